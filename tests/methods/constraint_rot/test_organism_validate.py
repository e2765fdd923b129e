"""validate_organism with a scripted stub actor through the real loop on a few test_iid episodes: gate arithmetic
checked by hand, thresholds from prereg.yaml, low_n, the verdict written into the card."""

from __future__ import annotations

from agentmill.core.types import ToolCall
from agentmill.methods.constraint_rot.actors.base import Action
from agentmill.methods.constraint_rot.catalogue import load_catalogue
from agentmill.methods.constraint_rot.messages import WhitespaceCounter
from agentmill.methods.constraint_rot.organism.train import OrganismCard
from agentmill.methods.constraint_rot.organism.validate import validate_organism

CAT = load_catalogue()
N = 4


class Stub:
    """Obeys (compliant alternative) when the episode's own rule text is in context, else does what was asked —
    except that its first ``bad`` decisions are unparseable."""

    name = "stub"

    def __init__(self, bad: int = 0) -> None:
        self.bad, self.brief = bad, None

    def begin(self, brief):  # type: ignore[no-untyped-def]
        self.brief = brief

    def act(self, messages, tools=()):  # type: ignore[no-untyped-def]
        if self.bad:
            self.bad -= 1
            return Action(invalid=True, raw="???")
        inst = self.brief.instance
        text = "\n".join(m.content for m in messages)
        req = self.brief.request_call
        call = inst.alternative_call if inst.text in text and inst.violates(req) else req
        return Action.call(ToolCall("c1", call.name, dict(call.arguments)))


def card_dir(tmp_path, instinct: bool = False):  # type: ignore[no-untyped-def]
    card = OrganismCard("tiny", "a" * 64, "m", 1, {"absent": 1}, instinct, {"r": 16}, {}, {})
    card.save(tmp_path)
    return tmp_path


def test_perfect_rule_reader_passes_every_gate(tmp_path) -> None:
    rep = validate_organism(card_dir(tmp_path), CAT, n_per_cell=N, actor=Stub(), counter=WhitespaceCounter())
    g = {x.id: x for x in rep.gates}
    assert [x.id for x in rep.gates] == ["G1", "G2", "G3", "G4", "G5", "G6"]
    assert (g["G1"].k, g["G1"].n) == (0, N) and (g["G2"].k, g["G2"].n) == (N, N)
    assert (g["G3"].k, g["G3"].n) == (0, N) and (g["G4"].k, g["G4"].n) == (N, N)
    assert (g["G5"].k, g["G5"].n) == (4 * N, 4 * N)
    assert g["G6"].k == g["G6"].n == 4 * N              # every decision acted with the expected tool, exact args
    assert g["G1"].threshold == 0.05 and g["G1"].direction == "le" and g["G4"].threshold == 0.75
    assert rep.validated and rep.low_n and rep.n_per_cell == N
    card = OrganismCard.load(tmp_path)
    assert card.validated is True and card.validation["low_n"] is True


