"""A store with runs holding blobs, list chains, an approval and a snapshot, and bundle helpers."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from pathlib import Path

import sealbox
from sealbox.approvals import answer, list_approvals
from sealbox.identities import add_identity
from identity_testkit import admin_key
from sealbox.policy import Policy
from sealbox.recorder import Recorder, ToolDenied

POLICY = textwrap.dedent("""
    version: 1
    rules:
      - id: writes-need-ops
        match: {tool: write_query}
        effect: require_approval
        approval: {groups: [ops], quorum: 1, expires: 1h}
      - id: reads
        match: {tool: read_query}
        effect: allow
      - id: no-drops
        match: {tool: drop_table}
        effect: deny
""")

SNAPSHOT = {"model": {"provider": "openai", "name": "gpt-4o", "version": "2024-08-06", "parameters": {}},
            "system_prompt": "You are a careful DBA.", "knowledge": [], "skills": [], "tools": [], "limits": {},
            "policy": None}

BIG_ROWS = {"rows": [f"row {i} " + "x" * 90 for i in range(12)]}  # > 512 B: a list chain
BIG_RESULT = "r" * 900  # > 512 B: a blob


def _approver(store, key_path):
    def work():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for s in list_approvals(store, pending=True):
                answer(store, s.approval_id, "approve", "reviewed", key_path)
                return
            time.sleep(0.02)
    t = threading.Thread(target=work)
    t.start()
    return t


def record_runs(folder: Path):
    """Two runs of agent ``dba`` (the first with a snapshot, blobs, a chain, an approval
    and a denied call) and one of agent ``other``. Returns (store path, run ids, alice's key)."""
    store = sealbox.init_store(folder / "store")
    key = add_identity(store, "alice", "approver", ["ops"], key_path=folder / "alice.key",
                       admin_key=admin_key(store, folder)).key_path
    rec = Recorder(store, policy=Policy.from_text(POLICY), approvals="block", approval_poll=0.02)
    t = _approver(store, key)
    with rec.run(agent="dba", snapshot=SNAPSHOT) as run:
        run.call_tool("db", "read_query", BIG_ROWS, lambda rows: BIG_RESULT)
        run.call_tool("db", "write_query", {"sql": "UPDATE t SET a = 1"}, lambda sql: "1 row")
        try:
            run.call_tool("db", "drop_table", {"name": "t"}, lambda name: "dropped")
        except ToolDenied:
            pass
    t.join()
    with rec.run(agent="dba") as run2:
        run2.call_tool("db", "read_query", {"rows": ["small"]}, lambda rows: "ok")
    def boom(rows):
        raise ValueError("boom")
    try:
        with rec.run(agent="other") as run3:
            run3.call_tool("db", "read_query", {"rows": []}, boom)
    except ValueError:
        pass
    store.close()
    return folder / "store", (run.run_id, run2.run_id, run3.run_id), key


def cli(*args, cwd, env_extra=None):
    """Run ``python -m sealbox.cli.main`` in a subprocess; returns (code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_STORE"}
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def rezip(path: Path, new: dict[str, bytes]) -> None:
    """Rewrite the bundle with the given members, in the canonical container (as an attacker would)."""
    from sealbox.interop.bundle import zip_bytes

    path.write_bytes(zip_bytes(list(new.items())))


def python_zip(new: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, data in new.items():
            z.writestr(name, data)
    return buf.getvalue()


def rebuild_manifest(m: dict[str, bytes]) -> None:
    """Recompute ``manifest.json`` from the other members with the module's own functions (as an attacker would)."""
    import json as _json

    from sealbox.events import SYSTEM_RUN_ID
    from sealbox.interop.bundle import DIGESTED, FORMATS, MEMBERS, export_digest, manifest_bytes, run_entries
    from sealbox.ledger.checkpoint import Checkpoint, parse_note

    cp = Checkpoint.parse(parse_note(m["checkpoint"].decode()).text)
    envs = [(d["leaf_index"], d["event"]) for d in map(_json.loads, m["events.jsonl"].splitlines())]
    blobs = [_json.loads(line) for line in m["blobs.jsonl"].splitlines()]
    m["manifest.json"] = manifest_bytes(
        origin=cp.origin, size=cp.size, root=cp.root, runs=run_entries(envs),
        system_events=sum(1 for _, e in envs if e["run_id"] == SYSTEM_RUN_ID), blobs=len(blobs),
        erased=sum(1 for b in blobs if b["content"] is None), snapshots=len(m["snapshots.jsonl"].splitlines()),
        members=[(n, m[n]) for n in MEMBERS[2:]], digest=export_digest([(n, m[n]) for n in DIGESTED]),
        **({"format": m["format"].decode().rstrip("\n")} if m["format"] in FORMATS else {}))
