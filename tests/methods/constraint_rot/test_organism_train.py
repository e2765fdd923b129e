"""Organism training without SmolLM2: a tiny random Llama (all seven projections, so the real LoRA config applies)
and a ChatML byte tokenizer. Loss falls, prompt tokens carry label -100, save → load → merge reproduces the trained
adapter's logits, out_dir is never overwritten, a foreign base digest is refused. One SmolLM2 smoke test (hf, slow).
"""

from __future__ import annotations

import json
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from agentmill.methods.constraint_rot.organism.actor import OrganismActor, OrganismMismatch  # noqa: E402
from agentmill.methods.constraint_rot.organism.data import SFTExample  # noqa: E402
from agentmill.methods.constraint_rot.organism.tiny_base import PAD, ChatMLBytes  # noqa: E402
from agentmill.methods.constraint_rot.organism.train import (Base, LoraCfg, OrganismCard, encode_example,  # noqa: E402
                                                             prompt_ids, train_organism)

SHA = "a" * 64


def tiny_base(seed: int = 0, sha: str = SHA) -> Base:
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=259, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                                   eos_token_id=257, pad_token_id=PAD, bos_token_id=256)
    return Base(transformers.LlamaForCausalLM(cfg).eval(), ChatMLBytes(), sha, "tiny:llama")


TOOLS = ({"type": "function", "function": {"name": "send_email", "description": "Send mail.",
                                           "parameters": {"type": "object", "properties": {"to": {"type": "string"}},
                                                          "required": ["to"]}}},)


def examples(n: int = 12) -> list[SFTExample]:
    out = []
    for i in range(n):
        msgs = ({"role": "user", "content": f"Mail b{i % 3}@x.io"},)
        out.append(SFTExample(msgs, TOOLS, f'CALL send_email {{"to": "b{i % 3}@x.io"}}', "absent", "f", "none"))
    return out


def test_prompt_tokens_are_masked_and_the_target_is_the_server_rendering() -> None:
    tok, ex = ChatMLBytes(), examples(1)[0]
    ids, labels = encode_example(tok, ex)
    p = prompt_ids(tok, ex.messages, ex.tools)
    assert ids[:len(p)] == p and labels[:len(p)] == [-100] * len(p)
    assert labels[len(p):] == ids[len(p):] == tok.encode(ex.target) + [257]
    text = tok.decode(p)
    assert "Tools:\n- send_email(to: string): Send mail." in text and text.endswith("assistant\n")


def test_loss_falls_save_load_merge_matches(tmp_path) -> None:
    base = tiny_base()
    seen = []
    card = train_organism(examples(), out_dir=tmp_path / "org", lr=1e-2, micro_batch=2, grad_accum=1, base=base,
                          progress=seen.append)
    losses = card.training["losses"]
    assert len(losses) == 6 == card.training["steps"] and [s["step"] for s in seen] == list(range(1, 7))
    assert sum(losses[-2:]) < sum(losses[:2])
    assert (tmp_path / "org" / "adapter_model.safetensors").exists()
    on_disk = OrganismCard.load(tmp_path / "org")
    assert on_disk.base_sha256 == SHA and on_disk.hyperparameters["max_length"] == 1536
    assert on_disk.lora["target_modules"] == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                              "down_proj"] and on_disk.validated is False
    probe = torch.tensor([prompt_ids(ChatMLBytes(), examples(1)[0].messages, TOOLS)])
    with torch.no_grad():
        trained = base.model(probe).logits       # the injected model carries the trained adapter (eval mode)
        actor = OrganismActor(tmp_path / "org", base=tiny_base)   # fresh base, load, merge
        merged = actor.model(probe).logits
    assert float((trained - merged).abs().max()) <= 1e-4
    # the adapter changed the model
    with torch.no_grad():
        assert float((tiny_base().model(probe).logits - merged).abs().max()) > 1e-3


def test_out_dir_is_never_overwritten(tmp_path) -> None:
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="never overwritten"):
        train_organism(examples(2), out_dir=tmp_path / "org", base=tiny_base())
    assert (tmp_path / "org" / "keep.txt").read_text() == "x"


