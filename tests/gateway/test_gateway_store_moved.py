"""The store's folder renamed while the gateway serves a session: the next tools/call is refused with
the store's reason and never reaches the upstream (no record, no action); the moved store holds the
calls made before, and verifies."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox.gateway import Gateway

from .conftest import connect, running, text_of, toy_config, toy_log

pytestmark = pytest.mark.anyio


async def test_a_call_after_the_store_folder_was_renamed_never_reaches_the_upstream(tmp_path, request):
    sealbox.init_store(tmp_path / "store").close()
    store = sealbox.open_store(tmp_path / "store")
    request.addfinalizer(store.close)
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg) as client:
            assert text_of(await client.call_tool("toy__add", {"a": 1, "b": 1})) == "2"
            os.rename(tmp_path / "store", tmp_path / "moved")
            refused = await client.call_tool("toy__add", {"a": 2, "b": 40})
            assert refused.is_error
            assert "sealbox.db was removed while this store had it open" in text_of(refused), text_of(refused)
    assert [entry.get("arguments") for entry in toy_log(tmp_path) if entry.get("tool") == "add"] == [{"a": 1, "b": 1}]
    store.close()
    done = subprocess.run([str(Path(sys.executable).parent / "sealbox"), "verify", str(tmp_path / "moved")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
