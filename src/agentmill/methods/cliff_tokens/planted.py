"""Planted-cliff chained addition: a task whose error mechanisms are designed, with an exact numpy oracle policy.

Problem: m = 3 two-digit operands. Prompt ``Q:23+45+17=\\n``; trace ``A:23+45=68;68+17=85;#85`` then EOS; every
character is one token (byte ids of ``lm.tiny``'s tokenizer, BOS/EOS = 256/257, so the oracle and a ``tiny:``
model share a vocabulary). Each line copies the previous *written* sum. At an addition x + y whose units carry
(x mod 10 + y mod 10 ≥ 10) the policy drops the carry (writes x + y − 10) with probability [R, docs/methods]:
DF (x ≡ 9 and y ≡ 9 mod 10) 0.995 — the wrong digit is greedy with H = 0.031 nats; UC (else y ≡ 7) 0.6 — greedy,
H = 0.673; SO (any other carry) 0.15 — non-greedy, H = 0.423; no carry: 0. The *error token* is the first character
where the wrong sum's decimal string differs from the right one. An error only lowers the running sum, so an erred
trace ends wrong [D]. Problem mix: 20 % contain a DF site, 30 % a UC site and no DF site, 50 % neither (on the
correct path).

``ChainAddOracle`` enumerates the (≤ 2^(m−1)) complete traces of a problem by recursion over the written state, so
the next-token law and the exact potential of any on-support prefix are sums over consistent traces. It is a
``ForkableLM`` (token-by-token sampling with ``lm.fork.stream_rng``) and also offers ``rollout_counts``: n complete
continuations drawn at once from the consistent traces (the same law, vectorised) for the potential estimator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from agentmill.lm.fork import BranchRequest, Continuation, TokenCounters, stream_rng

BOS, EOS, PAD, VOCAB = 256, 257, 258, 259  # the byte tokenizer of lm.tiny
P_ERR = {"DF": 0.995, "UC": 0.6, "SO": 0.15}
"""Planted carry-drop rates per site kind [R]; chosen so DF's error token is greedy with H ≤ H_b(0.99), UC's greedy
with high entropy, SO's non-greedy."""
MIX = (0.2, 0.3, 0.5)
"""Shares of problems with a DF site / a UC site and no DF site / neither (correct path) [R]."""


def site_kind(x: int, y: int) -> str | None:
    """Kind of the addition x + y: None without a units carry."""
    if x % 10 + y % 10 < 10:
        return None
    if x % 10 == 9 and y % 10 == 9:
        return "DF"
    if y % 10 == 7:
        return "UC"
    return "SO"


@dataclass(frozen=True)
class Site:
    pos: int          # index in the trace of the error token (0-based; the token y_{pos+1})
    kind: str
    p_err: float
    erred: bool


@dataclass(frozen=True)
class Leaf:
    ids: np.ndarray   # trace token ids (no EOS)
    prob: float
    correct: bool
    sites: tuple[Site, ...]


def encode(text: str) -> list[int]:
    return list(text.encode("ascii"))


def prompt_ids(ops: Sequence[int]) -> list[int]:
    return [BOS] + encode("Q:" + "+".join(str(a) for a in ops) + "=\n")


def grade_text(text: str, ops: Sequence[int]) -> bool | None:
    """True iff the integer after the last '#' equals the sum; None if there is no '#'-answer (unscorable is
    reserved for a missing answer marker; a malformed answer is wrong)."""
    if "#" not in text:
        return False
    tail = text.rsplit("#", 1)[1]
    return tail.isdigit() and int(tail) == sum(ops)