def test_bad_inputs_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="max_length=40"):
        train_organism(examples(2), out_dir=tmp_path / "a", max_length=40, base=tiny_base())
    with pytest.raises(ValueError, match="micro_batch"):
        train_organism(examples(2), out_dir=tmp_path / "b", micro_batch=0, base=tiny_base())
    with pytest.raises(ValueError, match="LoraCfg.dropout"):
        LoraCfg(dropout=1.5)


def test_digest_mismatch_names_both_digests(tmp_path) -> None:
    train_organism(examples(2), out_dir=tmp_path / "org", micro_batch=2, grad_accum=1, base=tiny_base())
    other = "b" * 64
    with pytest.raises(OrganismMismatch) as e:
        OrganismActor(tmp_path / "org", base=lambda: tiny_base(sha=other))
    assert SHA in str(e.value) and other in str(e.value)
    cfg = tmp_path / "org" / "adapter_config.json"
    d = json.loads(cfg.read_text())
    cfg.write_text(json.dumps({**d, "r": 4}))
    with pytest.raises(OrganismMismatch, match="peft config"):
        OrganismActor(tmp_path / "org", base=tiny_base)


def test_actor_parses_one_line_into_an_action(tmp_path) -> None:
    train_organism(examples(2), out_dir=tmp_path / "org", micro_batch=2, grad_accum=1, base=tiny_base())
    actor = OrganismActor(tmp_path / "org", base=tiny_base, max_new_tokens=4)
    tools = [TOOLS[0]]
    a = actor.parse('CALL send_email {"to": "b@x.io"}\nmore', tools)
    assert a.tool_calls[0].name == "send_email" and a.tool_calls[0].arguments == {"to": "b@x.io"}
    assert actor.parse("REPLY I can't.", tools).text == "I can't."
    for bad in ("", "hello", 'CALL rm {"x": 1}', "CALL send_email {oops"):
        assert actor.parse(bad, tools).invalid
    from agentmill.core.types import Message
    (act,) = actor.act_many([([Message("user", "Mail b0@x.io")], tools)])
    assert act.invalid or act.tool_calls or act.text is not None   # random tiny model: any of the three


@pytest.mark.hf
@pytest.mark.slow
def test_smollm2_smoke_six_steps(tmp_path) -> None:
    """Spec §2.10 model smoke job: 6 steps on 12 short examples, loss falls, save → load → merge logits match."""
    from agentmill.methods.constraint_rot.organism.train import load_base

    t0 = time.perf_counter()
    base = load_base()
    load_s = time.perf_counter() - t0
    card = train_organism(examples(), out_dir=tmp_path / "org", micro_batch=2, grad_accum=1, base=base, lr=1e-3)
    losses = card.training["losses"]
    print(f"\nsmollm2 smoke: load {load_s:.1f}s, step {card.training['step_seconds']:.2f}s, "
          f"{card.training['tokens_per_second']:.0f} tok/s, losses {losses}")
    assert sum(losses[-2:]) < sum(losses[:2])
    probe = torch.tensor([prompt_ids(base.tokenizer, examples(1)[0].messages, TOOLS)])
    with torch.no_grad():
        trained = base.model(probe).logits
        merged = OrganismActor(tmp_path / "org").model(probe).logits
    assert float((trained - merged).abs().max()) <= 1e-4


# -- recipe v2: loss on the transcript's past tool-call turns -------------------------------------------------------
def history_example() -> SFTExample:
    call = {"id": "d0-0", "type": "function", "function": {"name": "send_email", "arguments": '{"to": "a@x.io"}'}}
    msgs = ({"role": "user", "content": "Mail a@x.io"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "d0-0", "content": "sent"},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "Mail b@x.io"})
    return SFTExample(msgs, TOOLS, 'CALL send_email {"to": "b@x.io"}', "absent", "f", "none")


