"""C-pinned-serving: Constraint Pinning over the project's own OpenAI-compatible server with DSpark on.

One module per experiment; each defines a module-level ``EXPERIMENT`` with an id ``compose_pinned_serving.<what>``.
A composition is the one room where several methods' public faces meet; the methods never import each other."""

PAPER = ("Composition of Constraint Pinning (Chen, arXiv:2606.22528) and DSpark (Cheng et al., arXiv:2607.05147): "
         "pinned LangGraph and OpenAI Agents SDK agents over agentmill serve with speculative decoding")

REQUIRES = frozenset({"constraint-rot", "langchain", "openai-agents", "serve"})
"""The agents are real LangGraph and Agents SDK code over E164's episodes (YAML catalogue), talking to the server."""

MODULES: tuple[str, ...] = ("served",)
"""The experiment modules of this composition, in the order ``agentmill list`` and ``reproduce`` show them."""
