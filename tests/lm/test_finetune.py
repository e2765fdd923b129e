"""The one LoRA loop (``lm/finetune.py``) on a tiny random Llama built from a config (no download, ~1 s a run):
loss masks, the schedule, bit-identical resume from a safetensors checkpoint, safetensors adapters that reload to
the same outputs, snapshots, content addresses (pinned to a key recorded in docs/LOG.md) and validation gates."""

from __future__ import annotations

import json
import math
import random

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("safetensors")

from agentmill.lm import finetune  # noqa: E402
from agentmill.lm.finetune import (IGNORE, Admission, Example, GateReport, GateResult, LoraCfg,  # noqa: E402
                                   PreconditionNotMet, TrainCfg, checkpoint_path, content_key, example_order,
                                   load_adapter, load_checkpoint, lr_factor, obtain_adapter, read_card,
                                   micro_batch_loss, record_validation, save_adapter, train_lora, validated_adapter,
                                   weighted_loss)

PAD = 0


def tiny_llama(seed: int = 0):  # type: ignore[no-untyped-def]
    """All seven Llama projections, so the default LoraCfg applies."""
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   pad_token_id=PAD, bos_token_id=1, eos_token_id=2)
    return transformers.LlamaForCausalLM(cfg).eval()


def data(n: int = 8, seed: int = 0) -> list[Example]:
    """Prompts of 6–8 random tokens (so batches pad), each with a 3-token target."""
    rng = random.Random(seed)
    return [Example.completion([rng.randrange(3, 64) for _ in range(6 + i % 3)],
                               [rng.randrange(3, 64) for _ in range(3)]) for i in range(n)]


def lora_tensors(model) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


CFG = TrainCfg(lr=1e-2, micro_batch=2, grad_accum=1)


