"""Storage grows O(turns), not O(turns²) (issue 3 §4; LESSONS "Storage must not grow quadratically").

A 200-turn conversation: every turn the agent sends the WHOLE conversation so far
to the model (an OpenAI chat-completions request), records the call, and saves
the whole conversation as its state. Naively that stores the conversation twice
per turn; with content stored by hash, each message is stored once.
"""

from __future__ import annotations

import random
from pathlib import Path

from sealbox.canonical import canonical_bytes, decode, encode
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.store import init_store
from sealbox.verify import verify_store

TURNS = 200
MARKS = (0, 50, 100, 150, 200)
WORDS = ("agent tool ledger record replay policy approval merkle checkpoint snapshot customer order refund "
         "invoice shipment warehouse delay weather forecast account balance ticket escalation summary").split()


def sentence(rng: random.Random, low: int = 300, high: int = 800) -> str:
    target = rng.randint(low, high)
    words: list[str] = []
    while sum(map(len, words)) + len(words) < target:
        words.append(rng.choice(WORDS))
    return " ".join(words)[:target]


def stored_bytes(store) -> tuple[int, int, int]:
    """(sum of len(raw) of events, sum of blob content sizes, number of blobs)."""
    events = sum(len(e.raw) for e in store.read_range(0, store.size()))
    sizes = [len(content) for _, _, content in store.iter_blobs() if content is not None]
    return events, sum(sizes), len(sizes)


def chat_response(turn: int, text: str) -> dict:
    return {"id": f"chatcmpl-{turn}", "object": "chat.completion", "created": 1764400000 + turn, "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 100 * turn, "completion_tokens": 150, "total_tokens": 100 * turn + 150}}


def test_200_turn_conversation_grows_linearly(tmp_path: Path):
    rng = random.Random(2026)
    store = init_store(tmp_path / "store")
    rec = Recorder(store, policy=ALLOW_ALL)
    conversation = [{"role": "system", "content": "You are a support agent. " + sentence(rng)}]
    sizes: dict[int, int] = {}
    naive = 0  # what storing the whole request and state every turn would cost
    with rec.run(agent="chatty") as run:
        sizes[0] = sum(stored_bytes(store)[:2])
        for turn in range(1, TURNS + 1):
            conversation.append({"role": "user", "content": sentence(rng)})
            request = {"model": "gpt-4o", "temperature": 0.2, "messages": list(conversation)}
            answer = sentence(rng)
            run.model_call(request, chat_response(turn, answer), latency=0.8)
            conversation.append({"role": "assistant", "content": answer})
            run.save_state({"turn": turn, "messages": list(conversation)})
            naive += len(canonical_bytes(encode(request))) + len(canonical_bytes(encode(conversation)))
            if turn in MARKS:
                sizes[turn] = sum(stored_bytes(store)[:2])
    events_bytes, blob_bytes, blob_count = stored_bytes(store)
    last_state = [e for e in store.read_run(run.run_id) if e.kind == "state.saved"][-1]

    per_turn = {f"{a}-{b}": (sizes[b] - sizes[a]) / (b - a) for a, b in zip(MARKS, MARKS[1:])}
    message_bytes = sum(len(canonical_bytes(m)) for m in conversation)
    print(f"\nstored after turns {MARKS}: {[sizes[m] for m in MARKS]} bytes")
    print("bytes per turn by window: " + ", ".join(f"{k}: {v:,.0f}" for k, v in per_turn.items()))
    print(f"events {events_bytes:,} B + blobs {blob_bytes:,} B in {blob_count} blobs; "
          f"distinct message bytes {message_bytes:,} B; naive (whole request + state every turn) {naive:,} B "
          f"= {naive / sizes[TURNS]:.1f}x what is stored")

    # Linear: the last 100 turns cost about what the first 100 did, and the last 50 what the first 50 did.
    assert sizes[200] - sizes[100] <= 1.3 * (sizes[100] - sizes[0])
    assert per_turn["150-200"] <= 1.5 * per_turn["0-50"]
    # ...and far from quadratic.
    assert naive > 20 * sizes[TURNS]
    # Each message's bytes are stored about once: the store is a small multiple of the distinct content.
    assert sizes[TURNS] < 4 * message_bytes

    # The last state resolves to the whole conversation, exactly.
    assert decode(store.resolve(last_state.payload["state"])) == {"turn": TURNS, "messages": conversation}
    last_call = [e for e in store.read_run(run.run_id) if e.kind == "model.call"][-1]
    assert decode(store.resolve(last_call.payload["request"]))["messages"] == conversation[:-1]
    assert all(len(e.raw) < 2048 for e in store.read_run(run.run_id))

    report = verify_store(store)
    assert report.ok, [p.line() for p in report.problems]
    store.close()
    db = tmp_path / "store" / "sealbox.db"
    wal = db.with_name(db.name + "-wal")
    on_disk = db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    print(f"sealbox.db after close: {db.stat().st_size:,} B (+ WAL {wal.stat().st_size if wal.exists() else 0:,} B); "
          f"naive / on disk = {naive / on_disk:.1f}x")
    assert naive > 10 * on_disk
