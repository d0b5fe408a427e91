"""Serve recorded LangChain chat-model answers during a replay, through LangChain's cache hook.

A callback handler cannot replace a model's answer, but LangChain consults its
LLM cache before calling a model, and still fires ``on_chat_model_start`` and
``on_llm_end`` around a cache hit. So while a replay runs, the Replayer installs
a :class:`RecordCache` as the global LLM cache: every chat-model call gets the
recorded ``AIMessage`` of the next model step, and
:class:`~sealbox.integrations.langgraph.SealboxCallbackHandler` records the call
as usual — where its request is compared with the recorded one.

A ``.stream()`` / ``.astream()`` call does not consult the cache: it calls the model's streaming
API. While a replay runs, chat models therefore do not stream (:func:`served_not_streamed`): the
stream yields what ``invoke`` / ``ainvoke`` returns, as LangChain does for a model that cannot stream,
which the cache answers: the recorded message, whole, as one chunk. A model built with ``cache=False``
bypasses the cache and reaches the model for real: the handler then stops the replay
(``ReplaySource.check_model_served``).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

from langchain_core.caches import BaseCache
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration

__all__ = ["RecordCache", "generations_from_record", "serving_from_record"]


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


_PATCH_LOCK = threading.RLock()
_PATCH_DEPTH = [0]  # replays running now in this process (the patch is the process's, as the LLM cache is)
_PATCHED = ("stream", "astream")


@contextlib.contextmanager
def served_not_streamed() -> Iterator[None]:
    """While the block runs, ``BaseChatModel.stream`` / ``astream`` of every chat model of the process
    yield ``invoke`` / ``ainvoke``'s message, as LangChain does for a model that cannot stream, so that
    the replay's :class:`RecordCache` answers them instead of the model's streaming API being called
    for real. Restored when the last replay running in the process ends."""
    from langchain_core.language_models.chat_models import BaseChatModel

    with _PATCH_LOCK:
        if _PATCH_DEPTH[0] == 0:
            _ORIGINAL.update({name: BaseChatModel.__dict__[name] for name in _PATCHED})
            BaseChatModel.stream = _served_stream  # type: ignore[method-assign,assignment]
            BaseChatModel.astream = _served_astream  # type: ignore[method-assign,assignment]
        _PATCH_DEPTH[0] += 1
    try:
        yield
    finally:
        with _PATCH_LOCK:
            _PATCH_DEPTH[0] -= 1
            if _PATCH_DEPTH[0] == 0:
                for name in _PATCHED:
                    setattr(BaseChatModel, name, _ORIGINAL.pop(name))


_ACTIVE: list[tuple[Any, Any]] = []  # (source, run) of every replay serving LangChain models now
_PREVIOUS: list[Any] = []  # the process's LLM cache before the first of them started


@contextlib.contextmanager
def serving_from_record(source: Any, run: Any) -> Iterator[None]:
    """While the block runs, LangChain chat models are answered from the record: a :class:`RecordCache`
    is the process's LLM cache (each lookup answered from the asking run's record) and models do not
    stream (:func:`served_not_streamed`). Replays running at once share them; the process's own cache
    is put back when the last of them ends, whatever order they end in."""
    from langchain_core.globals import get_llm_cache, set_llm_cache

    with _PATCH_LOCK:
        if not _ACTIVE:
            _PREVIOUS[:] = [get_llm_cache()]
            set_llm_cache(RecordCache())
        _ACTIVE.append((source, run))
    try:
        with served_not_streamed():
            yield
    finally:
        with _PATCH_LOCK:
            for i, (_, r) in enumerate(_ACTIVE):
                if r is run:
                    del _ACTIVE[i]
                    break
            if not _ACTIVE:
                set_llm_cache(_PREVIOUS.pop() if _PREVIOUS else None)


_ORIGINAL: dict[str, Any] = {}


def _served_stream(self: Any, input: Any, config: Any = None, *, stop: Any = None, **kwargs: Any) -> Iterator[Any]:
    """``BaseChatModel.stream`` during a replay: the answer of ``invoke``, whole (see :func:`served_not_streamed`)."""
    yield self.invoke(input, config=config, stop=stop, **kwargs)


async def _served_astream(self: Any, input: Any, config: Any = None, *, stop: Any = None, **kwargs: Any) -> Any:
    """``BaseChatModel.astream`` during a replay: the answer of ``ainvoke``, whole."""
    yield await self.ainvoke(input, config=config, stop=stop, **kwargs)


class RecordCache(BaseCache):
    """An LLM cache whose every lookup is the recorded answer of the asking run's next model step.

    The asking run is the current run (``sealbox.recorder``'s context): a replay run, or a sub-agent
    run served from the record inside one, is answered from its own record; a run that is not a
    replay gets a cache miss (its model answers). With no current run, the lookup goes to ``run``
    (``source``) when given, else to the one replay running in the process; with several, a miss.
    """

    def __init__(self, source: Any = None, run: Any = None) -> None:
        self.source, self.run = source, run

    def _asking(self) -> tuple[Any, Any] | None:
        """``(source, run)`` whose record answers the lookup made now, or None (a cache miss)."""
        from sealbox.recorder import _CURRENT

        current = _CURRENT.get()
        if current is not None and not current.ended:
            source = getattr(current, "replay", None)
            if source is not None:
                return (source, current) if source.serves_models else None
            if current is not self.run:
                return None  # a run that is not a replay (another thread's, or started apart): live
        if self.run is not None:
            return self.source, self.run
        with _PATCH_LOCK:
            return _ACTIVE[0] if len(_ACTIVE) == 1 else None

    def lookup(self, prompt: str, llm_string: str) -> Any:
        """The recorded generations of the asking run's next model step (compared when the call is
        recorded), or None when no replay run asks (the model is called)."""
        asking = self._asking()
        if asking is None:
            return None
        source, run = asking
        return generations_from_record(source.model_response(run))

    def update(self, prompt: str, llm_string: str, return_val: Any) -> None:
        """Nothing: a replay never stores answers."""

    def clear(self, **kwargs: Any) -> None:
        """Nothing to clear."""

    async def alookup(self, prompt: str, llm_string: str) -> Any:
        """Async form of :meth:`lookup`."""
        return self.lookup(prompt, llm_string)

    async def aupdate(self, prompt: str, llm_string: str, return_val: Any) -> None:
        """Nothing: a replay never stores answers."""