# -- loss masks --------------------------------------------------------------------------------------------------------
def test_completion_labels_only_the_target() -> None:
    e = Example.completion([5, 6, 7], [8, 9])
    assert list(e.ids) == [5, 6, 7, 8, 9] and list(e.labels) == [IGNORE] * 3 + [8, 9]
    with pytest.raises(ValueError, match="labels"):
        Example([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="aux_labels"):
        Example([1, 2], [1, 2], [IGNORE])


def test_first_step_loss_is_the_cross_entropy_of_the_target_alone() -> None:
    """LoRA B starts at zero, so step 1's loss is the base model's next-token loss on the target positions only —
    computed here by hand from the base model's logits."""
    exs = data(2)
    cfg = TrainCfg(lr=1e-2, micro_batch=2, grad_accum=1)
    with torch.no_grad():
        base_logits = [tiny_llama()(torch.tensor([list(e.ids)])).logits[0] for e in exs]
    want = []
    for e, lg in zip(exs, base_logits):
        t = [i for i, y in enumerate(e.labels) if y != IGNORE]          # positions predicted from t-1
        want += [float(torch.nn.functional.cross_entropy(lg[i - 1:i], torch.tensor([e.ids[i]]))) for i in t]
    run = train_lora(tiny_llama(), exs, cfg, lora=LoraCfg(dropout=0.0), pad_id=PAD)
    assert run.losses[0] == pytest.approx(sum(want) / len(want), abs=1e-5)
    assert run.target_tokens == 6 and run.tokens == sum(len(e.ids) for e in exs)


def test_tokens_outside_the_span_do_not_change_the_gradient() -> None:
    """Trailing tokens after the target, labelled -100, cannot reach an earlier position (causal attention) and
    carry no loss: changing them leaves the trained weights bit-identical. Labelling them does change them."""
    def run(tail: list[int], labelled: bool = False) -> dict[str, torch.Tensor]:
        exs = [Example(list(e.ids) + tail, list(e.labels) + (tail if labelled else [IGNORE] * len(tail)))
               for e in data(4)]
        return lora_tensors(train_lora(tiny_llama(), exs, CFG, lora=LoraCfg(dropout=0.0), pad_id=PAD).model)

    a, b = run([10, 11, 12]), run([40, 41, 42])
    assert same(a, b)
    assert not same(a, run([10, 11, 12], labelled=True))


def test_aux_mask_adds_its_own_mean_with_its_weight() -> None:
    torch.manual_seed(0)
    logits = torch.randn(1, 5, 7)
    y = torch.tensor([[IGNORE, IGNORE, IGNORE, 3, 4]])
    h = torch.tensor([[IGNORE, 1, 2, IGNORE, IGNORE]])
    ce = torch.nn.functional.cross_entropy
    want = ce(logits[0, 2:4], torch.tensor([3, 4])) + 0.5 * ce(logits[0, 0:2], torch.tensor([1, 2]))
    assert torch.allclose(weighted_loss(logits, y, h, 0.5), want)
    assert torch.allclose(weighted_loss(logits, y, torch.full_like(h, IGNORE), 0.5),
                          ce(logits[0, 2:4], torch.tensor([3, 4])))


def test_loss_on_labelled_logits_only_equals_the_full_logits_loss() -> None:
    """The training loss applies the LM head only where a label is; it must be the full-logits loss, in both the
    main-mask-only and the weighted form, and its gradient too (right padding, rows labelled at different places)."""
    model = tiny_llama()
    ids = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [12, 13, 14, 15, 16, PAD, PAD]])
    mask = (ids != PAD).long()
    y = torch.full_like(ids, IGNORE)
    h = torch.full_like(ids, IGNORE)
    y[0, 5:7], y[1, 3:5] = ids[0, 5:7], ids[1, 3:5]
    h[0, 2:4] = ids[0, 2:4]
    for weight, aux in ((0.0, torch.full_like(h, IGNORE)), (0.5, h)):
        model.zero_grad()
        full = weighted_loss(model(input_ids=ids, attention_mask=mask).logits, y, aux, weight)
        full.backward()
        g_full = model.model.layers[0].mlp.up_proj.weight.grad.clone()
        model.zero_grad()
        kept = micro_batch_loss(model, ids, mask, y, aux, weight)
        kept.backward()
        assert torch.allclose(kept, full, atol=1e-6)
        assert torch.allclose(model.model.layers[0].mlp.up_proj.weight.grad, g_full, atol=1e-6)
    assert finetune.labelled_positions(y, h).tolist() == [1, 2, 3, 4, 5]


def test_activation_checkpointing_trains_the_same_adapter_bit_for_bit() -> None:
    """Recomputing each layer in the backward pass is a memory setting: with LoRA dropout on (its RNG replayed),
    the losses and the adapter equal an ordinary run's exactly, and the returned model is back to normal."""
    exs, cfg = data(8), TrainCfg(lr=1e-2, micro_batch=2, grad_accum=2, dtype="bf16")
    plain = train_lora(tiny_llama(), exs, cfg, lora=LoraCfg(dropout=0.1), pad_id=PAD)
    recomputed = train_lora(tiny_llama(), exs, cfg, lora=LoraCfg(dropout=0.1), pad_id=PAD,
                            activation_checkpointing=True)
    assert recomputed.losses == plain.losses
    assert same(lora_tensors(recomputed.model), lora_tensors(plain.model))
    assert not recomputed.model.get_base_model().is_gradient_checkpointing


# -- schedule and order ------------------------------------------------------------------------------------------------
def test_warmup_then_cosine_and_the_step_plan() -> None:
    assert [lr_factor(s, 4, 1) for s in range(4)] == pytest.approx([1.0, 1.0, 0.75, 0.25])
    assert [lr_factor(s, 10, 2) for s in range(2)] == [0.5, 1.0]
    assert TrainCfg(micro_batch=2, grad_accum=4).plan(20) == (10, 3, 1)       # ceil(10 / 4) steps
    assert TrainCfg(micro_batch=2, grad_accum=1, epochs=0.5).plan(8) == (2, 2, 1)
    for bad in ({"micro_batch": 0}, {"lr": 0.0}, {"aux_weight": -1.0}, {"dtype": "fp16"}):
        with pytest.raises(ValueError):
            TrainCfg(**bad)  # type: ignore[arg-type]


