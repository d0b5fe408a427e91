"""Values quoted in error lines as a YAML author wrote them (the gateway config, policies, policy
test cases): ``.nan``, ``.inf``, ``-.inf``, ``null``, ``true``, not Python's or JSON's spelling
(``nan``, ``NaN``, ``Infinity``, ``None``, ``True``)."""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = ["written"]


def written(value: Any) -> str:
    """``value`` as YAML spells it, for an error line: a string in quotes (``'sometimes'``),
    ``null``, ``true``, ``3``, ``.nan``, ``-.inf``, a list or mapping in flow style (``["uvx", "x"]``,
    ``{"a": 1}``, ``[.nan]``: non-finite numbers inside one too)."""
    if isinstance(value, str):
        return repr(value)
    return _flow(value)


def _flow(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if value != value else (".inf" if value > 0 else "-.inf")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_flow(key)}: {_flow(item)}" for key, item in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False, default=str)
