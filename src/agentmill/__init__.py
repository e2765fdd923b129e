"""agentmill: one week of LLM-agent papers as reusable software, each claim reproduced with an honest verdict.

Layers (enforced by ``tests/test_layering.py``)::

    cli, serve -> experiments -> methods -> lm, envs -> core
"""

__version__ = "0.1.0"
