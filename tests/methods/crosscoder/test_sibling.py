"""The SmolLM2 tool sibling's pieces, on hand-checkable prompts and a tiny random Llama (no SmolLM2 load)."""

from __future__ import annotations

import json

import pytest

from agentmill.methods.crosscoder import sibling as S
from agentmill.methods.crosscoder.organism import ToolPrompt
from agentmill.methods.crosscoder.toolcalls import score_tool_call


def _tool_prompt() -> ToolPrompt:
    return ToolPrompt("set a timer for 30 minutes", ("get_weather", "set_timer"), "set_timer", {"minutes": "30"})


def test_user_turn_lists_the_tools_in_numbered_style_then_the_request() -> None:
    text = S.user_text(_tool_prompt())
    assert text.splitlines()[1] == ("1. get_weather: Get the current weather forecast for a city. "
                                    "Parameters: city (string).")
    assert text.splitlines()[2].startswith("2. set_timer: Start a countdown timer. Parameters: minutes")
    assert text.endswith("\n\nRequest: set a timer for 30 minutes")
    assert S.user_text(ToolPrompt("say hello", (), "", category="generic")) == "say hello"
    assert set(S.DESCRIPTIONS) == set(__import__("agentmill.methods.crosscoder.organism", fromlist=["TOOLS"]).TOOLS)


def test_the_gold_call_scores_strict_exact_and_with_arguments() -> None:
    p = _tool_prompt()
    call = S.tool_call_text(p)
    assert call == '<tool_call>{"name": "set_timer", "arguments": {"minutes": "30"}}</tool_call>'
    sc = score_tool_call(call, gold_name=p.gold_name, tools=p.tools, gold_args=p.gold_args)
    assert sc.strict_format and sc.tool_exact and sc.args_exact
    assert S.cut(call + " and more text") == call and S.cut("no call") == "no call"


class _Tok:
    """Whitespace 'tokenizer' with a ChatML-like template: one id per word."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}

    def apply_chat_template(self, msgs, add_generation_prompt, tokenize):  # type: ignore[no-untyped-def]
        assert add_generation_prompt and not tokenize
        return "<sys> " + msgs[0]["content"] + " <asst>"

    def __call__(self, text, add_special_tokens=False):  # type: ignore[no-untyped-def]
        return {"input_ids": [self.vocab.setdefault(w, len(self.vocab)) for w in text.split()]}


def test_examples_put_the_loss_on_the_target_and_drop_long_ones() -> None:
    tok = _Tok()
    tool = _tool_prompt()
    gen = ToolPrompt("say hello", (), "", category="generic")
    exs, dropped = S.examples(tok, [tool, gen], {"say hello": "Hello there"}, max_len=1000)
    assert dropped == 0 and len(exs) == 2
    g = exs[1]
    n_prompt = len(tok("<sys> say hello <asst>")["input_ids"])
    assert list(g.labels[:n_prompt]) == [-100] * n_prompt
    assert list(g.labels[n_prompt:]) == list(g.ids[n_prompt:]) and len(g.ids) == n_prompt + 2  # "Hello there<|im_end|>"
    exs2, dropped2 = S.examples(tok, [tool, gen], {"say hello": "Hello there"}, max_len=6)
    assert dropped2 == 1 and len(exs2) == 1


def test_recipe_plans_exactly_its_steps_and_warmup() -> None:
    for batch in (4, 8):
        cfg = S.SiblingConfig(batch=batch)
        for n in (1700, 1699, 1333, 960):
            tc = cfg.train_cfg(n)
            assert tc.plan(n)[1:] == (120, 10) and tc.micro_batch * tc.grad_accum == batch
    assert json.loads(json.dumps(S.SiblingConfig().__dict__, default=list))["r"] == 8


def test_block_lora_trains_only_the_chosen_blocks_and_leaves_lower_blocks_identical() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from agentmill.lm import finetune

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                                   num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.tensor([[1, 5, 9, 13, 17, 21]])
    with torch.no_grad():
        before = model(input_ids=ids, output_hidden_states=True).hidden_states
    exs = [finetune.Example.completion([1, 2, 3, i % 7 + 4], [20 + i % 5, 30]) for i in range(16)]
    lora = S.BlockLoraCfg(r=4, alpha=8, first_block=2, n_blocks=4)
    run = finetune.train_lora(model, exs, finetune.TrainCfg(lr=1e-2, micro_batch=4, grad_accum=1), lora=lora,
                              pad_id=0)
    names = [n for n, p in run.model.named_parameters() if p.requires_grad]
    assert names and all((".layers.2." in n or ".layers.3." in n) for n in names)
    moved = [float(p.detach().abs().sum()) for n, p in run.model.named_parameters() if "lora_B" in n]
    assert max(moved) > 0  # lora_B starts at zero: training moved it
    with torch.no_grad():
        after = run.model(input_ids=ids, output_hidden_states=True).hidden_states
    for L in (0, 1, 2):  # block outputs hidden_states[L + 1]: blocks 0 and 1 carry no LoRA
        assert torch.equal(before[L], after[L])
    assert not torch.allclose(before[4], after[4])


def test_weak_checkpoint_is_the_earliest_snapshot_in_band_and_is_cached(tmp_path, monkeypatch) -> None:
    rates = {15: 0.0, 30: 0.1, 60: 0.3, 120: 0.9}  # dev strict_format per snapshot step
    scored: list[int] = []

    def fake_load(path, base="smollm2"):  # type: ignore[no-untyped-def]
        return int(path.name)

    def fake_greedy(step, prompts, max_new=64):  # type: ignore[no-untyped-def]
        scored.append(step)
        n_ok = round(rates[step] * len(prompts))
        return [S.tool_call_text(p) if i < n_ok else "no call" for i, p in enumerate(prompts)]

    monkeypatch.setattr(S, "load_sibling", fake_load)
    monkeypatch.setattr(S, "greedy", fake_greedy)
    (tmp_path / "adapter").mkdir()
    sib = S.Sibling(tmp_path / "adapter", {s: tmp_path / str(s) for s in rates}, {"recipe": {}}, False)
    weak = S.weak_checkpoint(sib, n_dev=20)
    assert weak["step"] == 60 and weak["in_band"] and weak["dev_strict_format"] == 0.3
    assert scored == [15, 30, 60]  # scoring stops at the first snapshot inside [0.15, 0.45]
    assert S.weak_checkpoint(sib, n_dev=20) == weak and scored == [15, 30, 60]  # cached in the card
    rates.update({60: 0.6})
    sib2 = S.Sibling(tmp_path / "adapter2", sib.snapshots, {"recipe": {}}, False)
    (tmp_path / "adapter2").mkdir()
    out = S.weak_checkpoint(sib2, n_dev=20)
    assert out["step"] == 30 and not out["in_band"]  # none inside: closest to 0.30 (0.1 beats 0.6 and 0.9)
