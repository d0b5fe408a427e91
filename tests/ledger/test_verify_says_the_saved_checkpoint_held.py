"""``sealbox verify STORE --checkpoint FILE`` says that the saved checkpoint was reproduced.

Regression (found by following the README's ``sealbox verify --key … --checkpoint saved-checkpoint.txt``):
a store whose events reproduce the saved checkpoint printed exactly what ``sealbox verify`` prints
without ``--checkpoint`` (text and ``--json``), so the investigator could not tell that the file had
been checked at all, let alone at which size and root; a bundle's verify says "The bundle's log
extends …".
"""

from __future__ import annotations

import json


import sealbox
from sealbox.cli.main import main
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


def _run(capsys, *args):
    code = 0
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        code = exc.code or 0
    out, err = capsys.readouterr()
    return code, out, err


def test_a_saved_checkpoint_that_the_events_reproduce_is_named_in_the_verdict(tmp_path, capsys):
    path = tmp_path / "store"
    store = sealbox.init_store(path)
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="bot") as run:
        run.call_tool("db", "read_query", {"query": "SELECT 1"}, lambda **_: [[1]])
    store.close()
    code, saved_text, _ = _run(capsys, "log", "checkpoint", "-s", path)
    assert code == 0
    saved = tmp_path / "saved-checkpoint.txt"
    saved.write_text(saved_text)
    size, root_b64 = int(saved_text.splitlines()[1]), saved_text.splitlines()[2]
    import base64
    root = "sha256:" + base64.b64decode(root_b64).hex()
    store = sealbox.open_store(path)
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:  # the log grows past the saved size
        run.call_tool("db", "read_query", {"query": "SELECT 2"}, lambda **_: [[2]])
    store.close()

    code, out, err = _run(capsys, "verify", path, "--checkpoint", saved)
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[0].startswith("Verified: the log is intact.")
    assert lines[1:] == [f"The log extends the checkpoint given in {saved} (size {size}, root {root}): "
                         "the events reproduce its signed root."]
    code, out, _ = _run(capsys, "verify", path, "--checkpoint", saved, "--json")
    assert json.loads(out)["extends"] == [{"checkpoint": f"the checkpoint given in {saved}", "size": size,
                                           "root": root}]
    # without --checkpoint, no such line
    code, out, _ = _run(capsys, "verify", path)
    assert "The log extends" not in out
