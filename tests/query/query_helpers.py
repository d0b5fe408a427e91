"""Helpers for query tests: a store recorded with the real Recorder, under a real policy.

Every call has a fixed call id, so tests assert exact sets of call ids. The
layout (who called what, what was decided, what happened):

=========  ===============  ===============  =========================  ========  ==========
run        agent            principal        call id: server/tool       decision  outcome
=========  ===============  ===============  =========================  ========  ==========
A          support-bot      agent:support    a1: db/read_query          allow     ok
(env=prod, snapshot S1)                      a2: db/read_query (DELETE) allow     ok
                                             a3: db/write_query         deny      not run
                                             a4: db/read_rows           allow     ValueError
B          billing-bot      agent:billing    b1: search/web_search      allow     ok
(child of A, env=staging,                    b2: fs/read_file           allow     PermissionError
 snapshot S2)                                b3: fs/delete_file         deny      not run (no rule)
                                             b4: db/read_query (blob)   allow     ok, result a blob
C          support-bot      agent:support    c1: search/news_search     allow     ok    (run ends in error)
(env=prod, team=red)
D          ops-bot          agent:ops        d1: http/fetch             require_approval (appended as
(running)                                                               a gateway would); no result
E          ops-bot          agent:ops        (none)                     (run cancelled)
F          ops-bot          agent:ops        (none)                     (run suspended)
=========  ===============  ===============  =========================  ========  ==========
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from sealbox import EventDraft, init_store, open_store
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied
from sealbox.snapshot import Snapshot, ToolSpec

POLICY = """
version: 1
name: query-tests
rules:
  - id: reads
    match: {tool: "read_*"}
    effect: allow
  - id: search
    match: {server: search}
    effect: allow
  - id: no-writes
    match: {tool: "write_*"}
    effect: deny
  - id: fetch-needs-ops
    match: {server: http}
    effect: require_approval
    approval: {groups: [ops]}
