"""The steering grid CX-7 and CX-13 share (CX-6's grid, factored for several crosscoders and layers). Not an
experiment (no ``EXPERIMENT``).

For one crosscoder on (sibling, base) at one block: rank latents of a block by Cohen's d of their codes at the last
prompt token, ``n_rank`` train tool vs ``n_rank`` train generic prompts (E175's rule: latents with μ_tool > μ_gen,
best first); for each |S| in ``sizes`` take the top |S| of them; steer with α ∈ {2, 8, 32} at {last_prompt, all}
(delta mode, encoded self_only(mean)); metric per cell: strict_format of each prompt, compared with the clean run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agentmill.experiments.e175_crosscoder.pairbench import Bench, score

ALPHAS = (2.0, 8.0, 32.0)
POSITIONS = ("last_prompt", "all")


def ranked_latents(b: Bench, a: Any, cc: Any, block: slice | np.ndarray | None, n_rank: int) -> Any:
    """FeatureTable of ``block``'s latents (None: all) on ``n_rank`` train tool vs generic prompts (last prompt
    token)."""
    from agentmill.methods.crosscoder.diagnostics import encode_rows
    from agentmill.methods.crosscoder.features import rank_features
    from agentmill.methods.crosscoder.organism import make_prompts

    rt = b.last_rows(a, make_prompts("tool", n_rank, seed=b.s.seed))
    rg = b.last_rows(a, make_prompts("generic", n_rank, seed=b.s.seed))
    sc = np.asarray(cc.scales, np.float32)[None, :, None]
    ft, _ = encode_rows(cc, rt["x"] * sc)
    fg, _ = encode_rows(cc, rg["x"] * sc)
    return rank_features(ft, fg, block)


def pick(table: Any, sizes: Sequence[int], *, force: bool = False) -> dict[int, list[int]]:
    """Top-|S| tool-leaning latents per size (sizes with fewer leaning latents than |S| are skipped; ``force``
    (smoke only) takes the top of the table regardless of direction)."""
    up = [int(i) for i in table.index[table.mean_pos > table.mean_neg]]
    if force and not up:
        up = [int(i) for i in table.index]
    return {n: up[:n] for n in sizes if len(up) >= n}


def run_grid(b: Bench, a: Any, cc: Any, layer: int, sel: dict[int, list[int]], prompts: Sequence[Any],
             clean: np.ndarray, *, label: str, ctx: Any) -> tuple[list[dict[str, Any]], list[np.ndarray]]:
    """(cells, per-prompt strict_format of each cell) over |S| × α × positions."""
    from agentmill.core.stats import mcnemar_exact
    from agentmill.methods.crosscoder.interventions import SelfOnly, steer

    enc = SelfOnly("mean", b.means(cc))
    cells: list[dict[str, Any]] = []
    per: list[np.ndarray] = []
    total = len(sel) * len(ALPHAS) * len(POSITIONS)
    for n_s, feats in sel.items():
        for alpha in ALPHAS:
            for pos in POSITIONS:
                got = score(b.generate(a, prompts, lambda P, f=feats, al=alpha, po=pos: steer(
                    a, cc, layer=layer, view=0, features=f, alpha=al, positions=po, encode_from=enc, prompt_len=P)),
                    prompts)["strict_format"]
                per.append(got)
                cells.append({"crosscoder": label, "layer": layer, "size": n_s, "alpha": alpha, "positions": pos,
                              "features": feats, "gain": float(got.mean() - clean.mean()),
                              "p": mcnemar_exact(got.astype(bool), clean.astype(bool)).p_value})
                ctx.progress(f"steering grid {label}", len(cells), total)
    return cells, per
