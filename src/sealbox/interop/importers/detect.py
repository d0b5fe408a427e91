"""Which importable format a parsed file is in.

Detection looks only at structure (keys and types), in a fixed order from the
most specific shape to the least; the first match wins. A file that matches
none is refused with one error naming the formats tried.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from sealbox.interop.importers.common import ImportFormatError

#: Format names accepted by ``--format``, in detection order.
FORMATS: tuple[str, ...] = (
    "openai-agents-runstate", "otlp-json", "jaeger", "langfuse", "swe-agent", "tau-bench",
)


def module_for(fmt: str) -> ModuleType:
    """The importer module of a format name."""
    from sealbox.interop.importers import (
        jaeger,
        langfuse,
        openai_agents_runstate,
        openai_messages,
        otlp_json,
        swe_agent,
    )

    modules = {"openai-agents-runstate": openai_agents_runstate, "otlp-json": otlp_json, "jaeger": jaeger,
               "langfuse": langfuse, "swe-agent": swe_agent, "tau-bench": openai_messages}
    try:
        return modules[fmt]
    except KeyError:
        raise ImportFormatError(f"unknown import format {fmt!r} (choose from auto, {', '.join(FORMATS)})") from None


def detect_format(doc: Any, name: str = "the file") -> str:
    """The format of a parsed document.

    Raises:
        ImportFormatError: it matches no known format (nothing of the file is quoted).
    """
    for fmt in FORMATS:
        try:
            if module_for(fmt).detect(doc):
                return fmt
        except Exception:  # noqa: BLE001 - a detector never decides on a crash
            continue
    raise ImportFormatError(
        f"{name} is not in a format sealbox can import (the top level is {_shape(doc)} that matches none of: "
        f"{', '.join(FORMATS)}); pass --format to see what a given importer expects")


def _shape(doc: Any) -> str:
    """What the top level of a parsed file is, in JSON's terms (never its content)."""
    if isinstance(doc, dict) and set(doc) == {"$jsonl"} and isinstance(doc["$jsonl"], list):
        return f"JSON Lines of {len(doc['$jsonl'])} values"  # load_json_bytes: one value per line
    if isinstance(doc, dict):
        return "an object"
    if isinstance(doc, list):
        return "an array"
    if isinstance(doc, str):
        return "a string"
    if isinstance(doc, bool):
        return "a boolean"
    if doc is None:
        return "null"
    return "a number"
