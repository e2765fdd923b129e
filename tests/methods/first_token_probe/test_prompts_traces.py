"""Prompt bank and trace grammar: template counts, split disjointness, planted decision sites, parsing back."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from agentmill.methods.first_token_probe.prompts import SPLITS, sample_prompts, template_bank
from agentmill.methods.first_token_probe.traces import (CLOSE, OPENERS, ROLE_STANCE, parse_completion, plan_trace,
                                                        render_example, split_sentences)


def test_bank_sizes_and_split_disjointness() -> None:
    bank = template_bank()
    assert Counter(t.category for t in bank) == {"C": 40, "N": 40, "B": 40, "D": 24}
    assert len({t.id for t in bank}) == len(bank)
    for cat in "CNBD":
        subs = {t.sub for t in bank if t.category == cat}
        for sub in subs:
            assert {t.split for t in bank if t.sub == sub} == set(SPLITS)  # every split holds every sub-category
    assert sorted({t.q for t in bank if t.category == "D"}) == [0.25, 0.5, 0.75]
    names = {sp: {it.name for it in sample_prompts(sp, {"C": 40, "D": 20})} for sp in SPLITS}
    assert not (names["probe_train"] & names["probe_test"]) and not (names["organism_train"] & names["probe_test"])


def test_sample_prompts_counts_and_templates_stay_in_split() -> None:
    items = sample_prompts("probe_test", {"C": 5, "N": 3, "B": 2, "D": 4})
    assert Counter(i.category for i in items) == {"C": 5, "N": 3, "B": 2, "D": 4}
    bank = {t.id: t for t in template_bank()}
    assert all(bank[i.template_id].split == "probe_test" for i in items)


def test_locked_decides_in_s1_and_deliberative_at_a_pivot() -> None:
    item = sample_prompts("probe_test", {"D": 1})[0]
    rng = np.random.default_rng(0)
    for _ in range(200):
        t = plan_trace(item, "locked", rng)
        assert t.site == 0 and ROLE_STANCE[t.roles[0]] == t.outcome and ROLE_STANCE[t.roles[-1]] == t.outcome
        d = plan_trace(item, "deliberative", rng)
        assert 2 <= d.site <= 5 and t.sentences[0].split(",")[0] + "," in OPENERS
        assert ROLE_STANCE[d.roles[d.site]] == d.outcome
        assert all(r in ("weigh_open", "restate", "lean_refuse", "lean_comply") for r in d.roles[: d.site])


@pytest.mark.slow  # ~3 s: 2,000 grammar draws
def test_outcome_rate_matches_q_and_first_token_is_independent_of_it() -> None:
    items = [i for i in sample_prompts("probe_train", {"D": 6}) if i.q == 0.5][:1]
    rng = np.random.default_rng(1)
    draws = [plan_trace(items[0], "locked", rng) for _ in range(2000)]
    o = np.array([t.outcome for t in draws])
    assert abs(o.mean() - 0.5) < 4 * np.sqrt(0.25 / 2000)
    first = np.array([t.sentences[0][0] for t in draws])
    for ch in set(first):  # opener frequency the same under both outcomes (4 SE)
        p1, p0 = (first[o == 1] == ch).mean(), (first[o == 0] == ch).mean()
        assert abs(p1 - p0) < 4 * np.sqrt(0.25 * (1 / (o == 1).sum() + 1 / (o == 0).sum()))


def test_parse_round_trip_recovers_roles_outcome_and_site() -> None:
    rng = np.random.default_rng(2)
    for item in sample_prompts("probe_test", {"C": 3, "N": 3, "D": 3}):
        for variant in ("locked", "deliberative"):
            t = plan_trace(item, variant, rng)
            text = render_example(item.user, t).split("<think>\n", 1)[1]
            p = parse_completion(text)
            assert p.finished and p.outcome == t.outcome and p.site == t.site and p.roles == t.roles
    assert not parse_completion("Hmm, this seems fine.").finished
    assert split_sentences("A b. C d? E!  F") == ["A b.", "C d?", "E!", "F"]
    assert CLOSE == "\n</think>\n"