def test_example_order_shuffles_whole_units() -> None:
    units = [[2 * u, 2 * u + 1] for u in range(10)]
    order = example_order(units, 30, seed=1)
    assert sorted(order[:20]) == list(range(20)) and len(set(order[20:])) == 10
    assert all(order[k] + 1 == order[k + 1] for k in range(0, 30, 2))      # each pair stays together, in order
    assert order == example_order(units, 30, seed=1) != example_order(units, 30, seed=2)
    assert order[:20] != [i for u in units for i in u]                     # shuffled


# -- checkpoints -------------------------------------------------------------------------------------------------------
class Killed(Exception):
    pass


def test_killed_run_resumes_bit_identically(tmp_path) -> None:
    """Dropout on (the torch RNG must be restored), an aux mask and gradient accumulation: the resumed run ends
    with exactly the uninterrupted run's losses and LoRA tensors."""
    exs = [Example(list(e.ids), list(e.labels), [IGNORE] + list(e.ids[1:3]) + [IGNORE] * (len(e.ids) - 3))
           for e in data(12)]
    cfg = TrainCfg(lr=1e-2, micro_batch=2, grad_accum=2, aux_weight=0.5)
    whole = train_lora(tiny_llama(), exs, cfg, pad_id=PAD, checkpoint=tmp_path / "a.ckpt", fingerprint="f")
    assert whole.steps == 3 and whole.aux_tokens > 0

    def die_at_2(p):  # type: ignore[no-untyped-def]
        if p["step"] == 2:
            raise Killed

    ck = tmp_path / "b.ckpt"
    with pytest.raises(Killed):
        train_lora(tiny_llama(), exs, cfg, pad_id=PAD, checkpoint=ck, fingerprint="f", progress=die_at_2)
    assert load_checkpoint(ck).meta["step"] == 2
    seen: list[int] = []
    resumed = train_lora(tiny_llama(), exs, cfg, pad_id=PAD, checkpoint=ck, fingerprint="f",
                         progress=lambda p: seen.append(p["step"]))
    assert seen == [3]
    assert resumed.losses == whole.losses and resumed.tokens == whole.tokens
    assert resumed.aux_tokens == whole.aux_tokens
    assert same(lora_tensors(resumed.model), lora_tensors(whole.model))
    with pytest.raises(ValueError, match="different training run"):
        train_lora(tiny_llama(), exs, cfg, pad_id=PAD, checkpoint=ck, fingerprint="other")


def test_a_checkpoint_is_safetensors_and_a_pickle_is_never_loaded(tmp_path) -> None:
    from safetensors import safe_open

    ck = tmp_path / "run.ckpt"
    train_lora(tiny_llama(), data(4), CFG, pad_id=PAD, checkpoint=ck, fingerprint="f")
    with safe_open(str(ck), framework="pt") as f:                       # a safetensors file with a JSON header
        header = json.loads(f.metadata()[finetune.CHECKPOINT_META])
        assert any(k.startswith("optim/") for k in f.keys()) and "rng/torch" in f.keys()
    assert header["meta"]["step"] == 1 and header["scheduler"]["last_epoch"] == 1
    ck.write_bytes(b"PK\x03\x04 a zip of pickles")
    with pytest.raises(ValueError, match="never loaded: delete it"):
        train_lora(tiny_llama(), data(4), CFG, pad_id=PAD, checkpoint=ck, fingerprint="f")


