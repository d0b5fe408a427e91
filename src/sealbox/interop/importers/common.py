"""What every importer shares: errors, the run builder, timestamps, lenient decoding.

An importer turns one parsed file into a list of :class:`RunBuilder`, one per
imported run, *without writing anything*; :func:`sealbox.interop.importers.import_file`
then appends every run's drafts in one store transaction, so a file either comes
in whole or not at all.

Oddities found on the way (a span that is its own parent, a naive timestamp,
double-encoded arguments, ``NaN``…) never stop an import: each becomes an
``anomaly`` event of the run it belongs to. Only a file that is in no known
format, or that is structurally not the format asked for, is refused, with an
:class:`ImportFormatError` whose message never quotes the file's content.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable

from sealbox.canonical import Tagged, canonical_bytes
from sealbox.errors import SealboxError
from sealbox.events import EventDraft, rfc3339_utc
from sealbox.store.base import new_run_id

__all__ = [
    "ImportFormatError",
    "ImportSummary",
    "RunBuilder",
    "IMPORTED_POLICY",
    "IMPORTED_POLICY_FINGERPRINT",
    "DEFAULT_SERVER",
    "IMPORTED_GRANT",
    "Progress",
]

Progress = Callable[[str, int, int], None]

#: Server id of an imported tool call when the source names none.
DEFAULT_SERVER = "imported"
#: Grant named by every imported tool call: the source recorded no grant.
IMPORTED_GRANT = "imported:unknown"

#: The pseudo-policy every imported decision names. Imported calls were not decided
#: by a Sealbox policy; their ``policy.decision`` events say so with reason code
#: ``imported`` and this fixed, documented fingerprint (docs/import.md).
IMPORTED_POLICY: dict[str, Any] = {
    "name": "imported",
    "description": "Calls imported from a trace recorded outside Sealbox; no Sealbox policy decided them.",
    "rules": [],
    "version": 1,
}
IMPORTED_POLICY_FINGERPRINT = "sha256:" + hashlib.sha256(canonical_bytes(IMPORTED_POLICY)).hexdigest()

MAX_SAFE_INT = 2**53
_MAX_ANOMALY_PATHS = 20


class ImportFormatError(SealboxError, ValueError):
    """The file is in no format Sealbox can import, or not in the format asked for.

    The message names the file and what is structurally wrong, never the file's
    content (a refused file may hold secrets).
    """


@dataclass(frozen=True)
class ImportSummary:
    """What one :func:`~sealbox.interop.importers.import_file` call wrote.

    Attributes:
        runs: the new run ids, in file order.
        events: number of events written (all runs).
        anomalies: number of ``anomaly`` events among them.
        format: the format imported (``tau-bench``, ``swe-agent``, ...).
        source_sha256: ``sha256:<hex>`` of the file's bytes.
        already_imported: True when the store held runs imported from a file of the same bytes
            already: nothing was written, ``runs`` are those runs and ``events`` is 0.
        duplicates_skipped: number of source items (spans, Langfuse observations, OTLP log records)
            skipped because the file gave an identical one with the same id before (the same
            content, compared as parsed JSON): they add no event. An item whose id repeats with
            different content is not skipped (a ``duplicate_span_id`` anomaly, docs/import.md).
        skipped_runs: the runs already in the store (imported before, from any file) holding the
            same content as a run of this file (``imported.content_sha256``): that run was not
            written again. When every run of the file was skipped so, ``already_imported`` is True
            and ``runs`` are these runs.
    """

    runs: tuple[str, ...]
    events: int
    anomalies: int
    format: str
    source_sha256: str
    already_imported: bool = False
    duplicates_skipped: int = 0
    skipped_runs: tuple[str, ...] = ()


# --------------------------------------------------------------------------- run builder


@dataclass
class _Item:
    kind: str
    payload: dict[str, Any]
    top: int  # 1-based local top-level step; renumbered after the anomalies
    sub: tuple[int, ...] = ()


@dataclass
class RunBuilder:
    """Collects one imported run's events; :meth:`drafts` lays them out.

    Layout: ``run.started`` (step 1), one ``anomaly`` per oddity (steps 2…), the
    run's events in source order (model calls get a step ``N``; the tool calls
    they requested ``N.1``, ``N.2``… as siblings), then ``run.ended``.
    """

    fmt: str
    source_file: str
    source_sha256: str
    agent: str = "imported"
    original_ids: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    status: str = "ok"
    end_info: dict[str, Any] = field(default_factory=dict)
    error: dict[str, str] | None = None
    run_id: str = field(default_factory=new_run_id)
    items: list[_Item] = field(default_factory=list)
    anomalies: list[tuple[str, Any]] = field(default_factory=list)
    _top: int = 0
    _calls: int = 0
    _usage_in: int = 0
    _usage_out: int = 0
    _usage_cost: float | None = None  # the sum of the model calls' costs; None: no source gave one
    duplicates: int = 0  # source items skipped as identical repeats (ImportSummary.duplicates_skipped)
    content_sha256: str | None = None  # content_digest(drafts) once known: run.started imported.content_sha256
    #: source_digest of each source item the run was made from (its spans, its trace record...): what
    #: content_digest compares; an item that could not be digested adds a part that matches nothing
    source_parts: list[str] = field(default_factory=list)
    _seen_anomalies: set = field(default_factory=set)
    _aggregated: dict = field(default_factory=dict)  # what -> the detail of its one aggregated anomaly

    # steps ---------------------------------------------------------------
    def new_step(self) -> int:
        """Reserve the next top-level step (a local number, renumbered at the end)."""
        self._top += 1
        return self._top

    def new_call_id(self) -> str:
        """A call id for a call the source gave none: ``imported-call-<n>`` (unique in the run)."""
        self._calls += 1
        return f"imported-call-{self._calls}"

    def anomaly(self, what: str, detail: Any = None, *, aggregate: bool = False) -> None:
        """Record an oddity of the source (once per identical what+detail).

        With ``aggregate``, repeats of ``what`` fold into one anomaly whose detail
        counts them and lists the first places (``where``).
        """
        if aggregate and isinstance(detail, dict):
            d = self._aggregated.get(what)
            if d is not None:
                d["count"] += 1
                if len(d["where"]) < _MAX_ANOMALY_PATHS:
                    d["where"].append(detail.get("where"))
                return
            detail = self._aggregated[what] = {**detail, "aggregated": True, "count": 1, "where": [detail.get("where")]}
            self.anomalies.append((what, detail))
            return
        key = (what, json.dumps(detail, sort_keys=True, default=str))
        if key in self._seen_anomalies:
            return
        self._seen_anomalies.add(key)
        self.anomalies.append((what, detail))

    def _micros(self, value: Any, field: str, *, call: str) -> int:
        """A duration in us for ``field`` (``duration_us``, ``latency_us``): negative or missing is 0, and so is
        one above 2^53 - 1 (285 years: a span whose start lies centuries before its end), which no event can
        hold as a number (RFC 7493 §2.2), with a ``duration_out_of_range`` anomaly keeping its digits."""
        micros = max(0, int(value or 0))
        if micros > _MAX_COUNT:
            self.anomaly("duration_out_of_range", {
                "field": field, "value": str(micros), "call": call,
                "message": f"a {field} above 2^53 - 1 us was recorded as 0"})
            return 0
        return micros

    def add(self, kind: str, payload: dict[str, Any], top: int, sub: tuple[int, ...] = ()) -> None:
        self.items.append(_Item(kind, payload, top, sub))

    # events ---------------------------------------------------------------
    def model_call(self, top: int, *, provider: str, model: str, request: Any, response: Any,
                   usage: dict[str, Any] | None, latency_us: int | None = None, fmt: str = "unknown",
                   tool_call_ids: Iterable[str | None] = (), source: dict[str, Any] | None = None,
                   stream: dict[str, int] | None = None) -> None:
        use = {}
        for key in ("input_tokens", "output_tokens"):
            value = (usage or {}).get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                if value > _MAX_COUNT:  # not I-JSON (RFC 7493 §2.2): no event can hold it as a number
                    self.anomaly("token_count_out_of_range", {
                        "field": key, "value": str(value), "model": model or "unknown",
                        "message": f"a {key} count above 2^53 - 1 was left out of the model call's usage"})
                    continue
                use[key] = value
        if use.get("input_tokens", 0) + use.get("output_tokens", 0) > _MAX_COUNT or \
                self._usage_in + use.get("input_tokens", 0) > _MAX_COUNT or \
                self._usage_out + use.get("output_tokens", 0) > _MAX_COUNT:
            self.anomaly("token_count_out_of_range", {
                "field": "total_tokens", "value": str(use.get("input_tokens", 0) + use.get("output_tokens", 0)),
                "model": model or "unknown",
                "message": "token counts whose sum passes 2^53 - 1 were left out of the usage"})
            use = {}
        if use:
            use["total_tokens"] = use.get("input_tokens", 0) + use.get("output_tokens", 0)
        self._usage_in += use.get("input_tokens", 0)
        self._usage_out += use.get("output_tokens", 0)
        cost = (usage or {}).get("cost")  # a Sealbox export's sealbox.usage.cost (the exporting store's prices)
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and math.isfinite(cost) and cost >= 0:
            use["cost"] = cost
            self._usage_cost = (self._usage_cost or 0.0) + cost
        payload: dict[str, Any] = {
            "provider": provider or "unknown", "model": model or "unknown", "request": request,
            "response": response, "usage": use, "format": fmt,
            # None: the source gives no timing (messages, trajectories): not known, never 0 (instant)
            "latency_us": None if latency_us is None else self._micros(latency_us, "latency_us", call=model or "unknown"),
            # each in its place (a tool call linked to it is at sub-step <step>.<place>): None, a call
            # requested without an id; anything else that is not an id is left out
            "tool_call_ids": [i for i in tool_call_ids if i is None or isinstance(i, str)],
        }
        if stream is not None:  # recorded from stream chunks ({"chunks": N}): a replay gives chunks again
            payload["stream"] = stream
        if source:
            payload["imported"] = source
        self.add("model.call", payload, top)

    def tool_call(self, top: int, sub: tuple[int, ...], *, call_id: str, tool: str, arguments: Any,
                  server: str | None = None, exposed: str | None = None, effect: str = "allow",
                  reason: str = "imported call: no Sealbox policy decided it", source: dict[str, Any] | None = None,
                  model_call_step: bool = True, rule: str | None = None,
                  decision_source: dict[str, Any] | None = None) -> None:
        """``tool.call`` then its ``policy.decision`` (effect ``allow`` unless the source says otherwise).

        ``rule`` and ``decision_source`` (the decision's ``imported`` field) are for a source that
        says which rule of its own policy decided the call (a Sealbox OTLP export): the decision
        still has reason code ``imported`` and the imported pseudo-policy's fingerprint.
        """
        srv, name = split_tool_name(tool, server)
        payload: dict[str, Any] = {"call_id": call_id, "server": srv, "tool": name, "exposed": exposed or tool,
                                   "arguments": arguments, "grant": IMPORTED_GRANT}
        if source:
            payload["imported"] = source
        self.add("tool.call", payload, top, sub)
        decision: dict[str, Any] = {
            "call_id": call_id, "server": srv, "tool": name, "effect": effect, "reason_code": "imported",
            "rule": rule, "reason": reason, "policy_fingerprint": IMPORTED_POLICY_FINGERPRINT, "eval_us": 0,
            "approval": None, "limit": None, "re_evaluable": False,
        }
        if decision_source:
            decision["imported"] = decision_source
        self.add("policy.decision", decision, top, sub)

    def tool_result(self, top: int, sub: tuple[int, ...], *, call_id: str, ok: bool, result: Any = None,
                    error: dict[str, str] | None = None, duration_us: int = 0,
                    source: dict[str, Any] | None = None) -> None:
        payload: dict[str, Any] = {"call_id": call_id, "ok": bool(ok),
                                   "duration_us": self._micros(duration_us, "duration_us", call=call_id)}
        if ok:
            payload["result"] = result
        else:
            payload["error"] = error or {"type": "error", "message": "the source marks this call as failed"}
            if result is not None:
                payload["result"] = result
        if source:
            payload["imported"] = source
        self.add("tool.result", payload, top, sub)

    def imported_approval(self, top: int, sub: tuple[int, ...], *, text: str, approval: dict[str, Any]) -> None:
        """An approval found in the source, as a ``note``: its identity is never authenticated.

        ``approval.answered`` is not used: it must carry an approver's Ed25519
        signature, which an imported file cannot provide.
        """
        about = {"imported_approval": {**approval, "identity": approval.get("identity"),
                                       "identity_authenticated": False}}
        self.add("note", {"text": text, "about": about}, top, sub)

    def state(self, top: int, state: Any, label: str) -> None:
        """Source facts that are content (ground truth, submissions): a ``state.saved``, so redaction applies."""
        self.add("state.saved", {"state": state, "label": label}, top)

    def note(self, top: int, text: str, about: Any = None) -> None:
        payload: dict[str, Any] = {"text": text}
        if about is not None:
            payload["about"] = about
        self.add("note", payload, top)

    # output ---------------------------------------------------------------
    def drafts(self) -> list[EventDraft]:
        """Every event of the run, in order, as drafts for one ``store.append``."""
        self._scan_non_finite()
        principal = "imported:" + (self.agent or "agent")
        offset = 1 + len(self.anomalies)
        imported = {"source_file": self.source_file, "source_sha256": self.source_sha256, "format": self.fmt,
                    "original_ids": self.original_ids}
        if self.content_sha256 is not None:
            imported["content_sha256"] = self.content_sha256
        labels = {"imported": "true", "import_format": self.fmt, **{k: str(v) for k, v in self.labels.items()}}
        out = [EventDraft("run.started", {
            "agent": self.agent or "imported", "snapshot": None, "parent_run_id": None, "labels": labels,
            "policy": {"fingerprint": IMPORTED_POLICY_FINGERPRINT, "name": "imported"}, "imported": imported,
        }, run_id=self.run_id, principal=principal, step="1")]
        for i, (what, detail) in enumerate(self.anomalies, start=2):
            payload: dict[str, Any] = {"what": what}
            if detail is not None:
                payload["detail"] = detail
            out.append(EventDraft("anomaly", payload, run_id=self.run_id, principal="sealbox", step=str(i)))
        last = offset
        for item in self.items:
            top = item.top + offset
            last = max(last, top)
            step = ".".join(str(n) for n in (top, *item.sub))
            out.append(EventDraft(item.kind, item.payload, run_id=self.run_id, principal=principal, step=step))
        end: dict[str, Any] = {"status": self.status,
                               "usage": {"input_tokens": self._usage_in, "output_tokens": self._usage_out}}
        if self._usage_cost is not None:
            end["usage"]["cost"] = self._usage_cost
        if self.error is not None:
            end["error"] = self.error
        if self.end_info:
            end["imported"] = self.end_info
        out.append(EventDraft("run.ended", end, run_id=self.run_id, principal=principal, step=str(last + 1)))
        return out

    def _scan_non_finite(self) -> None:
        found: dict[str, tuple[int, list[str]]] = {}
        for item in self.items:
            for what, path in odd_number_paths(item.payload, limit=_MAX_ANOMALY_PATHS):
                count, paths = found.get(what, (0, []))
                if len(paths) < _MAX_ANOMALY_PATHS:
                    paths.append(f"{item.kind}[{'.'.join(map(str, (item.top, *item.sub)))}]{path}")
                found[what] = (count + 1, paths)
        if "non_finite_number" in found:
            count, paths = found["non_finite_number"]
            self.anomaly("non_finite_number", {
                "message": "NaN or Infinity in the source (not valid JSON); kept as a tagged float",
                "count": count, "where": paths})
        if "huge_integer" in found:
            count, paths = found["huge_integer"]
            self.anomaly("huge_integer", {
                "message": f"an integer of more than {sys.get_int_max_str_digits()} digits in the source; kept exactly, as the "
                           "canonical tagged integer {\"$bigint\": digits}",
                "count": count, "where": paths})


# --------------------------------------------------------------------------- names


_MCP_NAME = re.compile(r"^mcp__([A-Za-z0-9_.-]+?)__(.+)$")


def split_tool_name(tool: Any, server: str | None = None) -> tuple[str, str]:
    """(server, tool) of an imported tool name: ``mcp__weather__get_weather`` → (weather, get_weather)."""
    name = tool if isinstance(tool, str) and tool else "unknown"
    if server:
        return server, name
    match = _MCP_NAME.match(name)
    if match:
        return match.group(1), match.group(2)
    return DEFAULT_SERVER, name


# --------------------------------------------------------------------------- JSON


class _Constants:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, name: str) -> float:
        self.count += 1
        return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[name]


def never_part() -> str:
    """A :attr:`RunBuilder.source_parts` entry for an item that could not be digested: it matches no
    other, so the run is never taken for one imported before."""
    import uuid

    return "undigested:" + uuid.uuid4().hex


def content_digest(run: RunBuilder, drafts: list[EventDraft]) -> str | None:
    """``sha256:<hex>`` of an imported run's source content (``imported.content_sha256``): the format
    and the set of digests of the source items it was made from (:attr:`RunBuilder.source_parts`:
    each distinct span / observation / trace record / message-list record, or the whole document of
    a one-run file), in no particular order, so two files whose bytes differ (re-indented, keys or
    spans in another order, other traces beside it) give the same digest for the same trace. A run
    with no source parts: the digest of the run as converted (every event's kind, step, principal and
    payload, without the file's name and hash and a record's index in it). None when neither can be
    serialised (the run is then never taken for one imported before)."""
    if run.source_parts:
        text = json.dumps([run.fmt, sorted(set(run.source_parts))], separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    items = []
    for d in drafts:
        payload: Any = d.payload
        if d.kind == "run.started" and isinstance(payload.get("imported"), dict):
            imported = {k: v for k, v in payload["imported"].items()
                        if k not in ("source_file", "source_sha256", "content_sha256")}
            if isinstance(imported.get("original_ids"), dict):
                imported["original_ids"] = {k: v for k, v in imported["original_ids"].items() if k != "record_index"}
            payload = {**payload, "imported": imported}
        items.append([d.kind, d.step, d.principal, payload])
    try:
        text = json.dumps(items, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):
        return None  # never compared: the run is imported as a new one
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def source_digest(value: Any) -> str | None:
    """A digest of a parsed source item (a span, an observation, a log record), equal for equal
    JSON values whatever their key order: what tells an identical repeat of an item from another
    item under the same id. None when the value cannot be serialised (then it is never a repeat)."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    except (TypeError, ValueError, RecursionError):
        return None
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def load_json_bytes(data: bytes, name: str) -> tuple[Any, int]:
    """Parse a file's bytes as JSON (``NaN``/``Infinity`` accepted and counted).

    Returns:
        (the value, how many non-finite constants it held).

    Raises:
        ImportFormatError: not UTF-8 or not JSON (the message gives line and column only).
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        what = _known_binary(data, name)
        if what is not None:
            raise ImportFormatError(f"{name} {what}; nothing was imported") from None
        raise ImportFormatError(f"{name} is not UTF-8 text (byte {exc.start}); no importable format is binary") from None
    consts = _Constants()
    try:
        return _loads(text, consts), consts.count
    except json.JSONDecodeError as first:
        # OTLP file exporters write JSON Lines: one export request per line. Lines end at "\n" only (a
        # "\r" before it is white space to JSON): str.splitlines would also cut at U+2028, U+0085, U+001E...,
        # which JSON allows unescaped inside a string.
        # A file whose first line holds a whole JSON value is JSON Lines: a line that does not parse (the last
        # one cut short by a collector killed mid-write) is named with its own error and the file's line number,
        # not with the "Extra data" of reading the whole file as one value.
        lines = [(n, ln) for n, ln in enumerate(text.split("\n"), 1) if ln.strip()]
        if len(lines) > 1:
            consts.count = 0
            values: list[Any] = []
            try:
                for _n, ln in lines:
                    values.append(_loads(ln, consts))
                return {"$jsonl": values}, consts.count
            except json.JSONDecodeError as exc:
                if values:
                    raise ImportFormatError(f"{name} is not valid JSON Lines (line {_n}, column {exc.colno}: "
                                            f"{exc.msg})") from None
        raise ImportFormatError(
            f"{name} is not valid JSON (line {first.lineno}, column {first.colno}: {first.msg})") from None
    except RecursionError:
        raise ImportFormatError(f"{name} nests JSON too deeply to import") from None


_READS = "import reads the JSON trace files of the formats listed in `sealbox import --help`"


def _known_binary(data: bytes, name: str) -> str | None:
    """What a file that is not UTF-8 is, when it is something a user may plausibly give import (a Sealbox
    export bundle, a Parquet export, a gzip-compressed trace, UTF-16 text), for the error; else None."""
    if data[:4] == b"PK\x03\x04":
        import io
        import zipfile

        try:
            with zipfile.ZipFile(io.BytesIO(data)) as zf:
                names = set(zf.namelist())
                if {"format", "manifest.json", "events.jsonl"} <= names:
                    with zf.open("format") as fh:  # its first bytes only: a member may be huge
                        bundle = fh.read(64).startswith(b"sealbox-bundle/")
                else:
                    bundle = False
        except Exception:  # noqa: BLE001 - a damaged or odd zip: said to be one, no more
            bundle = False
        if bundle:
            return (f"is a Sealbox export bundle, which import does not read: check it with `sealbox verify {name} "
                    f"--key KEY`; {_READS}")
        return f"is a zip archive, which import does not read; {_READS}"
    if data[:4] == b"PAR1":
        return f"is a Parquet file (as `sealbox export --parquet` writes), which import does not read; {_READS}"
    if data[:2] == b"\x1f\x8b":
        return "is gzip-compressed: decompress it first (gunzip)"
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "is UTF-16 text: convert it to UTF-8 first (iconv -f UTF-16 -t UTF-8)"
    return None


def _loads(text: str, consts: _Constants) -> Any:
    """``json.loads``; an integer longer than Python converts (``sys.get_int_max_str_digits()``,
    4300 digits by default: ``json`` raises a bare ValueError) becomes ``Tagged("$bigint", digits)``,
    which the store writes as the canonical ``{"$bigint": digits}`` (exact) and the run notes
    as a ``huge_integer`` anomaly. Only a file holding one is parsed twice."""
    count = consts.count
    try:
        return json.loads(text, parse_constant=consts)
    except json.JSONDecodeError:
        raise
    except ValueError:
        consts.count = count
        return json.loads(text, parse_constant=consts, parse_int=_int_or_tagged)


def _int_or_tagged(digits: str) -> Any:
    try:
        return int(digits)
    except ValueError:  # longer than int() converts
        return Tagged("$bigint", digits)


def looks_like_json(text: str) -> bool:
    s = text.lstrip()
    return bool(s) and s[0] in "{[\""


def decode_json_string(value: Any, max_layers: int = 4) -> tuple[Any, int]:
    """Decode a value that may be JSON text, possibly encoded several times.

    Returns:
        (decoded value, number of JSON layers removed). A string that is not JSON is
        returned unchanged with 0 layers. Objects and other values pass through.
    """
    layers = 0
    while isinstance(value, str) and layers < max_layers and looks_like_json(value):
        try:
            decoded = _loads(value, _Constants())
        except (ValueError, RecursionError):
            break
        layers += 1
        value = decoded
    return value, layers


def lenient(value: Any) -> Any:
    """Decode a field that may hold JSON text (one or more layers); other values unchanged."""
    return decode_json_string(value)[0]


def normalize_arguments(raw: Any, run: RunBuilder, where: str) -> Any:
    """Tool-call arguments in any encoding seen in the wild, as a value.

    JSON string → decoded; double-encoded → fully decoded (anomaly); object → as is;
    ``""`` → ``{}`` (anomaly); ``null``/missing → None (anomaly); a string that is not
    JSON → kept as the string (anomaly).
    """
    if raw is None:
        run.anomaly("null_arguments", {"where": where, "message": "the tool call's arguments are null; recorded as null"})
        return None
    if isinstance(raw, (bytes, bytearray)):
        raw = bytes(raw).decode("utf-8", "replace")
    if isinstance(raw, str):
        if not raw.strip():
            run.anomaly("empty_arguments", {"where": where, "message": "the tool call's arguments are an empty string; recorded as {}"})
            return {}
        value, layers = decode_json_string(raw)
        if layers == 0:
            run.anomaly("unparseable_arguments", {"where": where, "message": "arguments are not JSON; kept as the string"})
            return raw
        if layers > 1:
            run.anomaly("double_encoded_arguments", {"where": where, "layers": layers,
                                                      "message": "arguments were JSON-encoded more than once; decoded"})
        elif isinstance(value, str):
            run.anomaly("string_arguments", {"where": where, "message": "arguments are a JSON string, not an object"})
        return value
    return raw


def odd_number_paths(value: Any, limit: int = 20) -> list[tuple[str, str]]:
    """``(what, path)`` of the numbers no plain event field holds, JSON-pointer-like paths
    (iterative, bounded): ``non_finite_number`` (NaN/Infinity floats) and ``huge_integer``
    (an integer too long for Python to convert, read by :func:`load_json_bytes` as a tag)."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    seen: set[int] = set()
    while stack and len(out) < 2 * limit:
        v, path, depth = stack.pop()
        if isinstance(v, float):
            if not math.isfinite(v):
                out.append(("non_finite_number", path or "/"))
            continue
        if type(v) is Tagged:
            if v.tag == "$bigint":
                out.append(("huge_integer", path or "/"))
            continue
        if depth > 200 or not isinstance(v, (dict, list)) or id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, dict):
            stack.extend((x, f"{path}/{k}", depth + 1) for k, x in v.items())
        else:
            stack.extend((x, f"{path}/{i}", depth + 1) for i, x in enumerate(v))
    return out


