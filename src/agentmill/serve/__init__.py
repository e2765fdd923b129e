"""The one OpenAI-compatible server of agentmill (docs/methods/dspark.md): ``create_app`` over a ``BatchingLoop`` that
owns a ``LlamaEngine``. It holds no algorithm code."""

from agentmill.serve.app import create_app
from agentmill.serve.loop import BatchingLoop

__all__ = ["BatchingLoop", "create_app"]