"""

#: More than 512 bytes: stored as a blob, not inline in the event.
BIG_TEXT = "lorem ipsum " * 80 + "needle-7731 " + "dolor sit amet " * 20
ALL_CALLS = {"a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4", "c1", "d1"}

SNAP1 = Snapshot(model={"provider": "openai", "name": "gpt-4o", "version": "2024-08-06", "parameters": {"temperature": 0}},
                 system_prompt="You answer support tickets.", tools=(ToolSpec("db", "read_query", "Run SQL"),),
                 limits={"max_tool_calls": 20})
SNAP2 = Snapshot(model={"provider": "openai", "name": "gpt-4o", "version": "2024-08-06", "parameters": {"temperature": 0.7}},
                 system_prompt="You answer support tickets.",
                 tools=(ToolSpec("db", "read_query", "Run SQL"), ToolSpec("fs", "read_file", "Read a file")),
                 limits={})

SEALBOX = str(Path(sys.executable).parent / "sealbox")


@dataclass
class Recorded:
    """The recorded store and what a test needs to know about it."""

    path: Path
    runs: dict[str, str] = field(default_factory=dict)  # letter -> run id
    ts: dict[str, str] = field(default_factory=dict)  # call id -> ts of its tool.call
    snapshots: dict[str, str] = field(default_factory=dict)  # S1/S2 -> fingerprint

    def open(self):
        return open_store(self.path, readonly=True)


def _ok(**kwargs):
    return {"rows": [[1, "open"]], "echo": kwargs}


def _raise(exc: BaseException):
    def fn(**_kwargs):
        raise exc
    return fn


def _call(run, call_id: str, server: str, tool: str, args, fn=_ok) -> None:
    try:
        run.call_tool(server, tool, args, fn, call_id=call_id)
    except ToolDenied:
        pass
    except (ValueError, PermissionError):
        pass


def record(path: Path, **backend) -> Recorded:
    """Record the runs described in the module docstring into a new store at ``path`` (``backend``:
    ``postgres_url=URL, schema=NAME`` for a PostgreSQL store)."""
    store = init_store(path, **backend)
    rec = Recorder(store, policy=Policy.from_text(POLICY))
    out = Recorded(path)
    with rec.run(agent="support-bot", principal="agent:support", labels={"env": "prod"}, snapshot=SNAP1) as a:
        out.runs["A"] = a.run_id
        _call(a, "a1", "db", "read_query", {"query": "SELECT id FROM orders WHERE status = 'open'"})
        _call(a, "a2", "db", "read_query", {"query": "delete from orders where id = 7 -- why is this a read?"})
        _call(a, "a3", "db", "write_query", {"query": "DELETE FROM users"})
        _call(a, "a4", "db", "read_rows", {"table": "orders", "limit": 5}, _raise(ValueError("table orders is locked")))
        with rec.run(agent="billing-bot", principal="agent:billing", labels={"env": "staging"}, snapshot=SNAP2,
                     parent_run_id=a.run_id) as b:
            out.runs["B"] = b.run_id
            _call(b, "b1", "search", "web_search", {"q": "refund policy", "tags": ["billing", "refunds"]})
            _call(b, "b2", "fs", "read_file", {"path": "/etc/shadow"}, _raise(PermissionError("denied by the OS")))
            _call(b, "b3", "fs", "delete_file", {"path": "/tmp/x"})
            _call(b, "b4", "db", "read_query", {"query": "SELECT note FROM notes", "text": BIG_TEXT},
                  lambda **kw: {"text": "result " * 100 + "secret-result-42"})
    try:
        with rec.run(agent="support-bot", principal="agent:support", labels={"env": "prod", "team": "red"}) as c:
            out.runs["C"] = c.run_id
            _call(c, "c1", "search", "news_search", {"q": "outage"})
            raise RuntimeError("the agent gave up")
    except RuntimeError:
        pass
    d = rec.run(agent="ops-bot", principal="agent:ops").start()  # still running: never ended
    out.runs["D"] = d.run_id
    store.append([  # what a gateway writes for a call held for approval
        EventDraft("tool.call", {"call_id": "d1", "server": "http", "tool": "fetch", "exposed": "http.fetch",
                                 "arguments": {"url": "https://example.org/"}, "grant": "implicit:agent:ops"},
                   run_id=d.run_id, principal="agent:ops", step="2"),
        EventDraft("policy.decision", {"call_id": "d1", "server": "http", "tool": "fetch", "effect": "require_approval",
                                       "reason_code": "approval_required", "rule": "fetch-needs-ops",
                                       "reason": "rule fetch-needs-ops requires approval",
                                       "policy_fingerprint": rec.policy.fingerprint, "eval_us": 10},
                   run_id=d.run_id, principal="agent:ops", step="2"),
    ])
    try:
        with rec.run(agent="ops-bot", principal="agent:ops") as e:
            out.runs["E"] = e.run_id
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    f = rec.run(agent="ops-bot", principal="agent:ops").start()
    out.runs["F"] = f.run_id
    store.append(EventDraft("run.suspended", {"approval_ids": ["ap-1"], "reason": "waiting for ops"},
                            run_id=f.run_id, principal="agent:ops"))
    for run_id in out.runs.values():
        for ev in store.read_run(run_id):
            if ev.kind == "tool.call":
                out.ts[ev.payload["call_id"]] = ev.ts
    out.snapshots = {"S1": SNAP1.fingerprint, "S2": SNAP2.fingerprint}
    store.close()
    return out


def ids(rows) -> list[str]:
    """Call ids of query rows, in order."""
    return [r["call_id"] for r in rows]


def sealbox(*args: str) -> subprocess.CompletedProcess:
    """Run the real ``sealbox`` command."""
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    return subprocess.run([SEALBOX, *args], capture_output=True, text=True, env={**env, "COLUMNS": "250"})
