"""End-to-end losslessness of SpecEngine with sampling (temperature 1, top-k 3) on a tiny random Llama: the
distribution of the first three generated tokens under speculation equals the target's exact distribution,
computed from the engine's own logits. The drafter proposes the target's own greedy continuation (a strong but
imperfect drafter at T = 1), so drafts are accepted and rejected often; this exercises drafting, the ragged verify
forward, exact verification and KV rollback together."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")

from agentmill.lm.engine import EngineConfig, RaggedBatch, SamplingParams, warp
from agentmill.lm.engine.tiny import tiny_llama
from agentmill.methods.dspark import SpecEngine

pytestmark = pytest.mark.slow


def exact_dist(eng, prompt, params, n_tokens):
    def probs(ids):
        s = eng.new_sequence()
        fo = eng.forward(RaggedBatch().add(s, ids))
        eng.free(s)
        return warp(fo.logits, params.temperature, params.top_k, params.top_p)[0].double()

    out = {(): 1.0}
    for _ in range(n_tokens):
        nxt = {}
        for seq, pr in out.items():
            p = probs(prompt + list(seq))
            for t in torch.nonzero(p).flatten().tolist():
                nxt[seq + (t,)] = pr * float(p[t])
        out = nxt
    return out


class GreedyOracle:
    """Drafts the target's own greedy continuation (computed with a second copy of the same weights)."""

    deterministic = True

    def __init__(self, eng):
        self.eng = eng

    def propose_one(self, history, limit=None):
        return self.eng.generate([list(history)], SamplingParams(temperature=0, max_tokens=limit or 1,
                                                                  ignore_eos=True))[0] if limit else []


def test_speculative_sampling_matches_the_target_distribution():
    eng = tiny_llama(3, EngineConfig(threads=1))
    prompt = eng.tokenizer.encode("xy")
    base = SamplingParams(temperature=1.0, top_k=3, max_tokens=4, ignore_eos=True)
    exact = exact_dist(eng, prompt, base, 4)
    spec = SpecEngine(eng, GreedyOracle(tiny_llama(3, EngineConfig(threads=1))), verify_len=3, max_num_seqs=64)
    n = 4000
    counts: dict[tuple[int, int], int] = {}
    for start in range(0, n, 64):
        ids = [spec.add_request(prompt, SamplingParams(temperature=1.0, top_k=3, max_tokens=4, ignore_eos=True,
                                                       seed=s)) for s in range(start, min(n, start + 64))]
        outs = {i: [] for i in ids}
        while spec.has_work():
            for o in spec.step():
                outs[o.rid] += o.token_ids
        for seq in outs.values():
            counts[tuple(seq)] = counts.get(tuple(seq), 0) + 1
    assert set(counts) <= set(exact)
    keys = sorted(exact, key=exact.get, reverse=True)
    obs = np.array([counts.get(k, 0) for k in keys], float)
    exp = np.array([exact[k] for k in keys])
    exp = exp / exp.sum() * n                        # float32 warp: sums to 1 only within ~1e-7
    big = exp >= 5                                   # pool the rare sequences into one bin
    obs = np.append(obs[big], obs[~big].sum())
    exp = np.append(exp[big], exp[~big].sum())
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    st = spec.stats
    assert st.accepted > 0.2 * st.drafted > 0 and st.accepted < st.drafted   # both outcomes happen often
    assert len(eng.kv) == 0