def test_history_labels_cover_exactly_the_past_call_lines() -> None:
    from agentmill.methods.constraint_rot.organism.train import history_labels

    tok, ex = ChatMLBytes(), history_example()
    ids, labels = encode_example(tok, ex)
    hist = history_labels(tok, ex, ids)
    assert len(hist) == len(ids)
    kept = [t for t in hist if t != -100]
    # the one past tool call, as the server renders it, plus its end-of-turn token; the plain "Done." is not kept
    assert kept == tok.encode('CALL send_email {"to": "a@x.io"}') + [257]
    # disjoint from the target's labels, and every kept position holds the input token
    assert all(h == -100 for h, y in zip(hist, labels) if y != -100)
    assert all(h == i for h, i in zip(hist, ids) if h != -100)
    assert history_labels(tok, examples(1)[0], encode_example(tok, examples(1)[0])[0]) == [-100] * len(
        encode_example(tok, examples(1)[0])[0])


def test_history_weight_trains_and_is_recorded(tmp_path) -> None:
    data = [history_example()] * 4 + examples(4)
    card = train_organism(data, out_dir=tmp_path / "org", lr=1e-2, micro_batch=2, grad_accum=1, base=tiny_base(),
                          history_weight=1.0)
    assert card.hyperparameters["history_weight"] == 1.0
    assert card.training["history_tokens"] == 4 * len(ChatMLBytes().encode('CALL send_email {"to": "a@x.io"}') + [1])
    assert card.training["losses"][-1] < card.training["losses"][0]
    with pytest.raises(ValueError, match="history_weight"):
        train_organism(data, out_dir=tmp_path / "bad", base=tiny_base(), history_weight=-1.0)


# -- no drift: losses and addresses recorded before the loop moved to lm/finetune.py ---------------------------------
def test_losses_match_those_recorded_before_the_loop_moved(tmp_path) -> None:
    """Step losses of two tiny deterministic trainings, recorded with the organism's own loop before it became
    ``lm.finetune.train_lora`` (target-only loss with gradient accumulation; the history loss over four steps of
    warmup and cosine). A change in masks, batching, order, schedule or loss shows here first."""
    seen: list[float] = []
    train_organism(examples(8), out_dir=tmp_path / "a", lr=1e-2, micro_batch=2, grad_accum=2, base=tiny_base(),
                   progress=lambda p: seen.append(p["loss"]))
    assert seen == pytest.approx([5.571116209030151, 5.483798265457153], abs=1e-6)
    seen.clear()
    card = train_organism([history_example()] * 4 + examples(4), out_dir=tmp_path / "b", lr=1e-2, micro_batch=2,
                          grad_accum=1, base=tiny_base(), history_weight=1.0, progress=lambda p: seen.append(p["loss"]))
    assert seen == pytest.approx([11.134439468383789, 10.953109741210938, 10.872693061828613, 5.424089431762695],
                                 abs=1e-6)
    assert card.training["tokens"] == 2440 and card.training["target_tokens"] == 268


@pytest.mark.parametrize("recipe, manifest, key", [
    ({"n_train": 320}, "d07f602566b835d92a1cc1e9c05f3e5f7313ea49c40c1b2e718f04d46c108ccb", "821e519b193c5878"),
    ({"n_train": 320, "instinct": True}, "aa0152ecf63f59df4d5f6830ae9d91abde694a952e4b116afd6dd9521aeeba82",
     "be37fb7039222247"),
    ({"n_train": 960, "fresh_values": True}, "55cb9aa4c0e62f16b69faef727dc18d2be95fb618eecbe6ba5c002f59a9b6431",
     "2d1dc26ee91d2c36")])
def test_recorded_organism_addresses_do_not_drift(recipe, manifest, key) -> None:  # type: ignore[no-untyped-def]
    """The addresses docs/LOG.md and the README name (v3-320, the instinct organism, v4-960), from the data
    manifests ``plan_organism`` built for them with SmolLM2's tokenizer (recorded here so the test needs no model)."""
    from agentmill.methods.constraint_rot.organism.cache import Recipe, adapter_key

    r = Recipe(**recipe)
    assert adapter_key(manifest, r.hyper(), r.base) == key


def test_recipe_v1_keeps_its_address_and_v2_differs() -> None:
    from agentmill.methods.constraint_rot.organism.cache import SPEC_LR, Recipe

    v1, v2 = Recipe(n_train=320, lr=SPEC_LR, history_weight=0.0, paired=False), Recipe(n_train=320, paired=False)
    assert "history_weight" not in v1.hyper() and v1.hyper()["lr"] == 3e-4  # the address v1 was trained under
    assert v2.hyper()["history_weight"] == 1.0 and v2.hyper()["lr"] == 1e-3
    with pytest.raises(ValueError, match="history_weight"):
        Recipe(history_weight=-0.5)


