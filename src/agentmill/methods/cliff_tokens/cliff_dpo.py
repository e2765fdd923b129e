"""Cliff-DPO against full (trajectory) DPO on a ``tiny:`` policy, with every token of compute counted.

Read top to bottom, as the comparison runs:

1. :func:`branch_rollouts` — the potential estimator's fork for a ``tiny:`` model, batched: one teacher-forced
   pass over q + y keeps the logits and the KV cache at every position; each row continues the prefix of its own
   length (key mask over the shared cache, its own position ids), its first token sampled from the kept logits
   (or forced), all rows decoded together until EOS or the *absolute* length cap. Same law as
   :class:`potential.PotentialEstimator` on a white box, without its per-row Python loop.
2. :func:`scan_trace` — V̂_t at t = 0..T−1 (n rollouts each) → :func:`ztest.detect` → types from the policy's
   next-token distribution (:func:`taxonomy.type_token`, full entropy) → :func:`forced_counts` of the top-10
   candidates at each cliff (the cliff token reuses V̂_t) → the cliff dicts :func:`pairs.build_pairs` reads.
3. :func:`trajectory_pairs` — full DPO's data: 4 sampled traces per training problem, the first correct paired
   with the first wrong [R]; :func:`train_trajectory_dpo` — the sequence-level DPO loss over all response tokens
   (EOS included), reference log-probs computed once.
4. Evaluation: :func:`greedy_correct` (greedy accuracy per problem) and :func:`so_site_errors` (sampled SO-site
   error counts, T = 1).

Compute is counted in :class:`DPOLedger` (a :class:`dpo.ComputeLedger` plus the reference model's forward tokens):
detection = generated tokens + prefilled tokens of every rollout and sample that built the pairs; training =
policy tokens (× 3, forward + backward) + reference forward tokens; loss-bearing positions; optimizer steps; wall.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from agentmill.methods.cliff_tokens.chainadd import (enumerate_chain, grade_chain, ops_of_prompt, sample_traces)
from agentmill.methods.cliff_tokens.dpo import ComputeLedger, DPOConfig, trajectory_dpo_loss
from agentmill.methods.cliff_tokens.planted import EOS, PAD, prompt_ids
from agentmill.methods.cliff_tokens.taxonomy import type_token
from agentmill.methods.cliff_tokens.ztest import CliffTest, detect, expected_false_cliffs


@dataclass
class DPOLedger(ComputeLedger):
    """:class:`dpo.ComputeLedger` plus the reference model's forward tokens (forward only: counted once)."""

    reference_forward: int = 0

    def total(self) -> float:
        return super().total() + float(self.reference_forward)


def _torch():
    import torch

    return torch


def trace_text(ids: Sequence[int]) -> str:
    return bytes(int(t) for t in ids if int(t) < 256).decode("ascii", errors="replace")


# --------------------------------------------------------------------------------------------- 1. forked rollouts
def _draw(logp: Any, gen: Any, greedy: bool) -> Any:
    """One token per row: argmax, or inverse-CDF sampling with one uniform per row (the law of softmax(logp))."""
    torch = _torch()
    if greedy:
        return logp.argmax(-1)
    cdf = torch.cumsum(logp.exp(), -1)
    u = torch.rand(logp.shape[0], generator=gen, dtype=cdf.dtype) * cdf[:, -1]
    return torch.searchsorted(cdf, u[:, None])[:, 0].clamp(max=logp.shape[-1] - 1)


