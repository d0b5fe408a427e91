"""A long sampling session grows the store O(turns), not O(turns²) (issue 3 §4; LESSONS "Storage must
not grow quadratically"; tests/recorder/test_growth.py for model calls and state).

The toy upstream (a real stdio process) keeps one conversation and, at each call of its ``sample`` tool,
resends all of it to the client in a ``sampling/createMessage`` (every earlier prompt and reply, then
the new prompt), as a sampling agent does. The gateway records each request as a ``note`` whose
``about`` holds the params: stored like a content field, each message is stored once, as a link of a
chain of blobs (sealbox.blobs), not once per turn.
"""

from __future__ import annotations

import csv
import io
import random

import mcp_types as types
import pytest

import sealbox
from sealbox.canonical import canonical_bytes
from sealbox.gateway import Gateway
from sealbox.interop.bundle import export_bundle
from sealbox.interop.bundle_verify import verify_bundle

from .conftest import connect, gateway_runs, running, toy_config

pytestmark = pytest.mark.anyio

TURNS = 60
WORDS = ("agent tool ledger record replay policy approval merkle checkpoint snapshot customer order refund "
         "invoice shipment warehouse delay weather forecast account balance ticket escalation summary").split()


def sentence(rng: random.Random, low: int = 300, high: int = 600) -> str:
    target = rng.randint(low, high)
    words: list[str] = []
    while sum(map(len, words)) + len(words) < target:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:target]


def stored(store) -> int:
    """Bytes the store holds: every event's hashed bytes and every blob's content."""
    events = sum(len(e.raw) for e in store.read_range(0, store.size()))
    return events + sum(len(content) for _, _, content in store.iter_blobs() if content is not None)


