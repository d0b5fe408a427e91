"""``runs show --csv`` (the ``args=`` of a tool.call's ``detail``) and ``snapshot diff --csv`` (``a``, ``b``)
write values of any JSON type as their canonical JSON (RFC 8785), as ``calls --csv`` writes ``arguments``:
a JSON string that spells an object and that object, or the string ``"5"`` and the number 5, differ."""

from __future__ import annotations

import json
import os
import subprocess

from query_helpers import SEALBOX

import sealbox
from sealbox import EventDraft, init_store
from sealbox.snapshot import Snapshot

FP = "sha256:" + "ab" * 32
ENV = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}


def _run(*args: str) -> bytes:
    return subprocess.run([SEALBOX, *args], capture_output=True, env=ENV, check=True).stdout


def test_runs_show_csv_detail_holds_canonical_arguments(tmp_path):
    store = init_store(tmp_path / "s")
    run = "run-1"
    store.append(EventDraft("run.started", {"agent": "bot", "snapshot": None, "parent_run_id": None, "labels": {},
                                            "policy": {"fingerprint": FP, "name": "t"}}, run_id=run, principal="agent:bot"))
    values = ['{"a":1}', {"a": 1}, "5", 5, None, 1.0, {"b": "é\u0001", "a": [1.5]}]
    for i, value in enumerate(values):
        store.append(EventDraft("tool.call", {"call_id": f"c{i}", "server": "db", "tool": "q", "exposed": "db__q",
                                              "arguments": value, "grant": "g"}, run_id=run, principal="agent:bot"))
    store.close()
    events = json.loads(_run("runs", "show", run, "-s", str(tmp_path / "s"), "--json"))["events"]
    out = _run("runs", "show", run, "-s", str(tmp_path / "s"), "--csv").decode("utf-8")
    details = [
        '"db/q call c0 args=""{\\""a\\"":1}"""',   # the string {"a":1}
        '"db/q call c1 args={""a"":1}"',           # the object (was {"a": 1}, with a space)
        '"db/q call c2 args=""5"""',
        "db/q call c3 args=5",
        "db/q call c4 args=null",
        "db/q call c5 args=1",                     # canonical: 1.0 is 1
        '"db/q call c6 args={""a"":[1.5],""b"":""é\\u0001""}"',  # keys sorted, no spaces
    ]
    expected = ("run_seq,step,ts,kind,principal,tool,decision,duration_us,detail\r\n"
                f"1,1,{events[0]['ts']},run.started,agent:bot,,,,agent bot\r\n" + "".join(
                    f"{i + 2},{i + 2},{e['ts']},tool.call,agent:bot,db/q,,,{d}\r\n"
                    for i, (e, d) in enumerate(zip(events[1:], details))))
    assert out == expected


def test_snapshot_diff_csv_cells_are_canonical_json(tmp_path):
    store = sealbox.init_store(tmp_path / "store")
    a = Snapshot(extra={"v": '{"a":1}', "n": "5", "s": "=1+1", "gone": "x", "t": "text", "z": None})
    b = Snapshot(extra={"v": {"a": 1}, "n": 5, "s": -2, "new": "", "t": "text!", "z": [1]})
    fps = []
    rec = sealbox.Recorder(store, policy=sealbox.policies.ALLOW_ALL)
    for snap in (a, b):
        with rec.run(agent="snap", snapshot=snap) as run:
            pass
        fps.append(next(r["snapshot"] for r in store.query_runs() if r["run_id"] == run.run_id))
    store.close()
    out = _run("snapshot", "diff", "-s", str(tmp_path / "store"), *fps, "--csv").decode("utf-8")
    assert out == (
        "path,change,a,b\r\n"
        'extra.gone,removed,"""x""",\r\n'
        'extra.n,changed,"""5""",5\r\n'                  # the string 5, the number 5 (were both 5)
        'extra.new,added,,""""""\r\n'                    # absent, the empty string
        'extra.s,changed,"""=1+1""",-2\r\n'
        'extra.t,changed,"""text""","""text!"""\r\n'
        'extra.v,changed,"""{\\""a\\"":1}""","{""a"":1}"\r\n'  # the string, the object (were both {"a": 1})
        'extra.z,changed,,[1]\r\n')                    # null, a list
