"""Potential V_t of a trace: the probability that the policy, continuing from (q, y_≤t), ends correct.

V̂_t = k_t / n_t from n_t independent continuations (n = 64 [P]). Positions scored: t = 0 (``include_empty_prefix``)
and 1..T−1 (the paper's range [P]), every ``window``-th one; the scan stops after ``early_stop_zeros`` consecutive
k_t = 0 (20, the paper's configuration [P]) and records the positions it skipped (never imputed as 0). Continuations
stop at EOS or at the absolute length ``max_total_len`` of trace + continuation, not at a cap in new tokens (a cap in
new tokens makes a continuation from t−1 one token shorter than one from t and breaks the tower identity [D]).

Two rollout sources give the same law: any ``lm.fork.ForkableLM`` (``WhiteBoxForker`` over a ``tiny:`` or ``hf:``
model: one teacher-forced ``add_leaf`` of the trace, then forks at every scored position, each request drawing from
``stream_rng(tree_key, expansion_id)`` so counts do not depend on batching), or a source with ``rollout_counts``
(the chained-addition oracle, which draws whole continuations at once).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from agentmill.lm.fork import BranchRequest, TokenCounters, gumbel_pick, stream_rng, tempered_logp


@dataclass(frozen=True)
class PotentialConfig:
    """How potentials are estimated."""

    n: int = 64
    """Continuations per scored position (the paper's 64 [P])."""
    temperature: float = 1.0
    """Sampling temperature of the rollout policy (temperature only; no top-p/top-k)."""
    window: int = 1
    """Score every ``window``-th position (paper option [P])."""
    include_empty_prefix: bool = True
    """Also score t = 0 (the prompt alone)."""
    early_stop_zeros: int = 20
    """Stop after this many consecutive k_t = 0 (paper configuration [P]); 0 disables."""
    max_total_len: int = 40
    """Absolute cap on trace + continuation tokens (40 characters for chained addition [R])."""
    positions_per_batch: int = 8
    """Scored positions decoded together in one fork wave (fork source only)."""
    seed: int = 0
    """Root of every RNG stream."""
    grouped: bool = True
    """With a ``WhiteBoxForker`` source: one teacher-forced pass and one cache fork per scored position, its n rows
    decoded together (same RNG streams and law as forking each request alone, which ``False`` does)."""

    def __post_init__(self) -> None:
        if self.n < 2:
            raise ValueError(f"PotentialConfig: n must be >= 2, got {self.n}")
        if self.window < 1 or self.max_total_len < 1 or self.positions_per_batch < 1:
            raise ValueError("PotentialConfig: window, max_total_len and positions_per_batch must be >= 1")
        if self.temperature <= 0:
            raise ValueError(f"PotentialConfig: temperature must be > 0, got {self.temperature}")


@dataclass
class PotentialTrace:
    """One scanned trace. ``k``/``n``: (T+1,) int64, index t = after t tokens; −1 = unscored."""

    prompt_ids: list[int]
    trace_ids: list[int]
    k: np.ndarray
    n: np.ndarray
    skipped: list[int] = field(default_factory=list)
    unscorable: int = 0
    cost: dict[str, float] = field(default_factory=dict)

    @property
    def v(self) -> np.ndarray:
        out = np.full(len(self.k), np.nan)
        ok = self.k >= 0
        out[ok] = self.k[ok] / self.n[ok]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"prompt_ids": self.prompt_ids, "trace_ids": self.trace_ids, "k": self.k.tolist(),
                "n": self.n.tolist(), "skipped": self.skipped, "unscorable": self.unscorable, "cost": self.cost}


Verifier = Callable[[Sequence[int]], "bool | None"]


