"""``sealbox demo``: reconstruct a production incident end to end, on real parts.

1. A production system: a seeded SQLite database of customers and orders
   (:mod:`sealbox.demo.seed`) served by the real ``mcp-server-sqlite`` from PyPI,
   beside ``mcp-server-time``, each in its own cached venv (:mod:`sealbox.demo.upstreams`).
2. The governed layer: ``sealbox gateway serve`` in front of both, with a policy:
   reads allowed, ``write_query`` requires approval by the ``ops`` group, a budget
   of tool calls per run.
3. The agent: an OpenAI Agents SDK agent (:mod:`sealbox.demo.agent`) recorded
   through the Sealbox integration, which launches the gateway over stdio MCP with
   ``mcp_env(run)`` so the gateway joins the same run. It is asked to "clean up the
   test accounts".
4. The approval: the ``DELETE`` waits (the gateway holds the call); a second
   process answers with the key of the shared ``ops-oncall`` identity
   (``sealbox approvals approve``): signed, recorded, flagged as a shared account.
5. The incident: the ``DELETE``'s condition is wrong; it removes real customers.
6. The investigation, each step printed with the command a person would type.

:func:`run_drill` does all of it and returns the facts (:class:`DrillResult`)
read back from the record, so a test can assert them.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from sealbox.demo.agent import TASK, WRONG_DELETE
from sealbox.errors import SealboxError

__all__ = ["DrillError", "DrillResult", "run_drill", "replay_agent", "POLICY", "FIXED_POLICY", "APPROVER",
           "INVESTIGATION_OPTIONAL"]

APPROVER = "ops-oncall"
_PRINCIPAL = "agent:cleanup-bot"

POLICY = """\
version: 1
name: prod-db
rules:
  - id: reads-ok
    description: read-only queries and schema
    match: {server: db, tool: [read_query, list_tables, describe_table]}
    effect: allow
  - id: clock-ok
    match: {server: time}
    effect: allow
  - id: writes-need-ops
    description: every write to production needs someone from ops
    match: {server: db, tool: write_query}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 15m}
limits:
  max_tool_calls_per_run: 10
