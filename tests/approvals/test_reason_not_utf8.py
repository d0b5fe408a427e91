"""A --reason holding bytes that are not UTF-8 (a terminal in Latin-1, a pasted binary) is refused
as such, before anything is read or written: one `error:` line naming --reason, exit 2. It used to
fail deep in the canonical encoder with "a string or key contains a lone surrogate (I-JSON, RFC 7493
§2.1)", naming neither the option nor the fix; answer() refuses such a reason as bad_reason."""

from __future__ import annotations

import subprocess
import sys

import pytest
from approval_helpers import policy

from sealbox.approvals import ApprovalError, ApprovalPending, answer
from sealbox.recorder import Recorder


def _pending(store):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot", principal="agent:bot") as run:
            run.call_tool("db", "write_query", {"sql": "DELETE 1"}, lambda sql: sql)
    return info.value


def test_cli_refuses_a_reason_that_is_not_utf8(store, keys, tmp_path):
    pending = _pending(store)
    before = len(list(store.read_run(pending.run_id)))
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "approvals", "approve", pending.approval_id,
                          "--reason", b"ok \xff\xfe ticket", "--key-file", str(keys["alice"]),
                          "-s", str(tmp_path / "store")], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: ")
    assert "--reason" in out.stderr and "UTF-8" in out.stderr
    assert len(list(store.read_run(pending.run_id))) == before


def test_answer_refuses_a_reason_with_a_lone_surrogate(store, keys):
    pending = _pending(store)
    with pytest.raises(ApprovalError) as info:
        answer(store, pending.approval_id, "approve", "ok \udcff ticket", keys["alice"])
    assert info.value.code == "bad_reason"
    assert "UTF-8" in str(info.value)
    assert [e.kind for e in store.read_run(pending.run_id)][-1] == "run.suspended"
