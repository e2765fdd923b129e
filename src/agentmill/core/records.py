"""Run records: one JSON file per experiment run, written atomically and read through one validator.

A record is written to a temporary file in the same directory, flushed, fsynced and renamed over the target, so a
kill at any moment leaves either the old complete record or the new complete record, never a torn one.

A record is read only through :meth:`RunRecord.read`, which checks the file and every field's type (a hand-edited,
truncated or foreign file in a record's place must not crash ``list``, ``report`` or a suite far from where it was
read) and raises one error, :class:`RecordError`, naming the file and the field. Callers decide what a bad record
means (``experiments.runner`` moves it to ``history/`` and runs the experiment again).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import MISSING as dataclass_missing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate

RECORD_SCHEMA = 1
STATUSES = ("ok", "error")
VERDICTS = ("supported", "not_supported", "inconclusive", "not_judged")
"""The verdicts a claim can carry (``experiments.protocol`` judges; a record holds only these)."""


@contextlib.contextmanager
def atomic_target(path: str | os.PathLike[str]) -> Iterator[Path]:
    """The one atomic writer: yield a temporary path beside ``path``; on success fsync it and rename it over
    ``path``, on any error remove it. A kill at any moment leaves the old complete file or the new one, never a
    torn one. Writers that want a file name (``StepTable.to_jsonl``, ``torch.save``) write to the yielded path."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:  # name the file the caller asked for, not a random temporary name beside it
        raise OSError(e.errno, f"cannot write {path}: {e.strerror}", str(path)) from e
    os.close(fd)
    tmp = Path(tmp_name)
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; the output is an ordinary file of the user's
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (temporary file, fsync, rename)."""
    with atomic_target(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as indented JSON to ``path`` atomically (Estimates, numpy values, paths and dataclasses
    are converted)."""
    return write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=False, default=_json_default) + "\n")


def write_jsonl_atomic(path: str | os.PathLike[str], records: Iterable[Any]) -> Path:
    """Write one JSON object per line to ``path`` atomically."""
    return write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False, default=_json_default) + "\n"
                                           for r in records))


def append_jsonl_checkpoint(f: Any, row: Any) -> None:
    """Append one row to an open JSONL checkpoint and make it durable (flush, fsync) before the next unit starts, so
    a kill loses at most the unit in progress; :func:`read_jsonl_checkpoint` reads the file back."""
    f.write(json.dumps(row, default=_json_default) + "\n")
    f.flush()
    os.fsync(f.fileno())


