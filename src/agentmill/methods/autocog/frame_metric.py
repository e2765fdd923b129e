"""The repository's own metric code, ``def metric(data: pd.DataFrame) -> float``, run in the sandbox [C]
(AC-13: each committed metric, rerun on the vendored rows in file order, must give its ``real_value``).

The authors' metrics take a pandas DataFrame (``iterrows``, ``apply``, ``groupby``, ``loc``), while this project's
LLM-written metrics get a dict of numpy arrays (``metrics.data_columns``; pandas is not importable there). To run the
committed sources unchanged, this module prepends a prelude to the ordinary sandbox child that imports pandas and
exercises the operations those sources use *before* the audit hook freezes ``sys.modules`` (pandas imports some of
its internals lazily), exposes it as ``pd`` (the sources' annotation ``pd.DataFrame`` is evaluated when the function
is defined), and allows ``import pandas`` in the static policy. Everything else is the sandbox of ``sandbox.py``:
AST policy, ``python -I`` child, rlimits, wall watchdog, audit hook. pandas methods that read or write files or
evaluate strings (``read_*``, ``to_*`` other than ``to_numpy``/``to_list``, ``eval``, ``query``) are refused by the
static policy here; file opens would also hit the audit hook.

The evaluation follows the repository's ``Metric.__call__`` [C ``src/metric.py``, ``src/observation.py``]: the metric
runs on a copy of the pooled frame (value), then on each subject's rows of that same (possibly mutated) frame, grouped
by ``subject_id`` in order of appearance, each a fresh copy (variance = population variance, ddof 0; None if any
per-subject call fails).
"""

from __future__ import annotations

import ast
import dataclasses
import math

from agentmill.methods.autocog.sandbox import (SANDBOX_POLICY, TheoryOutputError, TheoryRejected, check_source,
                                               run_theory_child)

ALLOWED_TO = {"to_numpy", "to_list", "tolist"}
FORBIDDEN_FRAME_ATTRS = {"eval", "query"}

FRAME_PRELUDE = r'''
import numpy as np
import pandas as pd
# Warm-up: pandas imports parts of itself on first use; do it now, before the audit hook bans new imports.
_w = pd.DataFrame({"subject_id": [0, 0, 1], "option_a_ratings": [[1, 0], [0, 1], [1, 1]],
                   "option_b_ratings": [[0, 1], [1, 0], [1, 1]], "response": [0, 1, 0]})
for _i, _r in _w.iterrows():
    sum(_r["option_a_ratings"])
_t = _w["option_a_ratings"].apply(tuple)
_m = (_t == (1, 0)) & (_w["response"] == 0)
_w.loc[_m, "response"].mean(); _w[_m]["response"].sum(); _w.loc[_m, "response"].any()
_w["k"] = _w.apply(lambda r: r["response"] + 1, axis=1)
for _s, _g in _w.groupby("subject_id", sort=False):
    _g = _g.copy(); _g["subject_id"] = _s
_w.groupby("subject_id").apply(lambda g: g["response"].mean()).dropna().mean()
_w.groupby("subject_id")["response"].mean()
np.stack(_w["option_a_ratings"].values); np.vstack(_w["option_a_ratings"].values)
pd.notna(1.0); pd.isna(float("nan")); (_w["response"] == 0).astype(float).values
np.where(_m, 1 - _w["response"], _w["response"]); np.abs(_w["response"] - 1); np.corrcoef([1., 2., 3.], [1., 0., 2.])
_w.copy(); len(_w); _w["response"].mean(); _w["response"].apply(lambda x: x).sum()
import warnings
warnings.simplefilter("ignore")  # pandas FutureWarnings would walk frames and print to the result pipe's sink
'''
FRAME_POLICY = dataclasses.replace(SANDBOX_POLICY, imports=SANDBOX_POLICY.imports + ("pandas",),
                                   namespace=SANDBOX_POLICY.namespace + (("pd", "pandas"),))
"""AutoCog's sandbox policy plus ``import pandas`` (warmed up by ``FRAME_PRELUDE``), bound as ``pd``."""

CHILD_FRAME_METRIC = r'''
metric = ns.get("metric")
df = pd.DataFrame.from_records(req["rows"])
value = variance = error = None
n_subjects = 0
try:
    d = df.copy()
    v = float(metric(d))
    if not np.isfinite(v):
        raise ValueError("metric returned a non-finite value: " + str(v))
    value = v
    per = []
    try:
        for sid, sdf in d.groupby("subject_id", sort=False):
            sdf = sdf.copy(); sdf["subject_id"] = sid
            per.append(float(metric(sdf)))
    except Exception:
        per = []
    n_subjects = len(per)
    variance = float(np.var(per)) if per and np.all(np.isfinite(per)) else None
except MemoryError:
    fail("memory", "MemoryError")
except (PermissionError, ImportError) as e:
    fail("violation", str(e))
except Exception as e:
    error = type(e).__name__ + ": " + str(e)[:200]
out.write(json.dumps({"ok": True, "value": value, "variance": variance, "n_subjects": n_subjects, "error": error,
                      "layers": layers})); out.flush()
'''


def check_frame_source(source: str) -> ast.Module:
    """The sandbox's static policy with ``import pandas`` allowed, plus no pandas file I/O or string evaluation."""
    tree = check_source(source, entry="metric", extra_imports=("pandas",))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            a = node.attr
            if a in FORBIDDEN_FRAME_ATTRS or a.startswith("read_") or (a.startswith("to_") and a not in ALLOWED_TO):
                raise TheoryRejected(f"attribute {a!r} is not allowed in a frame metric", node.lineno)
    return tree


def run_frame_metric(source: str, rows: list[dict]) -> dict:
    """Run a repository-style ``metric(data: pd.DataFrame)`` on ``rows`` (dicts in file order) in one sandboxed
    child. Returns {value, variance, n_subjects, error, layers}: ``value`` None with ``error`` when the pooled call
    raised (a metric failing on real data). A compile error, a policy violation, a timeout or the memory
    limit raises the matching ``SandboxError``."""
    check_frame_source(source)
    if not rows or "subject_id" not in rows[0]:
        raise ValueError("run_frame_metric: rows must be non-empty dicts with a 'subject_id'")
    res = run_theory_child(source, CHILD_FRAME_METRIC, {"rows": rows}, name="metric", policy=FRAME_POLICY,
                           prelude=FRAME_PRELUDE)
    return validated_frame_answer(res, n_subjects=len({r["subject_id"] for r in rows}))


def validated_frame_answer(res: dict, *, n_subjects: int) -> dict:
    """The parent's check of the child's answer (data, never a verdict): ``value`` and ``variance`` finite numbers
    or None (``variance`` >= 0), ``n_subjects`` 0 or the number of subjects, ``error`` None or a string."""
    def number_or_none(x) -> bool:
        return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x))

    ok = (number_or_none(res.get("value")) and number_or_none(res.get("variance"))
          and (res.get("variance") is None or res["variance"] >= 0)
          and res.get("n_subjects") in (0, n_subjects) and not isinstance(res.get("n_subjects"), bool)
          and (res.get("error") is None or isinstance(res.get("error"), str))
          and (res.get("value") is None) == (res.get("error") is not None))
    if not ok:
        raise TheoryOutputError("sandbox answer rejected: a frame metric's answer is out of contract "
                                "(the child's answer is data, checked by the parent)")
    return res
