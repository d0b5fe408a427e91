"""A value redacted whole under a sensitive key name is remembered by the run (docs/content-modes.md,
"Values redacted earlier in the run"): every string inside it. When that value was an object Sealbox
stores as a tag -- a pydantic ``SecretStr`` under ``api_key`` (stored as ``{"$lossy": {"reason":
"unsupported", "repr": …, "type": "pydantic.types.SecretStr"}}``), a model or dataclass under
``password`` (``{"$pydantic": {"type": "app.Creds", "fields": …}}``) -- the tag's own words were
remembered too: every later ``unsupported`` the run recorded (a tool's "unsupported operation") became
a marker. Only the value's content is remembered now (a ``$lossy`` repr, the fields), not the tag's
``reason`` / ``type``."""

from __future__ import annotations

import dataclasses

import pydantic
import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder


@dataclasses.dataclass
class Creds:
    user: str
    pin: str


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")  # the default content mode: redacted
    yield s
    s.close()


def test_the_words_of_a_redacted_tag_are_not_taken_for_secrets(store):
    with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
        run.call_tool("llm", "configure", {"api_key": pydantic.SecretStr("sk-not-shown"),
                                           "password": Creds("bob", "4242-secret-pin")}, lambda **k: None)
        run.call_tool("fs", "chmod", {"mode": "0777"},
                      lambda mode: "unsupported operation (see pydantic.types.SecretStr, test_redacted_tag_metadata.Creds)")
        run.call_tool("fs", "echo", {"text": "pin 4242-secret-pin"}, lambda text: text)
    results = [e.payload for e in store.read_run(run.run_id) if e.kind == "tool.result"]
    assert results[1]["result"] == ("unsupported operation (see pydantic.types.SecretStr, "
                                    "test_redacted_tag_metadata.Creds)")
    assert "4242-secret-pin" not in str(results[2]["result"])  # the content is still remembered
    assert "⟦redacted:" in results[2]["result"]
