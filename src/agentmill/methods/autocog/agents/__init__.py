"""Loop roles: programmatic (LLM-free) in :mod:`.search`, LLM-driven in :mod:`.llm`."""
