"""OpenAI chat-completions message lists (format ``tau-bench``).

Accepted shapes:

- a list of records ``{task_id, reward, info, traj: [messages], trial}`` (tau-bench
  historical trajectories): one run per record; a record repeating an earlier one's
  ``task_id``/``trial``/``id`` with the same content is skipped (counted as a duplicate),
  with other content imported and flagged (``duplicate_record_id`` anomaly);
- a list of records with ``messages`` instead of ``traj``;
- ``{"messages": [...]}`` or a bare list of messages: one run.

Each assistant message is one ``model.call`` (step ``N``; its ``request`` holds the
messages added since the previous model call, with their ``offset`` in the list,
so a conversation resent on every turn is not stored again and again); each of its
``tool_calls`` is a ``tool.call`` at ``N.1``, ``N.2``… (parallel calls are
siblings); a ``role: tool`` message is the ``tool.result`` of the call its
``tool_call_id`` (or ``tool_call_ids`` list, as SWE-agent writes) names. The legacy
``function_call`` / ``role: function`` pair is matched by name, oldest first.
"""

from __future__ import annotations

import json
from typing import Any

from sealbox.interop.importers.common import (
    RunBuilder,
    as_dict,
    as_list,
    as_str,
    normalize_arguments,
    never_part,
    source_digest,
)

FORMAT = "tau-bench"