def enumerate_leaves(ops: Sequence[int]) -> list[Leaf]:
    """All complete traces of problem ``ops`` with their probabilities, by recursion over the written sum."""
    leaves: list[Leaf] = []

    def rec(text: str, x: int, i: int, prob: float, sites: tuple[Site, ...]) -> None:
        if i == len(ops):
            final = text + f"#{x}"
            leaves.append(Leaf(np.asarray(encode(final), np.int32), prob, x == sum(ops), sites))
            return
        y = ops[i]
        head = text + f"{x}+{y}="
        kind = site_kind(x, y)
        right = x + y
        if kind is None:
            rec(head + f"{right};", right, i + 1, prob, sites)
            return
        wrong, p = right - 10, P_ERR[kind]
        rs, ws = str(right), str(wrong)
        j = next(j for j in range(max(len(rs), len(ws))) if j >= len(ws) or j >= len(rs) or rs[j] != ws[j])
        pos = len(head) + j
        rec(head + f"{right};", right, i + 1, prob * (1 - p), sites + (Site(pos, kind, p, False),))
        rec(head + f"{wrong};", wrong, i + 1, prob * p, sites + (Site(pos, kind, p, True),))

    rec("A:", int(ops[0]), 1, 1.0, ())
    return leaves


def sample_problem(rng: np.random.Generator, m: int = 3, mix: tuple[float, float, float] = MIX) -> tuple[int, ...]:
    """Operands 10..99 drawn until the correct path falls in the category drawn from ``mix``."""
    cat = int(rng.choice(3, p=np.asarray(mix) / sum(mix)))
    while True:
        ops = tuple(int(a) for a in rng.integers(10, 100, m))
        kinds, x = [], ops[0]
        for y in ops[1:]:
            kinds.append(site_kind(x, y))
            x += y
        has_df, has_uc = "DF" in kinds, "UC" in kinds
        if (cat == 0 and has_df) or (cat == 1 and has_uc and not has_df) or (cat == 2 and not has_df and not has_uc):
            return ops


@dataclass
class _OracleTree:
    key: tuple[int, ...]
    ops: tuple[int, ...]
    prompt: list[int]
    leaf_tokens: dict[int, np.ndarray] = field(default_factory=dict)
    counters: TokenCounters = field(default_factory=TokenCounters)


