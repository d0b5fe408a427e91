r"""Model-call adapters: OpenAI chat-completions, OpenAI Responses, Anthropic Messages, LangChain.

:func:`normalize_model_call` accepts a request and a response as plain dicts or
as SDK objects (``openai.types.chat.ChatCompletion``,
``openai.types.responses.Response``, ``anthropic.types.Message``, or anything
else with ``model_dump()``), detects the format, and returns the provider, the
model, the token usage and the tool calls the response requests (id, name,
arguments), so that the recorder can link each requested tool call to the
``tool.call`` that carries it out.

It never raises on a malformed value: what it cannot read is left out of the
extracted fields, and the request and response are recorded as given. A token
count is read when it is a whole number from 0 to 2**53 - 1 (an ``int``, or a
``float`` with an integral value); missing or null counts as 0; any other value
(a string, a bool, a negative number, ``1e30``, NaN) is left out of ``usage`` and
named in ``unreadable_usage`` (the recorder writes an ``anomaly`` beside the model call).

Formats and where each field is read from:

=====================  ===============================  ==============================  ==========================
format                 tool calls                       call id                         usage
=====================  ===============================  ==============================  ==========================
``openai.chat``        ``choices[].message.tool_calls``  ``tool_calls[].id``             ``prompt_tokens`` /
                       (``function`` and ``custom``)                                    ``completion_tokens``
``openai.responses``   ``output[]`` of type              ``call_id`` (else ``id``)       ``input_tokens`` /
                       ``function_call``,                                               ``output_tokens``
                       ``custom_tool_call``; the
                       built-in tools the client runs:
                       ``computer_call``,
                       ``local_shell_call``,
                       ``shell_call``,
                       ``apply_patch_call``, a
                       ``tool_search_call`` with
                       ``execution: client``
``anthropic.messages`` ``content[]`` of type             ``id``                          ``input_tokens`` (+ cache
                       ``tool_use``                                                     tokens) / ``output_tokens``
``langchain``          ``generations[][].message``       ``tool_calls[].id``             ``usage_metadata``, else
                       ``.tool_calls`` (an ``LLMResult``                                ``llm_output.token_usage``
                       or one ``AIMessage``)
=====================  ===============================  ==============================  ==========================

Lone surrogates. A response decoded by ``json.loads`` may hold lone surrogates (JSON allows
``"\ud800"``). The request and response are recorded as given (the canonical encoder keeps
such a string losslessly, tagged ``$badstr``). The fields extracted into the record's own
string fields — ``model``, ``provider`` and each tool call ``id`` (``tool_call_ids``) — must be
valid Unicode: a lone surrogate there is written as the visible text ``\udXXX``
(:func:`valid_text`, Python's ``backslashreplace``), as the recorder writes error messages
(docs/content-modes.md). ``"call_\udc00"`` becomes ``"call_\\udc00"`` (a backslash, then
``udc00``); the id the response held is still in the recorded response. A tool call is linked by
that same text: pass :attr:`ToolCallRequest.id` (or ``valid_text(id)``) as the ``call_id``.
A requested call with no call id (a missing, empty or non-string ``id``: some OpenAI-compatible
providers leave it out) is kept in ``tool_calls`` with ``id`` None, in its place; an item with
neither an id nor a name is malformed, and left out.

Streams. A response given as the list of its stream chunks or events (OpenAI chat
``chat.completion.chunk`` objects, Anthropic Messages stream events from ``message_start`` to
``message_stop``, OpenAI Responses stream events) is assembled into the one response it adds up
to, recorded in that format with ``stream: {"chunks": N}`` beside it: texts joined, tool calls
merged by index (their ``arguments`` / ``input_json_delta`` fragments joined; an OpenAI chat
fragment without ``index``, as some OpenAI-compatible servers send, starts a call when it has an
``id`` and continues the last call when it has none), the usage of the chunk that carries it
(OpenAI chat: only with ``stream_options.include_usage``).

The built-in tools a client runs are returned with the tool's name (``computer``,
``local_shell``, ``shell``, ``apply_patch``, ``tool_search``) and, as arguments, the item's
``action`` (a ``computer_call``'s ``actions`` where it has no ``action``), ``operation`` or
``arguments``. Tool calls the provider runs itself (OpenAI hosted ``mcp_call`` / ``web_search_call``,
a ``tool_search_call`` with ``execution: server``, Anthropic ``server_tool_use``) are not returned: no client-side ``tool.call`` will
carry them out. A tool call without an id is not returned either (it cannot be
linked); it stays in the recorded response.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TO_PLAIN_MAX_DEPTH", "ToolCallRequest", "ModelCallInfo", "normalize_model_call", "parse_arguments",
           "to_plain", "valid_text"]


@dataclass(frozen=True)
class ToolCallRequest:
    r"""A tool call requested by a model response.

    Attributes:
        id: the call id the format uses (``tool_calls[].id``, ``call_id``, ``tool_use.id``), as
            valid Unicode (:func:`valid_text`: a lone surrogate becomes the text ``\udXXX``); None
            when the response gives the call none (not a non-empty string: some OpenAI-compatible
            providers leave ``id`` out).
        name: the tool name as the model wrote it.
        arguments: decoded arguments (see :func:`parse_arguments`).
    """

    id: str | None
    name: str
    arguments: Any


@dataclass(frozen=True)
class ModelCallInfo:
    """A model call in a common shape (see :func:`normalize_model_call`).

    Attributes:
        provider: ``openai``, ``anthropic``, or what the caller gave.
        model: the model name from the response, else the request, else ``unknown``, as valid
            Unicode (:func:`valid_text`).
        format: ``openai.chat``, ``openai.responses``, ``anthropic.messages``, ``langchain``
            or ``unknown``.
        request, response: plain-data forms of what was given.
        usage: ``input_tokens``, ``output_tokens`` and ``total_tokens`` where known
            (plus ``cache_read_input_tokens`` / ``cache_creation_input_tokens`` for
            Anthropic); empty for an unknown format.
        tool_calls: the tool calls the response requests, in response order, those without a call
            id included (``id`` None).
        unreadable_usage: the usage fields left out because the response's value was not a
            token count, with a short ``repr`` of that value (``{"output_tokens": "1e+30"}``).
        usage_missing: True when a response of a known provider format carries no ``usage`` at
            all (a stream read without ``stream_options.include_usage``, a proxy that drops it; a
            LangChain result with no ``usage_metadata`` and no ``llm_output`` token usage):
            its ``usage`` then says 0 tokens, which is not known. Never for an error response.
        stream_chunks: the number of stream chunks or events the response was given as (a list:
            OpenAI chat ``chat.completion.chunk`` objects, Anthropic Messages stream events, OpenAI
            Responses stream events), assembled into the one response recorded; 0 when it was
            given whole.
    """

    provider: str
    model: str
    format: str
    request: Any
    response: Any
    usage: dict[str, int] = field(default_factory=dict)
    tool_calls: tuple[ToolCallRequest, ...] = ()
    unreadable_usage: dict[str, str] = field(default_factory=dict)
    usage_missing: bool = False
    stream_chunks: int = 0


#: How deep :func:`to_plain` converts; below that, values are left as they are
#: (the canonical encoder bounds nesting and tags what it cannot keep).
TO_PLAIN_MAX_DEPTH = 100

_DUMP_KWARGS = ({"mode": "json", "by_alias": True, "warnings": False, "serialize_as_any": True},
                {"mode": "json", "by_alias": True, "warnings": False}, {})


def to_plain(value: Any) -> Any:
    """Turn SDK objects into plain data (dicts, lists, scalars).

    Pydantic v2 models (the ``openai`` and ``anthropic`` SDK types) are dumped in
    JSON mode by alias, which is their wire form, with subclass fields kept
    (``serialize_as_any``: a LangChain ``ChatGeneration`` holds an ``AIMessage``
    typed as ``BaseMessage``); other objects with
    ``model_dump``/``to_dict``/``dict`` are dumped by that method. Anything else
    is returned unchanged (the canonical encoder handles it).

    Never raises and never recurses without bound: a container that contains
    itself is left as it is where the cycle closes, and so is everything deeper
    than :data:`TO_PLAIN_MAX_DEPTH` levels; the canonical encoder then records
    the cycle or the depth explicitly.

    Args:
        value: any value.

    Returns:
        The plain-data form of ``value``.
    """
    return _plain(value, 0, set())


def _dumped(value: Any) -> Any:
    """``value`` dumped by its ``model_dump``/``to_dict``/``dict``, or :data:`_NOT_DUMPED`. Only a
    dump that gives plain data counts: an object whose attribute access invents values (a
    ``unittest.mock.MagicMock``: ``m.model_dump()`` is another mock) is not dumped, but left as it
    is (the canonical encoder records its repr), not dumped again and again down to the depth limit."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        for kwargs in _DUMP_KWARGS:
            try:
                out = dump(**kwargs)
            except TypeError:
                continue
            except Exception:  # noqa: BLE001 - a model that cannot dump itself is recorded as is
                break
            if isinstance(out, _DUMPS):
                return out
            break
    for attr in ("to_dict", "dict"):
        method = getattr(value, attr, None)
        if callable(method):
            try:
                out = method()
            except Exception:  # noqa: BLE001
                continue
            if isinstance(out, _DUMPS):
                return out
    return _NOT_DUMPED