async def test_a_sampling_conversation_resent_every_turn_is_stored_once(tmp_path, store):
    rng = random.Random(2026)
    replies = iter([sentence(rng) for _ in range(TURNS)])
    prompts = [sentence(rng) for _ in range(TURNS)]
    seen: list[int] = []

    async def sample(context, params):
        seen.append(len(params.messages))
        return types.CreateMessageResult(role="assistant", model="model-x-7", stop_reason="endTurn",
                                         content=types.TextContent(type="text", text=next(replies)))

    sizes: dict[int, int] = {}
    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, sampling_callback=sample) as session:
            sizes[0] = stored(store)
            for turn, prompt in enumerate(prompts, 1):
                result = await session.call_tool("toy__sample", {"prompt": prompt, "converse": True})
                assert result.is_error is False
                if turn in (TURNS // 2, TURNS):
                    sizes[turn] = stored(store)
        [run_id] = gateway_runs(store)
    assert seen == list(range(1, 2 * TURNS, 2))  # the upstream resent the whole conversation every turn

    asked = [e for e in store.read_run(run_id) if e.kind == "note" and e.payload["client_request"]["state"] == "asked"]
    assert len(asked) == TURNS
    conversation = []
    for prompt, answered in zip(prompts, [e for e in store.read_run(run_id) if e.kind == "note"][1::2]):
        conversation.append({"role": "user", "content": {"type": "text", "text": prompt}})
        conversation.append({"role": "assistant", "content": store.resolve(answered.payload["about"])["result"]["content"]})
    # the last request resolves to the whole conversation, exactly; every note's hashed bytes stay small
    last = store.resolve(asked[-1].payload["about"])
    assert last == {"params": {"messages": conversation[:-1], "systemPrompt": "toy system prompt", "maxTokens": 50}}
    assert all(len(e.raw) < 2048 for e in store.read_run(run_id))

    message_bytes = sum(len(canonical_bytes(m)) for m in conversation)
    naive = sum(len(canonical_bytes(store.resolve(e.payload["about"]))) for e in asked)
    half, whole = sizes[TURNS // 2] - sizes[0], sizes[TURNS] - sizes[TURNS // 2]
    print(f"\nstored after 0, {TURNS // 2}, {TURNS} turns: {sizes[0]:,} / {sizes[TURNS // 2]:,} / {sizes[TURNS]:,} B; "
          f"distinct message bytes {message_bytes:,} B; the requests' params inline would be {naive:,} B")
    # Linear: the second half of the turns costs about what the first did. (With each request's params
    # inline, 2.4 times as much here: the notes alone grow 3 times as much, diluted by the other events.)
    assert whole <= 1.2 * half, (half, whole)
    # ...about 6.5 kB a turn, each turn's two messages (1 kB) stored once in a note's chain of blobs, with
    # the turn's tool call, decision, result (the prompt and reply again) and two notes: far from storing
    # each request whole (inline, the requests' params alone are 4.6 times that after 60 turns, and growing)
    assert sizes[TURNS] - sizes[0] < 8 * message_bytes
    assert naive > 4 * (sizes[TURNS] - sizes[0])

    report = sealbox.verify_store(store)
    assert report.ok, [p.line() for p in report.problems]
    # an offline bundle of the run carries the blobs its notes reference, and verifies clean
    bundle = tmp_path / "run.sbx"
    export_bundle(store, [run_id], bundle)
    checked = verify_bundle(bundle, trusted_vkey=(tmp_path / "store" / "log.vkey").read_text().strip())
    assert checked.ok, [p.line() for p in checked.problems]


async def test_a_client_request_stored_in_blobs_is_shown_whole(tmp_path, store):
    """An elicitation whose message is above the inline limit: its note's ``about`` holds a blob
    reference; ``sealbox runs show`` and the incident report show the message all the same."""
    from click.testing import CliRunner

    from sealbox.cli.main import cli
    from sealbox.report import build_report, render_markdown
    from sealbox.report.markdown import md

    question = "which of these colours? " + "red green blue " * 40

    async def elicit(context, params):
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, elicitation_callback=elicit) as session:
            result = await session.call_tool("toy__ask", {"question": question})
        [run_id] = gateway_runs(store)
    assert result.is_error is False
    asked = [e for e in store.read_run(run_id) if e.kind == "note"][0]
    assert list(asked.payload["about"]["params"]["message"]) == ["$blob"]  # stored once, outside the event
    assert store.resolve(asked.payload["about"])["params"]["message"] == question

    shown = CliRunner().invoke(cli, ["runs", "show", run_id, "--csv", "-s", str(tmp_path / "store")])
    assert shown.exit_code == 0, shown.output
    [row] = [r for r in csv.DictReader(io.StringIO(shown.output)) if r["detail"].startswith("asked:")]
    assert row["detail"].endswith(' message="which of these colours? red green blue red green blue red …')
    report = render_markdown(build_report(store, run_id, now="2026-12-04T00:00:00.000000Z"))
    assert md(row["detail"]) in report


async def converse(tmp_path, store, prompts: list[str]) -> str:
    async def sample(context, params):
        return types.CreateMessageResult(role="assistant", model="model-x-7", stop_reason="endTurn",
                                         content=types.TextContent(type="text", text=f"reply to {len(params.messages)}"))

    gw = Gateway(toy_config(tmp_path), store=store)
    async with running(gw) as tg:
        async with connect(gw, tg, sampling_callback=sample) as session:
            for prompt in prompts:
                assert (await session.call_tool("toy__sample", {"prompt": prompt, "converse": True})).is_error is False
        [run_id] = gateway_runs(store)
    return run_id


@pytest.mark.parametrize("mode", ["redacted", "hashes-only"])
async def test_the_content_modes_apply_to_a_client_request_stored_in_blobs(tmp_path, mode):
    """Redacted before it is stored in blobs: a secret in a resent message is in no blob, no event,
    no file of the store; in hashes-only no message is (``about`` is one HMAC marker, inline)."""
    from sealbox.redaction import ContentPolicy

    secret = "sk-" + "Q7x" * 10
    rng = random.Random(7)
    prompts = [sentence(rng), f"my key is {secret}; " + sentence(rng), sentence(rng)]
    store = sealbox.init_store(tmp_path / "store", content=ContentPolicy(mode=mode))
    try:
        run_id = await converse(tmp_path, store, prompts)
        asked = [e for e in store.read_run(run_id) if e.kind == "note"][::2]
        assert len(asked) == 3
        if mode == "hashes-only":
            assert all(list(e.payload["about"]) == ["$redacted"] for e in asked)
            assert all(e.payload["about"]["$redacted"].startswith("hmac-sha256:") for e in asked)
        else:
            last = store.resolve(asked[-1].payload["about"])["params"]["messages"]
            assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user"]
            said = last[2]["content"]["text"]
            assert said.startswith("my key is ⟦redacted:hmac-sha256:") and secret not in said
            assert said.endswith("⟧; " + prompts[1][len(f"my key is {secret}; "):])
            assert last[0]["content"]["text"] == prompts[0] and last[4]["content"]["text"] == prompts[2]
        report = sealbox.verify_store(store)
        assert report.ok, [p.line() for p in report.problems]
    finally:
        store.close()
    files = [p.read_bytes() for p in (tmp_path / "store").iterdir() if p.is_file()]
    assert not any(secret.encode() in data for data in files)
    if mode == "hashes-only":  # no prompt's words anywhere: the tool call's arguments are markers too
        assert not any(prompts[0][:40].encode() in data for data in files)