class ChatConverter:
    """Turns one chat-completions message list into events on a :class:`RunBuilder`."""

    def __init__(self, run: RunBuilder, *, provider: str = "openai", model: str = "unknown",
                 fmt: str = "openai.chat.message", where: str = "messages") -> None:
        self.run = run
        self.provider, self.model, self.fmt, self.where = provider, model, fmt, where
        self.pending: list[Any] = []
        self.pending_offset = 0
        self.calls: dict[str, tuple[int, tuple[int, ...], str]] = {}  # call_id -> (top, sub, tool)
        self.open: list[str] = []  # calls without a result, oldest first
        self.answered: set[str] = set()
        self.by_source: dict[str, list[str]] = {}  # call id in the source -> ids recorded (reused ids)

    def feed_all(self, messages: list[Any]) -> None:
        for i, msg in enumerate(messages):
            self.feed(i, msg)

    def feed(self, index: int, msg: Any) -> None:
        where = f"{self.where}[{index}]"
        if not isinstance(msg, dict):
            self.run.anomaly("malformed_message", {"where": where, "message": "a message is not an object; skipped"})
            return
        role = msg.get("role")
        if role == "assistant":
            self.assistant(index, msg)
        elif role == "tool":
            ids = msg.get("tool_call_ids")
            if isinstance(ids, list):
                ids = [i for i in ids if isinstance(i, str) and i]
            elif as_str(msg.get("tool_call_id")):
                ids = [msg["tool_call_id"]]
            else:
                ids = []
            self.result(index, ids, msg.get("content"), name=as_str(msg.get("name")))
            self._pend(index, msg)
        elif role == "function":
            self.result(index, [], msg.get("content"), name=as_str(msg.get("name")), legacy=True)
            self._pend(index, msg)
        else:
            if role not in ("system", "user", "developer"):
                self.run.anomaly("unknown_role", {"where": where, "role": str(role)[:64]})
            self._pend(index, msg)

    def _pend(self, index: int, msg: Any) -> None:
        if not self.pending:
            self.pending_offset = index
        self.pending.append(msg)

    def assistant(self, index: int, msg: dict[str, Any], *, response: Any = None,
                  extra_calls: list[tuple[str | None, str, Any, dict[str, Any] | None]] | None = None,
                  usage: dict[str, int] | None = None, latency_us: int | None = None) -> tuple[int, list[str]]:
        """Record one model call; returns (its top step, the call ids it requested)."""
        where = f"{self.where}[{index}]"
        top = self.run.new_step()
        requested: list[tuple[str | None, str, Any, dict[str, Any] | None]] = []
        for k, tc in enumerate(as_list(msg.get("tool_calls"))):
            tc = as_dict(tc)
            if tc.get("type") == "custom" or ("custom" in tc and "function" not in tc):
                fn = as_dict(tc.get("custom"))
                raw = fn.get("input")
            else:
                fn = as_dict(tc.get("function"))
                raw = fn.get("arguments") if "arguments" in fn else None
            if not as_str(tc.get("id")):
                self.run.anomaly("tool_call_without_id", {"where": f"{where}.tool_calls[{k}]",
                                                           "message": "a tool call has no id; one was assigned"})
            requested.append((as_str(tc.get("id")), as_str(fn.get("name")) or "unknown",
                              normalize_arguments(raw, self.run, f"{where}.tool_calls[{k}]"), None))
        legacy = msg.get("function_call")
        if isinstance(legacy, dict):
            requested.append((None, as_str(legacy.get("name")) or "unknown",
                              normalize_arguments(legacy.get("arguments"), self.run, f"{where}.function_call"), None))
        requested.extend(extra_calls or [])
        ids: list[str] = []
        for k, (cid, name, args, src) in enumerate(requested, start=1):
            if not cid:
                cid = self.run.new_call_id()
            elif cid in self.by_source:
                uses = self.by_source[cid]
                # open: requested earlier and not answered, or requested earlier in this same response
                still_open = any(u in self.open or u in ids for u in uses)
                new_id = f"{cid}#{len(uses) + 1}"
                self.run.anomaly("duplicate_tool_call_id" if still_open else "reused_tool_call_id", {
                    "where": where, "call_id": cid, "recorded_as": new_id,
                    "message": ("a call id was requested again while its first call had no result"
                                if still_open else "a call id of an earlier, answered call was used again")
                    + "; this call is recorded under a new id and results naming the id go to its oldest open call"})
                uses.append(new_id)
                ids.append(new_id)
                requested[k - 1] = (new_id, name, args, {**(src or {}), "source_call_id": cid})
                continue
            self.by_source[cid] = [cid]
            ids.append(cid)
            requested[k - 1] = (cid, name, args, src)
        request = {"offset": self.pending_offset if self.pending else index, "messages": self.pending}
        self.run.model_call(top, provider=self.provider, model=self.model, request=request,
                            response=msg if response is None else response, usage=usage, latency_us=latency_us,
                            fmt=self.fmt, tool_call_ids=ids, source={"message_index": index})
        self.pending = []
        for k, (cid, name, args, src) in enumerate(requested, start=1):
            self.run.tool_call(top, (k,), call_id=cid, tool=name, arguments=args,
                               source={"message_index": index, **(src or {})})
            self.calls[cid] = (top, (k,), name)
            self.open.append(cid)
        return top, ids

    def result(self, index: int, ids: list[str], content: Any, *, name: str | None = None, legacy: bool = False,
               ok: bool = True, duration_us: int = 0, source: dict[str, Any] | None = None) -> None:
        where = f"{self.where}[{index}]"
        if not ids:
            match = next((c for c in self.open if name is None or self.calls[c][2] == name), None)
            if match is None:
                self.run.anomaly("orphan_tool_result", {"where": where, "message": "a tool result names no call "
                                                        "and no open call matches; kept only here", "content": content})
                return
            if not legacy:
                self.run.anomaly("tool_result_without_id", {"where": where, "call_id": match,
                                                            "message": "a tool result has no call id; matched to the oldest open call"})
            ids = [match]
        for source_id in ids:
            uses = self.by_source.get(source_id, [source_id])
            open_uses = [u for u in uses if u in self.open]
            named = [u for u in open_uses if name is None or self.calls[u][2] == name]
            cid = (named or open_uses or uses)[0] if uses else source_id
            if cid not in self.calls:
                self.run.anomaly("orphan_tool_result", {"where": where, "call_id": cid,
                                                        "message": "a tool result answers a call id never requested",
                                                        "content": content})
                continue
            if cid in self.answered:
                self.run.anomaly("duplicate_tool_result", {"where": where, "call_id": cid,
                                                           "message": "a second result for the same call; the first is kept",
                                                           "content": content})
                continue
            top, sub, _ = self.calls[cid]
            self.run.tool_result(top, sub, call_id=cid, ok=ok, result=content, duration_us=duration_us,
                                 error=None if ok else {"type": "error", "message": "the source marks this call as failed"},
                                 source={"message_index": index, **(source or {})})
            self.answered.add(cid)
            if cid in self.open:
                self.open.remove(cid)


