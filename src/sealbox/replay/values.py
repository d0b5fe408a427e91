"""Turning recorded content back into the values an agent receives on replay.

Recorded content is type-tag encoded (``sealbox.canonical``). :func:`rebuild`
decodes it and, where a ``$pydantic`` or ``$dataclass`` tag names a class that
is **already imported** (the agent's own code imported it), rebuilds the object
— a LangGraph tool result is a ``ToolMessage``, and the graph needs one back.
It never imports a module: reading a log must not run code.

A recorded exception comes back as the builtin exception of the same name when
there is one (``ValueError``, ``TimeoutError``…), else as a subclass of
:class:`ReplayedError` named like the recorded type (``ToolException``); its message is the
recorded one, so what the model sees is unchanged: ``str()``, ``repr()`` (LangGraph's
``ToolNode(handle_tool_errors=True)`` tells the model ``repr(error)``) and
``type(error).__name__`` read as they did when recorded.
"""

from __future__ import annotations

import builtins
import sys
from typing import Any

from sealbox.canonical import Tagged, decode

__all__ = ["ReplayedError", "rebuild", "rebuild_error"]


class ReplayedError(Exception):
    """A recorded exception whose class could not be rebuilt; ``str()`` is the recorded message.

    Attributes:
        type: the recorded exception type's qualified name.
    """

    def __init__(self, type_name: str, message: str) -> None:
        super().__init__(message)
        self.type = type_name


#: The ReplayedError subclass made for each recorded type name (see :func:`rebuild_error`).
_NAMED: dict[str, type[ReplayedError]] = {}


def _named(type_name: str) -> type[ReplayedError]:
    """A subclass of ReplayedError whose ``__name__`` / ``__qualname__`` are the recorded type's, so the
    replayed exception reads as the recorded one (its repr, a handler's ``type(e).__name__``, the
    replay run's ``run.ended`` error type); it is still caught as ``ReplayedError``, never as the
    recorded class (replay never imports a module named by the log)."""
    cls = _NAMED.get(type_name)
    if cls is None:
        try:
            cls = type(type_name.rpartition(".")[2] or "ReplayedError", (ReplayedError,),
                       {"__qualname__": type_name, "__module__": __name__})
        except (TypeError, ValueError):  # pragma: no cover - a name type() refuses (a NUL)
            cls = ReplayedError
        if len(_NAMED) < 10_000:
            _NAMED[type_name] = cls
    return cls


def _find_class(name: Any) -> type | None:
    if not isinstance(name, str) or "." not in name:
        return None
    module_name, _, qualname = name.rpartition(".")
    while module_name:
        module = sys.modules.get(module_name)
        if module is not None:
            obj: Any = module
            for part in qualname.split("."):
                obj = getattr(obj, part, None)
                if obj is None:
                    return None
            return obj if isinstance(obj, type) else None
        module_name, _, head = module_name.rpartition(".")
        qualname = f"{head}.{qualname}"
    return None


def _rebuild(value: Any) -> Any:
    if isinstance(value, Tagged) and value.tag in ("$pydantic", "$dataclass") and isinstance(value.value, dict):
        cls = _find_class(value.value.get("type"))
        fields = _rebuild(decode(value.value.get("fields")))
        if cls is not None and isinstance(fields, dict):
            try:
                if value.tag == "$pydantic" and hasattr(cls, "model_validate"):
                    return cls.model_validate(fields)
                return cls(**fields)
            except Exception:  # noqa: BLE001 - a class that changed shape: hand back the data
                return value
        return value
    if isinstance(value, dict):
        return {k: _rebuild(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rebuild(v) for v in value]
    return value


def rebuild(stored: Any) -> Any:
    """Decode stored (encoded) content and rebuild objects of already-imported classes."""
    return _rebuild(decode(stored))


def _literal(text: str) -> Any:
    """The Python literal ``text`` spells (a KeyError's message is the repr of its key), else ``text``."""
    import ast

    try:
        return ast.literal_eval(text) if len(text) <= 10_000 else text
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def rebuild_error(error: Any) -> BaseException:
    """The exception to raise for a recorded ``{"type", "message"}`` error."""
    error = error if isinstance(error, dict) else {}
    type_name, message = str(error.get("type") or "Exception"), str(error.get("message") or "")
    cls = getattr(builtins, type_name, None)
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            if issubclass(cls, KeyError):  # str(KeyError(k)) is repr(k): give back k, so str() is the message
                error_obj = cls(_literal(message))
                if str(error_obj) == message:
                    return error_obj
            return cls(message)
        except Exception:  # noqa: BLE001
            pass
    return _named(type_name)(type_name, message)
