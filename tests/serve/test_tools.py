"""The server's tool surface is the lm layer's (parsing and rendering are tested in tests/lm/test_chat_tools.py):
the re-exports are the same objects, so server and model organism cannot drift apart."""

from __future__ import annotations

from agentmill.lm import chat_tools
from agentmill.serve import app, tools


def test_serve_tools_reexports_the_lm_functions():
    for name in tools.__all__:
        assert getattr(tools, name) is getattr(chat_tools, name)
    assert app.template_renders_tool_role is chat_tools.template_renders_tool_role
