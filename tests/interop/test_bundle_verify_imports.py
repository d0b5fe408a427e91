"""``sealbox verify case.sbx`` checks re-approvals with the gateway's pin state
(``sealbox.gateway.pinning``); reaching it must not import the MCP gateway server and its protocol
types (about 0.6 s of a 2-core machine's time, printed in ``took …`` of every verification)."""

from __future__ import annotations

import json
import subprocess
import sys

LOADED = ("import json, sys; import sealbox.gateway.pinning, sealbox.gateway.config, sealbox.interop.bundle_verify; "
          "print(json.dumps(sorted(m for m in ('sealbox.gateway.server', 'mcp_types', 'mcp') if m in sys.modules)))")


def test_the_pin_state_and_the_bundle_verifier_do_not_import_the_gateway_server():
    out = subprocess.run([sys.executable, "-c", LOADED], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_the_gateway_package_still_gives_its_public_names():
    code = ("import sealbox.gateway as g; from sealbox.gateway import Gateway, ENV_RUN_ID, RUN_ID_META_KEY; "
            "import sealbox.gateway.server as s; "
            "print(Gateway is s.Gateway, ENV_RUN_ID == s.ENV_RUN_ID, RUN_ID_META_KEY == s.RUN_ID_META_KEY, "
            "sorted(set(g.__all__) - set(dir(g))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "True True True []\n"
