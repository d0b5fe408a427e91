"""Loading a policy does not import the CEL package's command-line tool (typer, prompt_toolkit, pygments)."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent

HEAVY = ("typer", "prompt_toolkit", "pygments", "cel.cli")


def test_a_policy_loads_and_decides_without_the_cel_command_line_tool(tmp_path):
    policy = tmp_path / "p.yaml"
    policy.write_text("""
version: 1
name: imports
rules:
  - id: small
    effect: allow
    match: {server: db, tool: read}
    when: "call.arguments.n < 3"
""")
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r})\n"
            "from policy_helpers import call\n"
            "from sealbox.policy import Policy\n"
            f"p = Policy.load({str(policy)!r})\n"
            "for n in (2, 3):\n"
            "    d = p.evaluate(call('read', arguments={'n': n}))\n"
            "    print(d.effect, d.reason_code, d.rule)\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stderr == ""
    assert out.stdout == "allow policy_allow small\ndeny no_match None\n[]\n"


def test_import_cel_after_sealbox_gives_the_same_engine():
    """A user's ``import cel`` after sealbox loaded the engine sees the same classes (one extension module)."""
    code = ("import sealbox.policy.conditions as c, cel\n"
            "print(cel.Context is c.cel.Context, cel.compile is c.cel.compile,"
            " cel.evaluate('1 + 2', {}), c.cel.compile('x * 2').execute(cel.Context({'x': 21})))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stderr == ""
    assert out.stdout == "True True 3 42\n"