class ChainAddOracle:
    """The exact planted policy as a ``ForkableLM`` plus exact potentials (numpy only)."""

    supports_prefix_sharing = True
    eos_token_ids = (EOS,)
    vocab_size = VOCAB

    def __init__(self) -> None:
        self._leaves: dict[tuple[int, ...], list[Leaf]] = {}
        self._grades: dict[tuple[tuple[int, ...], bytes], bool] = {}

    # ------------------------------------------------------------------ the law
    def leaves(self, ops: Sequence[int]) -> list[Leaf]:
        key = tuple(int(a) for a in ops)
        if key not in self._leaves:
            self._leaves[key] = enumerate_leaves(key)
        return self._leaves[key]

    @staticmethod
    def ops_of(prompt: Sequence[int]) -> tuple[int, ...]:
        text = bytes(int(t) for t in prompt if int(t) < 256).decode("ascii")
        if not (text.startswith("Q:") and text.endswith("=\n")):
            raise ValueError(f"not a chainadd prompt: {text!r}")
        return tuple(int(a) for a in text[2:-2].split("+"))

    def _consistent(self, ops: Sequence[int], prefix: Sequence[int]) -> list[Leaf]:
        pre = np.asarray(prefix, np.int32)
        out = [lf for lf in self.leaves(ops) if len(lf.ids) >= len(pre) and np.array_equal(lf.ids[: len(pre)], pre)]
        if not out:
            raise ValueError("prefix is off the oracle's support")
        return out

    def next_token_dist(self, ops: Sequence[int], prefix: Sequence[int]) -> np.ndarray:
        """(VOCAB,) probabilities of the next token after ``prefix`` (EOS once a trace is complete)."""
        p = np.zeros(VOCAB)
        cons = self._consistent(ops, prefix)
        for lf in cons:
            tok = int(lf.ids[len(prefix)]) if len(lf.ids) > len(prefix) else EOS
            p[tok] += lf.prob
        return p / p.sum()

    def exact_potential(self, ops: Sequence[int], prefix: Sequence[int]) -> float:
        cons = self._consistent(ops, prefix)
        tot = sum(lf.prob for lf in cons)
        return sum(lf.prob for lf in cons if lf.correct) / tot

    def sample_trace(self, ops: Sequence[int], rng: np.random.Generator) -> Leaf:
        lv = self.leaves(ops)
        return lv[int(rng.choice(len(lv), p=np.asarray([lf.prob for lf in lv])))]

    def rollout_counts(self, prompt: Sequence[int], prefix: Sequence[int], n: int, rng: np.random.Generator, *,
                       ban: int | None = None) -> tuple[int, int]:
        """(k correct, n graded) of ``n`` complete continuations of ``prefix`` drawn from the policy; with ``ban``,
        that token's first-step probability is set to 0 and the rest renormalised."""
        ops = self.ops_of(prompt)
        cons = self._consistent(ops, prefix)
        w = np.asarray([lf.prob for lf in cons], float)
        if ban is not None:
            nxt = [int(lf.ids[len(prefix)]) if len(lf.ids) > len(prefix) else EOS for lf in cons]
            w = w * np.asarray([t != ban for t in nxt])
            if w.sum() == 0:
                raise ValueError(f"banning token {ban} leaves no continuation")
        draws = rng.choice(len(cons), size=n, p=w / w.sum())
        graded = np.asarray([self._graded(ops, lf) for lf in cons], bool)
        return int(graded[draws].sum()), int(n)

    def _graded(self, ops: Sequence[int], lf: Leaf) -> bool:
        """The verifier's grade of a complete trace (computed from its text, once per trace)."""
        key = (tuple(ops), lf.ids.tobytes())
        if key not in self._grades:
            self._grades[key] = bool(grade_text(bytes(lf.ids.tolist()).decode(), ops))
        return self._grades[key]

    # ------------------------------------------------------------------ ForkableLM
    def decode(self, ids: Sequence[int]) -> str:
        return bytes(int(i) for i in ids if int(i) < 256).decode("ascii", errors="replace")

    def start_tree(self, prompt: Any, tree_key: tuple[int, ...]) -> _OracleTree:
        ids = [int(t) for t in prompt]
        return _OracleTree(tuple(int(k) for k in tree_key), self.ops_of(ids), ids)

    def add_leaf(self, tree: _OracleTree, token_ids: Sequence[int]) -> int:
        leaf = len(tree.leaf_tokens)
        tree.leaf_tokens[leaf] = np.asarray(token_ids, np.int32)
        tree.counters.prefill_tokens += max(len(token_ids) - 1, 0)
        return leaf

    def expand(self, tree: _OracleTree, requests: Sequence[BranchRequest], temperature: float = 1.0
               ) -> list[Continuation]:
        if temperature != 1.0:
            raise ValueError("the oracle is its own policy: temperature must be 1.0")
        out = []
        for r in requests:
            if r.parent_leaf is not None and not np.array_equal(tree.leaf_tokens[r.parent_leaf][: r.pos],
                                                                r.prefix_ids):
                raise ValueError("fork prefix does not match the parent leaf's tokens")
            rng = stream_rng(tree.key, r.expansion_id)
            pre, toks, lps, ents, finish = list(map(int, r.prefix_ids)), [], [], [], "length"
            while len(toks) < r.max_new_tokens:
                p = self.next_token_dist(tree.ops, pre + toks)
                nz = p > 0
                logp = np.full(VOCAB, -np.inf)
                logp[nz] = np.log(p[nz])
                tok = int(np.argmax(logp - np.log(-np.log(rng.random(VOCAB)))))
                tree.counters.gen_tokens += 1
                h = float(-(p[nz] * logp[nz]).sum())
                if tok == EOS:
                    finish = "eos"
                    break
                toks.append(tok), lps.append(float(logp[tok])), ents.append(h)
            ids = np.asarray(toks, np.int32)
            tree.leaf_tokens[len(tree.leaf_tokens)] = np.concatenate([np.asarray(r.prefix_ids, np.int32), ids])
            out.append(Continuation(ids, np.asarray(lps, np.float32), np.asarray(ents, np.float32),
                                    float(ents[0]) if ents else 0.0, finish, self.decode(ids)))
        return out

    def end_tree(self, tree: _OracleTree) -> TokenCounters:
        return tree.counters