def as_dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list:
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


#: The largest token count an event holds as a number (I-JSON, RFC 7493 §2.2).
_MAX_COUNT = 2**53 - 1


def as_count(value: Any) -> int | None:
    """A token count from an int, a float or a numeric string; None otherwise."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        value = int(value)
    return value if isinstance(value, int) and value >= 0 else None


# --------------------------------------------------------------------------- time

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ISO = re.compile(
    r"^(\d{4})-(\d\d)-(\d\d)[Tt ](\d\d):(\d\d)(?::(\d\d)(?:[.,](\d+))?)?\s*(Z|z|[+-]\d\d:?\d\d|[+-]\d\d)?$")


def rfc3339_from_ns(ns: int) -> str | None:
    """RFC 3339 UTC with microseconds of a Unix time in nanoseconds; None when out of range."""
    try:
        dt = _EPOCH + timedelta(microseconds=ns // 1000)
    except OverflowError:
        return None
    if dt.year < 1 or dt.year > 9999:
        return None
    return rfc3339_utc(dt)  # the year in four digits (strftime's %Y writes 999)


def parse_epoch(value: Any, unit_ns: int, run: RunBuilder, where: str) -> int | None:
    """A Unix time in ``unit_ns`` nanoseconds per unit (1 for OTLP, 1000 for Jaeger), as ns.

    Accepts decimal strings and numbers. A number above 2**53 (not exact in
    JavaScript, and OTLP/JSON says to write 64-bit integers as strings) is read
    exactly here and noted; a float is noted as possibly rounded.
    """
    if value is None or value == "" or isinstance(value, bool):
        return None
    if isinstance(value, str):
        s = value.strip()
        if re.fullmatch(r"-?\d+", s):
            if len(s) > 40:  # far out of range (and int() refuses more than 4300 digits)
                return _out_of_range(run, where)
            n = int(s)
        else:
            try:
                f = float(s)
            except ValueError:
                run.anomaly("bad_timestamp", {"where": where, "message": "a timestamp is not a number; ignored"}, aggregate=True)
                return None
            if not math.isfinite(f):
                run.anomaly("bad_timestamp", {"where": where, "message": "a timestamp is not finite; ignored"}, aggregate=True)
                return None
            n = int(f)
    elif isinstance(value, int):
        n = value
        if n > MAX_SAFE_INT:
            run.anomaly("unsafe_integer_timestamp", {
                "where": where, "message": "a timestamp is a JSON number above 2**53 (should be a string); read exactly"}, aggregate=True)
    elif isinstance(value, float):
        if not math.isfinite(value):
            run.anomaly("bad_timestamp", {"where": where, "message": "a timestamp is not finite; ignored"}, aggregate=True)
            return None
        n = int(value)
        if abs(value) > MAX_SAFE_INT:
            run.anomaly("imprecise_timestamp", {"where": where, "message": "a timestamp is a float above 2**53; it may be rounded"}, aggregate=True)
    else:
        run.anomaly("bad_timestamp", {"where": where, "message": "a timestamp has an unexpected type; ignored"}, aggregate=True)
        return None
    ns = n * unit_ns
    if ns <= 0:
        return None if n == 0 else _out_of_range(run, where)
    if rfc3339_from_ns(ns) is None:
        return _out_of_range(run, where)
    return ns


def _out_of_range(run: RunBuilder, where: str) -> None:
    run.anomaly("bad_timestamp", {"where": where, "message": "a timestamp is out of range; ignored"}, aggregate=True)
    return None


def parse_iso(value: Any, run: RunBuilder, where: str) -> int | None:
    """An RFC 3339 / ISO 8601 time as Unix ns; naive times are read as UTC (anomaly)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # seconds (or ms) since the epoch, as some exports write
        if isinstance(value, float) and not math.isfinite(value):
            run.anomaly("bad_timestamp", {"where": where, "message": "a timestamp is not finite; ignored"}, aggregate=True)
            return None
        scale = 1_000_000 if abs(value) > 1e11 else 1_000_000_000  # ms vs s
        scaled = value * scale
        if isinstance(scaled, float) and not math.isfinite(scaled):  # 1e308 ms: beyond any float, so beyond range
            return _out_of_range(run, where)
        return parse_epoch(int(scaled), 1, run, where)
    if not isinstance(value, str) or not value.strip():
        return None
    m = _ISO.match(value.strip())
    if not m:
        run.anomaly("bad_timestamp", {"where": where, "message": "a timestamp is not RFC 3339; ignored"}, aggregate=True)
        return None
    y, mo, d, h, mi, s, frac, tz = m.groups()
    try:
        base = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s or 0), tzinfo=timezone.utc)
    except ValueError:
        run.anomaly("bad_timestamp", {"where": where, "message": "a timestamp names an impossible date; ignored"}, aggregate=True)
        return None
    ns = int((base - _EPOCH).total_seconds()) * 1_000_000_000
    if frac:
        ns += int((frac + "000000000")[:9])
    if tz is None:
        run.anomaly("naive_timestamp", {"where": where, "message": "a timestamp has no UTC offset; read as UTC"}, aggregate=True)
    elif tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        offset = int(digits[:2]) * 3600 + (int(digits[2:4]) * 60 if len(digits) >= 4 else 0)
        ns -= sign * offset * 1_000_000_000
    return ns