def detect(doc: Any) -> bool:
    if isinstance(doc, dict):
        return isinstance(doc.get("messages"), list) and _is_messages(doc["messages"])
    if not isinstance(doc, list) or not doc:
        return False
    first = doc[0]
    if isinstance(first, dict) and ("traj" in first or "messages" in first) and "role" not in first:
        return all(isinstance(r, dict) and isinstance(r.get("traj", r.get("messages")), list) for r in doc[:50])
    return _is_messages(doc)


def _is_messages(items: list[Any]) -> bool:
    dicts = [m for m in items[:50] if isinstance(m, dict)]
    return bool(dicts) and all("role" in m for m in dicts)


def parse(doc: Any, ctx: Any) -> list[RunBuilder]:
    from sealbox.interop.importers.common import ImportFormatError

    if isinstance(doc, dict):
        records = [{"messages": doc.get("messages"), **{k: v for k, v in doc.items() if k != "messages"}}]
    elif isinstance(doc, list) and doc and isinstance(doc[0], dict) and "role" in doc[0]:
        records = [{"messages": doc}]
    elif isinstance(doc, list):
        records = doc
    else:
        records = []
    if not records or not all(isinstance(r, dict) and isinstance(r.get("traj", r.get("messages")), list)
                              for r in records):
        raise ImportFormatError(f"{ctx.name} is not an OpenAI chat-completions message list "
                                "(expected records with a 'traj' or 'messages' list, or a list of messages)")
    runs = []
    seen: dict[str, tuple[int, set[str]]] = {}  # the record's ids -> (first record index, content digests)
    for n, record in enumerate(records):
        ctx.progress("parse", n, len(records))
        original: dict[str, Any] = {"record_index": n}
        for key in ("task_id", "trial", "id"):
            if isinstance(record.get(key), (str, int)) and not isinstance(record.get(key), bool):
                original[key] = record[key]
        ids = {k: v for k, v in original.items() if k != "record_index"}
        conflict_with = None
        if ids:  # a record with ids: the same ids and content again is skipped, other content flagged
            key = json.dumps(ids, sort_keys=True)
            digest = source_digest(record)
            first, digests = seen.setdefault(key, (n, set()))
            if digest is not None and digest in digests:
                ctx.duplicates += 1
                continue
            if digests or (digest is None and first != n):
                conflict_with = first
            if digest is not None:
                digests.add(digest)
        labels = {}
        if isinstance(record.get("reward"), (int, float)) and not isinstance(record.get("reward"), bool):
            labels["reward"] = repr(record["reward"])
        run = ctx.new_run(FORMAT, agent=as_str(record.get("agent")) or "tau-bench-agent", original_ids=original,
                          labels=labels)
        run.source_parts.append("record:" + (source_digest(record) or never_part()))
        if conflict_with is not None:
            run.anomaly("duplicate_record_id", {"ids": ids, "first_record_index": conflict_with,
                                                "message": "an earlier record has the same ids but other content; "
                                                           "both were imported"})
        model = as_str(record.get("model")) or "unknown"
        conv = ChatConverter(run, model=model, where="traj" if "traj" in record else "messages")
        conv.feed_all(record.get("traj", record.get("messages")))
        extra = {k: v for k, v in record.items() if k not in ("traj", "messages")}
        if extra:
            run.state(run.new_step(), extra, "imported:record")  # reward, ground-truth actions, ...
        runs.append(run)
    return runs
