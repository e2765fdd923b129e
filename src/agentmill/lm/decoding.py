"""The decode loop shared by the torch backends (``hf:``, ``tiny:``): batched, seeded, batch-invariant.

Row (prompt i, sample j) draws its noise from its own stream ``np.random.default_rng([seed, i, j])`` and picks
the token by the Gumbel-max trick in float64, so a prompt yields the same tokens whether decoded alone or in a
padded batch (up to float ties between near-equal perturbed scores).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentmill.lm.base import Completion, GenerateConfig, apply_stops


@dataclass(frozen=True)
class StepState:
    """What a per-step decode hook sees after a row sampled a token: the row's position in ``rows`` and its
    (prompt, sample) pair, the number of tokens generated so far (``step`` = len(ids) − 1 for the token just
    drawn), the generated ids including that token, and the entropy (nats) of the distribution it was drawn from
    (tempered; temperature 1 when decoding greedily; after n-gram bans, before top-p)."""

    row: int
    prompt: int
    sample: int
    step: int
    ids: tuple[int, ...]
    entropy: float


StepHook = Callable[[StepState], "Sequence[int] | None"]
"""A per-step decode hook: returns token ids to force next (appended one per step, before sampling resumes) or
None."""


def _entropy(logits: np.ndarray, temperature: float) -> float:
    """Entropy in nats of softmax(logits / T) in float64 (T = 1 when ``temperature`` is 0)."""
    z = logits.astype(np.float64) / (temperature if temperature > 0 else 1.0)
    z = z - z.max()
    logp = z - np.log(np.exp(z).sum())
    p = np.exp(logp)
    return float(-(p[p > 0] * logp[p > 0]).sum())


def _forced_logprob(logits: np.ndarray, temperature: float, tok: int) -> float:
    """Log-probability of a forced token under the tempered distribution (temperature 1 when greedy)."""
    z = logits.astype(np.float64) / (temperature if temperature > 0 else 1.0)
    z = z - z.max()
    return float(z[tok] - np.log(np.exp(z).sum()))


def sample_token(logits: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> tuple[int, float]:
    """Sample a token from 1-D ``logits`` with the row's own ``rng``; return (token, logprob).

    Gumbel-max: argmax(logits/T + G), G = -log(-log U) with one uniform per vocabulary entry, is an exact sample
    of softmax(logits/T). Unlike an inverse CDF over the vocabulary, it only flips when the top two perturbed
    scores are within float noise, so fp32 differences between a padded batch and a single row (~1e-5) almost
    never change the token. The logprob is under the tempered distribution (before top-p truncation), the one a
    trainer recomputes; temperature 0 is greedy, with the logprob at temperature 1.
    """
    x = logits.astype(np.float64)
    if temperature == 0:
        tok = int(np.argmax(x))
        z = x - x.max()
        return tok, float(z[tok] - np.log(np.exp(z).sum()))
    z = x / temperature
    z -= z.max()
    logp = z - np.log(np.exp(z).sum())
    scores = logp - np.log(-np.log(rng.random(logp.size)))
    if top_p < 1.0:
        order = np.argsort(-logp, kind="stable")
        cum = np.cumsum(np.exp(logp[order]))
        outside = order[int(np.searchsorted(cum, top_p) + 1):]
        scores[outside] = -np.inf
    tok = int(np.argmax(scores))
    return tok, float(logp[tok])


def repeated_ngram_bans(tokens: list[int], n: int) -> list[int]:
    """Tokens that would complete an n-gram already present in ``tokens`` (their last n − 1 tokens as prefix)."""
    if n <= 0 or len(tokens) < n - 1:
        return []
    if n == 1:
        return sorted(set(tokens))
    prefix = tuple(tokens[len(tokens) - n + 1:])
    return sorted({tokens[i + n - 1] for i in range(len(tokens) - n + 1) if tuple(tokens[i:i + n - 1]) == prefix})


def advance_batch(lm: Any, cache: Any, mask: Any, next_pos: Any, step: list[int], active: list[int],
                  finish: list[Any]) -> tuple[Any, np.ndarray, Any, Any, list[int]] | None:
    """One step of a left-padded decode loop: drop the rows that just finished (``finish[r]`` set) from the cache
    and the masks, then feed the survivors' sampled tokens ``step`` (aligned with ``active``). Returns the new
    (cache, last-position logits [rows, V], mask, next positions, active rows), or None when every row finished."""
    import torch

    keep = [k for k, r in enumerate(active) if finish[r] is None]
    if not keep:
        return None
    if len(keep) < len(active):
        kt = torch.tensor(keep)
        cache.batch_select_indices(kt)
        mask, next_pos = mask[kt], next_pos[kt]
        step = [step[k] for k in keep]
        active = [active[k] for k in keep]
    mask = torch.cat([mask, torch.ones((len(active), 1), dtype=torch.long)], 1)
    fo = lm.forward(torch.tensor(step)[:, None], cache, attention_mask=mask, position_ids=next_pos[:, None])
    return fo.cache, fo.logits[:, -1].numpy(), mask, next_pos + 1, active


def decode_rows(lm: Any, rendered: list[list[int]], rows: list[tuple[int, int]], cfg: GenerateConfig,
                seed: int, *, step_hook: StepHook | None = None) -> list[Completion]:
    """Decode one batch: ``rows`` are (prompt index, sample index) pairs over the token lists ``rendered``.

    ``lm`` is a white-box model with ``forward(ids, cache, attention_mask=, position_ids=)``, ``pad_id``,
    ``eos_token_ids``, ``max_positions`` and ``decode``, whose cache supports ``batch_select_indices``. Prompts
    are left-padded; each distinct prompt is prefilled once and its cache shared by its samples; rows that
    finish are dropped from the batch instead of being decoded on.

    ``step_hook`` (default None: the loop as it always was) is called after every *sampled* token of a row that
    goes on decoding, with its :class:`StepState`; the ids it returns are forced, one per step, before the row
    samples again. A forced token draws no noise from the row's stream (so a row's sampled tokens up to its first
    forced one equal the unhooked run's), is exempt from n-gram bans, carries its log-probability under the
    tempered distribution, and counts toward ``max_new_tokens``, EOS and stops like a sampled one; the hook is not
    called on forced steps.
    """
    import torch

    uniq = sorted({i for i, _ in rows})
    width = max(len(rendered[i]) for i in uniq)
    ids = torch.full((len(uniq), width), lm.pad_id, dtype=torch.long)
    mask = torch.zeros((len(uniq), width), dtype=torch.long)
    for r, i in enumerate(uniq):
        n = len(rendered[i])
        ids[r, width - n:] = torch.tensor(rendered[i])
        mask[r, width - n:] = 1
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    prefill = lm.forward(ids, attention_mask=mask, position_ids=pos)
    # Expand the shared prefill to one row per (prompt, sample).
    sel = torch.tensor([uniq.index(i) for i, _ in rows])
    cache = prefill.cache
    cache.batch_select_indices(sel)
    logits = prefill.logits[sel, -1].numpy()
    mask, next_pos = mask[sel], pos[sel, -1] + 1
    rngs = [np.random.default_rng([seed, i, j]) for i, j in rows]
    budget = [min(cfg.max_new_tokens, lm.max_positions - len(rendered[i])) for i, _ in rows]
    toks: list[list[int]] = [[] for _ in rows]
    lps: list[list[float]] = [[] for _ in rows]
    finish: list[str | None] = [None] * len(rows)
    texts = [""] * len(rows)
    active = list(range(len(rows)))  # row indices still decoding, in cache order
    pending: list[list[int]] = [[] for _ in rows]  # forced ids a step hook queued, per row
    while active:
        step = []
        for k, r in enumerate(active):
            forced = bool(pending[r])
            if forced:
                tok = pending[r].pop(0)
                lp = _forced_logprob(logits[k], cfg.temperature, tok)
            else:
                banned = repeated_ngram_bans(toks[r], cfg.no_repeat_ngram_size)
                if banned:
                    logits[k, banned] = -np.inf
                tok, lp = sample_token(logits[k], cfg.temperature, cfg.top_p, rngs[r])
            toks[r].append(tok)
            lps[r].append(lp)
            step.append(tok)
            if tok in lm.eos_token_ids:
                toks[r].pop(), lps[r].pop()
                finish[r] = "eos"
                continue
            if cfg.stop or cfg.stop_regex:
                text, hit = apply_stops(lm.decode(toks[r]), cfg)
                if hit:
                    finish[r], texts[r] = "stop", text
                    continue
            if len(toks[r]) >= budget[r]:
                finish[r] = "length"
            elif step_hook is not None and not forced:
                extra = step_hook(StepState(r, rows[r][0], rows[r][1], len(toks[r]) - 1, tuple(toks[r]),
                                            _entropy(logits[k], cfg.temperature)))
                if extra:
                    pending[r].extend(int(t) for t in extra)
        state = advance_batch(lm, cache, mask, next_pos, step, active, finish)
        if state is None:
            break
        cache, logits, mask, next_pos, active = state
    out = []
    for r, (i, _j) in enumerate(rows):
        text = texts[r] if finish[r] == "stop" else lm.decode(toks[r])
        out.append(Completion(text=text, finish_reason=finish[r] or "length", token_ids=tuple(toks[r]),
                              logprobs=tuple(lps[r]), prompt_tokens=len(rendered[i])))
    return out
