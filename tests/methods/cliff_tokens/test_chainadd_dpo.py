"""The tiny chained-addition model, its batched forked rollouts, and the Cliff-DPO / full-DPO pieces."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentmill.lm.tiny import TinyConfig, TinyLM  # noqa: E402
from agentmill.methods.cliff_tokens import chainadd as ca  # noqa: E402
from agentmill.methods.cliff_tokens import cliff_dpo as cd  # noqa: E402
from agentmill.methods.cliff_tokens.planted import EOS, enumerate_leaves, prompt_ids, sample_problem  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models on a shared machine: one torch thread (two threads make them many times slower under load)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_msd_leaves_equal_the_planted_oracle():
    rng = np.random.default_rng(0)
    for _ in range(100):
        ops = sample_problem(rng)
        a, b = enumerate_leaves(ops), ca.enumerate_chain(ops, "msd")
        assert [tuple(x.ids.tolist()) for x in a] == [x.ids for x in b]
        assert [x.prob for x in a] == pytest.approx([x.prob for x in b])
        assert [(s.pos, s.kind, s.erred) for x in a for s in x.sites] == [(s.pos, s.kind, s.erred) for x in b
                                                                           for s in x.sites]


def test_lsd_trace_by_hand():
    # 23+45 = 68 (no carry); 68+17: units 8+7 carry, y ≡ 7 → UC; right 85 ("58"), wrong 75 ("57")
    lv = ca.enumerate_chain((23, 45, 17), "lsd")
    texts = {bytes(lf.ids).decode(): lf for lf in lv}
    assert set(texts) == {"A:32+54=86;86+71=58;#58", "A:32+54=86;86+71=57;#57"}
    right = texts["A:32+54=86;86+71=58;#58"]
    assert right.correct and right.prob == pytest.approx(0.4)
    (site,) = right.sites
    assert site.kind == "UC" and site.pos == len("A:32+54=86;86+71=5") and chr(site.right) == "8"
    assert chr(site.wrong) == "7"
    assert ca.grade_chain("A:32+54=86;86+71=58;#58", (23, 45, 17), "lsd")
    assert not ca.grade_chain("A:32+54=86;86+71=58;#85", (23, 45, 17), "lsd")


def test_sample_problems_follows_the_mix():
    rng = np.random.default_rng(1)
    probs = ca.sample_problems(rng, 3000)
    kinds = []
    for ops in probs:
        x, ks = ops[0], []
        for y in ops[1:]:
            ks.append(ca.site_kind(x, y))
            x += y
        kinds.append(0 if "DF" in ks else 1 if "UC" in ks else 2)
    share = np.bincount(kinds, minlength=3) / len(kinds)
    se = np.sqrt(np.array([0.2, 0.3, 0.5]) * (1 - np.array([0.2, 0.3, 0.5])) / len(kinds))
    assert np.all(np.abs(share - [0.2, 0.3, 0.5]) < 4 * se)


def test_distill_targets_put_p_err_on_the_wrong_digit():
    rng = np.random.default_rng(2)
    x, mt, mw, at, aw = ca.distill_batch(rng, 16, "msd")
    # at every position with an alternative, weights sum to 1 and the alternative weight is a planted rate
    alt = aw > 0
    assert torch.allclose((mw + aw)[alt], torch.ones(int(alt.sum())))
    assert set(np.round(aw[alt].double().numpy(), 3).tolist()) <= {0.995, 0.6, 0.15}
    # prompt positions carry no loss
    P = len(prompt_ids((10, 10, 10)))
    assert float(mw[:, : P - 1].sum()) == 0.0


def _naive_greedy(lm, seq, cap):
    seq = list(seq)
    out = []
    with torch.no_grad():
        while len(seq) < cap:
            t = int(lm.model(torch.tensor([seq]))[0][0, -1].argmax())
            if t == EOS:
                break
            out.append(t)
            seq.append(t)
    return out


@pytest.mark.slow
def test_branch_rollouts_equal_uncached_decoding():
    lm = TinyLM(TinyConfig(layers=2, d=16, heads=2, max_len=64, seed=3))
    base = prompt_ids((23, 45, 17)) + list(b"A:23+45=68;68+")
    lengths = [5, 14, len(base)]
    gen = torch.Generator().manual_seed(0)
    new, cost, logp = cd.branch_rollouts(lm, base, lengths, gen, cap=32, greedy=True)
    for L, got in zip(lengths, new):
        assert got == _naive_greedy(lm, base[:L], 32)
    # forced first tokens
    new_f, _, _ = cd.branch_rollouts(lm, base, [9, 9], gen, first=[ord("7"), ord("1")], cap=32, greedy=True)
    for f, got in zip([ord("7"), ord("1")], new_f):
        assert got[0] == f and got[1:] == _naive_greedy(lm, base[:9] + [f], 32)
    # kept log-probs are the teacher-forced ones
    with torch.no_grad():
        ref = torch.log_softmax(lm.model(torch.tensor([base]))[0][0].double(), -1).numpy()
    assert np.allclose(logp, ref, atol=1e-6)
    assert cost["prefill"] == len(base)


def test_ledger_adds_reference_tokens():
    led = cd.DPOLedger(detection_generated=10, detection_forward=5, train_forward_tokens=7, reference_forward=4)
    assert led.total() == 10 + 5 + 3 * 7 + 4
    assert led.to_dict()["total_forward_equiv"] == led.total()


@pytest.mark.slow
def test_trajectory_dpo_prefers_the_chosen_response_and_counts_tokens():
    lm = TinyLM(TinyConfig(layers=1, d=16, heads=2, max_len=64, seed=4))
    q = tuple(prompt_ids((23, 45, 17)))
    w = tuple(b"A:23+45=68;68+17=85;#85") + (EOS,)
    lose = tuple(b"A:23+45=68;68+17=75;#75") + (EOS,)
    pairs = [cd.TrajectoryPair(q, w, lose)] * 4
    before = {n: p.detach().clone() for n, p in lm.model.named_parameters()}
    led = cd.DPOLedger()
    from agentmill.methods.cliff_tokens.dpo import DPOConfig

    with torch.no_grad():
        m0 = float((cd._seq_logps(lm.model, [q], [w])[0] - cd._seq_logps(lm.model, [q], [lose])[0])[0])
    log = cd.train_trajectory_dpo(lm, pairs, DPOConfig(lr=1e-3, epochs=2, batch_size=2), led)
    with torch.no_grad():
        m1 = float((cd._seq_logps(lm.model, [q], [w])[0] - cd._seq_logps(lm.model, [q], [lose])[0])[0])
    assert m1 > m0
    assert any(not torch.equal(before[n], p) for n, p in lm.model.named_parameters())
    assert log["steps"] == led.optimizer_steps == 4
    # loss-bearing positions: |y_w| + |y_l| per pair per epoch; tokens fed: (|q| + |y| - 1) per sequence
    assert led.train_loss_positions == 2 * 4 * (len(w) + len(lose))
    assert led.train_forward_tokens == 2 * 4 * (len(q) + len(w) - 1 + len(q) + len(lose) - 1)
    assert led.reference_forward == 4 * (len(q) + len(w) - 1 + len(q) + len(lose) - 1)
    with pytest.raises(ValueError):
        cd.TrajectoryPair(q, w, w)


def test_so_site_errors_by_hand(monkeypatch):
    # 15+16: units 5+6 carry, SO (y ≢ 7, not 9/9); right 31, wrong 21 → error token is the first digit (msd)
    ops = (15, 16, 10)

    def fake_sample(lm, prompts, gen, *, greedy=False, max_new=40):
        return [list(b"A:15+16=31;31+10=41;#41"), list(b"A:15+16=21;21+10=31;#31"),
                list(b"A:15+17=32;32+10=42;#42")], 0

    monkeypatch.setattr(cd, "sample_traces", fake_sample)
    res = cd.so_site_errors(None, [ops], None, order="msd", samples=3)
    # third trace left the support before the site: not reached
    assert res.tolist() == [[2, 1]]


SHIPPED = ca.ChainRecipe(order="lsd", steps=3600, site_weight=5.0, train_mix=(1 / 3, 1 / 3, 1 / 3))


def test_obtain_without_training_fails_fast(tmp_path):
    with pytest.raises(FileNotFoundError):
        ca.obtain_chainadd(ca.ChainRecipe(steps=7), tmp_path, train=False)


@pytest.mark.slow
def test_shipped_model_is_the_planted_policy(tmp_path):
    lm, card = ca.obtain_chainadd(SHIPPED, tmp_path, train=False)
    assert card["source"] == "packaged" and card["gate"]["passed"]
    # a fresh, smaller gate on other problems: the wrong-digit probabilities sit at the planted rates
    g = ca.chain_gate(lm, "lsd", n_problems=150, n_sampled=16, seed=11)
    assert abs(g["p_wrong"]["UC"] - 0.6) < 0.05 and abs(g["p_wrong"]["SO"] - 0.15) < 0.05
    assert g["p_wrong"]["DF"] > 0.98 and g["p_correct_nonsite"] > 0.99 and g["malformed"] == 0.0


def test_cli_train_chainadd_uses_the_shipped_model(tmp_path, capsys):
    from agentmill.cli.main import main

    rc = main(["cliff", "train-chainadd", "--order", "lsd", "--steps", "3600", "--site-weight", "5",
               "--balanced-mix", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "gate passed" in out and '"source": "packaged"' in out
    assert not any(tmp_path.iterdir())  # nothing trained



@pytest.mark.slow
def test_forked_potential_at_the_prompt_matches_plain_sampling(tmp_path):
    """Two code paths, one law: V̂_0 from ``branch_rollouts`` (slab cache, single-query attention) and the accuracy of
    plain KV-cached sampling from the prompt (``sample_traces``) agree within 4 standard errors."""
    lm, _ = ca.obtain_chainadd(SHIPPED, tmp_path, train=False)
    gen = torch.Generator().manual_seed(5)
    n = 512
    for ops in ((23, 45, 17), (15, 16, 10)):   # a UC site (exact V_0 = 0.4), an SO site (0.85)
        P = prompt_ids(ops)
        new, _, _ = cd.branch_rollouts(lm, P, [len(P)] * n, gen, cap=len(P) + 40)
        a = np.mean([ca.grade_chain(cd.trace_text(x), ops, "lsd") for x in new])
        tr, _ = ca.sample_traces(lm, [P] * n, gen)
        b = np.mean([ca.grade_chain(cd.trace_text(x), ops, "lsd") for x in tr])
        se = np.sqrt(a * (1 - a) / n + b * (1 - b) / n)
        assert abs(a - b) <= 4 * se, (ops, a, b)
