"""`sealbox approvals list --flagged`'s help said "a possible shared account" while it lists requests
with an answer carrying any flag (docs/approvals.md): a marked shared identity, several clients, an
identity that acts as an agent, one client for a quorum's approvals."""

from __future__ import annotations

import subprocess
import sys


def test_approvals_list_flagged_help_names_every_flag():
    out = subprocess.run([sys.executable, "-m", "sealbox.cli.main", "approvals", "list", "--help"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = out.stdout.split("  --flagged", 1)[1].split("\n  --run", 1)[0]  # the option's help, as wrapped
    assert "--flagged " + " ".join(text.split()) == (
        "--flagged Only requests with a counted answer carrying any flag: shared_identity (a shared account), "
        "multiple_clients (one identity, several clients), acts_as_agent (the identity is also an agent's "
        "principal), quorum_same_client (two approvers of one request, one client).")