#: What a dump method's result must be to count as a dump: plain data (a ``RootModel`` dumps its root).
_DUMPS = (dict, list, tuple, str, bytes, int, float, bool, type(None))


_NOT_DUMPED = object()


def _plain(value: Any, depth: int, path: set[int]) -> Any:
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    if depth >= TO_PLAIN_MAX_DEPTH or id(value) in path:
        return value
    path.add(id(value))
    try:
        if isinstance(value, dict):
            return {k: _plain(v, depth + 1, path) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [_plain(v, depth + 1, path) for v in value]
        dumped = _dumped(value)
        return value if dumped is _NOT_DUMPED else _plain(dumped, depth + 1, path)
    finally:
        path.discard(id(value))


def valid_text(text: str) -> str:
    r"""``text`` as valid Unicode, for a string field of the record: each lone surrogate becomes
    the visible text ``\udXXX`` (``backslashreplace``; ``"gpt-4o\ud800"`` → ``"gpt-4o\\ud800"``),
    anything else is returned as it is. The same text the recorder writes for an error message
    holding one. Not reversible where the text already held a backslash and ``udXXX``; the
    original stays in the recorded request or response (encoded losslessly as ``$badstr``)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def parse_arguments(raw: Any) -> Any:
    """Decode tool-call arguments as a model wrote them.

    Args:
        raw: a JSON string, an already decoded value (object, list…), ``""`` or None.

    Returns:
        A JSON string decoded; ``""`` (or only whitespace) as ``{}`` — the empty
        argument string OpenAI models send for a tool without parameters; None as
        None; a string that is not valid JSON, or nested too deep for ``json`` to
        decode (``"[" * 5000``), unchanged (kept as evidence, never dropped); any
        other value unchanged.
    """
    if isinstance(raw, (bytes, bytearray)):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            return bytes(raw)
    if isinstance(raw, str):
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than json can decode
            return raw
    return raw


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


#: The largest token count read (2**53 - 1: exact in every JSON reader).
MAX_COUNT = 2**53 - 1


class _Unread:
    """A usage value that is not a token count (kept for the anomaly's detail)."""

    def __init__(self, raw: Any) -> None:
        try:
            text = repr(raw)
        except Exception:  # noqa: BLE001
            text = f"<{type(raw).__name__}>"
        self.raw = text if len(text) <= 100 else text[:100] + "…"


def _count(value: Any) -> "int | _Unread":
    """A token count; 0 for None; :class:`_Unread` for anything but a whole number in range."""
    if value is None:
        return 0
    if isinstance(value, _Unread):
        return value
    if isinstance(value, float) and value.is_integer() and 0 <= value <= MAX_COUNT:
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return int(value)
    return _Unread(value)


def _add(*counts: "int | _Unread") -> "int | _Unread":
    """A sum of counts: unreadable if a part is, or if it exceeds :data:`MAX_COUNT`."""
    for c in counts:
        if isinstance(c, _Unread):
            return c
    total = sum(counts)  # type: ignore[arg-type]
    return total if total <= MAX_COUNT else _Unread(total)


def _call(call_id: Any, name: Any, arguments: Any) -> ToolCallRequest | None:
    """A requested tool call; one without a call id (a non-empty string; some OpenAI-compatible
    providers leave it out) is kept, with ``id`` None, so that the record lists every call the
    response requests, each at its own position. None for an item with neither an id nor a name
    (a malformed one: nothing says what it calls)."""
    has_id = isinstance(call_id, str) and bool(call_id)
    if not has_id and not (isinstance(name, str) and name):
        return None
    return ToolCallRequest(valid_text(call_id) if has_id else None,
                           name if isinstance(name, str) else str(name), parse_arguments(arguments))


def _usage(usage: Any, input_key: str, output_key: str) -> dict[str, int]:
    usage = _dict(usage)
    out = {"input_tokens": _count(usage.get(input_key)), "output_tokens": _count(usage.get(output_key))}
    total = usage.get("total_tokens")
    out["total_tokens"] = _count(total) if total is not None else _add(out["input_tokens"], out["output_tokens"])
    return out


def _openai_chat(resp: dict) -> tuple[dict[str, int], list[ToolCallRequest | None]]:
    calls: list[ToolCallRequest | None] = []
    for choice in _list(resp.get("choices")):
        for tc in _list(_dict(_dict(choice).get("message")).get("tool_calls")):
            tc = _dict(tc)
            if tc.get("type") == "custom" or "custom" in tc and "function" not in tc:
                custom = _dict(tc.get("custom"))
                calls.append(_call(tc.get("id"), custom.get("name"), custom.get("input")))
            else:
                fn = _dict(tc.get("function"))
                calls.append(_call(tc.get("id"), fn.get("name"), fn.get("arguments")))
    return _usage(resp.get("usage"), "prompt_tokens", "completion_tokens"), calls


def _openai_responses(resp: dict) -> tuple[dict[str, int], list[ToolCallRequest | None]]:
    calls: list[ToolCallRequest | None] = []
    for item in _list(resp.get("output")):
        item = _dict(item)
        if item.get("type") == "function_call":
            calls.append(_call(item.get("call_id") or item.get("id"), item.get("name"), item.get("arguments")))
        elif item.get("type") == "custom_tool_call":
            calls.append(_call(item.get("call_id") or item.get("id"), item.get("name"), item.get("input")))
        elif item.get("type") in _RESPONSES_CLIENT_TOOLS:
            name, field_name = _RESPONSES_CLIENT_TOOLS[item["type"]]
            if item["type"] == "tool_search_call" and item.get("execution") != "client":
                continue  # the provider ran it
            arguments = item.get(field_name)
            if arguments is None and item["type"] == "computer_call":
                arguments = item.get("actions")  # a batch of actions instead of one
            calls.append(_call(item.get("call_id"), name, arguments))
    return _usage(resp.get("usage"), "input_tokens", "output_tokens"), calls


#: Responses output items of built-in tools the client carries out (OpenAI Responses API), by
#: type: (the tool's name, the field holding what to do). They are linked by ``call_id`` like
#: ``function_call``; a ``tool_search_call`` only when its ``execution`` is ``client``.
_RESPONSES_CLIENT_TOOLS: dict[str, tuple[str, str]] = {
    "computer_call": ("computer", "action"),
    "local_shell_call": ("local_shell", "action"),
    "shell_call": ("shell", "action"),
    "apply_patch_call": ("apply_patch", "operation"),
    "tool_search_call": ("tool_search", "arguments"),
}


def _anthropic(resp: dict) -> tuple[dict[str, int], list[ToolCallRequest | None]]:
    calls = [_call(_dict(b).get("id"), _dict(b).get("name"), _dict(b).get("input"))
             for b in _list(resp.get("content")) if _dict(b).get("type") == "tool_use"]
    raw = _dict(resp.get("usage"))
    usage = _usage(raw, "input_tokens", "output_tokens")
    # Anthropic's input_tokens leaves out cached prompt tokens; count them in, as
    # OpenAI's prompt_tokens does (OpenTelemetry gen_ai.usage.input_tokens).
    cache_read = _count(raw.get("cache_read_input_tokens"))
    cache_creation = _count(raw.get("cache_creation_input_tokens"))
    usage["input_tokens"] = _add(usage["input_tokens"], cache_read, cache_creation)
    usage["total_tokens"] = _add(usage["input_tokens"], usage["output_tokens"])
    if cache_read or cache_creation:
        usage["cache_read_input_tokens"] = cache_read
        usage["cache_creation_input_tokens"] = cache_creation
    return usage, calls


def _lc_messages(resp: dict) -> list[dict]:
    if resp.get("type") in ("ai", "AIMessageChunk"):
        return [resp]
    return [_dict(_dict(g).get("message")) for batch in _list(resp.get("generations")) for g in _list(batch)]


def _langchain(resp: dict) -> tuple[dict[str, int], list[ToolCallRequest | None]]:
    messages = _lc_messages(resp)
    calls = [_call(_dict(tc).get("id"), _dict(tc).get("name"), _dict(tc).get("args"))
             for m in messages for tc in _list(m.get("tool_calls"))]
    metas = [_dict(m.get("usage_metadata")) for m in messages if m.get("usage_metadata")]
    if metas:
        usage = {"input_tokens": _add(*(_count(u.get("input_tokens")) for u in metas)),
                 "output_tokens": _add(*(_count(u.get("output_tokens")) for u in metas))}
        total = _add(*(_count(u.get("total_tokens")) for u in metas))
        usage["total_tokens"] = total if total != 0 else _add(usage["input_tokens"], usage["output_tokens"])
        return usage, calls
    raw = _dict(_dict(resp.get("llm_output")).get("token_usage") or _dict(resp.get("llm_output")).get("usage"))
    if "input_tokens" in raw or "output_tokens" in raw:
        return _usage(raw, "input_tokens", "output_tokens"), calls
    return _usage(raw, "prompt_tokens", "completion_tokens"), calls


def _langchain_model(resp: dict) -> Any:
    found = _dict(resp.get("llm_output")).get("model_name") or _dict(resp.get("llm_output")).get("model")
    for m in _lc_messages(resp):
        meta = _dict(m.get("response_metadata"))
        found = found or meta.get("model_name") or meta.get("model")
    return found


def _detect(resp: Any) -> tuple[str, str]:
    if not isinstance(resp, dict):
        return "unknown", "unknown"
    if isinstance(resp.get("generations"), list) or (
            resp.get("type") in ("ai", "AIMessageChunk") and "tool_calls" in resp):
        return "langchain", "unknown"
    obj = resp.get("object")
    if obj == "chat.completion" or isinstance(resp.get("choices"), list):
        return "openai.chat", "openai"
    if obj == "response" or isinstance(resp.get("output"), list):
        return "openai.responses", "openai"
    if resp.get("type") == "message" and isinstance(resp.get("content"), list):
        return "anthropic.messages", "anthropic"
    return "unknown", "unknown"


def _text_of(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _chat_stream(chunks: list[dict]) -> dict:
    """OpenAI chat-completion chunks (``object: chat.completion.chunk``) as the ``chat.completion``
    they add up to: each choice's ``delta`` texts joined, its tool calls merged by ``index`` (the id,
    type and name from the chunk that gave them, the ``arguments`` fragments joined), the last
    ``finish_reason``, and the ``usage`` of the chunk that carries one (``include_usage``). A
    tool call fragment without an ``index`` (some OpenAI-compatible servers leave it out) is placed
    by :func:`_unindexed_call`."""
    out: dict[str, Any] = {"object": "chat.completion"}
    choices: dict[int, dict[str, Any]] = {}
    parts: dict[tuple, list[str]] = {}  # the fragments of each text, joined once at the end (not quadratic)
    for chunk in chunks:
        for key in ("id", "created", "model", "system_fingerprint", "service_tier"):
            if chunk.get(key) is not None:
                out[key] = chunk[key]
        if chunk.get("usage"):
            out["usage"] = chunk["usage"]
        for choice in _list(chunk.get("choices")):
            choice = _dict(choice)
            index = choice.get("index") if type(choice.get("index")) is int else 0
            slot = choices.setdefault(index, {"index": index, "message": {"role": "assistant", "content": None},
                                              "finish_reason": None, "_calls": {}})
            delta = _dict(choice.get("delta"))
            message = slot["message"]
            if isinstance(delta.get("role"), str):
                message["role"] = delta["role"]
            for key in ("content", "refusal"):
                if isinstance(delta.get(key), str):
                    parts.setdefault((index, key), []).append(delta[key])
            for tc in _list(delta.get("tool_calls")):
                tc = _dict(tc)
                at = tc.get("index") if type(tc.get("index")) is int else _unindexed_call(slot, tc)
                slot["_last"] = at
                call = slot["_calls"].setdefault(at, {"id": None, "type": "function",
                                                      "function": {"name": "", "arguments": ""}})
                if isinstance(tc.get("id"), str) and tc["id"]:
                    call["id"] = tc["id"]
                if isinstance(tc.get("type"), str):
                    call["type"] = tc["type"]
                fn = _dict(tc.get("function"))
                for key in ("name", "arguments"):
                    if isinstance(fn.get(key), str):
                        parts.setdefault((index, at, key), []).append(fn[key])
            if choice.get("finish_reason") is not None:
                slot["finish_reason"] = choice["finish_reason"]
    out["choices"] = []
    for index in sorted(choices):
        slot = choices[index]
        calls = slot.pop("_calls")
        slot.pop("_last", None)
        for key in ("content", "refusal"):
            if (index, key) in parts:
                slot["message"][key] = "".join(parts[(index, key)])
        for at, call in calls.items():
            for key in ("name", "arguments"):
                call["function"][key] = "".join(parts.get((index, at, key), ()))
        if calls:
            slot["message"]["tool_calls"] = [calls[i] for i in sorted(calls)]
        out["choices"].append(slot)
    return out


def _unindexed_call(slot: dict[str, Any], tc: dict[str, Any]) -> int:
    """Where a chat stream's tool call fragment without an ``index`` belongs, in a choice's calls
    (keyed by index): one with an ``id`` starts a new call (or continues the call that has that id:
    a server that repeats the id on every fragment), one without continues the last call a fragment
    went to (or starts the first)."""
    calls: dict[int, dict[str, Any]] = slot["_calls"]
    call_id = tc.get("id")
    if isinstance(call_id, str) and call_id:
        for at, call in calls.items():
            if call["id"] == call_id:
                return at
    elif slot.get("_last") is not None:
        return slot["_last"]
    return max(calls, default=-1) + 1


def _anthropic_stream(events: list[dict]) -> dict:
    """Anthropic Messages stream events as the ``message`` they add up to: ``message_start``'s
    message, each content block from ``content_block_start`` with its ``text_delta`` /
    ``thinking_delta`` / ``signature_delta`` texts joined, its ``citations_delta`` citations listed in
    ``citations``, and a ``tool_use`` block's ``input_json_delta`` fragments
    parsed as its ``input`` (kept as the joined text where it is not JSON), and ``message_delta``'s
    ``stop_reason`` and usage (its counts are cumulative: they replace ``message_start``'s)."""
    message: dict[str, Any] = {"type": "message", "role": "assistant", "content": []}
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    parts: dict[tuple[int, str], list[str]] = {}  # the fragments of each text, joined once at the end
    for event in events:
        kind = event.get("type")
        if kind == "message_start":
            start = _dict(event.get("message"))
            message.update({k: v for k, v in start.items() if k != "content"})
            message["type"] = "message"
        elif kind == "content_block_start" and type(event.get("index")) is int:
            blocks[event["index"]] = dict(_dict(event.get("content_block")))
            for key in ("text", "thinking", "signature"):
                parts.pop((event["index"], key), None)
        elif kind == "content_block_delta" and type(event.get("index")) is int:
            block = blocks.setdefault(event["index"], {"type": "text", "text": ""})
            delta = _dict(event.get("delta"))
            if delta.get("type") == "input_json_delta":
                partial.setdefault(event["index"], []).append(_text_of(delta.get("partial_json")))
            elif delta.get("type") == "citations_delta":
                if not isinstance(block.get("citations"), list):
                    block["citations"] = []
                block["citations"].append(delta.get("citation"))
            else:
                for key in ("text", "thinking", "signature"):
                    if isinstance(delta.get(key), str):
                        parts.setdefault((event["index"], key), [_text_of(block.get(key))]).append(delta[key])
        elif kind == "message_delta":
            delta = _dict(event.get("delta"))
            message.update({k: v for k, v in delta.items() if k in ("stop_reason", "stop_sequence")})
            if isinstance(event.get("usage"), dict):
                message["usage"] = {**_dict(message.get("usage")),
                                    **{k: v for k, v in event["usage"].items() if v is not None}}
    for (index, key), texts in parts.items():
        blocks[index][key] = "".join(texts)
    for index, fragments in partial.items():
        if index in blocks:
            text = "".join(fragments)
            try:
                blocks[index]["input"] = json.loads(text) if text.strip() else _dict(blocks[index].get("input"))
            except (ValueError, RecursionError):
                blocks[index]["input"] = text
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def _responses_stream(events: list[dict]) -> dict:
    """OpenAI Responses stream events as the response they end with: the ``response`` of the last
    ``response.completed`` / ``response.incomplete`` / ``response.failed`` event, else the newest
    ``response`` any event carried (a stream closed early)."""
    final = latest = None
    for event in events:
        if isinstance(event.get("response"), dict):
            latest = event["response"]
            if event.get("type") in ("response.completed", "response.incomplete", "response.failed"):
                final = latest
    return dict(final or latest or {"object": "response", "output": []})


def _assembled_stream(resp: Any) -> tuple[Any, int]:
    """``(response, chunks)``: a list of stream chunks or events of a known format (OpenAI chat
    chunks, Anthropic Messages events, OpenAI Responses events) as the one response it adds up to,
    with the number of chunks; anything else as it is, with 0."""
    if not isinstance(resp, list) or not resp or not all(isinstance(item, dict) for item in resp):
        return resp, 0
    try:  # never raises: a list that cannot be assembled is recorded as given
        if any(item.get("object") == "chat.completion.chunk" for item in resp):
            return _chat_stream(resp), len(resp)
        types = {t for t in (item.get("type") for item in resp) if isinstance(t, str)}  # ["string", "null"]
        if "message_start" in types or "content_block_delta" in types:
            return _anthropic_stream(resp), len(resp)
        if any(t.startswith("response.") for t in types) and any(
                isinstance(item.get("response"), dict) for item in resp):
            return _responses_stream(resp), len(resp)
    except Exception:  # noqa: BLE001 - a malformed response must not crash the agent
        pass
    return resp, 0


_PARSERS = {"openai.chat": _openai_chat, "openai.responses": _openai_responses, "anthropic.messages": _anthropic,
            "langchain": _langchain}


def normalize_model_call(request: Any, response: Any, *, provider: str | None = None,
                         model: str | None = None) -> ModelCallInfo:
    """Detect the format of a model call and extract usage and requested tool calls.

    Args:
        request: the request as a dict or SDK object (recorded as given; its
            ``model`` is used when the response has none).
        response: the response as a dict or SDK object; its shape decides the format.
        provider: override the detected provider.
        model: override the detected model name.

    Returns:
        A :class:`ModelCallInfo`. An unknown format is recorded as given, with no
        usage and no tool calls. Never raises on malformed content.
    """
    req, resp = to_plain(request), to_plain(response)
    resp, chunks = _assembled_stream(list(resp) if isinstance(resp, tuple) else resp)
    fmt, detected_provider = _detect(resp)
    usage: dict[str, Any] = {}
    calls: list[ToolCallRequest | None] = []
    if fmt in _PARSERS:
        try:
            usage, calls = _PARSERS[fmt](resp)
        except Exception:  # noqa: BLE001 - a malformed response must not crash the agent
            usage, calls = {}, []
    unread = {k: v.raw for k, v in usage.items() if isinstance(v, _Unread)}
    usage = {k: v for k, v in usage.items() if not isinstance(v, _Unread)}
    found_model = model or _dict(resp).get("model") or (
        _langchain_model(resp) if fmt == "langchain" else None) or _dict(req).get("model") or "unknown"
    found_provider = provider or detected_provider
    if isinstance(found_provider, str):
        found_provider = valid_text(found_provider)
    missing = (fmt in ("openai.chat", "openai.responses", "anthropic.messages") and not _dict(resp).get("usage")
               and not _dict(resp).get("error"))  # a Responses object always holds "error": null
    if fmt == "langchain":  # no usage_metadata on any message, no token usage in llm_output
        llm_output = _dict(_dict(resp).get("llm_output"))
        missing = not (any(_dict(m).get("usage_metadata") for m in _lc_messages(resp))
                       or llm_output.get("token_usage") or llm_output.get("usage"))
    return ModelCallInfo(found_provider, valid_text(str(found_model)), fmt, req, resp, usage,
                         tuple(c for c in calls if c is not None), unread, missing, chunks)