# -- adapters ----------------------------------------------------------------------------------------------------------
def test_adapter_is_safetensors_and_reloads_to_identical_outputs(tmp_path) -> None:
    run = train_lora(tiny_llama(), data(4), CFG, pad_id=PAD)
    out = save_adapter(run.model, tmp_path / "ad", {"note": "x"})
    assert {"adapter_card.json", "adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in
                                                                                         out.iterdir()}
    assert not [p for p in out.iterdir() if p.suffix in (".bin", ".pt", ".pkl")]
    assert read_card(out) == {"note": "x"}
    probe = torch.tensor([list(data(1, seed=5)[0].ids)])
    with torch.no_grad():
        trained = run.model(probe).logits
        reloaded = load_adapter(tiny_llama(), out)(probe).logits
        merged = load_adapter(tiny_llama(), out, merge=True)(probe).logits
        untouched = tiny_llama()(probe).logits
    assert torch.equal(trained, reloaded)
    assert float((trained - merged).abs().max()) < 1e-5
    assert float((trained - untouched).abs().max()) > 1e-3             # the adapter changed the model
    with pytest.raises(FileExistsError, match="never overwritten"):
        save_adapter(run.model, out, {})
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="only safetensors"):
        load_adapter(tiny_llama(), tmp_path / "empty")


def test_save_adapter_removes_the_checkpoint(tmp_path) -> None:
    out = tmp_path / "ad"
    run = train_lora(tiny_llama(), data(4), CFG, pad_id=PAD, checkpoint=checkpoint_path(out), fingerprint="f")
    assert checkpoint_path(out).exists()
    save_adapter(run.model, out, {})
    assert not checkpoint_path(out).exists() and (out / finetune.ADAPTER_FILE).exists()


def test_snapshots_are_saved_at_the_chosen_steps(tmp_path) -> None:
    from safetensors.torch import load_file

    run = train_lora(tiny_llama(), data(8), CFG, pad_id=PAD, snapshot_steps={1, 4}, snapshot_dir=tmp_path / "s",
                     fingerprint="f")
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["step-000001", "step-000004"]
    meta = json.loads((tmp_path / "s" / "step-000001" / "snapshot.json").read_text())
    assert meta == {"step": 1, "loss": run.losses[0], "fingerprint": "f"}
    final = save_adapter(run.model, tmp_path / "final", {})
    last, first = (load_file(tmp_path / "s" / f"step-00000{k}" / finetune.ADAPTER_FILE) for k in (4, 1))
    assert same(last, load_file(final / finetune.ADAPTER_FILE)) and not same(first, last)
    with pytest.raises(ValueError, match="snapshot_dir"):
        train_lora(tiny_llama(), data(2), CFG, pad_id=PAD, snapshot_steps={1})


# -- content addresses -------------------------------------------------------------------------------------------------
V3_HYPER = {"lora": repr(LoraCfg()), "lr": 0.001, "epochs": 1.0, "micro_batch": 2, "grad_accum": 4, "seed": 0,
            "dtype": "bf16", "max_length": 1536, "history_weight": 1.0, "keep_groups": True}


def test_content_key_is_pinned_to_a_recorded_address() -> None:
    """The ConstraintRot v3-320 organism's address (docs/LOG.md): its data manifest, recipe and base. If this
    fails, every cached adapter in every user's cache is orphaned."""
    assert repr(LoraCfg()) == ("LoraCfg(r=16, alpha=32, dropout=0.05, target_modules=('q_proj', 'k_proj', "
                               "'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'))")
    manifest = "d07f602566b835d92a1cc1e9c05f3e5f7313ea49c40c1b2e718f04d46c108ccb"
    assert content_key(manifest, V3_HYPER, "hf:smollm2") == "821e519b193c5878"
    assert content_key("m" * 64, {"lr": 3e-4}, "hf:smollm2") == "509cfac806ea584c"


