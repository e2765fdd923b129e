"""Study configuration [R]: the YAML a study is run under, validated, hashed and pinned.

The config is part of the pre-registration: its SHA-256 (of canonical JSON) is written into the run's ledger
through the cohort's ``describe()`` (the loop's first event, before any observation is requested) and pinned into
the study database, so a database and a run can never silently disagree about consent text, exclusion rules,
recruitment caps or token lifetime. The per-study HMAC secret is *not* part of the config: it is generated per
database (``Store``) and never exported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentmill.methods.autocog.cohorts import HumanCohort
from agentmill.methods.autocog.theory import sha256

EXCLUSION_DEFAULTS: dict[str, float] = {
    # [C `filter_participants.py`] + catch accuracy [R]; same values as web/exclusion.py's constants
    "single_side": 0.95, "min_mean_rt_ms": 1200, "alternation": 0.95, "max_blur_ms": 60_000, "catch_min_correct": 3,
}
STUDY_DEFAULTS: dict[str, Any] = {
    "study_id": "autocog-demo", "title": "Choosing between two products",
    "consent_text": "This is a short decision study (about 10 minutes). Your choices are stored anonymously. "
                    "You may stop at any time. Do you agree to take part?",
    "consent_version": "v1",
    "instructions": "On each trial you see two products, A-side on the left or right, each rated by several experts. "
                    "The panel above shows how accurate each expert has been. Pick the product you think is better: "
                    "press F for the left product or J for the right one (or click the button).",
    "keys": {"left": "f", "right": "j"}, "n_catch": 4, "quiz": True, "min_rt_ms": 0,
    "exclusion": dict(EXCLUSION_DEFAULTS), "target_valid_n": 25, "max_recruit": 35, "token_ttl_hours": 24,
    "completion_code": None, "completion_url": None, "store_raw_pid": False, "ethics_reference": None,
}
"""Study fields [R]; target_valid_n 25 and max_recruit 35 [R]; n_catch 4 at 20/40/60/80 %."""


def _type_error(field: str, want: str, got: Any) -> ValueError:
    return ValueError(f"study config: {field} must be {want}, got {got!r}")


def validate_study(raw: dict | None) -> dict:
    """Defaults filled in, every field checked; raises ValueError naming the field and the fix."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError(f"study config must be a mapping of the study fields, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(STUDY_DEFAULTS))
    if unknown:
        raise ValueError(f"study config: unknown field(s) {', '.join(unknown)}; accepted: {', '.join(STUDY_DEFAULTS)}")
    cfg = {**STUDY_DEFAULTS, **raw}
    for f in ("study_id", "title", "consent_text", "consent_version", "instructions"):
        if not isinstance(cfg[f], str) or not cfg[f].strip():
            raise _type_error(f, "a non-empty string", cfg[f])
    keys = cfg["keys"]
    if not isinstance(keys, dict) or set(keys) != {"left", "right"} or not all(
            isinstance(v, str) and len(v) == 1 for v in keys.values()) or keys["left"] == keys["right"]:
        raise _type_error("keys", "{left: <one char>, right: <another char>}", keys)
    for f, lo in (("n_catch", 0), ("min_rt_ms", 0), ("target_valid_n", 1), ("max_recruit", 1)):
        if not isinstance(cfg[f], int) or isinstance(cfg[f], bool) or cfg[f] < lo:
            raise _type_error(f, f"an integer >= {lo}", cfg[f])
    if cfg["n_catch"] > 8:
        raise _type_error("n_catch", "at most 8", cfg["n_catch"])
    if cfg["max_recruit"] < cfg["target_valid_n"]:
        raise ValueError(f"study config: max_recruit ({cfg['max_recruit']}) must be >= target_valid_n "
                         f"({cfg['target_valid_n']})")
    ttl = cfg["token_ttl_hours"]
    if not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or not ttl > 0:
        raise _type_error("token_ttl_hours", "a positive number", ttl)
    for f in ("quiz", "store_raw_pid"):
        if not isinstance(cfg[f], bool):
            raise _type_error(f, "true or false", cfg[f])
    for f in ("completion_code", "completion_url", "ethics_reference"):
        if cfg[f] is not None and (not isinstance(cfg[f], str) or not cfg[f].strip()):
            raise _type_error(f, "a non-empty string or null", cfg[f])
    if cfg["completion_code"] and cfg["completion_url"]:
        raise ValueError("study config: give completion_code or completion_url, not both")
    if cfg["completion_url"] and not cfg["completion_url"].startswith(("https://", "http://")):
        raise _type_error("completion_url", "an http(s) URL", cfg["completion_url"])
    ex = cfg["exclusion"]
    if not isinstance(ex, dict):
        raise _type_error("exclusion", "a mapping of thresholds", ex)
    bad = sorted(set(ex) - set(EXCLUSION_DEFAULTS))
    if bad:
        raise ValueError(f"study config: unknown exclusion field(s) {', '.join(bad)}; accepted: "
                         f"{', '.join(EXCLUSION_DEFAULTS)}")
    ex = {**EXCLUSION_DEFAULTS, **ex}
    for f, v in ex.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
            raise _type_error(f"exclusion.{f}", "a number >= 0", v)
    for f in ("single_side", "alternation"):
        if ex[f] > 1:
            raise _type_error(f"exclusion.{f}", "a rate in [0, 1]", ex[f])
    if ex["catch_min_correct"] > cfg["n_catch"]:
        raise ValueError(f"study config: exclusion.catch_min_correct ({ex['catch_min_correct']}) exceeds n_catch "
                         f"({cfg['n_catch']})")
    cfg["exclusion"] = ex
    return cfg


def load_study(path: str | Path) -> dict:
    """Read a study YAML (JSON is valid YAML) and validate it. ValueError on a missing/unparsable file."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ValueError(f"study config {p}: no such file")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"study config {p}: not YAML ({str(e).splitlines()[0]})") from None
    return validate_study(raw)


def study_sha256(cfg: dict) -> str:
    return sha256(cfg)


class StudyCohort(HumanCohort):
    """A ``HumanCohort`` whose ``describe()`` carries the study config's hash, so the loop's ledgered config event
    pins it before any data are requested; a resume under a changed study config is refused by the loop."""

    def __init__(self, store, study: dict) -> None:
        super().__init__(store, target_valid_n=study["target_valid_n"])
        self.study = study
        self.max_recruit = study["max_recruit"]

    def describe(self) -> dict:
        return {**super().describe(), "study_id": self.study["study_id"], "study_sha256": study_sha256(self.study),
                "max_recruit": self.max_recruit}
