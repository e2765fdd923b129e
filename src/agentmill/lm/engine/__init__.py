"""A ragged-batch Llama engine on CPU: per-request KV caches, O(1) rollback, one forward for mixed prefill and
decode rows. The substrate for speculative decoding and the server (docs/methods/dspark.md).

    from agentmill.lm.engine import LlamaEngine, RaggedBatch, SamplingParams
    eng = LlamaEngine.smollm2_135m()
    out = eng.generate([eng.tokenizer.encode("The capital of France is")], SamplingParams(temperature=0))
"""

from agentmill.lm.engine.config import EngineConfig, LlamaConfig
from agentmill.lm.engine.engine import LlamaEngine, SamplingParams
from agentmill.lm.engine.kv import KVBudgetError, KVPool
from agentmill.lm.engine.model import ForwardOut, RaggedBatch, RaggedItem
from agentmill.lm.engine.sampling import sample_rows, warp

__all__ = ["EngineConfig", "ForwardOut", "KVBudgetError", "KVPool", "LlamaConfig", "LlamaEngine", "RaggedBatch",
           "RaggedItem", "SamplingParams", "sample_rows", "warp"]
