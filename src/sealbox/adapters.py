"""Model-call adapters: OpenAI chat-completions, OpenAI Responses, Anthropic Messages.

:func:`normalize_model_call` accepts a request and a response as plain dicts or
as SDK objects (anything with ``model_dump()``), detects the format, and returns
the provider, the model, the token usage and the tool calls the response
requests (id, name, arguments), so that the recorder can link each requested
tool call to the ``tool.call`` that carries it out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolCallRequest", "ModelCallInfo", "normalize_model_call", "to_plain"]


@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call requested by a model response.

    Attributes:
        id: the call id the format uses (``tool_calls[].id``, ``call_id``, ``tool_use.id``).
        name: the tool name as the model wrote it.
        arguments: decoded arguments (a JSON string is parsed; invalid JSON is kept as the string).
    """

    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class ModelCallInfo:
    """A model call in a common shape (see :func:`normalize_model_call`)."""

    provider: str
    model: str
    format: str
    request: Any
    response: Any
    usage: dict[str, int] = field(default_factory=dict)
    tool_calls: tuple[ToolCallRequest, ...] = ()


def to_plain(value: Any) -> Any:
    """Turn SDK objects (pydantic models, objects with ``model_dump``/``to_dict``) into plain data."""
    for attr in ("model_dump", "to_dict", "dict"):
        method = getattr(value, attr, None)
        if callable(method) and not isinstance(value, (dict, list, str, bytes)):
            try:
                return to_plain(method())
            except TypeError:
                continue
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def _args(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _openai_chat(req: dict, resp: dict) -> tuple[dict[str, int], list[ToolCallRequest]]:
    usage = resp.get("usage") or {}
    calls = []
    for choice in resp.get("choices") or []:
        for tc in (choice.get("message") or {}).get("tool_calls") or []:
            fn = tc.get("function") or {}
            calls.append(ToolCallRequest(str(tc.get("id")), str(fn.get("name")), _args(fn.get("arguments"))))
    return {"input_tokens": usage.get("prompt_tokens") or 0, "output_tokens": usage.get("completion_tokens") or 0}, calls


def _openai_responses(req: dict, resp: dict) -> tuple[dict[str, int], list[ToolCallRequest]]:
    usage = resp.get("usage") or {}
    calls = [
        ToolCallRequest(str(item.get("call_id") or item.get("id")), str(item.get("name")), _args(item.get("arguments")))
        for item in resp.get("output") or [] if isinstance(item, dict) and item.get("type") == "function_call"
    ]
    return {"input_tokens": usage.get("input_tokens") or 0, "output_tokens": usage.get("output_tokens") or 0}, calls


def _anthropic(req: dict, resp: dict) -> tuple[dict[str, int], list[ToolCallRequest]]:
    usage = resp.get("usage") or {}
    calls = [
        ToolCallRequest(str(block.get("id")), str(block.get("name")), block.get("input"))
        for block in resp.get("content") or [] if isinstance(block, dict) and block.get("type") == "tool_use"
    ]
    return {"input_tokens": usage.get("input_tokens") or 0, "output_tokens": usage.get("output_tokens") or 0}, calls


def _detect(resp: Any) -> tuple[str, str]:
    if isinstance(resp, dict):
        if "choices" in resp:
            return "openai.chat", "openai"
        if resp.get("object") == "response" or ("output" in resp and isinstance(resp.get("output"), list)):
            return "openai.responses", "openai"
        if resp.get("type") == "message" and isinstance(resp.get("content"), list):
            return "anthropic.messages", "anthropic"
    return "unknown", "unknown"


_PARSERS = {"openai.chat": _openai_chat, "openai.responses": _openai_responses, "anthropic.messages": _anthropic}


def normalize_model_call(request: Any, response: Any, *, provider: str | None = None,
                         model: str | None = None) -> ModelCallInfo:
    """Detect the format of a model call and extract usage and requested tool calls.

    Args:
        request, response: dicts or SDK objects.
        provider, model: override what is detected.

    Returns:
        A :class:`ModelCallInfo`; an unknown format is recorded as given, with no usage.
    """
    req, resp = to_plain(request), to_plain(response)
    fmt, detected_provider = _detect(resp)
    usage, calls = _PARSERS[fmt](req if isinstance(req, dict) else {}, resp) if fmt in _PARSERS else ({}, [])
    found_model = model or (resp.get("model") if isinstance(resp, dict) else None) or (
        req.get("model") if isinstance(req, dict) else None) or "unknown"
    return ModelCallInfo(provider or detected_provider, str(found_model), fmt, req, resp,
                         {k: int(v) for k, v in usage.items()}, tuple(calls))
