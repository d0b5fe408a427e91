"""``sealbox calls --csv``: the ``arguments`` cell is the value's canonical JSON (RFC 8785), so a JSON
string that looks like an object (``"{\"a\":1}"``) and the object ``{"a":1}`` are told apart."""

from __future__ import annotations

import json
import os
import subprocess

from query_helpers import SEALBOX

from sealbox import EventDraft, init_store

FP = "sha256:" + "ab" * 32
HEADER = ("ts,run_id,agent,principal,step,call_id,server,tool,exposed,grant,arguments,decision,rule,reason_code,"
          "outcome,ok,error,duration_us,approvers,flags\r\n")


def _call(run: str, call_id: str, arguments) -> list[EventDraft]:
    return [
        EventDraft("tool.call", {"call_id": call_id, "server": "db", "tool": "q", "exposed": "db__q",
                                 "arguments": arguments, "grant": "g"}, run_id=run, principal="agent:bot"),
        EventDraft("policy.decision", {"call_id": call_id, "effect": "deny", "reason_code": "policy_deny", "rule": "r",
                                       "reason": "no", "policy_fingerprint": FP, "eval_us": 1},
                   run_id=run, principal="agent:bot"),
    ]


def test_a_json_string_and_the_object_it_spells_are_different_csv_cells(tmp_path):
    store = init_store(tmp_path / "s")
    run = "run-1"
    store.append(EventDraft("run.started", {"agent": "bot", "snapshot": None, "parent_run_id": None, "labels": {},
                                            "policy": {"fingerprint": FP, "name": "t"}}, run_id=run, principal="agent:bot"))
    values = ['{"a":1}', {"a": 1}, "plain", "", None, 5, -2, True, ["x", 1], "=1+1", "\"quoted\"", {"b": "é\u0001", "a": [1.5]}]
    for i, value in enumerate(values):
        store.append(_call(run, f"c{i}", value))
    store.close()
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    listed = json.loads(subprocess.run([SEALBOX, "calls", "-s", str(tmp_path / "s"), "--json"], capture_output=True,
                                       env=env, check=True).stdout)
    assert [r["arguments"] for r in listed] == values
    assert [r["step"] for r in listed] == [str(2 + 2 * i) for i in range(len(values))]
    out = subprocess.run([SEALBOX, "calls", "-s", str(tmp_path / "s"), "--csv"], capture_output=True, env=env, check=True).stdout
    cells = [
        '"""{\\""a\\"":1}"""',      # the string {"a":1}: "{\"a\":1}" in JSON, its quotes doubled by CSV
        '"{""a"":1}"',              # the object {"a":1}
        '"""plain"""',
        '""""""',                   # the empty string: "" (an empty cell is null)
        "",
        "5",
        "-2",                       # a number, not a formula
        "true",
        '"[""x"",1]"',
        '"""=1+1"""',               # a string starts with its quote: no spreadsheet formula
        '"""\\""quoted\\"""""',
        '"{""a"":[1.5],""b"":""é\\u0001""}"',  # canonical: keys sorted, no spaces, controls escaped
    ]
    expected = HEADER + "".join(
        f"{r['ts']},{run},bot,agent:bot,{r['step']},c{i},db,q,db__q,g,{cell},deny,r,policy_deny,not_run,,,,[],[]\r\n"
        for i, (r, cell) in enumerate(zip(listed, cells)))
    assert out.decode("utf-8") == expected
