"""The README's "Recording an agent (Python)" example, run as written (pasted into an empty folder, nothing
defined for it): it records, and what its comments say the calls return holds. It assigned
run.model_call(...)'s result to ``reply``, which is a ModelCallRecord (the step and the requested tool calls),
not the model's reply; and it used names it left to the reader (request, response, client_call, write_query,
agent_state) and a policy.yaml it did not write, so pasted as it was it stopped with NameError."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _example() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Recording an agent (Python)"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_recording_example_runs_as_written_and_its_comments_hold(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    names: dict = {"__name__": "__main__"}
    exec(compile(_example(), str(README), "exec"), names)  # noqa: S102 - the README's own example, nothing defined for it
    from sealbox.recorder import ModelCallRecord

    assert isinstance(names["m"], ModelCallRecord)  # what run.model_call returns, as the comment says
    assert names["reply"] == names["response"]  # run.complete returns the model's response
    assert names["rows"] == [(42,)]  # the decorated tool ran
    printed = capsys.readouterr().out  # write_query matches no rule: denied, and the example prints why
    assert printed == "None no rule matches db/write_query; default is deny\n", printed
    import sealbox

    store = sealbox.open_store(tmp_path / ".sealbox", readonly=True)
    try:
        kinds = [e.kind for e in store.read_run(names["run"].run_id)]
    finally:
        store.close()
    assert kinds.count("model.call") == 2 and kinds.count("tool.call") == 2 and "state.saved" in kinds
