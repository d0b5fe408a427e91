"""Inputs that broke other recorders (issue 3), each through the real Recorder and a real SQLite store.

In every case: the agent code does not crash because of Sealbox (the tool's
result comes back to the caller unchanged, as the same object), the record is
complete (every event present, exact kinds in order), decoding the recorded
content gives back what was given (or a documented ``$lossy`` tag for cycles and
excess depth), and ``verify_store(store).ok`` is True.

Tests named ``test_bug_*`` show a bug found here; they fail until it is fixed.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import random
import threading
from typing import Any, Callable

import pytest

from sealbox.blobs import blob_refs
from sealbox.canonical import Tagged, decode, is_lossy
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder
from sealbox.store import init_store
from sealbox.verify import verify_store

ONE_CALL = ["run.started", "tool.call", "policy.decision", "tool.result", "run.ended"]
MB = 1_000_000


# --------------------------------------------------------------------------- helpers


@pytest.fixture
def store(tmp_path):
    s = init_store(tmp_path / "store")  # the default content mode: redacted
    yield s
    s.close()


def assert_same(got: Any, want: Any, path: str = "$") -> None:
    """Exact structural equality: same types, NaN equal to NaN, no tuple/list or int/float confusion."""
    if isinstance(want, float) and math.isnan(want):
        assert isinstance(got, float) and math.isnan(got), f"{path}: {got!r} is not NaN"
        return
    assert type(got) is type(want), f"{path}: type {type(got).__name__} != {type(want).__name__}"
    if isinstance(want, dict):
        assert list(got) == list(want) or set(got) == set(want), f"{path}: keys {list(got)!r} != {list(want)!r}"
        for k in want:
            assert_same(got[k], want[k], f"{path}[{k!r}]")
    elif isinstance(want, list):
        assert len(got) == len(want), f"{path}: length {len(got)} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{path}[{i}]")
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"
        if isinstance(want, dt.datetime):
            assert (got.tzinfo is None) == (want.tzinfo is None), f"{path}: naive/aware changed"
            if want.tzinfo is not None:
                assert got.utcoffset() == want.utcoffset(), f"{path}: offset changed"


def assert_verified(store) -> None:
    report = verify_store(store)
    assert report.ok, [p.line() for p in report.problems]


def record_one_call(store, arguments: Any, fn: Callable[..., Any]) -> tuple[Any, Any, Any, list]:
    """One run with one tool call; returns (what the caller got, recorded arguments, recorded result, events)."""
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="hostile", principal="agent:hostile") as run:
        got = run.call_tool("srv", "tool", arguments, fn)
    events = store.read_run(run.run_id)
    assert [e.kind for e in events] == ONE_CALL
    assert [e.run_seq for e in events] == [1, 2, 3, 4, 5]
    call, decision, result = events[1:4]
    assert call.payload["call_id"] == decision.payload["call_id"] == result.payload["call_id"]
    assert decision.payload["effect"] == "allow"
    assert result.payload["ok"] is True
    assert events[-1].payload["status"] == "ok"
    assert all(e.ts.endswith("Z") for e in events)  # the writer's UTC time, whatever the content held
    args_back = decode(store.resolve(call.payload["arguments"]))
    result_back = decode(store.resolve(result.payload["result"]))
    assert_verified(store)
    return got, args_back, result_back, events


def returning(value: Any) -> Callable[..., Any]:
    return lambda *args, **kwargs: value


def echo_kwargs(**kwargs: Any) -> dict:
    return kwargs


def lossy_reasons(value: Any) -> list[str]:
    out: list[str] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, Tagged):
            if v.tag == "$lossy":
                out.append(v.value.get("reason"))
            stack.append(v.value)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return out


def nested_dict(levels: int, leaf: Any = "leaf") -> dict:
    value: Any = leaf
    for i in range(levels):
        value = {f"k{i % 10}": value}
    return value


def nested_list(levels: int, leaf: Any = "leaf") -> list:
    value: Any = leaf
    for _ in range(levels):
        value = [value]
    return value


def rows_of(total_bytes: int) -> dict:
    """A nested JSON-like tool output of about ``total_bytes``."""
    rows = [{"id": i, "name": f"row {i}", "tags": ["a", "b", str(i)], "body": "lorem ipsum dolor " * 25}
            for i in range(total_bytes // 520)]
    return {"rows": rows, "meta": {"count": len(rows), "source": "db"}}


# --------------------------------------------------------------------------- big outputs, kept whole


@pytest.mark.parametrize("size", [1 * MB, 5 * MB], ids=["1MB", "5MB"])
@pytest.mark.parametrize("shape", ["str", "nested"])
def test_big_tool_output_is_kept_whole_in_blobs(store, size, shape):
    value = ("0123456789abcdef" * (size // 16)) if shape == "str" else rows_of(size)
    got, _, back, events = record_one_call(store, {"q": "all"}, returning(value))
    assert got is value
    result_event = events[3]
    assert blob_refs(result_event.payload["result"]), "the big output must be moved to a blob"
    assert len(result_event.raw) < 2048, "the hashed event bytes must not grow with the content"
    assert back == value  # exact, whole: nothing truncated or dropped


def test_100kb_of_base64_is_kept_whole_as_result_and_argument(store):
    data = random.Random(7).randbytes(75_000)
    text = base64.b64encode(data).decode("ascii")
    assert len(text) == 100_000
    got, args, back, events = record_one_call(store, {"attachment": text}, lambda attachment: attachment)
    assert got is text
    assert back == text and args == {"attachment": text}
    assert base64.b64decode(back) == data
    assert all(len(e.raw) < 2048 for e in events)


def test_raw_base64_bytes_of_100kb_round_trip(store):
    data = random.Random(8).randbytes(100_000)
    got, _, back, _ = record_one_call(store, None, returning(data))
    assert got is data
    assert_same(back, data)


# --------------------------------------------------------------------------- bytes and broken text


NOT_UTF8 = [b"\xff\xfe\x00\x80abc", bytes(range(256)), b"\xc3\x28", b"\xed\xa0\x80"]


@pytest.mark.parametrize("raw", NOT_UTF8, ids=["bom-ish", "all-bytes", "bad-continuation", "encoded-surrogate"])
def test_bytes_that_are_not_utf8_as_result(store, raw):
    got, _, back, _ = record_one_call(store, {"path": "/bin/blob"}, returning(raw))
    assert got is raw
    assert_same(back, raw)


@pytest.mark.parametrize("raw", NOT_UTF8, ids=["bom-ish", "all-bytes", "bad-continuation", "encoded-surrogate"])
def test_bytes_that_are_not_utf8_as_argument(store, raw):
    got, args, _, _ = record_one_call(store, {"payload": raw, "also": bytearray(raw)}, lambda payload, also: len(payload))
    assert got == len(raw)
    assert_same(args, {"payload": raw, "also": bytes(raw)})  # a bytearray comes back as bytes


def test_bytes_as_the_whole_argument(store):
    raw = b"\x00\xff\xfe"
    got, args, _, _ = record_one_call(store, raw, lambda data: data[::-1])
    assert got == raw[::-1]
    assert_same(args, raw)


LONE = {"high": "a\ud800b", "low": "\udfffz", "pair-reversed": "\udc00\ud800", "only": "\ud83d"}


@pytest.mark.parametrize("name", list(LONE))
def test_lone_surrogates_in_keys_and_values(store, name):
    s = LONE[name]
    value = {s: s, "plain": [s, {"inner" + s: s}], "ok": "fine"}
    got, args, back, _ = record_one_call(store, {"text": s, "nested": value}, lambda text, nested: nested)
    assert got is value
    assert_same(back, value)
    assert_same(args, {"text": s, "nested": value})


def test_lone_surrogate_as_keyword_argument_name(store):
    key = "arg\udc80"
    got, args, back, _ = record_one_call(store, {key: "v\ud800"}, echo_kwargs)
    assert_same(got, {key: "v\ud800"})
    assert_same(args, {key: "v\ud800"})
    assert_same(back, {key: "v\ud800"})


def test_emoji_cut_in_half_by_a_utf16_size_limit(store):
    text = "weather: sunny \U0001F600 and warm \U0001F30D"
    utf16 = text.encode("utf-16-le")
    cut = utf16[: utf16.index("\U0001F600".encode("utf-16-le")) + 2].decode("utf-16-le", "surrogatepass")
    assert cut.endswith("\ud83d")  # a lone high surrogate, as JavaScript's slice leaves it
    got, args, back, _ = record_one_call(store, {"summary": cut}, lambda summary: summary)
    assert got is cut
    assert_same(back, cut)
    assert_same(args, {"summary": cut})


def test_emoji_cut_mid_utf8_sequence(store):
    data = "ok \U0001F600".encode("utf-8")
    cut_bytes = data[:-2]  # two of the emoji's four bytes
    cut_text = cut_bytes.decode("utf-8", "surrogateescape")  # how os/filesystem APIs hand it over
    value = {"bytes": cut_bytes, "text": cut_text, "list": [cut_bytes, cut_text]}
    got, args, back, _ = record_one_call(store, {"raw": cut_bytes, "text": cut_text}, returning(value))
    assert got is value
    assert_same(back, value)
    assert_same(args, {"raw": cut_bytes, "text": cut_text})


def test_long_text_with_an_emoji_cut_at_the_blob_limit(store):
    text = ("\U0001F600" * 300_000)
    cut = text.encode("utf-16-le")[: 2 * 300_001].decode("utf-16-le", "surrogatepass")  # ends in a lone high half
    assert cut[-1] == "\ud83d"
    got, _, back, events = record_one_call(store, None, returning(cut))
    assert got is cut
    assert blob_refs(events[3].payload["result"])
    assert back == cut


# --------------------------------------------------------------------------- cycles and shared references


def test_cyclic_result_is_recorded_with_a_cycle_tag(store):
    obj: dict = {"name": "node", "items": [1, 2]}
    obj["self"] = obj
    obj["items"].append(obj["items"])
    got, _, back, _ = record_one_call(store, None, returning(obj))
    assert got is obj
    assert back["name"] == "node" and back["items"][:2] == [1, 2]
    assert isinstance(back["self"], Tagged) and back["self"].tag == "$lossy"
    assert back["self"].value["reason"] == "cycle"
    assert isinstance(back["items"][2], Tagged) and back["items"][2].value["reason"] == "cycle"
    assert sorted(lossy_reasons(back)) == ["cycle", "cycle"]


def test_cyclic_argument_is_recorded_with_a_cycle_tag(store):
    a: list = ["a"]
    b: list = ["b", a]
    a.append(b)
    got, args, _, _ = record_one_call(store, {"graph": a}, lambda graph: graph[0])
    assert got == "a"
    assert args["graph"][0] == "a" and args["graph"][1][0] == "b"
    assert lossy_reasons(args) == ["cycle"]


def test_cycle_through_a_big_blobbed_value(store):
    obj: dict = {"pad": "z" * 200_000}
    obj["again"] = obj
    got, _, back, events = record_one_call(store, None, returning(obj))
    assert got is obj
    assert back["pad"] == obj["pad"]
    assert lossy_reasons(back) == ["cycle"]
    assert blob_refs(events[3].payload["result"])


def test_same_object_twice_is_not_a_cycle(store):
    shared = {"id": 1, "text": "shared " * 20, "tags": ["x", "y"]}
    shared_list = [1, 2, 3]
    value = {"first": shared, "second": shared, "list": [shared, shared, shared_list, shared_list]}
    got, args, back, events = record_one_call(store, {"a": shared, "b": shared}, returning(value))
    assert got is value
    assert not is_lossy(store.resolve(events[3].payload["result"]))
    assert_same(back, {"first": shared, "second": shared, "list": [shared, shared, shared_list, shared_list]})
    assert_same(args, {"a": shared, "b": shared})


def test_same_big_object_twice_is_stored_once(store):
    shared = {"doc": "knowledge " * 50_000}
    value = [shared, shared]
    got, _, back, _ = record_one_call(store, None, returning(value))
    assert got is value
    assert_same(back, [shared, shared])
    sizes = [len(content) for _, _, content in store.iter_blobs() if content is not None]
    assert sum(sizes) < 1.5 * len(shared["doc"]), "identical content must be stored once"


# --------------------------------------------------------------------------- depth


@pytest.mark.parametrize("levels", [65, 100])
@pytest.mark.parametrize("shape", ["dict", "list"])
def test_nesting_deeper_than_64_round_trips(store, levels, shape):
    value = nested_dict(levels) if shape == "dict" else nested_list(levels)
    got, args, back, _ = record_one_call(store, {"tree": value}, returning(value))
    assert got is value
    assert_same(back, value)
    assert_same(args, {"tree": value})


def test_nesting_500_deep_dict_is_tagged_lossy_depth(store):
    value = nested_dict(500)
    got, args, back, _ = record_one_call(store, {"tree": value}, returning(value))
    assert got is value
    for recorded in (back, args["tree"]):
        assert lossy_reasons(recorded) == ["depth"]
        node, kept = recorded, 0
        while isinstance(node, dict):  # the outer levels are kept as given, up to the tag
            node = next(iter(node.values()))
            kept += 1
        assert isinstance(node, Tagged) and node.value["reason"] == "depth"
        assert kept >= 64


def test_nesting_500_deep_dict_as_state(store):
    value = nested_dict(500)
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="hostile") as run:
        run.save_state(value)
    events = store.read_run(run.run_id)
    assert [e.kind for e in events] == ["run.started", "state.saved", "run.ended"]
    state = decode(store.resolve(events[1].payload["state"]))
    assert lossy_reasons(state) == ["depth"]
    assert_verified(store)


def test_nesting_100_deep_dict_in_a_model_request(store):
    value = nested_dict(100)
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": value}
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="hostile") as run:
        run.model_call(request, {"object": "chat.completion", "model": "m", "choices": []})
    events = store.read_run(run.run_id)
    assert [e.kind for e in events] == ["run.started", "model.call", "run.ended"]
    assert_same(decode(store.resolve(events[1].payload["request"])), request)
    assert_verified(store)


DEEP_SMALL = [126, 200, 500]


@pytest.mark.parametrize("levels", DEEP_SMALL)
def test_bug_deep_small_list_as_tool_result_fails_after_the_tool_ran(store, levels):
    """A list nested deeper than ~125 levels is small enough to stay inline, so the
    envelope around the payload pushes it past canonical.MAX_DEPTH (128) and the
    tool.result cannot be written: the tool already ran, the caller gets a
    RecordingError instead of its result and the record has no tool.result."""
    value = nested_list(levels)
    ran = []
    got, _, back, _ = record_one_call(store, None, lambda: ran.append(1) or value)
    assert got is value
    assert lossy_reasons(back) == ["depth"]


@pytest.mark.parametrize("levels", DEEP_SMALL)
def test_bug_deep_small_list_as_argument_blocks_the_call(store, levels):
    value = nested_list(levels)
    got, args, _, _ = record_one_call(store, {"tree": value}, lambda tree: "ran")
    assert got == "ran"
    assert lossy_reasons(args) == ["depth"]


@pytest.mark.parametrize("levels", DEEP_SMALL)
def test_bug_deep_small_list_as_state_cannot_be_saved(store, levels):
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="hostile") as run:
        run.save_state(nested_list(levels))
    assert [e.kind for e in store.read_run(run.run_id)] == ["run.started", "state.saved", "run.ended"]
    assert_verified(store)


@pytest.mark.parametrize("levels", [126, 500])
def test_bug_deep_small_list_in_a_model_request_crashes_model_call(store, levels):
    """The same depth bug through run.model_call: RecordingError, no model.call recorded."""
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="hostile") as run:
        run.model_call({"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": nested_list(levels)},
                       {"object": "chat.completion", "model": "m", "choices": []})
    assert [e.kind for e in store.read_run(run.run_id)] == ["run.started", "model.call", "run.ended"]
    assert_verified(store)


def test_500_deep_dict_in_a_model_request_is_tagged_lossy_depth(store):
    """adapters.to_plain must not recurse without bound (it raised RecursionError at ~330 levels)."""
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="hostile") as run:
        run.model_call({"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": nested_dict(500)},
                       {"object": "chat.completion", "model": "m", "choices": []})
    events = store.read_run(run.run_id)
    assert [e.kind for e in events] == ["run.started", "model.call", "run.ended"]
    assert lossy_reasons(decode(store.resolve(events[1].payload["request"]))) == ["depth"]
    assert_verified(store)


def test_cyclic_model_request_is_recorded_with_a_cycle_tag(store):
    """adapters.to_plain must not loop on a cycle (it raised RecursionError)."""
    request: dict = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    request["messages"].append(request)  # e.g. a framework object holding its own history
    rec = Recorder(store, policy=ALLOW_ALL)
    with rec.run(agent="hostile") as run:
        run.model_call(request, {"object": "chat.completion", "model": "m", "choices": []})
    events = store.read_run(run.run_id)
    assert [e.kind for e in events] == ["run.started", "model.call", "run.ended"]
    assert "cycle" in lossy_reasons(decode(store.resolve(events[1].payload["request"])))
    assert_verified(store)


# --------------------------------------------------------------------------- NaN and infinities


def test_nan_and_infinities_as_result_and_arguments(store):
    value = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "list": [math.nan, 1.5, -math.inf]}
    got, args, back, _ = record_one_call(store, {"x": math.nan, "bound": math.inf}, returning(value))
    assert got is value
    assert_same(back, value)
    assert_same(args, {"x": math.nan, "bound": math.inf})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_bare_non_finite_float(store, value):
    got, args, back, _ = record_one_call(store, value, lambda v: v)
    assert got is value
    assert_same(back, value)
    assert_same(args, value)


# --------------------------------------------------------------------------- argument shapes


@pytest.mark.parametrize("arguments", ['{"city": "Paris", "days": 3}', {"city": "Paris", "days": 3}, "", None],
                         ids=["json-string", "object", "empty-string", "none"])
def test_tool_arguments_in_every_shape_models_send(store, arguments):
    seen = []

    def tool(*args: Any, **kwargs: Any) -> str:
        seen.append((args, kwargs))
        return "result"

    got, args, back, _ = record_one_call(store, arguments, tool)
    assert got == "result" and back == "result"
    assert_same(args, arguments)  # recorded as given, never reinterpreted
    if isinstance(arguments, dict):
        assert seen == [((), arguments)]
    elif arguments is None:
        assert seen == [((), {})]
    else:
        assert seen == [((arguments,), {})]


# --------------------------------------------------------------------------- datetimes


NAIVE = dt.datetime(2026, 11, 29, 8, 30, 15, 123456)
AWARE = [dt.datetime(2026, 11, 29, 8, 30, tzinfo=dt.timezone.utc),
         dt.datetime(2026, 11, 29, 8, 30, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
         dt.datetime(2026, 11, 29, 8, 30, tzinfo=dt.timezone(dt.timedelta(hours=-8)))]


def test_naive_datetime_stays_naive(store):
    value = {"when": NAIVE, "dates": [NAIVE.date(), NAIVE.time()]}
    got, args, back, events = record_one_call(store, {"since": NAIVE}, returning(value))
    assert got is value
    assert_same(back, value)
    assert_same(args, {"since": NAIVE})
    assert back["when"].tzinfo is None  # never silently read as local time or UTC


@pytest.mark.parametrize("when", AWARE, ids=["utc", "+05:30", "-08:00"])
def test_aware_datetime_keeps_its_offset(store, when):
    got, args, back, _ = record_one_call(store, {"since": when}, returning({"at": when, "naive": NAIVE}))
    assert_same(back, {"at": when, "naive": NAIVE})
    assert_same(args, {"since": when})


# --------------------------------------------------------------------------- parallel tool calls


def chat_response_with_tool_calls(ids: list[str]) -> dict:
    return {
        "id": "chatcmpl-parallel", "object": "chat.completion", "created": 1764400000, "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": cid, "type": "function",
                            "function": {"name": "get_weather", "arguments": f'{{"city": "c{i}"}}'}}
                           for i, cid in enumerate(ids)]}}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 45, "total_tokens": 165},
    }


def test_three_parallel_tool_calls_get_steps_by_position_not_completion(store):
    rec = Recorder(store, policy=ALLOW_ALL)
    ids = ["call_first", "call_second", "call_third"]
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "weather in three cities"}],
               "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]}
    results: dict[str, Any] = {}
    errors: list[BaseException] = []
    with rec.run(agent="parallel") as run:
        run.save_state({"turn": 0})  # so the model call is not step 2 by accident
        mc = run.model_call(request, chat_response_with_tool_calls(ids))
        assert [tc.id for tc in mc.tool_calls] == ids
        entered = {cid: threading.Event() for cid in ids}
        finished = {cid: threading.Event() for cid in ids}
        # Finishing order: third, second, first. Each tool waits until the later one has finished.
        wait_for = {"call_first": "call_second", "call_second": "call_third", "call_third": None}

        def worker(i: int, cid: str) -> None:
            tc = mc.tool_calls[i]

            def tool(city: str) -> dict:
                entered[cid].set()
                if wait_for[cid]:
                    assert finished[wait_for[cid]].wait(30)
                return {"city": city, "temp_c": 20 + i}

            try:
                results[cid] = run.call_tool("weather", tc.name, tc.arguments, tool, call_id=cid)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                finished[cid].set()

        threads = []
        for i in (2, 1, 0):  # started (and recorded) in reverse order too
            t = threading.Thread(target=worker, args=(i, ids[i]))
            t.start()
            assert entered[ids[i]].wait(30)
            threads.append(t)
        for t in threads:
            t.join(30)
    assert not errors
    assert results == {cid: {"city": f"c{i}", "temp_c": 20 + i} for i, cid in enumerate(ids)}
    events = store.read_run(run.run_id)
    assert [e.kind for e in events[:3]] == ["run.started", "state.saved", "model.call"]
    assert events[-1].kind == "run.ended"
    model_step = mc.step
    assert events[2].step == model_step == "3"
    want = {cid: f"{model_step}.{i}" for i, cid in enumerate(ids, start=1)}
    by_call: dict[str, list] = {}
    for e in events[3:-1]:
        by_call.setdefault(e.payload["call_id"], []).append(e)
    assert set(by_call) == set(ids)
    for cid, evs in by_call.items():
        assert [e.kind for e in evs] == ["tool.call", "policy.decision", "tool.result"]
        assert {e.step for e in evs} == {want[cid]}
    completion = [e.payload["call_id"] for e in events if e.kind == "tool.result"]
    assert completion == ["call_third", "call_second", "call_first"]
    recorded = decode(store.resolve(events[2].payload["response"]))
    assert recorded == chat_response_with_tool_calls(ids)
    assert events[2].payload["tool_call_ids"] == ids
    assert_verified(store)


def test_values_that_look_like_blob_references_stay_data_and_verify_stays_clean(tmp_path):
    """A tool result holding {"$blob": ...} (a user's dict, a Tagged from a decoded record) is data:
    it must not become a reference to a blob the store does not hold (verify would then report
    blob_missing on a store nobody touched); real references to stored blobs are kept."""
    store = init_store(tmp_path / "s")
    forged = "sha256:" + "0" * 64
    results = [{"user": {"$blob": "x"}}, {"data": Tagged("$blob", forged)},
               {"big": "y" * 2000, "u": {"$blob": "x", "$n": [{"$blob": "z"}]}}]
    try:
        with Recorder(store, policy=ALLOW_ALL).run(agent="a") as run:
            for value in results:
                run.call_tool("db", "q", {}, lambda value=value: value)
        stored = [e.payload["result"] for e in store.read_run(run.run_id) if e.kind == "tool.result"]
        assert stored[0] == {"user": {"$esc": {"$blob": "x"}}}
        assert stored[1] == {"data": {"$esc": {"$blob": forged}}}
        assert stored[2]["u"] == {"$esc": {"$blob": "x", "$n": [{"$esc": {"$blob": "z"}}]}}
        big_ref = stored[2]["big"]["$blob"]
        assert blob_refs(stored[2]) == [big_ref]  # only the real one
        restored = [decode(store.resolve(v)) for v in stored]
        assert restored == [{"user": {"$blob": "x"}}, {"data": {"$blob": forged}},
                            {"big": "y" * 2000, "u": {"$blob": "x", "$n": [{"$blob": "z"}]}}]
        report = verify_store(store)
        assert report.ok, report.problems
    finally:
        store.close()


def test_store_tags_given_by_a_tool_are_data_even_when_they_name_a_real_blob(tmp_path):
    """A Tagged("$blob", ref) naming another run's blob must not pull that blob into this run
    (its export would carry another run's content); a Tagged("$cons") is not a list chain; a
    Tagged("$redacted") is not a marker the store wrote."""
    store = init_store(tmp_path / "s")
    try:
        recorder = Recorder(store, policy=ALLOW_ALL)
        with recorder.run(agent="a") as a:
            a.call_tool("db", "q", {}, lambda: "SECRET-A " * 400)
        (res_a,) = [e for e in store.read_run(a.run_id) if e.kind == "tool.result"]
        ref = res_a.payload["result"]["$blob"]
        given = [Tagged("$blob", ref), Tagged("$cons", [None, "x" * 495, "extra"]), Tagged("$redacted", "hmac-sha256:00")]
        with recorder.run(agent="b") as b:
            for value in given:
                b.call_tool("db", "q", {}, lambda value=value: {"v": value})
        stored = [e.payload["result"] for e in store.read_run(b.run_id) if e.kind == "tool.result"]
        assert stored[0] == {"v": {"$esc": {"$blob": ref}}}
        assert [decode(store.resolve(v)) for v in stored] == [
            {"v": {"$blob": ref}}, {"v": {"$cons": [None, "x" * 495, "extra"]}}, {"v": {"$redacted": "hmac-sha256:00"}}]
        assert all(ref not in blob_refs(v) for v in stored)
        assert verify_store(store).ok
    finally:
        store.close()
