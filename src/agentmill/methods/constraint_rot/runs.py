"""The files around a ConstraintRot run: the episodes JSONL read back, the run manifest written next to the results
(versions, CPU, catalogue / prereg / episodes hashes, seeds) and the checks that refuse to resume results of another
catalogue or prereg. Error messages name the command-line flag the path came from."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any


MANIFEST_SCHEMA = 1


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cpu_info() -> dict[str, Any]:
    model = platform.processor() or None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"model": model, "count": os.cpu_count(), "machine": platform.machine(), "system": platform.system()}


def package_versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in ("agentmill", "numpy", "pyyaml", "rich", "transformers", "torch"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


def manifest_path(out: Path) -> Path:
    return out.with_name(out.name + ".manifest.json")


def matrix_path(out: Path) -> Path:
    return out.with_name(out.name + ".matrix.json")


def check_resume(out: Path, cat: Any, prereg: Any) -> dict[str, Any] | None:
    """The existing manifest of ``out`` (None for a new file); refuses another catalogue or prereg (the package README,
    "Faults")."""
    mp = manifest_path(out)
    old = json.loads(mp.read_text()) if mp.is_file() else None
    if old is not None:
        for field_, mine in (("catalogue_version", cat.version), ("catalogue_sha", cat.sha256),
                             ("prereg_sha256", prereg.sha256)):
            if old.get(field_) != mine:
                raise ValueError(f"--resume {out}: its manifest {mp.name} has {field_} {old.get(field_)!r}, this run "
                                 f"has {mine!r}; write to a new --out")
    if out.is_file():
        from agentmill.methods.constraint_rot.metrics import load_rows

        for i, row in enumerate(load_rows(out), 1):
            for field_, mine in (("catalogue_version", cat.version), ("catalogue_sha", cat.sha256)):
                if row.get(field_) != mine:
                    raise ValueError(f"--resume {out}:{i}: row has {field_} {row.get(field_)!r}, this run has "
                                     f"{mine!r}; write to a new --out")
    return old


def write_manifest(out: Path, old: dict[str, Any] | None, run: dict[str, Any], cat: Any, prereg: Any) -> Path:
    from agentmill.core.records import write_json_atomic

    manifest = old or {"schema": MANIFEST_SCHEMA, "results": out.name, "catalogue_version": cat.version,
                       "catalogue_sha": cat.sha256, "prereg_version": prereg.version, "prereg_sha256": prereg.sha256,
                       "runs": []}
    manifest["runs"] = [*manifest.get("runs", []), run]
    return write_json_atomic(manifest_path(out), manifest)


def load_episodes(path: Path, cat: Any) -> list[Any]:
    from agentmill.methods.constraint_rot.generate import Episode

    if not path.is_file():
        raise ValueError(f"--episodes {path}: file not found")
    eps = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            eps.append(Episode.from_dict(json.loads(line), cat))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f"--episodes {path}:{i}: {type(e).__name__}: {e}") from None
    if not eps:
        raise ValueError(f"--episodes {path}: no episodes")
    return eps


def actor_config(actor: Any) -> dict[str, Any] | None:
    """What the manifest records of the actor: its ``config`` (no API key: the endpoint's config carries none),
    plus the organism's card digest and validation state."""
    cfg = getattr(actor, "config", None)
    out = dict(cfg) if isinstance(cfg, dict) else None
    card = getattr(actor, "card", None)
    if card is not None and out is not None:
        out.update(adapter_dir=str(actor.adapter_dir), base=card.base, base_sha256=card.base_sha256,
                   validated=card.validated)
    return out
