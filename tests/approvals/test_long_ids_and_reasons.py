"""An unknown id was echoed in full in the error message however long it was (a pasted file: one
100 KB line), and --reason had no length limit (100 KB accepted, signed and kept forever). Echoed ids
are now cut to their first 40 characters and `…`; a reason longer than 4096 characters is refused:
one `error:` line, exit 2, nothing written (the CLI), ApprovalError bad_reason (answer())."""

from __future__ import annotations

import subprocess
import sys

import pytest
from approval_helpers import policy

from sealbox.approvals import REASON_MAX_CHARS, ApprovalError, ApprovalPending, answer
from sealbox.recorder import Recorder


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True)


def _pending(store):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot", principal="agent:bot") as run:
            run.call_tool("db", "write_query", {"sql": "DELETE 1"}, lambda sql: sql)
    return info.value


def test_a_long_unknown_id_is_cut_in_messages(store, keys, tmp_path):
    long_id = "apr_" + "f" * 100_000
    for args in (("approvals", "show", long_id), ("approvals", "approve", long_id, "--reason", "ok",
                                                   "--key-file", keys["alice"])):
        out = sb(*args, "-s", store.path)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and out.stderr.startswith("error: ")
        assert len(out.stderr) < 400 and f"'{long_id[:40]}…'" in out.stderr, out.stderr[:300]
    with pytest.raises(ApprovalError) as info:
        answer(store, long_id, "approve", "ok", keys["alice"])
    assert info.value.code == "unknown_approval" and len(str(info.value)) < 400
    assert f"'{long_id[:40]}…'" in str(info.value)


def test_a_reason_over_the_limit_is_refused(store, keys, tmp_path):
    assert REASON_MAX_CHARS == 4096
    pending = _pending(store)
    before = len(list(store.read_run(pending.run_id)))
    out = sb("approvals", "approve", pending.approval_id, "--reason", "x" * 100_000, "--key-file", keys["alice"],
             "-s", store.path)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("error: ") and "4096" in out.stderr
    assert len(out.stderr) < 400
    with pytest.raises(ApprovalError) as info:
        answer(store, pending.approval_id, "approve", "x" * (REASON_MAX_CHARS + 1), keys["alice"])
    assert info.value.code == "bad_reason" and "4096" in str(info.value) and len(str(info.value)) < 400
    assert len(list(store.read_run(pending.run_id))) == before
    ok = answer(store, pending.approval_id, "approve", "y" * REASON_MAX_CHARS, keys["alice"])  # at the limit
    assert ok.status == "approved"
