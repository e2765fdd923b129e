"""Export a drafter in the DeepSpec checkpoint layout [C] and read it back.

The layout (``config.json`` with the DSpark fields, ``model.safetensors`` with DeepSpec's key names, the STS
temperatures in a ``dspark_calibration.json`` sidecar) follows DeepSpec's ``modeling/dspark`` (MIT), read from a
written summary of it; no code was copied. Honest limit: vLLM/SGLang/TensorRT-LLM instantiate DSpark drafters only
for the targets they support (Qwen3, Gemma4, DeepSeek-V4), so a SmolLM2 drafter is format-compatible but cannot be
served there; only the round trip below is tested here.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

_LAYER_KEYS = {
    "q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
    "o_proj": "self_attn.o_proj", "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm",
    "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "down_proj": "mlp.down_proj",
    "input_layernorm": "input_layernorm", "post_attention_layernorm": "post_attention_layernorm",
}
_TOP_KEYS = {"markov_w1": "markov_head.markov_w1", "markov_w2": "markov_head.markov_w2",
             "conf_proj": "confidence_head.proj"}


def to_deepspec_key(k: str) -> str:
    parts = k.split(".")
    if parts[0] == "layers":
        return ".".join(["layers", parts[1], _LAYER_KEYS[parts[2]], *parts[3:]])
    if parts[0] in _TOP_KEYS:
        return ".".join([_TOP_KEYS[parts[0]], *parts[1:]])
    return k


def from_deepspec_key(k: str) -> str:
    inv_layer = {v: kk for kk, v in _LAYER_KEYS.items()}
    inv_top = {v: kk for kk, v in _TOP_KEYS.items()}
    parts = k.split(".")
    if parts[0] == "layers":
        for n in (2, 1):
            mid = ".".join(parts[2: 2 + n])
            if mid in inv_layer:
                return ".".join(["layers", parts[1], inv_layer[mid], *parts[2 + n:]])
    for v, kk in inv_top.items():
        if k.startswith(v + "."):
            return kk + k[len(v):]
    return k


def export_deepspec(ckpt: Path, out: Path, engine: Any, *, include_shared: bool = True) -> Path:
    from safetensors.torch import save_file

    from agentmill.methods.dspark.drafter import DSparkDrafter

    d = DSparkDrafter.load(ckpt, engine)
    c, t = d.cfg, d.t
    tensors = {to_deepspec_key(k): v.detach().contiguous() for k, v in d.state_dict().items()}
    if include_shared:
        tensors["embed_tokens.weight"] = d.embed_tokens.contiguous()
        tensors["lm_head.weight"] = d.lm_head.contiguous()
    tensors["d2t"] = d.d2t.contiguous()
    config = {
        "architectures": ["LlamaDSparkModel"], "model_type": "llama", "base_architecture_note":
            "DeepSpec ships Qwen3DSparkModel; this drafter is for a Llama-family target (SmolLM2), so no engine "
            "class instantiates it",
        "hidden_size": t.hidden_size, "intermediate_size": t.intermediate_size,
        "num_attention_heads": t.num_heads, "num_key_value_heads": t.num_kv_heads, "head_dim": t.head_dim,
        "rms_norm_eps": t.rms_norm_eps, "rope_theta": t.rope_theta, "vocab_size": t.vocab_size,
        "num_target_layers": t.num_layers, "num_hidden_layers": c.num_draft_layers, "block_size": c.block_size,
        "tie_word_embeddings": False, "layer_types": ["full_attention"] * c.num_draft_layers,
        "mask_token_id": c.mask_token_id, "target_layer_ids": list(c.target_layer_ids), "num_anchors": 16,
        "enable_confidence_head": c.confidence_head, "confidence_head_with_markov": c.confidence_head_with_markov,
        "markov_rank": c.markov_rank, "markov_head_type": c.markov_head_type, "draft_vocab_size": len(d.d2t),
        "qk_norm": c.qk_norm,
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-export-", dir=out.parent))
    try:
        save_file(tensors, str(tmp / "model.safetensors"))
        (tmp / "config.json").write_text(json.dumps(config, indent=1))
        (tmp / "dspark_calibration.json").write_text(
            json.dumps({k: v.tolist() for k, v in DSparkDrafter.calibration_of(ckpt).items()}, indent=1))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def load_deepspec(path: Path, engine: Any) -> Any:
    """Read an exported directory back into a ``DSparkDrafter`` (the round-trip test)."""
    from safetensors.torch import load_file

    from agentmill.methods.dspark.drafter import DraftVocab, DSparkConfig, DSparkDrafter, TargetShape

    path = Path(path)
    c = json.loads((path / "config.json").read_text())
    cfg = DSparkConfig(block_size=c["block_size"], num_draft_layers=c["num_hidden_layers"],
                       target_layer_ids=tuple(c["target_layer_ids"]), markov_rank=c["markov_rank"],
                       confidence_head=c["enable_confidence_head"],
                       confidence_head_with_markov=c["confidence_head_with_markov"],
                       draft_vocab_size=c["draft_vocab_size"], mask_token_id=c["mask_token_id"], qk_norm=c["qk_norm"])
    tensors = load_file(str(path / "model.safetensors"))
    vocab = DraftVocab(tensors.pop("d2t"), c["vocab_size"])
    shared = {k: tensors.pop(k) for k in ("embed_tokens.weight", "lm_head.weight") if k in tensors}
    model = DSparkDrafter(cfg, TargetShape.of(engine), vocab, engine.model.embed, engine.model.head_weight)
    if "lm_head.weight" in shared and not bool((shared["lm_head.weight"].float() == model.lm_head).all()):
        raise ValueError("the exported lm_head does not match this target's LM head on the draft vocabulary")
    model.load_state_dict({from_deepspec_key(k): v.float() for k, v in tensors.items()}, strict=False)
    return model
