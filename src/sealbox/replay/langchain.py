"""Serve recorded LangChain chat-model answers during a replay, through LangChain's cache hook.

A callback handler cannot replace a model's answer, but LangChain consults its
LLM cache before calling a model, and still fires ``on_chat_model_start`` and
``on_llm_end`` around a cache hit. So while a replay runs, the Replayer installs
a :class:`RecordCache` as the global LLM cache: every chat-model call gets the
recorded ``AIMessage`` of the next model step, and
:class:`~sealbox.integrations.langgraph.SealboxCallbackHandler` records the call
as usual — where its request is compared with the recorded one.

A model built with ``cache=False``, or a ``.stream()`` / ``.astream()`` call, bypasses the cache and
reaches the model for real: the handler then stops the replay (``ReplaySource.check_model_served``).
"""

from __future__ import annotations

from typing import Any

from langchain_core.caches import BaseCache
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration

__all__ = ["RecordCache", "generations_from_record"]


def _message(data: Any) -> AIMessage:
    if isinstance(data, AIMessage):
        return data
    data = dict(data) if isinstance(data, dict) else {}
    data.pop("type", None)
    data.setdefault("content", "")
    return AIMessage(**{k: v for k, v in data.items() if v is not None or k == "content"})


class _ServedGeneration(ChatGeneration):
    """A recorded generation served as it was: LangChain's cache-hit path replaces a cached
    message by a copy with ``usage_metadata.total_cost = 0``, which would change the
    conversation the agent goes on with (and so the next request); the message is kept."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name != "message":
            super().__setattr__(name, value)


def generations_from_record(response: Any) -> list[ChatGeneration]:
    """The ``ChatGeneration`` list of a recorded ``langchain``-format response (an ``LLMResult``).

    Raises:
        Exception: the recorded call failed (``{"error": …}``), rebuilt as in a tool error.
    """
    from sealbox.replay.values import rebuild_error

    response = response if isinstance(response, dict) else {}
    if set(response) == {"error"}:
        raise rebuild_error(response["error"])
    batches = response.get("generations") or [[{"message": {"content": ""}}]]
    out = []
    for gen in batches[0] if batches else []:
        gen = gen if isinstance(gen, dict) else {}
        out.append(_ServedGeneration(message=_message(gen.get("message")), generation_info=gen.get("generation_info")))
    return out


class RecordCache(BaseCache):
    """An LLM cache whose every lookup is the recorded answer of the run's next model step."""

    def __init__(self, source: Any, run: Any) -> None:
        self.source, self.run = source, run

    def lookup(self, prompt: str, llm_string: str) -> Any:
        """The recorded generations of the next model step (compared when the call is recorded)."""
        return generations_from_record(self.source.model_response(self.run))

    def update(self, prompt: str, llm_string: str, return_val: Any) -> None:
        """Nothing: a replay never stores answers."""

    def clear(self, **kwargs: Any) -> None:
        """Nothing to clear."""

    async def alookup(self, prompt: str, llm_string: str) -> Any:
        """Async form of :meth:`lookup`."""
        return self.lookup(prompt, llm_string)

    async def aupdate(self, prompt: str, llm_string: str, return_val: Any) -> None:
        """Nothing: a replay never stores answers."""