def test_content_key_depends_on_each_input_and_not_on_dict_order() -> None:
    k = content_key("m" * 64, {"lr": 3e-4, "seed": 0}, "hf:smollm2")
    assert k == content_key("m" * 64, {"seed": 0, "lr": 3e-4}, "hf:smollm2") and len(k) == 16
    assert k != content_key("n" * 64, {"lr": 3e-4, "seed": 0}, "hf:smollm2")
    assert k != content_key("m" * 64, {"lr": 1e-4, "seed": 0}, "hf:smollm2")
    assert k != content_key("m" * 64, {"lr": 3e-4, "seed": 1}, "hf:smollm2")
    assert k != content_key("m" * 64, {"lr": 3e-4, "seed": 0}, "tiny:x")


def test_obtain_adapter_trains_once_then_reuses(tmp_path) -> None:
    calls = []

    def train(d):  # type: ignore[no-untyped-def]
        calls.append(d)
        save_adapter(train_lora(tiny_llama(), data(2), CFG, pad_id=PAD).model, d, {"k": 1})

    key = content_key("m" * 64, {"lr": 1e-2}, "tiny:x")
    assert obtain_adapter(tmp_path / key, train) == (tmp_path / key, True)
    assert obtain_adapter(tmp_path / key, train) == (tmp_path / key, False) and len(calls) == 1
    with pytest.raises(RuntimeError, match="wrote no"):
        obtain_adapter(tmp_path / "other", lambda d: None)


# -- validation gates --------------------------------------------------------------------------------------------------
def _adapter(tmp_path):  # type: ignore[no-untyped-def]
    return save_adapter(train_lora(tiny_llama(), data(2), CFG, pad_id=PAD).model, tmp_path / "ad", {"base": "t"})


def gates(*passed: bool) -> GateReport:
    return GateReport([GateResult(f"G{i + 1}", p, value=float(p), threshold=0.5) for i, p in enumerate(passed)])


def test_a_failing_gate_refuses_the_adapter_and_the_results_stay_in_the_card(tmp_path) -> None:
    ad = _adapter(tmp_path)
    calls = []

    def check(d):  # type: ignore[no-untyped-def]
        calls.append(d)
        return gates(True, False, True)

    adm = validated_adapter(ad, check)
    assert isinstance(adm, Admission) and not adm.ok and adm.failed == ("G2",)
    assert "precondition not met" in adm.reason and "G2" in adm.reason
    with pytest.raises(PreconditionNotMet, match="G2"):
        adm.require()
    card = read_card(ad)
    assert card["base"] == "t" and card["validated"] is False and card["validation"]["validated"] is False
    assert [(g["id"], g["passed"]) for g in card["validation"]["gates"]] == [("G1", True), ("G2", False),
                                                                             ("G3", True)]
    assert not validated_adapter(ad, check).ok and len(calls) == 1     # the card answers; gates run once


def test_a_passing_adapter_is_returned_and_revalidation_replaces_the_result(tmp_path) -> None:
    ad = _adapter(tmp_path)
    assert validated_adapter(ad, lambda d: gates(True, True)).require() == ad
    assert read_card(ad)["validated"] is True
    assert validated_adapter(ad).ok                                     # no check needed: the card says so
    adm = validated_adapter(ad, lambda d: gates(True, False), revalidate=True)
    assert not adm.ok and read_card(ad)["validated"] is False


def test_an_unvalidated_or_gateless_adapter_is_refused(tmp_path) -> None:
    ad = _adapter(tmp_path)
    adm = validated_adapter(ad)
    assert not adm.ok and "not been validated" in adm.reason
    record_validation(ad, GateReport([]))
    adm = validated_adapter(ad)
    assert not adm.ok and "no gate" in adm.reason and read_card(ad)["validated"] is False
    with pytest.raises(ValueError, match="no adapter_card.json"):
        validated_adapter(tmp_path)


def test_the_default_warmup_share() -> None:
    """The default warmup share (5 %) gives one warmup step below 30 steps and rounds above it."""
    assert TrainCfg().plan(8 * 40)[2] == 2 and TrainCfg().plan(8 * 120)[2] == 6
    assert math.isclose(lr_factor(0, 40, 2), 0.5)