# -- checkpoints: a killed training resumes where it stopped ---------------------------------------------------------
class Killed(Exception):
    pass


def test_killed_training_resumes_bit_identically(tmp_path) -> None:
    from agentmill.methods.constraint_rot.organism.train import checkpoint_path

    kw = {"lr": 1e-2, "micro_batch": 2, "grad_accum": 1}
    whole = train_organism(examples(8), out_dir=tmp_path / "whole", base=tiny_base(), **kw)

    def die_after_2(p):  # type: ignore[no-untyped-def]
        if p["step"] == 2:
            raise Killed

    with pytest.raises(Killed):
        train_organism(examples(8), out_dir=tmp_path / "org", base=tiny_base(), progress=die_after_2, **kw)
    assert checkpoint_path(tmp_path / "org").exists() and not (tmp_path / "org").exists()
    seen = []
    resumed = train_organism(examples(8), out_dir=tmp_path / "org", base=tiny_base(),
                             progress=lambda p: seen.append(p["step"]), **kw)
    assert seen == [3, 4]                                   # only the steps the killed run had not finished
    assert resumed.training["losses"] == whole.training["losses"]
    assert resumed.training["tokens"] == whole.training["tokens"]
    from safetensors.torch import load_file
    a, b = load_file(tmp_path / "whole" / "adapter_model.safetensors"), load_file(
        tmp_path / "org" / "adapter_model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not checkpoint_path(tmp_path / "org").exists()   # removed once the adapter is whole


def test_a_checkpoint_of_another_run_is_refused(tmp_path) -> None:
    def die(p):  # type: ignore[no-untyped-def]
        raise Killed

    with pytest.raises(Killed):
        train_organism(examples(8), out_dir=tmp_path / "org", base=tiny_base(), progress=die, lr=1e-2,
                       micro_batch=2, grad_accum=1)
    with pytest.raises(ValueError, match="different training run"):
        train_organism(examples(8), out_dir=tmp_path / "org", base=tiny_base(), lr=5e-3, micro_batch=2,
                       grad_accum=1)


def test_example_order_keeps_contrastive_groups_in_one_step() -> None:
    import random as _random

    from agentmill.methods.constraint_rot.organism.train import _example_order

    def ex(i: int, group: int | None) -> SFTExample:
        meta = {} if group is None else {"group": group}
        return SFTExample(({"role": "user", "content": str(i)},), (), "REPLY ok", "absent", "f", "none", meta)

    data = [ex(i, i // 4) for i in range(40)]
    order = _example_order(data, 80, seed=0, keep_groups=True)
    assert sorted(order[:40]) == list(range(40)) == sorted(order[40:])  # two whole passes
    for step in range(0, 80, 8):  # effective batch 8 = two whole groups
        assert all(order[k] // 4 == order[k - 1] // 4 for k in range(step + 1, step + 8) if k % 4)
    assert order != list(range(80)) and order == _example_order(data, 80, seed=0, keep_groups=True)
    # without keep_groups: the pre-v3 order, bit for bit (v1/v2 adapters resume and retrain identically)
    rng, old = _random.Random(3), []
    while len(old) < 50:
        ep = list(range(40))
        rng.shuffle(ep)
        old += ep
    assert _example_order(data, 50, seed=3, keep_groups=False) == old[:50]
    loose = [ex(i, None) for i in range(40)]
    assert _example_order(loose, 50, seed=3, keep_groups=True) == old[:50]  # no groups: the same as off


def test_recipe_v3_is_paired_and_v2_keeps_its_address() -> None:
    from agentmill.methods.constraint_rot.organism.cache import Recipe

    v2, v3 = Recipe(n_train=960, paired=False), Recipe(n_train=960)
    assert v3.paired and v3.hyper()["keep_groups"] is True
    assert "keep_groups" not in v2.hyper() and {**v2.hyper(), "keep_groups": True} == v3.hyper()