class PotentialEstimator:
    """Potentials over ``source`` (a ``ForkableLM`` or an object with ``rollout_counts``), graded by ``verifier``
    (token ids of trace prefix + continuation → True / False / None = unscorable, excluded and counted)."""

    def __init__(self, source: Any, verifier: Verifier, cfg: PotentialConfig = PotentialConfig(), *,
                 stop: Callable[[Sequence[int]], bool] | None = None) -> None:
        self.source, self.verifier, self.cfg = source, verifier, cfg
        self.stop = stop
        """The task's stop predicate over trace prefix + continuation ids (e.g. an arithmetic answer line that is
        complete); a row that meets it stops decoding. Grouped white-box source only (``stop_supported``)."""
        self.counters = TokenCounters()
        self.unscorable = 0
        self.last_timings: dict[str, Any] = {}
        """Wall seconds of the last grouped or naive call: ``prefill_s`` (the shared teacher-forced pass, grouped
        only) and ``per_position_s`` (one entry per scored position, in call order)."""
        if stop is not None and not self.stop_supported:
            raise ValueError("a stop predicate needs a WhiteBoxForker source in fork mode with grouped=True")

    @property
    def stop_supported(self) -> bool:
        """True when rollouts come from the grouped white-box path (the only one that reads ``stop``)."""
        return (self.cfg.grouped and type(self.source).__name__ == "WhiteBoxForker"
                and getattr(self.source, "mode", None) == "fork")

    # ---------------------------------------------------------------- one prefix
    def at(self, prompt_ids: Sequence[int], prefix_ids: Sequence[int], n: int, *, seed_key: Sequence[int],
           ban: int | None = None, force: int | None = None) -> tuple[int, int]:
        """(k, n_graded) of ``n`` fresh continuations of prompt + prefix (+ ``force``), the first step with ``ban``'s
        probability set to 0 when given."""
        prefix = [int(t) for t in prefix_ids] + ([int(force)] if force is not None else [])
        key = (self.cfg.seed, *(int(s) for s in seed_key))
        if hasattr(self.source, "rollout_counts"):
            return self.source.rollout_counts(prompt_ids, prefix, n, np.random.default_rng(key), ban=ban)
        if ban is None:
            return self._fork_counts(prompt_ids, prefix, [len(prefix)], n, key)[0]
        return self._ban_counts(prompt_ids, prefix, n, key, ban)

    # ---------------------------------------------------------------- a whole trace
    def scan(self, prompt_ids: Sequence[int], trace_ids: Sequence[int], *, seed_key: Sequence[int] = (0,)
             ) -> PotentialTrace:
        cfg = self.cfg
        trace = [int(t) for t in trace_ids]
        T = len(trace)
        if T > cfg.max_total_len:
            raise ValueError(f"trace has {T} tokens, longer than max_total_len={cfg.max_total_len}")
        t0 = time.perf_counter()
        k = np.full(T + 1, -1, np.int64)
        n = np.full(T + 1, -1, np.int64)
        todo = [t for t in range(0 if cfg.include_empty_prefix else 1, T) if t % cfg.window == 0 or t == 0]
        key = (cfg.seed, *(int(s) for s in seed_key))
        before = self.unscorable
        zeros, skipped, i = 0, [], 0
        while i < len(todo):
            chunk = todo[i: i + (1 if hasattr(self.source, "rollout_counts") else cfg.positions_per_batch)]
            if hasattr(self.source, "rollout_counts"):
                res = [self.source.rollout_counts(prompt_ids, trace[:t], cfg.n,
                                                  np.random.default_rng((*key, t))) for t in chunk]
            else:
                res = self._fork_counts(prompt_ids, trace, chunk, cfg.n, key)
            stop = False
            for t, (kt, nt) in zip(chunk, res):
                k[t], n[t] = kt, nt
                zeros = zeros + 1 if kt == 0 else 0
                if cfg.early_stop_zeros and zeros >= cfg.early_stop_zeros:
                    stop = True
                    skipped = [u for u in todo if u > t]
                    break
            if stop:
                break
            i += len(chunk)
        return PotentialTrace(list(map(int, prompt_ids)), trace, k, n, skipped, self.unscorable - before,
                              {"wall_seconds": time.perf_counter() - t0, **self.counters.to_dict()})

    # ---------------------------------------------------------------- fork source
    def _grade(self, ids: Sequence[int]) -> bool | None:
        try:
            g = self.verifier(ids)
        except Exception:  # noqa: BLE001 - a verifier crash is "unscorable", never a failure
            return None
        if g is not None and not isinstance(g, (bool, np.bool_)):
            raise TypeError(f"verifier must return bool or None, got {type(g).__name__}")
        return g

    def _fork_counts(self, prompt_ids: Sequence[int], trace: list[int], positions: Sequence[int], n: int,
                     key: tuple[int, ...]) -> list[tuple[int, int]]:
        if self.stop_supported:
            return self.fork_counts(prompt_ids, trace, positions, n, key)
        lm, cfg = self.source, self.cfg
        tree = lm.start_tree(list(prompt_ids), key)
        leaf = lm.add_leaf(tree, trace) if trace else None
        reqs = []
        for t in positions:
            budget = cfg.max_total_len - t
            if budget < 1:
                raise ValueError(f"position {t} leaves no room under max_total_len={cfg.max_total_len}")
            for j in range(n):
                reqs.append(BranchRequest(leaf if t else None, t, np.asarray(trace[:t], np.int32), t * n + j, budget))
        conts = lm.expand(tree, reqs, cfg.temperature)
        self.counters.add(lm.end_tree(tree))
        out = []
        for i, t in enumerate(positions):
            k = m = 0
            for c in conts[i * n:(i + 1) * n]:
                g = self._grade(trace[:t] + c.token_ids.tolist())
                if g is None:
                    self.unscorable += 1
                    continue
                k, m = k + int(g), m + 1
            out.append((k, m))
        return out

    def fork_counts(self, prompt_ids: Sequence[int], trace: Sequence[int], positions: Sequence[int], n: int,
                    key: tuple[int, ...]) -> list[tuple[int, int]]:
        """The fork source's law with one fork per position: one teacher-forced pass over prompt + trace keeps the
        cache and the logits at every position; each scored position copies the cache once, expands it to n rows
        and decodes them together. Row j of position t draws from ``stream_rng(key, t·n + j)`` exactly as the
        per-request path does, so the counts agree with it (up to float ties). Needs a ``WhiteBoxForker`` source."""
        import torch

        lm, trace = self.source.lm, [int(t) for t in trace]
        t0 = time.perf_counter()
        prompt = [int(t) for t in prompt_ids]
        P = len(prompt)
        full = lm.forward(torch.tensor([prompt + trace[: max(positions)]]))
        self.counters.prefill_tokens += P + max(positions)
        self.counters.forward_calls += 1
        logits_all = full.logits[0].numpy()
        timings: dict[str, Any] = {"prefill_s": time.perf_counter() - t0, "per_position_s": []}
        out = []
        for t in positions:
            t1 = time.perf_counter()
            cache = lm.crop_cache(lm.fork_cache(full.cache), P + t)
            cache = lm.fork_cache(cache, n) if n > 1 else cache
            self.counters.forks += 1
            logits = np.repeat(logits_all[P + t - 1][None], n, 0)
            out.append(self._decode_and_grade(lm, cache, logits, P, trace[:t], n, key, t))
            timings["per_position_s"].append(time.perf_counter() - t1)
        self.counters.wall_seconds += time.perf_counter() - t0
        self.last_timings = timings
        return out

    def naive_counts(self, prompt_ids: Sequence[int], trace: Sequence[int], positions: Sequence[int], n: int,
                     key: tuple[int, ...]) -> list[tuple[int, int]]:
        """The same law without forks, as ``generate(num_return_sequences=n)`` does it: for each position t,
        prompt + y_≤t repeated n times is prefilled as one batch (n·(P+t) tokens), then decoded with the same
        sampler and the same RNG streams as :meth:`fork_counts` — the reference a fork scan is checked and timed
        against. Needs a white-box source (``WhiteBoxForker`` or the model itself)."""
        import torch

        lm = getattr(self.source, "lm", self.source)
        prompt, trace = [int(t) for t in prompt_ids], [int(t) for t in trace]
        P = len(prompt)
        timings: dict[str, Any] = {"prefill_s": 0.0, "per_position_s": []}
        t0 = time.perf_counter()
        out = []
        for t in positions:
            t1 = time.perf_counter()
            fo = lm.forward(torch.tensor([prompt + trace[:t]] * n))
            self.counters.prefill_tokens += n * (P + t)
            self.counters.forward_calls += 1
            out.append(self._decode_and_grade(lm, fo.cache, fo.logits[:, -1].numpy(), P, trace[:t], n, key, t))
            timings["per_position_s"].append(time.perf_counter() - t1)
        self.counters.wall_seconds += time.perf_counter() - t0
        self.last_timings = timings
        return out

    def sample(self, prompt_ids: Sequence[int], n: int, key: tuple[int, ...]
               ) -> list[tuple[list[int], bool | None, str]]:
        """n traces of the rollout policy from the prompt alone (the t = 0 rollouts of :meth:`fork_counts`, same
        streams): (token ids, grade, finish reason ``eos`` / ``length`` / ``stop``) per row."""
        import torch

        lm = self.source.lm
        prompt = [int(t) for t in prompt_ids]
        fo = lm.forward(torch.tensor([prompt]))
        self.counters.prefill_tokens += len(prompt)
        cache = lm.fork_cache(fo.cache, n) if n > 1 else fo.cache
        logits = np.repeat(fo.logits[0, -1].numpy()[None], n, 0)
        toks, finish = self._decode_rows(lm, cache, logits, len(prompt), [], n, key, 0)
        return [(tk, self._grade(tk), f or "length") for tk, f in zip(toks, finish)]

    def _decode_and_grade(self, lm: Any, cache: Any, logits: np.ndarray, P: int, prefix: list[int], n: int,
                          key: tuple[int, ...], t: int) -> tuple[int, int]:
        """Decode n rows that share prompt + ``prefix`` (``cache`` holds n rows of length P + t, ``logits`` [n, V]
        are the next-token logits); row j draws from ``stream_rng(key, t·n + j)``; returns (k, n_graded)."""
        toks, _ = self._decode_rows(lm, cache, logits, P, prefix, n, key, t)
        k = m = 0
        for r in range(n):
            g = self._grade(prefix + toks[r])
            if g is None:
                self.unscorable += 1
                continue
            k, m = k + int(g), m + 1
        return k, m

    def _decode_rows(self, lm: Any, cache: Any, logits: np.ndarray, P: int, prefix: list[int], n: int,
                     key: tuple[int, ...], t: int) -> tuple[list[list[int]], list[str | None]]:
        """The shared decode loop of :meth:`_decode_and_grade` and :meth:`sample`: (tokens, finish) per row."""
        import torch

        from agentmill.lm.decoding import advance_batch

        cfg = self.cfg
        budget = min(cfg.max_total_len - t, lm.max_positions - P - t)
        if budget < 1:
            raise ValueError(f"position {t} leaves no room under max_total_len={cfg.max_total_len}")
        eos = set(getattr(lm, "eos_token_ids", ()) or ())
        rngs = [stream_rng(key, t * n + j) for j in range(n)]
        toks: list[list[int]] = [[] for _ in range(n)]
        finish: list[str | None] = [None] * n
        mask = torch.ones((n, P + t), dtype=torch.long)
        next_pos = torch.full((n,), P + t, dtype=torch.long)
        active = list(range(n))
        while active:
            logp = tempered_logp(logits, cfg.temperature)
            step = []
            for k, r in enumerate(active):
                tok = gumbel_pick(logp[k], rngs[r])[0]
                self.counters.gen_tokens += 1
                if tok in eos:
                    finish[r] = "eos"
                else:
                    toks[r].append(tok)
                    if len(toks[r]) >= budget:
                        finish[r] = "length"
                    elif self.stop is not None and self.stop(prefix + toks[r]):
                        finish[r] = "stop"
                step.append(tok)
            state = advance_batch(lm, cache, mask, next_pos, step, active, finish)
            if state is None:
                break
            cache, logits, mask, next_pos, active = state
            self.counters.fed_tokens += len(active)
            self.counters.forward_calls += 1
        return toks, finish

    def _ban_counts(self, prompt_ids: Sequence[int], prefix: list[int], n: int, key: tuple[int, ...], ban: int
                    ) -> tuple[int, int]:
        """Ban on a white-box fork source: draw each row's first token from the renormalised law without ``ban``
        (its own stream), then continue each distinct first token from a teacher-forced leaf."""
        logp = next_token_logp(self.source.lm, prompt_ids, prefix, self.cfg.temperature)
        logp = logp.copy()
        logp[int(ban)] = -np.inf
        firsts = [gumbel_pick(logp, stream_rng((*key, 1), j))[0] for j in range(n)]
        k = m = 0
        for x in sorted(set(firsts)):
            cnt = firsts.count(x)
            kx, mx = self._fork_counts(prompt_ids, prefix + [x], [len(prefix) + 1], cnt, (*key, 2, x))[0]
            k, m = k + kx, m + mx
        return k, m


