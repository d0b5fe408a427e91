"""``sealbox snapshot diff`` (and a replay's configuration check, which uses the same
:func:`sealbox.snapshot.diff_snapshots`) of snapshots pinning many knowledge documents or tools.

The keys that tell apart entries sharing a URI or ``server/name`` were found with ``keys.count(k)``
for every key: quadratic. Two snapshots of an agent pinning 50,000 documents of its retrieval corpus
(one changed) took minutes to diff (20,000: 85 s on a 2-core VM), so an investigator's
``snapshot diff`` looked hung. Now it is linear. The bound below is not a timing measurement: the
fixed code takes a few seconds even on a loaded VM, the old one many minutes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = r"""
import json, sys
from sealbox.snapshot import Knowledge, Snapshot, ToolSpec, diff_snapshots

n = 50_000
def snap(changed):
    return Snapshot(
        model={"name": "m"},
        knowledge=tuple(Knowledge.from_bytes(f"corpus/doc{i}.md", b"v2" if i == changed else str(i).encode())
                        for i in range(n)),
        tools=tuple(ToolSpec("db", f"t{i}", version="2" if i == changed else "1") for i in range(n)),
    ).to_dict()
a, b = snap(-1), snap(4321)
print(json.dumps([d.to_dict() for d in diff_snapshots(a, b)]))
"""


def test_snapshots_with_50000_documents_and_tools_are_diffed_without_a_quadratic_pass():
    try:
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("diff_snapshots of two 50,000-entry snapshots did not finish in 120 s")
    assert out.returncode == 0, out.stderr
    diffs = json.loads(out.stdout)
    assert [(d["path"], d["change"]) for d in diffs] == [
        ('knowledge["corpus/doc4321.md"].content_hash', "changed"),
        ('knowledge["corpus/doc4321.md"].size', "changed"),
        ("tools.db/t4321.version", "changed")]
    assert diffs[2]["a"] == "1" and diffs[2]["b"] == "2"


def test_entries_sharing_a_key_are_still_told_apart():
    from sealbox.snapshot import Knowledge, ToolSpec, Snapshot, diff_snapshots

    a = Snapshot(model={}, tools=(ToolSpec("db", "q", version="1"), ToolSpec("db", "q", version="2")),
                 knowledge=(Knowledge.from_bytes("k", b"1"), Knowledge.from_bytes("k", b"1"))).to_dict()
    b = Snapshot(model={}, tools=(ToolSpec("db", "q", version="1"), ToolSpec("db", "q", version="3")),
                 knowledge=(Knowledge.from_bytes("k", b"1"),)).to_dict()
    assert [(d.path, d.change) for d in diff_snapshots(a, b)] == [
        ("knowledge.k@sha256:6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b#2", "removed"), ("tools.db/q@2", "removed"), ("tools.db/q@3", "added")]
