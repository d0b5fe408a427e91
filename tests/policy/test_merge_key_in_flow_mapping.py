"""A YAML merge key inside a flow mapping (``labels: {<<: {env: prod}}``, or ``<<: *base`` there) made
``sealbox policy check`` end with ``error: internal error: TypeError: 'NoneType' object is not
subscriptable``: ruamel keeps no line for a merged key of a flow mapping (``None``, not a ``KeyError``).
Such a file now loads as any merge does, a merged key taking the mapping's line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from policy_helpers import call, load

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def test_a_merge_key_in_a_flow_mapping_loads(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: prod-only
            match: {labels: {<<: {env: prod}}}
            effect: allow
    """)
    assert policy.to_dict()["rules"][0]["match"]["labels"] == {"env": ["prod"]}
    assert policy.evaluate(call(tool="x")).rule == "prod-only"


def test_a_wrong_type_merged_into_a_flow_mapping_is_one_line_at_the_mapping(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nbase: &b {quorum: 'x'}\nrules:\n  - id: a\n    effect: allow\n"
                    "    match: {labels: {<<: *b}}\n")
    done = subprocess.run([SEALBOX, "policy", "check", str(path)], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: {path}:2: ")
    assert "internal error" not in done.stderr