def planted_sites(oracle: ChainAddOracle, ops: Sequence[int], trace: Sequence[int]) -> list[Site]:
    """The planted sites a trace passed, with whether it erred there."""
    tr = np.asarray(trace, np.int32)
    for lf in oracle.leaves(ops):
        if np.array_equal(lf.ids, tr):
            return list(lf.sites)
    raise ValueError("trace is not one of the oracle's traces")


def binary_entropy(p: float) -> float:
    return 0.0 if p in (0.0, 1.0) else -(p * math.log(p) + (1 - p) * math.log(1 - p))


# ------------------------------------------------------------------------------------------ the tiny model
TINY_RECIPE = {"layers": 3, "d": 96, "heads": 4, "max_len": 64, "lr": 3e-3, "warmup": 100, "batch": 128,
               "steps": 2000, "seed": 0}
"""``chainadd-v1`` [R]: TinyLM 3 × 96, AdamW lr 3e-3, 100 warm-up steps then cosine, batch 128, 2,000 steps of fresh
oracle samples, seed 0."""
FORMAT = r"A:(\d+)\+(\d+)=(\d+);(\d+)\+(\d+)=(\d+);#(\d+)"


def oracle_batch(oracle: ChainAddOracle, rng: np.random.Generator, batch: int) -> list[tuple[list[int], list[int]]]:
    """``batch`` (prompt ids, trace ids + EOS) pairs sampled from the planted policy."""
    out = []
    for _ in range(batch):
        ops = sample_problem(rng)
        out.append((prompt_ids(ops), oracle.sample_trace(ops, rng).ids.tolist() + [EOS]))
    return out


def _pad(rows: list[list[int]]):
    import torch

    L = max(len(r) for r in rows)
    x = torch.full((len(rows), L), PAD, dtype=torch.long)
    for i, r in enumerate(rows):
        x[i, : len(r)] = torch.tensor(r)
    return x


