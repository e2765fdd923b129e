"""The server's tool-call surface: the pure rendering and parsing functions live in :mod:`agentmill.lm.chat_tools`
(formats documented there), shared with the constraint-rot model organism so both see byte-identical prompts.
Re-exported here so server code and its users keep importing ``agentmill.serve.tools``."""

from __future__ import annotations

from agentmill.lm.chat_tools import (FORMAT_AUTO, FORMAT_REQUIRED, TOOL_NAME, ParsedCall, ParsedOutput, Tool,
                                     ToolRequest, ToolRequestError, call_line, chat_prompt_ids, parse_tool_call,
                                     parse_tool_request, render_tools_prompt, template_messages,
                                     template_renders_tool_role)

__all__ = ["FORMAT_AUTO", "FORMAT_REQUIRED", "TOOL_NAME", "ParsedCall", "ParsedOutput", "Tool", "ToolRequest",
           "ToolRequestError", "call_line", "chat_prompt_ids", "parse_tool_call", "parse_tool_request",
           "render_tools_prompt", "template_messages", "template_renders_tool_role"]