def ts_field(ns: int | None) -> str | None:
    return rfc3339_from_ns(ns) if ns is not None else None


# --------------------------------------------------------------------------- context


@dataclass
class ImportContext:
    """What an importer's ``parse(doc, ctx)`` gets besides the parsed document."""

    name: str
    source_sha256: str
    on_progress: Progress | None = None
    non_finite: int = 0
    duplicates: int = 0  # identical repeats skipped before any run was built (OTLP log records)

    def progress(self, stage: str, done: int, total: int) -> None:
        if self.on_progress is not None:
            self.on_progress(stage, done, total)

    def new_run(self, fmt: str, *, agent: str | None = None, original_ids: dict[str, Any] | None = None,
                labels: dict[str, str] | None = None) -> RunBuilder:
        return RunBuilder(fmt=fmt, source_file=self.name, source_sha256=self.source_sha256,
                          agent=agent or "imported", original_ids=dict(original_ids or {}), labels=dict(labels or {}))


def without_passed_on_secrets(store: Any, drafts: list[EventDraft]) -> list[EventDraft]:
    """``drafts`` (whole imported runs) as a ``redacted`` store must keep them: every string the
    store's redaction takes out of any content field of a run (or a note's ``about``) by a sensitive
    key name or a configured path, that was itself the redacted value (``sealbox.redaction.own_values``:
    at least 4 characters; not the strings inside a redacted list, such as the name in a header pair
    ``["Cookie", ["Cookie", None]]``) is replaced
    by its in-string marker wherever else the run holds it in clear — another call's arguments, a
    result, a model request, a note's text, an error's message and traceback — as the recorder does
    for a live run (docs/content-modes.md, "Values redacted earlier in the run"; an import knows the
    whole run, so an earlier event is scrubbed of a value a later one had redacted too). The parts
    the store redacts itself are left to it. ``drafts`` itself outside ``redacted`` mode or when
    no run lost anything to redaction."""
    import dataclasses

    from sealbox.canonical import MAX_DEPTH, encode, pre_encoded
    from sealbox.events import CONTENT_FIELDS
    from sealbox.redaction import own_values

    redactor = getattr(store, "redactor", None)
    if redactor is None or getattr(redactor.policy, "mode", None) != "redacted":
        return drafts

    def fields(draft: EventDraft) -> tuple[str, ...]:
        return CONTENT_FIELDS.get(draft.kind, ()) + (("about",) if draft.kind == "note" else ())

    found: dict[str, set[str]] = {}
    for draft in drafts:
        for name in fields(draft):
            if name in draft.payload:
                view = encode(draft.payload[name], max_depth=MAX_DEPTH - 3)
                if not redactor.surely_clean(view):
                    out, changed = redactor.apply(name, view)
                    if changed:  # each string that was a redacted value itself (not a header name beside it)
                        found.setdefault(draft.run_id, set()).update(own_values(view, out, keys=redactor.key_names))
    runs = {run_id: sorted(values, key=lambda v: (-len(v), v)) for run_id, values in found.items() if values}
    if not runs:
        return drafts
    out = []
    for draft in drafts:
        values = runs.get(draft.run_id)
        if not values:
            out.append(draft)
            continue
        payload = dict(draft.payload)
        for name in fields(draft):
            if name in payload:
                _, scrubbed, changed = redactor.scrub_echoes(name, encode(payload[name], max_depth=MAX_DEPTH - 3),
                                                             values, direct=True)
                if changed:
                    payload[name] = pre_encoded(scrubbed)
        if draft.kind == "note" and isinstance(payload.get("text"), str):
            payload["text"] = redactor.scrub_values(payload["text"], values)
        error = payload.get("error")
        if isinstance(error, dict):
            payload["error"] = {k: redactor.scrub_values(v, values) if isinstance(v, str) else v
                                for k, v in error.items()}
        out.append(dataclasses.replace(draft, payload=payload))
    return out
