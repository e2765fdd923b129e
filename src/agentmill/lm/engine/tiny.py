"""``tiny_llama``: a random 2-layer Llama with a byte tokenizer and a ChatML template, so engine, server and
speculative tests run in milliseconds without SmolLM2 [R]."""

from __future__ import annotations

from typing import Any

from agentmill.lm.engine.config import EngineConfig


class ByteTokenizer:
    """Bytes shifted by 3; 0 = pad, 1 = BOS, 2 = EOS (also the ChatML end-of-turn)."""

    pad_token_id, bos_token_id, eos_token_id = 0, 1, 2
    vocab_size = 259

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [b + 3 for b in text.encode("utf-8")]

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return bytes(i - 3 for i in ids if i >= 3).decode("utf-8", errors="replace")

    def apply_chat_template(self, messages: list[dict[str, str]], add_generation_prompt: bool = True,
                            tokenize: bool = False) -> Any:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        if add_generation_prompt:
            text += "<|im_start|>assistant\n"
        return self.encode(text) if tokenize else text


def tiny_llama(seed: int = 0, ecfg: EngineConfig | None = None, *, scale: float = 4.0) -> Any:
    """A random Llama (2 layers, d = 64, GQA 4/2) over the byte vocabulary, as a ``LlamaEngine``."""
    import torch
    import transformers

    from agentmill.lm.engine.engine import LlamaEngine

    cfg = transformers.LlamaConfig(vocab_size=ByteTokenizer.vocab_size, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=2048, rope_theta=10000.0, tie_word_embeddings=True,
                                   bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)  # random init is near-uniform; a larger scale gives peaked, input-dependent logits
    return LlamaEngine.from_hf_model(model, ecfg, tokenizer=ByteTokenizer(), fingerprint=f"tiny-llama-{seed}")
