"""``Policy.evaluate`` never raises, and fails closed. Arguments nested 10,000 lists deep (small enough for
``max_input_bytes``) given to a condition that reads them crashed the whole process with a segmentation
fault while the CEL library converted them. Arguments nested deeper than canonical JSON allows (128
levels, which a recorded call never exceeds: the recorder encodes deeper values as lossy) are now denied
``guardrail_error`` before any conversion. Run in a child process: the crash would take pytest with it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import sys
sys.path.insert(0, {helpers!r})
from policy_helpers import call
from sealbox.policy import Policy
policy = Policy.from_text("version: 1\\nrules:\\n  - id: r\\n    when: 'has(call.arguments.a)'\\n    effect: allow\\n")
value = 1
for _ in range({depth}):
    value = [value]
d = policy.evaluate(call(arguments={{"a": value}}))
print(d.effect, d.reason_code, d.rule)
print(d.reason)
"""


@pytest.mark.parametrize("depth, out", [
    (10_000, "deny guardrail_error r\nrule 'r': arguments nest lists or mappings more than 128 levels deep\n"),
    (126, "allow policy_allow r\nrule 'r' allows the call (condition true: has(call.arguments.a))\n"),
])
def test_deeply_nested_arguments_are_denied_not_a_crash(depth, out):
    helpers = str(Path(__file__).resolve().parent)
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(helpers=helpers, depth=depth)],
                          capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout) == (0, out), done.stderr[-500:]