def train_chainadd_tiny(*, steps: int = 2000, layers: int = 3, d: int = 96, heads: int = 4, lr: float = 3e-3,
                        warmup: int = 100, batch: int = 128, seed: int = 0, progress=None) -> tuple[Any, list[float]]:
    """A fresh ``TinyLM`` trained on oracle samples (loss on trace tokens and EOS only). Returns (lm, losses)."""
    import torch

    from agentmill.lm.tiny import TinyConfig, TinyLM

    lm = TinyLM(TinyConfig(layers=layers, d=d, heads=heads, max_len=64, seed=seed), spec="tiny:chainadd")
    net = lm.model
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) /
                                                                                max(steps - warmup, 1))))
    oracle, rng, losses = ChainAddOracle(), np.random.default_rng([seed, 7]), []
    n0 = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for step in range(steps):
            rows = oracle_batch(oracle, rng, batch)
            x = _pad([p + t for p, t in rows])
            y = x.clone()
            for i, (p, _t) in enumerate(rows):
                y[i, : len(p)] = PAD   # no loss on the prompt
            logits, _ = net(x[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y[:, 1:].reshape(-1),
                                                     ignore_index=PAD)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            losses.append(float(loss.detach()))
            if progress is not None and step % 50 == 0:
                progress(step, steps)
    finally:
        torch.set_num_threads(n0)
    net.eval()
    return lm, losses


def tiny_gate(lm: Any, *, n_problems: int = 2000, n_sampled: int = 200, seed: int = 1) -> dict[str, Any]:
    """The model's probability of the wrong digit at planted sites (per kind), of the correct token elsewhere,
    and its malformed-trace rate, on held-out problems; ``passed`` applies the pre-registered gate [R]:
    SO within 0.15 ± 0.05, UC within 0.6 ± 0.05, DF ≥ 0.99, non-site ≥ 0.995, malformed ≤ 1 %."""
    import re

    import torch

    oracle, rng = ChainAddOracle(), np.random.default_rng([seed, 99])
    per_kind: dict[str, list[float]] = {"DF": [], "UC": [], "SO": []}
    nonsite: list[float] = []
    for s in range(0, n_problems, 128):
        rows = []
        for _ in range(min(128, n_problems - s)):
            ops = sample_problem(rng)
            lf = oracle.sample_trace(ops, rng)
            rows.append((ops, prompt_ids(ops), lf))
        x = _pad([p + lf.ids.tolist() + [EOS] for _, p, lf in rows])
        with torch.no_grad():
            logp = torch.log_softmax(lm.model(x)[0].double(), -1).numpy()
        for i, (ops, p, lf) in enumerate(rows):
            P, ids = len(p), lf.ids.tolist() + [EOS]
            site_at = {st.pos: st for st in lf.sites}
            for j, tok in enumerate(ids):
                dist = oracle.next_token_dist(ops, ids[:j])
                lp = logp[i, P + j - 1]
                if j in site_at:
                    wrong = [int(t) for t in np.flatnonzero(dist) if dist[t] < 1]
                    st = site_at[j]
                    # the wrong digit is the one of the erring branch: its oracle probability is p_err
                    wtok = min(wrong, key=lambda t: abs(dist[t] - st.p_err))
                    per_kind[st.kind].append(float(np.exp(lp[wtok])))
                elif dist.max() == 1.0:
                    nonsite.append(float(np.exp(lp[tok])))
    # malformed: sampled traces (T = 1)
    probs = [sample_problem(rng) for _ in range(n_sampled)]
    bad = 0
    gen = torch.Generator().manual_seed(seed)
    for s in range(0, n_sampled, 64):
        chunk = probs[s: s + 64]
        seqs = [prompt_ids(o) for o in chunk]
        texts = sample_tiny(lm, seqs, 40, gen)
        for o, t in zip(chunk, texts):
            bad += re.fullmatch(FORMAT, t) is None
    means = {k: (float(np.mean(v)) if v else float("nan")) for k, v in per_kind.items()}
    counts = {k: len(v) for k, v in per_kind.items()}
    nonsite_mean = float(np.mean(nonsite))
    malformed = bad / n_sampled
    passed = (abs(means["SO"] - 0.15) <= 0.05 and abs(means["UC"] - 0.6) <= 0.05 and means["DF"] >= 0.99
              and nonsite_mean >= 0.995 and malformed <= 0.01)
    return {"p_wrong": means, "sites": counts, "p_correct_nonsite": nonsite_mean, "malformed": malformed,
            "n_problems": n_problems, "n_sampled": n_sampled, "passed": bool(passed)}


def sample_tiny(lm: Any, prompts: list[list[int]], max_new: int, gen: Any, temperature: float = 1.0) -> list[str]:
    """Plain ancestral sampling (T = 1) of a batch of prompts of equal length without cache (tiny, ≤ 64 tokens)."""
    import torch

    L = {len(p) for p in prompts}
    if len(L) != 1:
        out = []
        for p in prompts:
            out += sample_tiny(lm, [p], max_new, gen, temperature)
        return out
    x = torch.tensor(prompts)
    done = torch.zeros(len(prompts), dtype=torch.bool)
    new: list[list[int]] = [[] for _ in prompts]
    with torch.no_grad():
        for _ in range(max_new):
            logits = lm.model(x)[0][:, -1].double() / temperature
            tok = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)[:, 0]
            for i, t in enumerate(tok.tolist()):
                if not done[i]:
                    if t == EOS:
                        done[i] = True
                    else:
                        new[i].append(t)
            if bool(done.all()):
                break
            x = torch.cat([x, tok[:, None]], 1)
            if x.shape[1] >= lm.max_positions:
                break
    return [bytes(t for t in n if t < 256).decode("ascii", errors="replace") for n in new]