class SlabCache:
    """Preallocated per-layer keys/values [R, H, S_max, Dh] for batched tiny decoding: ``update`` writes in place
    and returns views (``TinyCache`` concatenates, which copies the whole cache every step)."""

    def __init__(self, keys: list[Any], values: list[Any], length: int) -> None:
        self.keys, self.values, self.length = keys, values, length
        self._pending = 0

    @classmethod
    def from_base(cls, base: Any, rows: int, s_max: int) -> SlabCache:
        """A slab of ``rows`` copies of a one-row ``TinyCache`` (the teacher-forced prefix), room for ``s_max``."""
        torch = _torch()
        ks, vs = [], []
        for k, v in zip(base.keys, base.values):
            _, H, L, Dh = k.shape
            K = torch.empty(rows, H, s_max, Dh, dtype=k.dtype)
            V = torch.empty(rows, H, s_max, Dh, dtype=v.dtype)
            K[:, :, :L] = k
            V[:, :, :L] = v
            ks.append(K), vs.append(V)
        return cls(ks, vs, base.get_seq_length())

    def get_seq_length(self) -> int:
        return self.length

    def update(self, layer: int, k: Any, v: Any) -> tuple[Any, Any]:
        T = k.shape[2]
        end = self.length + T
        self.keys[layer][:, :, self.length: end] = k
        self.values[layer][:, :, self.length: end] = v
        if layer == len(self.keys) - 1:
            self._pending = T
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def advance(self) -> None:
        self.length += self._pending
        self._pending = 0

    def select(self, idx: Any) -> None:
        self.keys = [k[idx] for k in self.keys]
        self.values = [v[idx] for v in self.values]


