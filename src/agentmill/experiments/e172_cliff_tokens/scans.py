"""Oracle scans shared by the E172 experiments (CT-3 … CT-6): one study per (traces, n, test, seed), kept as JSON
under ``core.paths.cache_root()/cliff_scans/<hash>.json`` so each experiment that reads the same scans does not
redo them. Not an experiment module (not in ``MODULES``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

import numpy as np

from agentmill.core.paths import cache_root
from agentmill.core.records import write_json_atomic

SCHEMA = "agentmill.cliffscan/1"


def _key(n_traces: int, n: int, seed: int) -> str:
    from agentmill import __version__

    blob = json.dumps({"schema": SCHEMA, "n_traces": n_traces, "n": n, "seed": seed, "v": __version__,
                       "substrate": "chainadd-oracle"}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _encode(rec: dict[str, Any]) -> dict[str, Any]:
    pt = rec["scan"]
    return {"i": rec["i"], "ops": list(rec["ops"]), "prompt": rec["prompt"], "trace": rec["trace"],
            "correct": bool(rec["correct"]), "sites": [asdict(s) for s in rec["sites"]],
            "k": pt.k.tolist(), "n": pt.n.tolist(), "skipped": pt.skipped,
            "cliffs": [asdict(c) for c in rec["cliffs"]], "types": rec["types"], "types_top20": rec["types_top20"],
            "type_entropy": [t.entropy for t in rec["type_info"]], "type_prob": [t.prob for t in rec["type_info"]],
            "expected_false": rec["expected_false"], "exact_v": rec["exact_v"].tolist()}


def oracle_scans(n_traces: int, n: int = 64, seed: int = 0, progress=None) -> tuple[list[dict[str, Any]], float]:
    """(records, seconds spent scanning now: 0 when read from the cache)."""
    import time

    from agentmill.methods.cliff_tokens.core import CliffConfig, oracle_study
    from agentmill.methods.cliff_tokens.potential import PotentialConfig

    path = cache_root() / "cliff_scans" / f"{_key(n_traces, n, seed)}.json"
    if path.exists():
        try:
            blob = json.loads(path.read_text())
            if blob.get("schema") == SCHEMA:
                return blob["traces"], 0.0
        except (OSError, ValueError):
            pass
    t0 = time.perf_counter()
    recs = oracle_study(n_traces, CliffConfig(PotentialConfig(n=n)), seed=seed, progress=progress)
    out = [_encode(r) for r in recs]
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_json_atomic(path, {"schema": SCHEMA, "substrate": "chainadd-oracle", "n": n, "seed": seed, "traces": out})
    return out, time.perf_counter() - t0


def first_error_site(rec: dict[str, Any]) -> dict[str, Any] | None:
    erred = [s for s in rec["sites"] if s["erred"]]
    return min(erred, key=lambda s: s["pos"]) if erred else None


def plot_potentials(recs: list[dict[str, Any]], out, name: str, k: int = 6) -> Any:
    """Potential curves V̂_t (and exact V_t) of a few failing traces with their cliffs marked."""
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    show = [r for r in recs if r["cliffs"]][:k]
    fig, axes = plt.subplots(len(show) or 1, 1, figsize=(7, 1.6 * max(len(show), 1)), squeeze=False)
    for ax, r in zip(axes[:, 0], show):
        kk, nn = np.asarray(r["k"], float), np.asarray(r["n"], float)
        ok = kk >= 0
        t = np.arange(len(kk))
        ax.plot(t[ok], kk[ok] / nn[ok], "o-", ms=3, label="V̂ (n=64)")
        ax.plot(t, r["exact_v"], "k--", lw=0.8, label="exact V")
        for c, ty in zip(r["cliffs"], r["types"]):
            ax.axvline(c["pos"], color={"DF": "tab:red", "UC": "tab:orange", "SO": "tab:purple"}.get(ty, "gray"),
                       lw=1.5, alpha=0.7)
            ax.text(c["pos"], 1.02, ty, fontsize=7, ha="center")
        ax.set_ylim(-0.05, 1.15)
        ax.set_xticks(t[1:])
        ax.set_xticklabels(list(bytes(r["trace"]).decode()), fontsize=6)
    axes[0, 0].legend(fontsize=7, loc="lower left")
    axes[0, 0].set_title("potential curves of oracle traces, cliffs marked by type")
    fig.tight_layout()
    p = out / name
    save(fig, p, dpi=110)
    return p
