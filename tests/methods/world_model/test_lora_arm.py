"""The pretrained-LM arm's pieces, with hand-checkable inputs and a scripted LM (no SmolLM2): the gates, the strict
parse, the one-shot prompt, SFT and CPT token data, the data digest, item sampling, batched greedy prediction."""

from __future__ import annotations

import dataclasses

import pytest

from agentmill.lm.base import Completion
from agentmill.lm.finetune import IGNORE, Example
from agentmill.methods.world_model import lora_arm as LA
from agentmill.methods.world_model.data import WMExample

OBS = "-= Hall =-\nYou see a lamp.\nExits: north.\nYou are carrying nothing."


def _ex(i: int, changed: bool, task: str = "t0") -> WMExample:
    return WMExample(f"<|im_start|>system\nsys {i}<|im_end|>\n<|im_start|>user\nact {i}<|im_end|>\n", "tgt", task, i,
                     changed, False, OBS, OBS, None, "look")


def _row(f1: float, copy: float, parse: bool = True) -> dict:
    return {"f1": f1, "copy_f1": copy, "parse": parse}


def test_gates_pass_and_fail_on_their_thresholds() -> None:
    seen = [_row(0.6, 0.4), _row(0.6, 0.4)]           # margin 0.20
    unseen = [_row(0.45, 0.4), _row(0.5, 0.4, False)]  # margin 0.075, one parse failure
    rep = LA.gates(seen, unseen)
    g = {x.id: x for x in rep.gates}
    assert g["G-WM1"].value == 0.75 and not g["G-WM1"].passed      # 3 of 4 parse < 0.9
    assert g["G-WM2"].value == pytest.approx(0.2) and g["G-WM2"].passed
    assert g["G-WM3"].value == pytest.approx(0.075) and not g["G-WM3"].passed
    assert g["G-WM2"].detail == {"n": 2, "f1": 0.6, "copy_previous_f1": 0.4}
    ok = LA.gates([_row(0.5, 0.4)] * 10, [_row(0.5, 0.4)] * 10)  # margin exactly 0.10 passes (≥)
    assert all(x.passed for x in ok.gates)
    empty = LA.gates([], [])
    assert not any(x.passed for x in empty.gates)


def test_strict_parse_needs_a_closed_block() -> None:
    assert LA.strict_parse("<think>x</think>\n<predicted_observation>\nA\n</predicted_observation>")
    assert not LA.strict_parse("<predicted_observation>\nA")          # unclosed
    assert not LA.strict_parse("A plain answer")                      # no tag


def test_one_shot_appends_the_demo_to_the_system_message() -> None:
    demo = dataclasses.replace(_ex(9, True), target="<think>\nD\n</think>\n<predicted_observation>\nX\n"
                                                     "</predicted_observation>")
    out = LA.one_shot(_ex(1, True).prompt, demo)
    system, _, rest = out.partition("<|im_end|>")
    assert system.endswith("</predicted_observation>") and "sys 1" in system and "act 1" in rest
    assert out.count("<|im_end|>") == 2
    with pytest.raises(ValueError):
        LA.one_shot("no markers", demo)


def test_sft_examples_train_on_target_and_end_of_turn_only() -> None:
    def enc(s: str) -> list[int]:
        return [ord(c) for c in s]

    ex = _ex(0, True)
    (e,) = LA.sft_examples(enc, [ex])
    n = len(ex.prompt)
    assert list(e.ids) == enc(ex.prompt + "tgt" + LA.END_OF_TURN)
    assert list(e.labels[:n]) == [IGNORE] * n and list(e.labels[n:]) == enc("tgt" + LA.END_OF_TURN)


def test_cpt_windows_pack_documents_into_full_windows() -> None:
    def enc(s: str) -> list[int]:
        return [ord(c) for c in s]

    docs = ["abcdefghij", "klmnopqrst", "uvwxyz0123"]
    w = LA.cpt_windows(enc, docs, seq=8, tokens=20, seed=0, sep="|")
    assert len(w) == 2 and all(len(x.ids) == 8 and list(x.ids) == list(x.labels) for x in w)
    joined = "".join(chr(i) for x in w for i in x.ids)
    assert joined.count("|") >= 1 and len(set(joined) - set("".join(docs) + "|")) == 0
    assert LA.cpt_windows(enc, docs, seq=8, tokens=20, seed=0, sep="|") == w  # seeded


def test_manifest_changes_with_ids_or_labels() -> None:
    a = [Example([1, 2, 3], [IGNORE, 2, 3])]
    b = [Example([1, 2, 3], [IGNORE, IGNORE, 3])]
    assert LA.manifest(a) == LA.manifest(list(a)) and LA.manifest(a) != LA.manifest(b)


def test_balanced_takes_half_changed_and_is_seeded() -> None:
    exs = [_ex(i, i % 3 == 0, f"t{i % 4}") for i in range(30)]
    pick = LA.balanced(exs, 8, seed=1, label="x")
    assert len(pick) == 8 and sum(e.changed for e in pick) == 4
    assert pick == LA.balanced(exs, 8, seed=1, label="x") and pick != LA.balanced(exs, 8, seed=2, label="x")
    assert len(LA.sample(exs, 100, 0)) == 30


class _Echo:
    """Scripted LM: answers prompt i with a closed observation block naming i; records its batches and config."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, object]] = []

    def generate(self, prompts, cfg):
        self.calls.append((len(prompts), cfg))
        return [Completion(f"<predicted_observation>\n{p}\n</predicted_observation>", "stop") for p in prompts]


def test_predict_batches_greedily_and_scores_per_item() -> None:
    lm = _Echo()
    exs = [_ex(i, True) for i in range(5)]
    texts = LA.predict(lm, [OBS] * 5, max_new=7, batch=2)
    assert [n for n, _ in lm.calls] == [2, 2, 1]
    cfg = lm.calls[0][1]
    assert cfg.temperature == 0.0 and cfg.max_new_tokens == 7 and "predicted_observation" in cfg.stop_regex
    rows = LA.score(exs, texts)
    assert all(r["parse"] and r["f1"] == 1.0 and r["copy_f1"] == 1.0 for r in rows)


def test_adapter_dir_is_a_content_address_and_trains_nothing(tmp_path) -> None:
    from agentmill.lm.finetune import TrainCfg

    exs = [Example([1, 2, 3], [IGNORE, 2, 3])]
    a = LA.adapter_dir("wm-sft", exs, TrainCfg(), root=tmp_path)
    assert a == LA.adapter_dir("wm-sft", list(exs), TrainCfg(), root=tmp_path) and a.parent == tmp_path
    assert a != LA.adapter_dir("wm-sft", exs, TrainCfg(lr=1e-3), root=tmp_path)
    assert a != LA.adapter_dir("wm-sft", exs, TrainCfg(), init=[tmp_path / "wm-cpt-x"], root=tmp_path)
    assert a.name.startswith("wm-sft-") and not a.exists()
