"""Framework integrations: the same record for agents written with existing frameworks.

- :mod:`sealbox.integrations.openai_agents` — the OpenAI Agents SDK (``openai-agents``).
- :mod:`sealbox.integrations.langgraph` — LangGraph and LangChain (``langgraph``, ``langchain-core``).

Each module imports its framework; importing this package imports neither.
See ``docs/integrations.md``.
"""

__all__: list[str] = []
