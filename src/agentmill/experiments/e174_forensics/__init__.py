"""E174, model forensics with pre-registered hypotheses and single-variable counterfactual replays.

One module per experiment; each defines a module-level ``EXPERIMENT``. Importing this package imports
none of them: the registry loads them on first use."""

PAPER = ("Singh, Kroiz, Rajamanoharan, Nanda, Model Forensics: Investigating Whether Concerning Behavior Reflects "
         "Misalignment, arXiv:2606.26071")

MODULES: tuple[str, ...] = ("dose", "loyalty", "calibration", "recovery", "replay", "interrogation", "endpoint", "perf",
                            "organism", "episodes")
"""The experiment modules of this paper, in the order ``agentmill list`` and ``reproduce`` show them."""


def stamp_prereg(data: dict) -> dict:
    """Note the sha256 of the method's pre-registration in a run's ``data`` (every record prints it) and return its
    thresholds. The hash needs no YAML parser; without PyYAML the file is hashed but not parsed (noted in ``data``),
    so the experiments stay runnable on the core install."""
    import hashlib
    from importlib import resources

    path = resources.files("agentmill.methods.forensics").joinpath("prereg.yaml")
    raw = path.read_bytes()
    data["prereg_sha256"] = hashlib.sha256(raw).hexdigest()
    try:
        import yaml  # noqa: F401
    except ImportError:
        data["prereg_note"] = "pyyaml not installed: hashed, not parsed"
        return {}
    from agentmill.core.prereg import parse_prereg

    return parse_prereg(raw, path=str(path)).thresholds


def scratch_registry(ctx, name: str):
    """A fresh hypothesis registry for one run. Experiments use it as an instrument under test, not as a record to
    keep (the run record stores its head hash), so it lives in a memory-backed directory where one exists: each
    append is still fsynced, which costs ~4 ms on this machine's disk and ~0.02 ms on tmpfs."""
    import shutil
    import tempfile
    from pathlib import Path

    from agentmill.methods.forensics import HypothesisRegistry

    shm = Path("/dev/shm")
    base = Path(tempfile.mkdtemp(prefix=f"forensics-{name}-", dir=shm if shm.is_dir() else ctx.work_dir))
    ctx.data.setdefault("_scratch", []).append(str(base))
    shutil.rmtree(base / "registry", ignore_errors=True)
    return HypothesisRegistry(base / "registry")


def drop_scratch(ctx) -> None:
    """Remove the scratch registries of this run (call at the end of ``measure``)."""
    import shutil

    for d in ctx.data.pop("_scratch", []):
        shutil.rmtree(d, ignore_errors=True)