def append_jsonl(path: str | os.PathLike[str], row: Any) -> None:
    """Append one durable row to the JSONL file at ``path`` (made, with its folder, if missing): the per-item logs
    that a rerun reads to skip finished work open, append and close once per row."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "a", encoding="utf-8") as f:
        append_jsonl_checkpoint(f, row)


def read_jsonl_checkpoint(path: str | os.PathLike[str]) -> list[Any]:
    """The rows of an append-only JSONL checkpoint, in file order; [] when it does not exist. A line that does not
    parse (a kill mid-append tears the last one) is skipped, so the unit it held is simply done again."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, Estimate):
        return o.to_dict()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "__dataclass_fields__"):
        return asdict(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


WHOLE_FILE = "(whole file)"
"""The ``field`` of a :class:`RecordError` about the file rather than one of its fields."""


class RecordError(ValueError):
    """A file in a record's place that is not a valid :class:`RunRecord`. The message is one line naming the
    file (``path``) and the field (``field``; :data:`WHOLE_FILE` when the file as a whole is wrong)."""

    def __init__(self, path: str, field_name: str, problem: str) -> None:
        self.path, self.field, self.problem = path, field_name, problem
        where = field_name if field_name == WHOLE_FILE else f"field {field_name}"
        super().__init__(f"{path}: {where}: {problem}")

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries (suite workers) intact
        return (type(self), (self.path, self.field, self.problem))


@dataclass
class RunRecord:
    """Everything needed to audit one experiment run.

    ``status`` is ``"ok"`` or ``"error"``; an error record keeps the message and no metrics. ``verdicts`` maps a
    claim id to ``supported`` / ``not_supported`` / ``inconclusive`` / ``not_judged``. ``reasons`` maps the id of
    every claim that is neither supported nor not supported to one line saying why (no interval, a stand-in model,
    the smoke profile), so a reader never has to guess what "inconclusive" hides; records written before it read
    as ``{}``. ``data`` holds the raw series the report plots from.
    """

    experiment_id: str
    profile: str
    setup: dict[str, Any]
    status: str = "ok"
    metrics: dict[str, Estimate] = field(default_factory=dict)
    verdicts: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    model: str | None = None
    version: str = ""
    git_commit: str | None = None
    packages: dict[str, str] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    started_at: str = ""
    wall_seconds: float = 0.0
    setup_hash: str = ""
    schema: int = RECORD_SCHEMA

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["metrics"] = {k: v.to_dict() for k, v in self.metrics.items()}
        return d

    def to_bytes(self) -> bytes:
        """The record's file content. Raises ``TypeError`` on a value JSON cannot hold (``data`` is free-form)."""
        return (json.dumps(self.to_dict(), indent=2, default=_json_default) + "\n").encode("utf-8")

    @classmethod
    def from_dict(cls, d: Any, *, source: str | os.PathLike[str] = "<record>") -> RunRecord:
        """Build a record from parsed JSON, checking every field; raises :class:`RecordError` naming ``source``
        and the first bad field. Missing optional fields take their defaults (older records); unknown fields are
        ignored (newer ones); a ``schema`` newer than this code reads is an error."""
        return _parse(d, str(source))

    def write(self, path: str | os.PathLike[str]) -> Path:
        return write_bytes_atomic(path, self.to_bytes())

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> RunRecord:
        """Read and validate the record at ``path``.

        Raises :class:`RecordError` (naming the file and the field) for anything that is not a valid record: not a
        regular file (a directory, a FIFO), not UTF-8, not JSON (including nesting too deep to parse and integers
        too long to convert), not an object, or a field of the wrong type or value. A missing file raises
        ``FileNotFoundError`` and an unreadable one its ``OSError``: those are disk conditions, not bad content.
        """
        source = str(path)
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # checked before open: opening a FIFO would block
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
            raise RecordError(source, WHOLE_FILE, f"{kind}, not a record file")
        with open(path, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordError(source, WHOLE_FILE, f"not UTF-8 (byte {e.start})") from None
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise RecordError(source, WHOLE_FILE, f"not valid JSON ({e.msg}, line {e.lineno} column {e.colno})") \
                from None
        except RecursionError:
            raise RecordError(source, WHOLE_FILE, "JSON nested too deeply to read") from None
        except ValueError as e:  # e.g. an integer literal longer than int() converts
            raise RecordError(source, WHOLE_FILE, f"not readable JSON ({_one_line(str(e))})") from None
        return _parse(obj, source)


_JSON_TYPE = {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string",
              list: "an array", dict: "an object"}


def _one_line(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _got(v: Any) -> str:
    kind = _JSON_TYPE.get(type(v), type(v).__name__)
    if isinstance(v, (dict, list)) or v is None:
        return kind if v is not None else "null"
    return f"{kind} ({_one_line(repr(v), 40)})"


def _parse(d: Any, source: str) -> RunRecord:
    """Field-by-field check of one parsed record (the only way a record gets from JSON into a RunRecord)."""
    def bad(name: str, problem: str) -> RecordError:
        return RecordError(source, name, problem)

    if not isinstance(d, dict):
        raise bad(WHOLE_FILE, f"expected a JSON object, got {_got(d)}")
    fields = RunRecord.__dataclass_fields__

    def get(name: str, check: Any, what: str) -> Any:
        if name not in d:
            f = fields[name]
            if f.default is not dataclass_missing:
                return f.default
            if f.default_factory is not dataclass_missing:
                return f.default_factory()
            raise bad(name, "missing")
        v = d[name]
        if not check(v):
            raise bad(name, f"expected {what}, got {_got(v)}")
        return v

    def is_str(v: Any) -> bool:
        return isinstance(v, str)

    def is_opt_str(v: Any) -> bool:
        return v is None or isinstance(v, str)

    def is_obj(v: Any) -> bool:
        return isinstance(v, dict)

    def is_str_map(v: Any) -> bool:
        return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())

    schema = get("schema", lambda v: _is_int(v) and v >= 1, "a positive integer")
    if schema > RECORD_SCHEMA:
        raise bad("schema", f"schema {schema} is newer than this agentmill reads ({RECORD_SCHEMA}); upgrade it")
    out: dict[str, Any] = {
        "experiment_id": get("experiment_id", lambda v: isinstance(v, str) and v.strip() != "", "a non-empty string"),
        "profile": get("profile", lambda v: isinstance(v, str) and v.strip() != "", "a non-empty string"),
        "setup": get("setup", is_obj, "an object"),
        "status": get("status", lambda v: v in STATUSES, f"one of {', '.join(STATUSES)}"),
        "data": get("data", is_obj, "an object"),
        "error": get("error", is_opt_str, "a string or null"),
        "model": get("model", is_opt_str, "a string or null"),
        "version": get("version", is_str, "a string"),
        "git_commit": get("git_commit", is_opt_str, "a string or null"),
        "packages": get("packages", is_str_map, "an object of strings"),
        "environment": get("environment", is_obj, "an object"),
        "started_at": get("started_at", is_str, "a string"),
        "wall_seconds": float(get("wall_seconds", lambda v: _is_num(v) and math.isfinite(v) and v >= 0,
                                  "a finite number of seconds >= 0")),
        "setup_hash": get("setup_hash", is_str, "a string"),
        "schema": schema,
    }
    verdicts = get("verdicts", is_obj, "an object")
    for claim, v in verdicts.items():
        if v not in VERDICTS:
            raise bad(f"verdicts[{claim!r}]", f"expected one of {', '.join(VERDICTS)}, got {_got(v)}")
    out["verdicts"] = dict(verdicts)
    out["reasons"] = dict(get("reasons", is_str_map, "an object of strings"))
    metrics = get("metrics", is_obj, "an object")
    out["metrics"] = {name: _estimate(est, lambda f, p, n=name: bad(f"metrics[{n!r}]{f}", p))
                      for name, est in metrics.items()}
    return RunRecord(**out)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    """A JSON number that converts to a float (a bool is not a number; a 400-digit integer does not convert)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        float(v)
    except OverflowError:
        return False
    return True


def _estimate(d: Any, bad: Any) -> Estimate:
    """One metric: the fields of :class:`Estimate` with their types (NaN allowed in the value and bounds, as
    ``Estimate`` allows it for undefined statistics); unknown keys are ignored, and the optional ones an older record
    lacks (``dropped``, ``n_boot``) take their defaults."""
    if not isinstance(d, dict):
        raise bad("", f"expected an object (value, lo, hi, n, level, method), got {_got(d)}")
    count = (lambda v: _is_int(v) and v >= 0, "an integer >= 0", False)
    kw: dict[str, Any] = {}
    for key, check, what, required in (("value", _is_num, "a number", True), ("lo", _is_num, "a number", True),
                                       ("hi", _is_num, "a number", True),
                                       ("n", *count),
                                       ("level", lambda v: _is_num(v) and 0 < v <= 1, "a number in (0, 1]", False),
                                       ("method", lambda v: isinstance(v, str), "a string", False),
                                       ("dropped", *count), ("n_boot", *count)):
        if key not in d:
            if required:
                raise bad(f".{key}", "missing")
            continue
        if not check(d[key]):
            raise bad(f".{key}", f"expected {what}, got {_got(d[key])}")
        kw[key] = float(d[key]) if key in ("value", "lo", "hi", "level") else d[key]
    try:
        return Estimate(**kw)
    except ValueError as e:  # lo <= value <= hi
        raise bad("", _one_line(str(e))) from None