def decode_step(net: Any, cur: Any, cache: SlabCache, key_mask: Any, pos: Any) -> Any:
    """Logits [R, V] for one new token per row: ``lm.tiny``'s block computation (pre-norm attention + GELU MLP,
    learned positions) with attention written out for a single query, which on CPU is several times faster than
    ``scaled_dot_product_attention`` with a boolean mask at these shapes. ``key_mask`` [R, S+1] covers the cache
    and the new token. Equal to the module's forward (tested against uncached decoding)."""
    torch = _torch()
    R = cur.shape[0]
    x = net.tok(cur) + net.pos(pos.clamp(max=net.pos.num_embeddings - 1))          # [R, D]
    D = x.shape[-1]
    for i, blk in enumerate(net.layers):
        q, k, v = blk.qkv(blk.ln1(x)).split(D, dim=-1)
        h = cache.keys[i].shape[1]
        q, k, v = (t.view(R, h, 1, D // h) for t in (q, k, v))
        K, V = cache.update(i, k, v)                                                # [R, h, S+1, Dh]
        att = torch.matmul(q, K.transpose(-1, -2))[:, :, 0] / (D // h) ** 0.5         # [R, h, S+1]
        att = att.masked_fill(~key_mask[:, None, :], float("-inf")).softmax(-1)
        o = torch.matmul(att[:, :, None], V)[:, :, 0].reshape(R, D)
        x = x + blk.proj(o)
        x = x + blk.mlp(blk.ln2(x))
    return net.head(net.ln_f(x))


def branch_rollouts(lm: Any, base: Sequence[int], lengths: Sequence[int], gen: Any, *,
                    first: Sequence[int] | None = None, cap: int,
                    greedy: bool = False) -> tuple[list[list[int]], dict[str, int], Any]:
    """Continue ``base[:lengths[r]]`` for every row r (T = 1, or argmax with ``greedy``) until EOS or the absolute
    length ``cap`` (in tokens of base + new). ``first[r]`` forces row r's first token; otherwise it is drawn from
    the policy at that prefix. Returns (new tokens per row, EOS excluded; {"generated", "prefill"}; the kept
    log-probs [len(base), V]). ``generated`` counts the tokens of live rows only (finished rows are dropped from the
    batch whenever half of it has finished)."""
    torch = _torch()
    from agentmill.lm.tiny import TinyCache

    net, R = lm.model, len(lengths)
    lengths_t = torch.as_tensor(list(lengths), dtype=torch.long)
    n0 = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            pre = TinyCache(lm.cfg.layers)
            logits, _ = net(torch.as_tensor([list(base)], dtype=torch.long), pre)
            logp_all = torch.log_softmax(logits[0].double(), -1)
            cost = {"generated": 0, "prefill": len(base)}
            if first is None:
                cur = _draw(logp_all[lengths_t - 1], gen, greedy)
                cost["generated"] += R
            else:
                cur = torch.as_tensor(list(first), dtype=torch.long)
            steps = max(cap - int(lengths_t.min()), 1)
            s_max = len(base) + steps
            cache = SlabCache.from_base(pre, R, s_max)
            key_mask = torch.zeros(R, s_max, dtype=torch.bool)
            key_mask[:, : len(base)] = torch.arange(len(base))[None, :] < lengths_t[:, None]
            pos = lengths_t.clone()                         # position id of ``cur``
            rows = torch.arange(R)                          # original row of each batch row
            live = torch.ones(R, dtype=torch.bool)
            toks: list[Any] = []                            # (rows, cur, live) per step
            while True:
                live = live & (cur != EOS)
                toks.append((rows, cur, live))
                live = live & (pos + 1 < cap)               # room for one more token after cur
                n_live = int(live.sum())
                if n_live == 0:
                    break
                if n_live * 2 <= len(rows):
                    idx = torch.nonzero(live)[:, 0]
                    cache.select(idx)
                    key_mask, pos, rows, cur, live = key_mask[idx], pos[idx], rows[idx], cur[idx], live[idx]
                S = cache.length
                key_mask[:, S] = True
                logits = decode_step(net, cur, cache, key_mask[:, : S + 1], pos)
                cache.advance()
                cur = _draw(torch.log_softmax(logits.double(), -1), gen, greedy)
                cost["generated"] += n_live
                pos = pos + 1
    finally:
        torch.set_num_threads(n0)
    new: list[list[int]] = [[] for _ in range(R)]
    for rows_s, cur_s, live_s in toks:
        for r, t in zip(rows_s[live_s].tolist(), cur_s[live_s].tolist()):
            new[r].append(int(t))
    return new, cost, logp_all.numpy()


def scan_trace(lm: Any, prompt: Sequence[int], trace: Sequence[int], n: int, gen: Any, *, order: str,
               max_total_len: int = 40) -> dict[str, Any]:
    """V̂_t for t = 0..T−1 (k, n with T+1 entries; V_T unscored, −1) and the kept log-probs of q + y."""
    ops = ops_of_prompt(prompt)
    P, T = len(prompt), len(trace)
    base = list(prompt) + list(trace)
    ts = list(range(T))
    lengths = [P + t for t in ts for _ in range(n)]
    new, cost, logp = branch_rollouts(lm, base, lengths, gen, cap=P + max_total_len)
    k = np.full(T + 1, -1, np.int64)
    nn = np.zeros(T + 1, np.int64)
    for j, t in enumerate(ts):
        ok = sum(grade_chain(trace_text(list(trace[:t]) + new[j * n + i]), ops, order) for i in range(n))
        k[t], nn[t] = ok, n
    return {"k": k, "n": nn, "cost": cost, "logp": logp}


def forced_counts(lm: Any, prompt: Sequence[int], trace: Sequence[int], pos: int, tokens: Sequence[int], n: int,
                  gen: Any, *, order: str, max_total_len: int = 40) -> tuple[list[int], dict[str, int]]:
    """k of n rollouts from (q, y_<pos, x) for each forced token x (``pos`` 1-based, as a cliff's)."""
    ops = ops_of_prompt(prompt)
    P = len(prompt)
    base = list(prompt) + list(trace[: pos - 1])
    lengths = [len(base)] * (n * len(tokens))
    first = [int(x) for x in tokens for _ in range(n)]
    new, cost, _ = branch_rollouts(lm, base, lengths, gen, first=first, cap=P + max_total_len)
    ks = [sum(grade_chain(trace_text(list(trace[: pos - 1]) + new[j * n + i]), ops, order) for i in range(n))
          for j in range(len(tokens))]
    return ks, cost


def cliffs_of_trace(lm: Any, prompt: Sequence[int], trace: Sequence[int], gen: Any, *, order: str, n: int = 64,
                    top_k: int = 10, test: CliffTest = CliffTest(), max_total_len: int = 40) -> dict[str, Any]:
    """Scan → detect → type → forced top-k candidates at every cliff. Returns the cliff dicts for
    :func:`pairs.build_pairs` (plus positions, types and the scan), and the cost."""
    sc = scan_trace(lm, prompt, trace, n, gen, order=order, max_total_len=max_total_len)
    P = len(prompt)
    found = detect(sc["k"], sc["n"], list(trace), test)
    cost = dict(sc["cost"])
    out = []
    for c in found:
        lp = sc["logp"][P + c.pos - 2]             # the distribution at (q, y_<pos)
        kind, rank, h = type_token(lp, c.token_id, entropy="full")
        top = [int(x) for x in np.argsort(-lp)[:top_k]]
        others = [x for x in top if x != c.token_id]
        ks, cc = forced_counts(lm, prompt, trace, c.pos, others, n, gen, order=order, max_total_len=max_total_len)
        for key in cost:
            cost[key] += cc[key]
        cands = [(x, float(np.exp(lp[x])), kx, n) for x, kx in zip(others, ks)]
        cands.append((c.token_id, float(np.exp(lp[c.token_id])), c.k_curr, c.n_curr))
        out.append({"prefix_ids": list(prompt) + list(trace[: c.pos - 1]), "token": c.token_id, "type": kind,
                    "pos": c.pos, "rank": rank, "entropy": h, "k_prev": c.k_prev, "n_prev": c.n_prev,
                    "k_curr": c.k_curr, "n_curr": c.n_curr, "candidates": cands})
    return {"cliffs": out, "k": sc["k"].tolist(), "n": sc["n"].tolist(), "cost": cost,
            "expected_false": expected_false_cliffs(sc["k"], sc["n"], test)}


# --------------------------------------------------------------------------------------------- 3. full DPO
@dataclass(frozen=True)
class TrajectoryPair:
    prompt_ids: tuple[int, ...]
    chosen: tuple[int, ...]          # response ids (EOS appended when the trace ended)
    rejected: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.chosen == self.rejected:
            raise ValueError("TrajectoryPair: chosen == rejected")


def trajectory_pairs(lm: Any, problems: Sequence[Sequence[int]], gen: Any, *, order: str, samples: int = 4,
                     max_total_len: int = 40, batch: int = 512) -> tuple[list[TrajectoryPair], dict[str, int]]:
    """``samples`` traces per problem (T = 1); where one is correct and one wrong, the first correct is paired with
    the first wrong [R]. Returns (pairs, cost)."""
    rows = [(i, prompt_ids(ops)) for i, ops in enumerate(problems) for _ in range(samples)]
    traces: list[list[int]] = []
    cost = {"generated": 0, "prefill": 0}
    for s in range(0, len(rows), batch):
        chunk = rows[s: s + batch]
        tr, g = sample_traces(lm, [p for _, p in chunk], gen, max_new=max_total_len)
        traces += tr
        cost["generated"] += g
        cost["prefill"] += sum(len(p) for _, p in chunk)
    pairs = []
    for i, ops in enumerate(problems):
        mine = traces[i * samples: (i + 1) * samples]
        grades = [grade_chain(trace_text(t), ops, order) for t in mine]
        if any(grades) and not all(grades):
            w = mine[grades.index(True)]
            lose = mine[grades.index(False)]
            if w != lose:
                end = lambda t: tuple(t) + ((EOS,) if len(t) < max_total_len else ())  # noqa: E731
                pairs.append(TrajectoryPair(tuple(prompt_ids(ops)), end(w), end(lose)))
    return pairs, cost


def _seq_logps(net: Any, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]):
    """Summed log-probs of each response given its prompt ([B] tensor), and the number of tokens fed."""
    torch = _torch()
    seqs = [list(p) + list(r) for p, r in zip(prompts, responses)]
    L = max(len(s) for s in seqs)
    x = torch.full((len(seqs), L), PAD, dtype=torch.long)
    mask = torch.zeros(len(seqs), L - 1)
    for i, (p, s) in enumerate(zip(prompts, seqs)):
        x[i, : len(s)] = torch.tensor(s)
        mask[i, len(p) - 1: len(s) - 1] = 1.0
    logits, _ = net(x[:, :-1])
    logp = torch.log_softmax(logits.double(), -1).gather(-1, x[:, 1:, None])[..., 0]
    return (logp * mask).sum(-1), sum(len(s) - 1 for s in seqs)


def train_trajectory_dpo(lm: Any, pairs: Sequence[TrajectoryPair], cfg: DPOConfig, ledger: DPOLedger
                         ) -> dict[str, Any]:
    """Full fine-tuning of a ``tiny:`` model on whole-response pairs (same β, optimiser, epochs, batch as the
    one-token arm); the reference is a frozen copy, its log-probs computed once. Trains in place."""
    torch = _torch()
    if not pairs:
        raise ValueError("train_trajectory_dpo: empty pair set")
    net = lm.model
    ref = copy.deepcopy(net).eval()
    t0 = time.perf_counter()
    n0 = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            ref_w, nw = _seq_logps(ref, [p.prompt_ids for p in pairs], [p.chosen for p in pairs])
            ref_l, nl = _seq_logps(ref, [p.prompt_ids for p in pairs], [p.rejected for p in pairs])
        ledger.reference_forward += nw + nl
        opt = torch.optim.AdamW(net.parameters(), lr=cfg.lr, weight_decay=0.0)
        rng = np.random.default_rng(cfg.seed)
        losses = []
        net.train()
        for _ in range(cfg.epochs):
            order = rng.permutation(len(pairs))
            for s in range(0, len(order), cfg.batch_size):
                idx = order[s: s + cfg.batch_size]
                b = [pairs[i] for i in idx]
                pw, tw = _seq_logps(net, [p.prompt_ids for p in b], [p.chosen for p in b])
                pl, tl = _seq_logps(net, [p.prompt_ids for p in b], [p.rejected for p in b])
                loss = trajectory_dpo_loss(pw, pl, ref_w[idx], ref_l[idx], cfg.beta)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(float(loss.detach()))
                ledger.optimizer_steps += 1
                ledger.train_forward_tokens += tw + tl
                ledger.train_loss_positions += sum(len(p.chosen) + len(p.rejected) for p in b)
    finally:
        torch.set_num_threads(n0)
        net.eval()
    ledger.wall["train"] = ledger.wall.get("train", 0.0) + time.perf_counter() - t0
    return {"losses": losses, "steps": len(losses)}


# --------------------------------------------------------------------------------------------- 4. evaluation
def greedy_correct(lm: Any, problems: Sequence[Sequence[int]], *, order: str, max_total_len: int = 40,
                   batch: int = 512) -> np.ndarray:
    """Whether the greedy trace of each problem is correct (bool array)."""
    torch = _torch()
    out: list[bool] = []
    gen = torch.Generator().manual_seed(0)  # unused by greedy decoding
    for s in range(0, len(problems), batch):
        chunk = problems[s: s + batch]
        tr, _ = sample_traces(lm, [prompt_ids(o) for o in chunk], gen, greedy=True, max_new=max_total_len)
        out += [grade_chain(trace_text(t), o, order) for o, t in zip(chunk, tr)]
    return np.asarray(out, bool)


def so_site_errors(lm: Any, problems: Sequence[Sequence[int]], gen: Any, *, order: str, samples: int = 4,
                   max_total_len: int = 40, batch: int = 512) -> np.ndarray:
    """Per problem (rows), [SO sites reached, SO sites erred] over ``samples`` traces sampled at T = 1. A site is
    reached when the sampled trace agrees with an oracle trace up to the site's error token; it is erred unless
    the token written there is the right digit."""
    rows = [(i, ops) for i, ops in enumerate(problems) for _ in range(samples)]
    res = np.zeros((len(problems), 2), np.int64)
    for s in range(0, len(rows), batch):
        chunk = rows[s: s + batch]
        tr, _ = sample_traces(lm, [prompt_ids(o) for _, o in chunk], gen, max_new=max_total_len)
        for (i, ops), t in zip(chunk, tr):
            seen = set()
            for lf in enumerate_chain(ops, order):
                for st in lf.sites:
                    key = (st.pos, lf.ids[: st.pos])
                    if st.kind != "SO" or key in seen or len(t) <= st.pos or tuple(t[: st.pos]) != lf.ids[: st.pos]:
                        continue
                    seen.add(key)
                    res[i, 0] += 1
                    res[i, 1] += int(t[st.pos] != st.right)
    return res


@dataclass
class ArmResult:
    """One DPO arm's outcome: greedy correctness per held-out problem after training, its ledger and log."""

    name: str
    correct: np.ndarray
    ledger: DPOLedger
    pairs: int
    steps: int
    losses: list[float] = field(default_factory=list)
