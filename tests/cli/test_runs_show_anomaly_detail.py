"""``sealbox runs show`` says what an anomaly event is about.

Found importing an OTLP file with a span whose start time is out of range: the timeline showed the row
``anomaly`` with an empty detail column, so the reader had to go to ``--json`` to learn that it was
``bad_timestamp: a timestamp is out of range; ignored``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import sealbox

SEALBOX = str(Path(sys.executable).parent / "sealbox")

SPAN = {"traceId": "zz", "spanId": "1", "name": "x", "startTimeUnixNano": "99999999999999999999999"}


def test_an_anomaly_row_names_what_and_its_message(tmp_path):
    sealbox.init_store(tmp_path / "store").close()
    source = tmp_path / "otlp.json"
    source.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [SPAN]}]}]}))
    env = {**{k: v for k, v in os.environ.items() if k not in ("SEALBOX_DEBUG",)},
           "SEALBOX_STORE": str(tmp_path / "store"), "COLUMNS": "200"}
    imported = subprocess.run([SEALBOX, "import", str(source), "--json"], capture_output=True, text=True, env=env)
    assert imported.returncode == 0, imported.stderr
    run_id = json.loads(imported.stdout)["runs"][0]
    shown = subprocess.run([SEALBOX, "runs", "show", run_id, "--json"], capture_output=True, text=True, env=env)
    (row,) = [r for r in json.loads(shown.stdout)["events"] if r["kind"] == "anomaly"]
    assert row["detail"] == "bad_timestamp: a timestamp is out of range; ignored (span 1)"
    table = subprocess.run([SEALBOX, "runs", "show", run_id], capture_output=True, text=True, env=env)
    assert "bad_timestamp: a timestamp is out of range; ignored (span 1)" in table.stdout