def next_token_logp(lm: Any, prompt_ids: Sequence[int], prefix_ids: Sequence[int], temperature: float = 1.0
                    ) -> np.ndarray:
    """float64 log-probabilities of the next token after prompt + prefix under softmax(logits / T), from a
    white-box LM (``forward``) or a source with ``next_token_dist`` (the oracle; T must be 1)."""
    if hasattr(lm, "next_token_dist"):
        p = lm.next_token_dist(lm.ops_of(prompt_ids), prefix_ids)
        with np.errstate(divide="ignore"):
            return np.log(p)
    if not hasattr(lm, "forward"):
        raise TypeError(f"next-token distributions need a WhiteBoxLM (forward); got {type(lm).__name__}")
    import torch

    ids = torch.tensor([list(prompt_ids) + list(prefix_ids)])
    logits = lm.forward(ids).logits[0, -1].double().numpy()
    return tempered_logp(logits, temperature)


def tower_check(est: PotentialEstimator, prompt_ids: Sequence[int], prefix_ids: Sequence[int], n: int, *,
                seed_key: Sequence[int], min_prob: float = 1e-6) -> dict[str, float]:
    """Tower identity V_{t−1} = Σ_x π(x)·V(x): the right side from forced-candidate estimates over every token with
    π(x) ≥ ``min_prob`` (the residual mass is reported), the left from a fresh direct estimate; returns both, their
    SE and |difference| / SE."""
    src = est.source.lm if hasattr(est.source, "lm") else est.source
    logp = next_token_logp(src, prompt_ids, prefix_ids, est.cfg.temperature)
    p = np.exp(logp)
    cand = np.flatnonzero(p >= min_prob)
    rhs, var = 0.0, 0.0
    for x in cand:
        kx, nx = est.at(prompt_ids, prefix_ids, n, seed_key=(*seed_key, 1, int(x)), force=int(x))
        vx = kx / nx if nx else 0.0
        rhs += p[x] * vx
        var += p[x] ** 2 * vx * (1 - vx) / max(nx, 1)
    k0, n0 = est.at(prompt_ids, prefix_ids, n, seed_key=(*seed_key, 0))
    v0 = k0 / n0
    se = float(np.sqrt(var + v0 * (1 - v0) / n0))
    return {"direct": v0, "tower": float(rhs), "se": se, "residual_mass": float(1 - p[cand].sum()),
            "z": abs(v0 - rhs) / se if se > 0 else (0.0 if v0 == rhs else np.inf)}
