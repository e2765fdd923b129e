"""The probe study, top to bottom: organism → prompts → rollouts → labels → hidden states → probes → controls.

``probe_study`` is what the decodability, valley and judge experiments share: sample a validated organism on
``probe_train`` and ``probe_test`` prompts (K samples per prompt, more on contested prompts), label every rollout
with the judge ensemble (majority vote) and read the grammar's truth beside it, capture hidden states at the named
positions on the sampled ids, then fit grouped probes (by template) on train and score them on test.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.methods.first_token_probe.capture import ActivationSet, capture
from agentmill.methods.first_token_probe.config import ProbeConfig
from agentmill.methods.first_token_probe.probes import (ProbeGrid, ceiling_auroc, diff_means, emitted_token_auroc,
                                                        fit_probes, permutation_p, prompt_text_auroc)
from agentmill.methods.first_token_probe.prompts import sample_prompts
from agentmill.methods.first_token_probe.sampling import Rollout, sample_rollouts


def organism_rollouts(lm: Any, split: str, counts: dict[str, int], *, k: int, k_contested: int, seed: int,
                      cache: bool = True, defense: Any = None, max_new_tokens: int = 400) -> list[Rollout]:
    """K samples per C/N/B prompt and ``k_contested`` per D prompt of ``split``."""
    items = sample_prompts(split, counts, seed=seed)
    settled = [i for i in items if i.category != "D"]
    contested = [i for i in items if i.category == "D"]
    out = sample_rollouts(lm, settled, k=k, seed=seed, cache=cache, defense=defense, max_new_tokens=max_new_tokens)
    if contested:
        out += sample_rollouts(lm, contested, k=k_contested, seed=seed + 1, cache=cache, defense=defense,
                               max_new_tokens=max_new_tokens)
    return out


def labels_of(rollouts: Sequence[Rollout], source: str = "vote") -> np.ndarray:
    """Label per rollout as float (NaN = none): ``vote`` (the judge majority), ``truth`` (the grammar) or a judge
    id in the rollouts' labels."""
    vals = []
    for r in rollouts:
        if not (r.parsed and r.parsed.finished):
            vals.append(np.nan)
            continue
        v = r.outcome if source == "vote" else r.truth if source == "truth" else r.labels.get(source)
        vals.append(np.nan if v is None else float(v))
    return np.array(vals)


@dataclass
class StudyResult:
    """A probe study: the grid, its baselines, the activations and the labelled rows kept."""

    grid: ProbeGrid
    acts_train: ActivationSet
    acts_test: ActivationSet
    train: list[Rollout]
    test: list[Rollout]
    y_train: np.ndarray
    y_test: np.ndarray
    dropped: dict[str, int]
    keep_train: np.ndarray
    keep_test: np.ndarray
    baselines: dict[str, float] = field(default_factory=dict)


def probe_study(lm: Any, train: Sequence[Rollout], test: Sequence[Rollout], *, positions: Sequence[str],
                layers: Sequence[int] | str = "all", label_source: str = "vote", cfg: ProbeConfig = ProbeConfig(),
                acts: tuple[ActivationSet, ActivationSet] | None = None, shuffle_cells: bool = True) -> StudyResult:
    """Capture (unless ``acts`` are given for the same rollouts), drop rows without a label (counted), fit the
    grid and the text/ceiling/emitted-token/diff-means baselines at the first position."""
    ytr_all, yte_all = labels_of(train, label_source), labels_of(test, label_source)
    a_tr = acts[0] if acts else capture(lm, train, positions, layers)
    a_te = acts[1] if acts else capture(lm, test, positions, layers)
    ktr, kte = ~np.isnan(ytr_all), ~np.isnan(yte_all)
    tr = [r for r, k in zip(train, ktr) if k]
    te = [r for r, k in zip(test, kte) if k]
    ytr, yte = ytr_all[ktr].astype(int), yte_all[kte].astype(int)
    g = lambda rs: np.array([r.item.template_id for r in rs])  # noqa: E731
    pid = lambda rs: np.array([r.item.prompt_id for r in rs])  # noqa: E731
    grid = fit_probes(a_tr.H[ktr], ytr, g(tr), pid(tr), a_te.H[kte], yte, g(te), positions=list(a_tr.positions),
                      layers=list(a_tr.layers), label_source=label_source, cfg=cfg, shuffle_cells=shuffle_cells)
    res = StudyResult(grid, a_tr, a_te, tr, te, ytr, yte,
                      {"train_unlabelled": int((~ktr).sum()), "test_unlabelled": int((~kte).sum())}, ktr, kte)
    return res


def baselines(res: StudyResult, position: str = "think_open", token_position: str = "first_generated") -> dict[str, float]:
    """Text and determinism baselines, plus the diff-means cosine, at ``position`` (emitted token at
    ``token_position``)."""
    P = res.grid.positions
    p = P.index(position)
    L = res.grid.best_layer[position]
    li = res.grid.layers.index(L)
    out: dict[str, float] = {}
    if token_position in P:
        q = res.acts_train.positions.index(token_position)
        ktr = res.acts_train.tokens[:, q]
        kte = res.acts_test.tokens[:, q]
        mtr = labels_mask(res, "train")
        mte = labels_mask(res, "test")
        tt, te_ = ktr[mtr], kte[mte]
        ok_tr, ok_te = tt >= 0, te_ >= 0
        out["emitted_token_auroc"] = emitted_token_auroc(tt[ok_tr], res.y_train[ok_tr], te_[ok_te], res.y_test[ok_te])
    out["prompt_text_auroc"] = prompt_text_auroc([r.item.user for r in res.train], res.y_train,
                                                 [r.item.user for r in res.test], res.y_test)
    out["ceiling_auroc"] = ceiling_auroc(res.y_test, np.array([r.item.prompt_id for r in res.test]))
    Xtr = res.acts_train.H[labels_mask(res, "train"), p, li].astype(float)
    Xte = res.acts_test.H[labels_mask(res, "test"), p, li].astype(float)
    dm_auc, cos = diff_means(Xtr, res.y_train, Xte, res.y_test, res.grid.fits[(p, li)].w)
    out["diff_means_auroc"], out["diff_means_cosine"] = dm_auc, cos
    head = float(res.grid.auroc[p, li])
    out["leak_alarm"] = float(head > out["ceiling_auroc"] + 0.03) if not np.isnan(out["ceiling_auroc"]) else np.nan
    res.baselines = out
    return out


def labels_mask(res: StudyResult, which: str) -> np.ndarray:
    """Rows of the train/test activation sets that carry a label."""
    return res.keep_train if which == "train" else res.keep_test


def headline_permutation(res: StudyResult, position: str, n_perm: int, seed: int) -> tuple[float, list[float]]:
    """Permutation p of the headline cell (``l*(position)``), ``n_perm`` within-size prompt permutations."""
    p = res.grid.positions.index(position)
    li = res.grid.layers.index(res.grid.best_layer[position])
    mtr, mte = labels_mask(res, "train"), labels_mask(res, "test")
    Xtr = res.acts_train.H[mtr, p, li].astype(float)
    Xte = res.acts_test.H[mte, p, li].astype(float)
    return permutation_p(Xtr, res.y_train, np.array([r.item.prompt_id for r in res.train]), Xte, res.y_test,
                         res.grid.fits[(p, li)].C, float(res.grid.auroc[p, li]), n_perm=n_perm, seed=seed)
