"""Synthetic pairs carry their planted structure; the tool-format prompts split templates; the gates decide."""

from __future__ import annotations

import numpy as np

from agentmill.methods.crosscoder.organism import Gates, compute_gates, make_prompts
from agentmill.methods.crosscoder.synthetic import make_leak_pair, make_toy_pair


def test_toy_pair_structure() -> None:
    t = make_toy_pair(n=20_000, d=16, n_shared=8, n_a=2, n_b=2, seed=1)
    assert t.x.shape == (20_000, 2, 16)
    cos = (t.shared_a * t.shared_b).sum(1)
    assert np.all(cos >= np.cos(np.deg2rad(10)) - 1e-9)  # B's shared directions within 10°
    # an A-only direction explains variance in A but not in B
    pa = (t.x[:, 0] @ t.a_only[0]).var()
    pb = (t.x[:, 1] @ t.a_only[0]).var()
    assert pa > 2 * pb


def test_leak_pair_b_is_independent_of_the_label() -> None:
    p = make_leak_pair(n=20_000, d=16, n_shared=8, seed=0)
    s = p.s.astype(bool)
    gap_a = abs((p.x[s, 0] @ p.u).mean() - (p.x[~s, 0] @ p.u).mean())
    gap_b = abs((p.x[s, 1] @ p.u).mean() - (p.x[~s, 1] @ p.u).mean())
    assert gap_a > 2.0 and gap_b < 0.05


def test_prompt_splits_use_disjoint_templates_and_categories_differ() -> None:
    tr = make_prompts("tool", 300, split="train")
    te = make_prompts("tool", 100, split="test")
    pre_tr = {p.template_id.split(":")[2] for p in tr}
    assert all(p.gold_name in p.tools for p in tr) and not any(p.user in {q.user for q in tr} for p in te)
    assert pre_tr == {"0", "1", "2", "3"}
    decoy, bare = make_prompts("decoy", 20), make_prompts("bare", 20)
    assert all(p.tools and not p.gold_name for p in decoy) and all(not p.tools and p.gold_name for p in bare)
    assert tr[0].sibling_target().startswith(' <tool_call>{"name": ') and decoy[0].sibling_target() == \
        " " + decoy[0].plain_answer


def test_gates_pass_and_fail() -> None:
    tool, gen = make_prompts("tool", 10, split="test"), make_prompts("generic", 10, split="test")

    def good(ps):
        return [p.tool_target() if p.category == "tool" else " hi" for p in ps]

    g = compute_gates(good, lambda ps: [" no"] * len(ps), tool, gen)
    assert g.passed and g.sibling_tool_exact == 1.0
    g2 = compute_gates(good, good, tool, gen)  # a base that already calls tools fails its gate
    assert not g2.passed and g2.base_strict_format == 1.0
    assert "FAILED" in Gates(0.5, 0.5, 0.0, 0.0, 10, 10).text()
