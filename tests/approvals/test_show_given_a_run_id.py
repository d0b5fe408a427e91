"""`sealbox approvals show RUN` (a run id pasted where an approval id goes, as `runs list` and `calls` show
run ids first) said "no approval request 'RUN' in this store", as for a typo. It now says the id is a run's
and names the command that lists that run's approvals."""

from __future__ import annotations

import subprocess
import sys

import pytest
from approval_helpers import policy

from sealbox.approvals import ApprovalPending
from sealbox.recorder import Recorder


def sb(*args):
    return subprocess.run([sys.executable, "-m", "sealbox.cli.main", *map(str, args)], capture_output=True, text=True)


def test_show_of_a_run_id_names_the_listing_of_its_approvals(store):
    with pytest.raises(ApprovalPending):
        with Recorder(store, policy=policy(), approvals="suspend").run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda sql: "ran")
    run_id = run.run_id
    store.close()
    for given in (run_id, run_id[:13]):
        proc = sb("approvals", "show", given, "-s", store.path)
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr == (f"error: {given!r} is a run, not an approval request: `sealbox approvals list --run "
                               f"{run_id}` lists its approvals\n")
    proc = sb("approvals", "show", "apr_0123456789", "-s", store.path)  # an unknown approval id: as before
    assert (proc.returncode, proc.stderr) == (2, "error: no approval request 'apr_0123456789' in this store\n")