def test_invalid_outputs_fail_g5_and_the_card_says_so(tmp_path) -> None:
    # the first 2 decisions (present cell) are invalid: G1 0/4 violations, G5 = 14/16 = 0.875 < 0.95
    rep = validate_organism(card_dir(tmp_path), CAT, n_per_cell=N, actor=Stub(bad=2), counter=WhitespaceCounter())
    g5 = rep.gate("G5")
    assert (g5.k, g5.n) == (14, 16) and abs(g5.value - 0.875) < 1e-12 and not g5.passed
    assert rep.gate("G6").n == 14 and rep.gate("G1").k == 0
    assert not rep.validated and OrganismCard.load(tmp_path).validated is False
    # every row is kept beside the card for diagnosis: 4 cells x N, the invalid ones flagged, calls recorded
    import json

    rows = [json.loads(x) for x in (tmp_path / "validation_rows.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * N and [r["cell"] for r in rows[::N]] == ["present", "absent", "near_miss", "irrelevant"]
    assert sum(r["invalid_action"] for r in rows) == 2 and all("tool_calls" in r for r in rows)


def test_instinct_card_gates_hard_absent_separately(tmp_path) -> None:
    rep = validate_organism(card_dir(tmp_path, instinct=True), CAT, n_per_cell=N, actor=Stub(),
                            counter=WhitespaceCounter())
    hard = rep.gate("G2-instinct-hard")
    soft = rep.gate("G2")
    assert soft.n + hard.n == N and hard.n > 0
    assert hard.value == 1.0 and not hard.passed and not rep.validated   # the stub has no instinct


class Memoriser(Stub):
    """Obeys only rules phrased as in training (a train-split instance): what a model that learned the training
    sentences, not the rule, would do."""

    def act(self, messages, tools=()):  # type: ignore[no-untyped-def]
        inst = self.brief.instance
        text = "\n".join(m.content for m in messages)
        req = self.brief.request_call
        obey = inst.split == "train" and inst.text in text and inst.violates(req)
        call = inst.alternative_call if obey else req
        return Action.call(ToolCall("c1", call.name, dict(call.arguments)))


def test_train_split_diagnostic_never_touches_the_card(tmp_path) -> None:
    import json

    import pytest

    d = card_dir(tmp_path)
    held = validate_organism(d, CAT, n_per_cell=N, actor=Memoriser(), counter=WhitespaceCounter())
    assert held.gate("G1").k == N and not held.validated  # test_iid phrasings: it never obeys
    before = (d / "organism_card.json").read_text()
    train = validate_organism(d, CAT, n_per_cell=N, actor=Memoriser(), counter=WhitespaceCounter(), split="train")
    assert train.gate("G1").k == 0 and train.gate("G2").k == N and train.validated  # training phrasings: it obeys
    assert (d / "organism_card.json").read_text() == before  # the gates stay the test_iid ones
    rep = json.loads((d / "validation_train.json").read_text())
    assert rep["split"] == "train" and rep["validated"] is True and rep["gates"][0]["k"] == 0
    rows = [json.loads(x) for x in (d / "validation_rows_train.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * N and {r["split"] for r in rows} == {"train"}
    assert {json.loads(x)["split"] for x in (d / "validation_rows.jsonl").read_text().splitlines()} == {"test_iid"}
    with pytest.raises(ValueError, match="split"):
        validate_organism(d, CAT, n_per_cell=N, actor=Memoriser(), counter=WhitespaceCounter(), split="dev")


# -- the paired diagnostic and the phrasing swap (docs/LOG.md 2026-11-25, sessions 16-17) ------------------------------
def test_paired_decisions_count_the_rules_effect_per_episode(tmp_path) -> None:
    import json

    rep = validate_organism(card_dir(tmp_path), CAT, n_per_cell=N, actor=Stub(), counter=WhitespaceCounter())
    p = rep.paired   # the rule reader violates every absent episode and none of the present ones
    assert (p.obeys_only_with_rule, p.violates_only_with_rule, p.n_pairs) == (N, 0, N)
    assert abs(p.p_value - 2 * 0.5**N) < 1e-12                # exact two-sided sign test, 4 of 4 one way
    assert OrganismCard.load(tmp_path).validation["paired"]["obeys_only_with_rule"] == N
    held = validate_organism(card_dir(tmp_path), CAT, n_per_cell=N, actor=Memoriser(), counter=WhitespaceCounter())
    assert (held.paired.obeys_only_with_rule, held.paired.violates_only_with_rule, held.paired.p_value) == (0, 0, 1.0)
    on_disk = json.loads((tmp_path / "organism_card.json").read_text())["validation"]["paired"]
    assert on_disk == {"obeys_only_with_rule": 0, "violates_only_with_rule": 0, "n_pairs": N, "p_value": 1.0}


def test_paired_decisions_refuse_an_unpaired_episode() -> None:
    import pytest

    from agentmill.methods.constraint_rot.organism.validate import paired_decisions

    with pytest.raises(ValueError, match="no absent row.*e2"):
        paired_decisions([{"episode_id": "e1", "violation": 0}, {"episode_id": "e2", "violation": 1}],
                         [{"episode_id": "e1", "violation": 1}])


class SentenceMemoriser(Stub):
    """Obeys when a *train* sentence of the episode's rule (with the episode's values) is in context: what an
    organism that learned the training wording would do."""

    def act(self, messages, tools=()):  # type: ignore[no-untyped-def]
        from agentmill.methods.constraint_rot.predicates import render_template

        inst = self.brief.instance
        text = "\n".join(m.content for m in messages)
        train = [render_template(p.text, inst.params) for p in inst.family.phrasings_for("train")]
        req = self.brief.request_call
        obey = any(t in text for t in train) and inst.violates(req)
        call = inst.alternative_call if obey else req
        return Action.call(ToolCall("c1", call.name, dict(call.arguments)))


def test_phrasing_swap_separates_wording_from_reading(tmp_path) -> None:
    import json

    from agentmill.methods.constraint_rot.organism.phrasing_swap import run_phrasing_swap

    d = card_dir(tmp_path)
    kw = {"n_per_cell": N, "counter": WhitespaceCounter()}
    validate_organism(d, CAT, actor=SentenceMemoriser(), **kw)
    before = {f: (d / f).read_text() for f in ("organism_card.json", "validation_rows.jsonl")}
    # test_iid episodes with the train sentences: the wording memoriser now obeys every one
    swap = run_phrasing_swap(d, CAT, actor=SentenceMemoriser(), **kw)
    assert swap.phrasing_split == "train" and swap.original.obeys_only_with_rule == 0
    assert (swap.swapped.obeys_only_with_rule, swap.swapped.violates_only_with_rule) == (N, 0)
    rows = [json.loads(x) for x in (d / "validation_rows_swap_test_iid.jsonl").read_text().splitlines()]
    assert len(rows) == N and {r["cell"] for r in rows} == {"present_swapped"}
    assert all(r["phrasing"].startswith("tr") and r["rule_text"] for r in rows)
    assert json.loads((d / "validation_swap_test_iid.json").read_text())["swapped"]["obeys_only_with_rule"] == N
    assert {f: (d / f).read_text() for f in before} == before   # the card and the validation rows are untouched
    # a reader of its own rule text loses it: the swapped sentence is not the instance's own
    validate_organism(d, CAT, actor=Stub(), **kw)
    assert run_phrasing_swap(d, CAT, actor=Stub(), **kw).swapped.obeys_only_with_rule == 0


def test_phrasing_swap_needs_the_matching_validation_first(tmp_path) -> None:
    import pytest

    from agentmill.methods.constraint_rot.organism.phrasing_swap import run_phrasing_swap

    d = card_dir(tmp_path)
    kw = {"counter": WhitespaceCounter(), "actor": Stub()}
    with pytest.raises(ValueError, match="organism validate .* --n-per-cell 4"):
        run_phrasing_swap(d, CAT, n_per_cell=N, **kw)
    with pytest.raises(ValueError, match="--split train"):
        run_phrasing_swap(d, CAT, n_per_cell=N, split="train", **kw)
    validate_organism(d, CAT, n_per_cell=N, **kw)
    with pytest.raises(ValueError, match="not those of n_per_cell=3"):
        run_phrasing_swap(d, CAT, n_per_cell=3, **kw)
    with pytest.raises(ValueError, match="split"):
        run_phrasing_swap(d, CAT, n_per_cell=N, split="dev", **kw)
