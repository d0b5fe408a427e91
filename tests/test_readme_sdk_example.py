"""The README's "Recording an agent (Python)" example, run as written with the names it leaves to the reader
(request, response, client_call, write_query, agent_state) defined: it records, and what its comments say the
calls return holds. It assigned run.model_call(...)'s result to ``reply``, which is a ModelCallRecord (the step
and the requested tool calls), not the model's reply."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"

POLICY = """version: 1
rules:
  - id: reads-ok
    match: {server: db, tool: read_query}
    effect: allow
"""

RESPONSE = {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}


def _example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Recording an agent (Python)"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_recording_example_runs_and_its_comments_hold(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "policy.yaml").write_text(POLICY)
    names = {"request": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
             "response": RESPONSE, "client_call": lambda _request: RESPONSE,
             "write_query": lambda query: "deleted", "agent_state": {"turn": 1}}
    exec(compile(_example(), str(README), "exec"), names)  # noqa: S102 - the README's own example
    from sealbox.recorder import ModelCallRecord

    assert isinstance(names["m"], ModelCallRecord)  # what run.model_call returns, as the comment says
    assert names["reply"] == RESPONSE  # run.complete returns the model's response
    assert names["rows"] is None  # the decorated tool ran (its body is `...`)
    printed = capsys.readouterr().out  # write_query matches no rule: denied, and the example prints why
    assert printed == "None no rule matches db/write_query; default is deny\n", printed
    import sealbox

    store = sealbox.open_store(tmp_path / ".sealbox", readonly=True)
    try:
        kinds = [e.kind for e in store.read_run(names["run"].run_id)]
    finally:
        store.close()
    assert kinds.count("model.call") == 2 and kinds.count("tool.call") == 2 and "state.saved" in kinds