"""

#: The corrected policy for what-if: a DELETE must name the test domain exactly.
FIXED_POLICY = POLICY.replace("""  - id: writes-need-ops""", """  - id: deletes-name-the-test-domain
    description: a cleanup DELETE must target the test domain exactly, never a wildcard on 'test'
    match: {server: db, tool: write_query}
    when: 'call.arguments.query.matches("(?i)^\\\\s*delete") && !call.arguments.query.contains("@example.test")'
    effect: deny
  - id: writes-need-ops""").replace("name: prod-db", "name: prod-db-fixed")

#: Investigation steps that run only when their command exists (others are building them).
INVESTIGATION_OPTIONAL = ("export", "replay", "whatif")


class DrillError(SealboxError):
    """The drill could not run to its end (the agent's gateway stopped); the message says why."""


@dataclass
class DrillResult:
    """The facts of the incident, read back from the record and the database.

    Attributes:
        workdir: the workspace (store, database, policies, keys, reports).
        run_id: the agent's run (the gateway joined it).
        approval_id: the DELETE's approval request.
        delete_query: the exact DELETE text, as recorded in the ``tool.call``.
        affected_rows: rows the DELETE removed, as the upstream reported it.
        deleted_real: ``(id, email)`` of real customers that are gone.
        deleted_test: ids of test accounts that are gone.
        approver, signature, flags: who answered, whether the signature verified, the flags on the answer.
        wait_s: seconds between the request and the answer.
        verified: the store verified.
        delete_call_id: the DELETE's call id (the model's tool call id, sent by the SDK in ``_meta``).
        replay_run_id, replay_reproduced, replay_steps: the replay run of ``sealbox replay`` (when it
            ran) and its verdict, read from its ``run.ended``: reproduced, steps compared.
        whatif_delete: the DELETE's decision under ``fixed.yaml`` re-evaluated from the record
            (``sealbox.replay.whatif.whatif_policy``): ``(before, after, rule)``, or None when the
            what-if did not run or would not change it.
        skipped: investigation steps not run, with the reason.
        seconds: wall-clock time of the drill (upstream venvs excluded).
    """

    workdir: Path
    run_id: str
    approval_id: str | None
    delete_query: str | None
    affected_rows: int | None
    customers_before: int
    customers_after: int
    deleted_real: tuple[tuple[int, str], ...]
    deleted_test: tuple[int, ...]
    approver: str | None
    signature: str | None
    flags: tuple[str, ...]
    wait_s: float | None
    verified: bool
    final_output: str | None
    delete_call_id: str | None = None
    commands: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    replay_run_id: str | None = None
    replay_reproduced: bool | None = None
    replay_steps: int | None = None
    whatif_delete: tuple[str, str, str | None] | None = None
    seconds: float = 0.0


# ----------------------------------------------------------------------------- workspace


def _gateway_yaml(ws: Path, sqlite_cmd: str, time_cmd: str, hold_s: float) -> str:
    return f"""\
version: 1
store: ./store
policy: ./policy.yaml
principal: {_PRINCIPAL}
name: prod-gateway
limits:
  approval_hold_s: {hold_s:g}     # hold the DELETE this long for a person; then "pending, call again"
  call_timeout_s: 60
upstreams:
  - id: db
    command: {json.dumps(sqlite_cmd)}
    args: ["--db-path", {json.dumps(str(ws / 'shop.db'))}]
  - id: time
    command: {json.dumps(time_cmd)}
    args: ["--local-timezone", "UTC"]
"""


def _cli(argv: list[str], echo: Callable[[str], None]) -> str:
    """Run ``sealbox ARGV`` in this process; echo and return what it printed."""
    from sealbox.cli.main import main

    buf, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            main(argv)
    except SystemExit as exc:
        if exc.code in (130, 143):  # Ctrl-C / SIGTERM: the step cleaned up; the drill's own CLI says it, once
            raise KeyboardInterrupt from None
        sys.stderr.write(err.getvalue())
        if exc.code not in (0, None):
            echo(buf.getvalue().rstrip())
            raise RuntimeError(f"sealbox {' '.join(argv)} exited with {exc.code}") from None
    else:
        sys.stderr.write(err.getvalue())
    text = buf.getvalue().rstrip()
    if text:
        echo(text)
    return text


def _sealbox_argv() -> list[str]:
    return [sys.executable, "-m", "sealbox.cli.main"]


# ----------------------------------------------------------------------------- the approver


class _Approver(threading.Thread):
    """The on-call person: waits for the request, reads it, answers from another process."""

    def __init__(self, store_path: Path, key_file: Path, run_id: str, delay_s: float, echo: Callable[[str], None]):
        super().__init__(name="drill-approver", daemon=True)
        self.store_path, self.key_file, self.run_id, self.delay_s, self.echo = store_path, key_file, run_id, delay_s, echo
        self.stop = threading.Event()
        self.approval_id: str | None = None
        self.error: str | None = None

    def _pending(self) -> str | None:
        from sealbox.store import open_store

        store = open_store(self.store_path, readonly=True)
        try:
            for e in store.read_run(self.run_id):
                if e.kind == "approval.requested" and e.payload.get("tool") == "write_query":
                    return e.payload["approval_id"]
        finally:
            store.close()
        return None

    def run(self) -> None:
        try:
            while not self.stop.is_set() and self.approval_id is None:
                self.approval_id = self._pending()
                if self.approval_id is None:
                    self.stop.wait(0.2)
            if self.approval_id is None:
                return
            self.stop.wait(self.delay_s)  # a person reads the request before answering
            if self.stop.is_set():
                return
            argv = ["approvals", "approve", self.approval_id, "--key-file", str(self.key_file),
                    "--reason", "cleanup of test accounts, ticket OPS-1182"]
            self.echo(f"\n[approver, another terminal] $ sealbox {' '.join(_quote(a) for a in argv)}")
            env = {**os.environ, "SEALBOX_STORE": str(self.store_path)}
            done = subprocess.run(_sealbox_argv() + argv, env=env, capture_output=True, text=True, timeout=60)
            for line in (done.stdout + done.stderr).rstrip().splitlines():
                self.echo(f"[approver] {line}")
            if done.returncode != 0:
                self.error = f"approve exited with {done.returncode}: {done.stderr.strip()}"
        except Exception as exc:  # noqa: BLE001 - reported by the drill, never a silent hang
            self.error = f"{type(exc).__name__}: {exc}"


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


# ----------------------------------------------------------------------------- the agent


async def _run_agent(ws: Path, store: Any, echo: Callable[[str], None], approver_delay_s: float) -> tuple[str, Any]:
    from agents import set_tracing_disabled

    from sealbox.demo.agent import INSTRUCTIONS, MODEL_NAME
    from sealbox.policy import Policy
    from sealbox.recorder import Recorder
    from sealbox.snapshot import Snapshot

    set_tracing_disabled(True)
    policy = Policy.load(ws / "policy.yaml")
    snapshot = Snapshot(model={"provider": "scripted", "name": MODEL_NAME, "version": "1", "parameters": {}},
                        system_prompt=INSTRUCTIONS, limits={"max_tool_calls_per_run": 10}, policy=policy.fingerprint,
                        extra={"mcp": {"gateway": "sealbox gateway serve --config gateway.yaml"}})
    recorder = Recorder(store, policy=policy)
    async with recorder.run(agent="cleanup-bot", principal=_PRINCIPAL, snapshot=snapshot,
                            labels={"env": "prod", "ticket": "OPS-1182"}) as run:
        approver = _Approver(ws / "store", ws / "keys" / f"{APPROVER}.key", run.run_id, approver_delay_s, echo)
        echo("\n== 4. The approval: the DELETE waits for ops; the on-call person answers from another process "
             f"with the shared {APPROVER} key ==")
        approver.start()
        try:
            final = await _agent(run, ws / "gateway.yaml", ws)
        finally:
            approver.stop.set()
            approver.join(timeout=70)
        if approver.error:
            echo(f"[approver] error: {approver.error}")
    return run.run_id, final


async def _agent(run: Any, config: Path, cwd: Path | None) -> Any:
    """The agent's code, the same when recorded and when replayed: the scripted model, its tools
    reached through ``sealbox gateway serve --config CONFIG`` over stdio, joined to ``run``; its final output."""
    from agents import Runner
    from agents.mcp import MCPServerStdio

    from sealbox.demo.agent import CleanupModel, StateHooks, build_agent
    from sealbox.integrations.openai_agents import instrument, mcp_env, mcp_meta_resolver

    params = {"command": sys.executable, "args": ["-m", "sealbox.cli.main", "gateway", "serve", "--config",
                                                  str(config)],
              "env": mcp_env(run, {"SEALBOX_UPSTREAMS_CACHE": os.environ.get("SEALBOX_UPSTREAMS_CACHE", "")}),
              "cwd": str(cwd) if cwd is not None else None}
    # the resolver sends each call's step and call id (_meta "sealbox/step", "sealbox/call_id"):
    # the gateway records the call as "<model step>.<i>" of the model call that requested it
    try:
        async with MCPServerStdio(params=params, name="sealbox-gateway", cache_tools_list=True,
                                  client_session_timeout_seconds=120,
                                  tool_meta_resolver=mcp_meta_resolver(run)) as gateway:
            agent = build_agent(CleanupModel(), [gateway])
            result = await Runner.run(instrument(run, agent, provider="scripted"), TASK, hooks=StateHooks(run),
                                      max_turns=20)
    except Exception as exc:  # the MCP client's "unhandled errors in a TaskGroup" when the gateway exits
        if any(str(leaf) == "Connection closed" for leaf in _leaves(exc)):
            raise DrillError(f"the gateway the agent launched (sealbox gateway serve --config {config}) closed "
                             "the connection before answering; its error is printed above") from exc
        raise
    return result.final_output


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, and the causes / contexts of each."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    out, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


# ----------------------------------------------------------------------------- replay


async def replay_agent(run: Any) -> Any:
    """The drill's agent for ``sealbox replay RUN --agent sealbox.demo.drill:replay_agent``.

    The very agent code the drill recorded (:func:`_agent`: ``CleanupModel``, the same instructions,
    ``StateHooks``, ``instrument(run, agent)``, ``MCPServerStdio`` launching the gateway with
    ``mcp_env(run)`` and ``mcp_meta_resolver(run)``). In a replay the model is answered from the
    record (``SealboxModel``) and the gateway is never launched: the integration lists its tools and
    answers each call (or recorded deny) from the record (docs/integrations.md, "In a replay"), so
    no database, no gateway, no side effects; the gateway config it names need not exist.

    Raises:
        sealbox.errors.ConfigError: ``run`` is not a replay.
    """
    from agents import set_tracing_disabled

    if getattr(run, "replay", None) is None:
        from sealbox.errors import ConfigError

        raise ConfigError("replay_agent re-runs the drill's agent from a record: use it with `sealbox replay`")
    set_tracing_disabled(True)
    return await _agent(run, Path("gateway.yaml"), None)


# ----------------------------------------------------------------------------- facts


def _db_facts(db: Path) -> tuple[int, set[int]]:
    conn = sqlite3.connect(db)
    try:
        ids = {r[0] for r in conn.execute("SELECT id FROM customers")}
    finally:
        conn.close()
    return len(ids), ids


def _record_facts(store: Any, run_id: str) -> dict[str, Any]:
    from sealbox.report import build_report

    report = build_report(store, run_id)
    writes = [c for c in report.tool_calls if c.tool == "write_query"]
    delete = writes[-1] if writes else None
    approval = next((a for a in report.approvals if delete is not None and a.call_id == delete.call_id), None)
    answer = approval.answers[0] if approval and approval.answers else None
    affected = None
    if delete is not None and delete.result is not None:
        import re

        found = re.search(r"affected_rows'?\"?:\s*(\d+)", delete.result.text.replace("\\", ""))
        affected = int(found.group(1)) if found else None
    return {"report": report, "delete": delete, "approval": approval, "answer": answer, "affected": affected}


# ----------------------------------------------------------------------------- the drill


def _setup(ws: Path, echo: Callable[[str], None], hold_s: float) -> Any:
    from sealbox.demo.seed import seed_database
    from sealbox.demo.upstreams import is_built, server_command

    echo("== 1. A production system: customers and orders, served by the real mcp-server-sqlite ==")
    for name in ("sqlite", "time"):
        if not is_built(name):
            echo(f"(first run: building the {name} upstream's venv from PyPI; it is cached for next time)")
    sqlite_cmd, time_cmd = server_command("sqlite"), server_command("time")
    facts = seed_database(ws / "shop.db")
    echo(f"shop.db: {facts.customers} customers ({len(facts.test_ids)} test accounts @example.test), "
         f"{facts.orders} orders; upstreams {sqlite_cmd} and {time_cmd}")
    echo("\n== 2. The governed layer: the Sealbox gateway in front of both, with a policy ==")
    (ws / "policy.yaml").write_text(POLICY, encoding="utf-8")
    (ws / "fixed.yaml").write_text(FIXED_POLICY, encoding="utf-8")
    (ws / "gateway.yaml").write_text(_gateway_yaml(ws, sqlite_cmd, time_cmd, hold_s), encoding="utf-8")
    (ws / "keys").mkdir()
    echo("$ sealbox init store")
    _cli(["init", str(ws / "store")], lambda _t: None)
    echo("$ sealbox identities add security-admin --role admin --key-out keys/security-admin.key")
    _cli(["identities", "add", "security-admin", "--role", "admin", "--key-out", str(ws / "keys" / "security-admin.key"),
          "-s", str(ws / "store")], echo)
    echo(f"$ sealbox identities add {APPROVER} --role approver --group ops --shared --key-out keys/{APPROVER}.key "
         "--admin-key keys/security-admin.key")
    _cli(["identities", "add", APPROVER, "--role", "approver", "--group", "ops", "--shared",
          "--key-out", str(ws / "keys" / f"{APPROVER}.key"), "--admin-key", str(ws / "keys" / "security-admin.key"),
          "-s", str(ws / "store")], echo)
    echo("$ cat policy.yaml\n" + POLICY.rstrip())
    return facts


# What the drill writes in its workspace besides store/ and shop.db: a user's own file of one of
# these names in --dir is refused, never overwritten.
DRILL_WRITES = ("keys", "policy.yaml", "fixed.yaml", "gateway.yaml", "incident.html", "incident.md",
                "incident.sbx")


def run_drill(workdir: str | os.PathLike | None = None, *, echo: Callable[[str], None] = print,
              approver_delay_s: float = 2.0, hold_s: float = 45) -> DrillResult:
    """Run the whole drill in ``workdir`` (default: a new temporary folder) and return its facts.

    Args:
        workdir: the workspace folder (created; it must not hold a drill, nor a file the drill writes).
        echo: prints one chunk of output.
        approver_delay_s: how long the approver reads the request before answering.
        hold_s: the gateway's ``limits.approval_hold_s``: how long it holds the DELETE for the
            answer before replying "pending, call again" (the agent then calls again).

    Raises:
        FileExistsError: ``workdir`` already holds a drill, or a file the drill writes
            (``DRILL_WRITES``: policy.yaml, gateway.yaml, keys/, incident.*); use a new folder.
        sealbox.demo.upstreams.UpstreamBuildError: an upstream's venv could not be built.
        DrillError: the gateway the agent launched stopped before answering (its error is printed
            above, on stderr).
    """
    from sealbox.store import open_store

    # absolute: the gateway the agent launches runs in the workspace (cwd) and is given its config's
    # path; a relative --dir was looked for again under itself ('d/gateway.yaml' inside d/)
    ws = Path(os.path.abspath(workdir if workdir is not None else tempfile.mkdtemp(prefix="sealbox-drill-")))
    ws.mkdir(parents=True, exist_ok=True)
    if (ws / "store").exists() or (ws / "shop.db").exists():
        raise FileExistsError(f"{ws} already holds a drill; pass a new --dir")
    for name in DRILL_WRITES:
        if os.path.lexists(ws / name):
            raise FileExistsError(f"{ws} already holds {name}, which the drill would overwrite; "
                                  "pass a new or empty --dir")
    seed = _setup(ws, echo, hold_s)
    started = time.monotonic()
    before, before_ids = _db_facts(ws / "shop.db")
    echo(f"\n== 3. The agent (OpenAI Agents SDK, scripted model) is asked: {TASK!r} ==")
    store = open_store(ws / "store")
    try:
        run_id, final = asyncio.run(_run_agent(ws, store, echo, approver_delay_s))
    finally:
        store.close()
    echo(f"agent: {final}")
    after, after_ids = _db_facts(ws / "shop.db")
    gone = before_ids - after_ids
    test_ids = set(seed.test_ids)
    result = _result(ws, run_id, final, before, after, gone, test_ids, seed)
    echo("\n== 5. The incident ==")
    echo(f"{before - after} customers deleted: {len(result.deleted_test)} test accounts and "
         f"{len(result.deleted_real)} REAL customers: " + ", ".join(e for _, e in result.deleted_real))
    _investigate(ws, result, echo)
    _investigation_facts(ws, result)
    result.seconds = time.monotonic() - started
    echo(f"\nWorkspace: {ws}")
    from sealbox.cli.common import explore_path_prefix

    echo(f"Explore it: cd {ws} && {explore_path_prefix(' && ')}export SEALBOX_STORE=$PWD/store && "
         f"sealbox runs show {run_id}")
    opener = {"darwin": "open", "win32": "start"}.get(sys.platform, "xdg-open")  # Linux's `open` is openvt
    echo(f"            sealbox approvals list; sealbox calls --run {run_id}; {opener} incident.html")
    return result


def _result(ws: Path, run_id: str, final: Any, before: int, after: int, gone: set[int], test_ids: set[int],
            seed: Any) -> DrillResult:
    from sealbox.store import open_store

    store = open_store(ws / "store", readonly=True)
    try:
        f = _record_facts(store, run_id)
    finally:
        store.close()
    answer, approval, delete = f["answer"], f["approval"], f["delete"]
    wait = None
    if approval is not None and answer is not None:
        from datetime import datetime

        parse = lambda ts: datetime.fromisoformat(ts.replace("Z", "+00:00"))  # noqa: E731
        wait = (parse(answer.answered_at) - parse(approval.requested_at)).total_seconds()
    real = tuple((i, e) for i, e in seed.real_with_test if i in gone)
    return DrillResult(
        workdir=ws, run_id=run_id, approval_id=approval.approval_id if approval else None,
        delete_query=(delete.arguments.value or {}).get("query") if delete else None, affected_rows=f["affected"],
        customers_before=before, customers_after=after, deleted_real=real,
        deleted_test=tuple(sorted(gone & test_ids)), approver=answer.identity_name if answer else None,
        signature=answer.signature if answer else None,
        flags=tuple(fl.get("code") for fl in answer.flags) if answer else (), wait_s=wait,
        verified=bool(f["report"].verification.ok), final_output=final if isinstance(final, str) else None,
        delete_call_id=delete.call_id if delete else None)


def _investigation_facts(ws: Path, result: DrillResult) -> None:
    """The replay's verdict and the what-if's answer about the DELETE, read from the record."""
    from sealbox.store import open_store

    store = open_store(ws / "store", readonly=True)
    try:
        if any(c.startswith("sealbox replay ") for c in result.commands):
            replays = [r for r in store.runs() if r.get("replay_of") == result.run_id]
            if replays:  # newest first
                events = store.read_run(replays[0]["run_id"])
                ended = next((e.payload for e in reversed(events) if e.kind == "run.ended"), {})
                verdict = ended.get("verdict") or {}
                result.replay_run_id = replays[0]["run_id"]
                result.replay_reproduced = verdict.get("reproduced")
                result.replay_steps = verdict.get("steps_compared")
        if any(c.startswith("sealbox whatif ") for c in result.commands) and result.delete_call_id:
            from sealbox.policy import Policy
            from sealbox.replay.whatif import whatif_policy

            report = whatif_policy(store, Policy.load(ws / "fixed.yaml"), [result.run_id])
            change = next((c for c in report.changed if c.call_id == result.delete_call_id), None)
            if change is not None:
                result.whatif_delete = (change.before, change.after, change.rule_after)
    finally:
        store.close()


def _investigate(ws: Path, result: DrillResult, echo: Callable[[str], None]) -> None:
    from sealbox.cli.main import COMMANDS

    echo("\n== 6. The investigation ==")
    echo(f"$ cd {ws}")
    echo("$ export SEALBOX_STORE=$PWD/store")
    run = result.run_id
    steps: list[tuple[str, list[str]]] = [
        ("runs", ["runs", "show", run]),
        ("calls", ["calls", "--tool", "write_query"]),
        ("approvals", ["approvals", "show", result.approval_id] if result.approval_id else []),
        ("report", ["report", run, "-o", "incident.html"]),
        ("report", ["report", run, "-o", "incident.md"]),
        ("export", ["export", run, "-o", "incident.sbx"]),
        ("export", ["verify", "incident.sbx", "--key", "store/log.vkey"]),  # the log's key, never the bundle's own
        ("replay", ["replay", run, "--agent", "sealbox.demo.drill:replay_agent"]),
        ("whatif", ["whatif", "--policy", "fixed.yaml", run]),
    ]
    old_cwd, old_store = os.getcwd(), os.environ.get("SEALBOX_STORE")
    os.chdir(ws)
    os.environ["SEALBOX_STORE"] = str(ws / "store")
    try:
        for needs, argv in steps:
            if not argv:
                continue
            if needs not in COMMANDS:
                result.skipped[" ".join(argv[:2])] = f"`sealbox {needs}` does not exist in this build yet"
                continue
            cmd = "sealbox " + " ".join(_quote(a) for a in argv)
            echo(f"\n$ {cmd}")
            result.commands.append(cmd)
            try:
                _cli(argv, echo)
            except Exception as exc:  # noqa: BLE001 - one failing step is reported; the others still run
                result.skipped[" ".join(argv[:2])] = f"failed: {exc}"
                echo(f"(this step failed: {exc})")
    finally:
        os.chdir(old_cwd)
        if old_store is None:
            os.environ.pop("SEALBOX_STORE", None)
        else:
            os.environ["SEALBOX_STORE"] = old_store
    for step, why in result.skipped.items():
        echo(f"(not run: sealbox {step}: {why})")

