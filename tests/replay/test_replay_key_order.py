"""A tool result served from the record has its keys sorted (the record keeps it canonically), so an
agent that sends its model ``str(result)`` or ``json.dumps(result)`` sent a string that differed from
the recorded one only in key order, and the replay reported a divergence at that model call
(docs/replay.md, "Serialized dicts"). Such strings now compare equal; any other difference in them
still diverges, and the divergence's diff shows only the fields that really changed."""

from __future__ import annotations

import json

import pytest

import sealbox
from sealbox.policies import ALLOW_ALL
from sealbox.recorder import Recorder, RunContext
from sealbox.replay import Replayer, render_divergence
from sealbox.replay.serialized import MAX_LITERAL_CHARS, reordered_text, same_but_for_key_order

SECRET = "hunter2-very-secret"


@pytest.fixture
def store(tmp_path):
    s = sealbox.init_store(tmp_path / "store")
    yield s
    s.close()


def answer(text: str) -> dict:
    return {"id": "c1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}


def requests(store, run_id: str) -> list:
    return [store.resolve(e.payload)["request"] for e in store.read_run(run_id) if e.kind == "model.call"]


def agent_sending(serialize, weather=None):
    """An agent that calls a weather tool (an unsorted dict) and sends the model ``serialize(result)``."""
    def agent(run):
        result = run.call_tool("local", "weather", {"city": "Paris"},
                               weather or (lambda city: {"temp": 20, "city": city, "wind": {"speed": 3, "dir": "N"}}))
        run.complete({"model": "m", "messages": [{"role": "tool", "content": serialize(result)}]},
                     lambda request: answer("ok"))
    return agent


@pytest.mark.parametrize("serialize, sent", [
    (str, "{'temp': 20, 'city': 'Paris', 'wind': {'speed': 3, 'dir': 'N'}}"),
    (json.dumps, '{"temp": 20, "city": "Paris", "wind": {"speed": 3, "dir": "N"}}'),
    (lambda r: json.dumps(r, indent=2), json.dumps({"temp": 20, "city": "Paris", "wind": {"speed": 3, "dir": "N"}},
                                                    indent=2)),
])
def test_a_served_dict_sent_to_the_model_as_text_replays_reproduced(store, serialize, sent):
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        agent_sending(serialize)(run)
    assert requests(store, run.run_id)[0]["messages"][0]["content"] == sent
    result = Replayer(store).replay(run.run_id, agent_sending(serialize))
    assert (result.reproduced, result.divergence, result.steps_compared) == (True, None, 2), result.divergence
    replayed = requests(store, result.new_run_id)[0]["messages"][0]["content"]
    assert replayed == serialize({"city": "Paris", "temp": 20, "wind": {"dir": "N", "speed": 3}}) != sent


def test_a_serialized_dict_holding_a_redacted_value_replays_reproduced(store):
    """The store (content mode redacted) keeps the token inside the string as its marker, the same
    HMAC in the record and in the replay's view: the strings still differ only in key order."""
    token = "Bearer abcdefghijklmnop1234"
    agent = agent_sending(lambda r: json.dumps({**r, "auth": token}))
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        agent(run)
    sent = requests(store, run.run_id)[0]["messages"][0]["content"]
    assert sent.startswith('{"temp": 20, "city": "Paris", "wind": {"speed": 3, "dir": "N"}, "auth": "⟦redacted:hmac')
    result = Replayer(store).replay(run.run_id, agent)
    assert (result.reproduced, result.divergence, result.steps_compared) == (True, None, 2)
    replayed = requests(store, result.new_run_id)[0]["messages"][0]["content"]
    assert replayed.startswith('{"city": "Paris", "temp": 20,') and replayed.endswith(sent[-80:])


def test_a_changed_value_inside_the_serialized_dict_still_diverges_at_that_field(store):
    """The agent's new code builds the dict in another order and with another wind speed: the string
    differs in a value, not only in key order, so the replay diverges there."""
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        agent_sending(str)(run)
    changed = agent_sending(str, lambda city: {"wind": {"dir": "N", "speed": 4}, "city": city, "temp": 20})
    result = Replayer(store, policy=ALLOW_ALL).replay(run.run_id, changed, tools="live", side_effects=True)
    assert result.reproduced is False and result.steps_compared == 1
    d = result.divergence
    assert (d.kind, d.step, d.mismatched) == ("mismatch", "3", ("hash",))
    assert [(f.path, f.change, f.a, f.b) for f in d.diff] == [
        ("messages[0].content", "changed", "{'temp': 20, 'city': 'Paris', 'wind': {'speed': 3, 'dir': 'N'}}",
         "{'wind': {'dir': 'N', 'speed': 4}, 'city': 'Paris', 'temp': 20}")]
    assert render_divergence(d).splitlines()[1:2] == [
        "  step 3: the replay made model.call m with different content (1 field(s) differ)"]


def test_the_diff_leaves_out_the_strings_that_differ_only_in_key_order(store):
    """Two serialized results in one request: the first reordered only, the second with another value.
    The divergence names the second alone."""
    def agent(n):
        def run_agent(run):
            a = run.call_tool("local", "weather", {"city": "Paris"}, lambda city: {"temp": 20, "city": city})
            b = run.call_tool("local", "weather", {"city": "Oslo"}, lambda city: {"temp": n, "city": city})
            run.complete({"model": "m", "messages": [{"role": "tool", "content": str(a)},
                                                     {"role": "tool", "content": str(b)}]},
                         lambda request: answer("ok"))
        return run_agent

    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        agent(5)(run)
    result = Replayer(store).replay(run.run_id, agent(5))
    assert result.reproduced is True, result.divergence

    # a recorded result served to an agent whose code now changes the second one
    def changed(run):
        a = run.call_tool("local", "weather", {"city": "Paris"}, lambda city: None)
        b = run.call_tool("local", "weather", {"city": "Oslo"}, lambda city: None)
        b["temp"] = 6
        run.complete({"model": "m", "messages": [{"role": "tool", "content": str(a)},
                                                 {"role": "tool", "content": str(b)}]},
                     lambda request: answer("ok"))

    result = Replayer(store).replay(run.run_id, changed)
    assert [(f.path, f.a, f.b) for f in result.divergence.diff] == [
        ("messages[1].content", "{'temp': 5, 'city': 'Oslo'}", "{'city': 'Oslo', 'temp': 6}")]
    assert "~ messages[1].content: \"{'temp': 5, 'city': 'Oslo'}\" -> \"{'city': 'Oslo', 'temp': 6}\"" in \
        render_divergence(result.divergence)


def test_a_record_written_before_scrubbing_and_a_reordered_dict_in_one_step_reproduce(store, monkeypatch):
    """Both normalisations at one step: the record (written before runs scrubbed the values they
    redacted earlier) holds a password in clear where the replay's view holds its marker, and the
    served dict's keys come sorted."""
    def agent(run):
        run.call_tool("auth", "login", {"user": "bob", "password": SECRET}, lambda user, password: "ok")
        result = run.call_tool("local", "weather", {"city": "Paris"}, lambda city: {"temp": 20, "city": city})
        run.call_tool("db", "save", {"sql": f"insert ... '{SECRET}'", "data": str(result)}, lambda sql, data: 1)

    with monkeypatch.context() as m:
        m.setattr(RunContext, "_remember_secrets", lambda self, values: None)
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            agent(run)
    saved = [store.resolve(e.payload)["arguments"] for e in store.read_run(run.run_id) if e.kind == "tool.call"][2]
    assert saved == {"sql": f"insert ... '{SECRET}'", "data": "{'temp': 20, 'city': 'Paris'}"}
    result = Replayer(store).replay(run.run_id, agent)
    assert (result.reproduced, result.divergence, result.steps_compared) == (True, None, 3)


def test_an_error_whose_message_is_a_served_dict_replays_with_the_same_outcome(store):
    """The run ended with ValueError(result), its message str() of the tool's dict: the replay's
    message had the keys sorted, an outcome divergence. Another value there still diverges."""
    def agent(temp):
        def run_agent(run):
            result = run.call_tool("local", "weather", {"city": "Paris"}, lambda city: {"temp": 20, "city": city})
            result["temp"] = temp
            raise ValueError(result)
        return run_agent

    with pytest.raises(ValueError):
        with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
            agent(20)(run)
    result = Replayer(store).replay(run.run_id, agent(20))
    assert (result.reproduced, result.divergence) == (True, None)
    assert result.agent_error == {"type": "ValueError", "message": "{'city': 'Paris', 'temp': 20}"}
    result = Replayer(store).replay(run.run_id, agent(21))
    assert result.divergence.kind == "outcome"
    assert result.divergence.message == (
        "every step matched and both runs ended error, but the recorded run raised ValueError: "
        "{'temp': 20, 'city': 'Paris'} and the replay raised ValueError: {'city': 'Paris', 'temp': 21} "
        "(differs in message)")


# --------------------------------------------------------------------------- the rule itself


@pytest.mark.parametrize("a, b", [
    ("{'b': 1, 'a': 2}", "{'a': 2, 'b': 1}"),
    ('{"b":1,"a":[{"y":null,"x":true}]}', '{"a":[{"x":true,"y":null}],"b":1}'),
    ("[{'b': 1, 'a': 2}]", "[{'a': 2, 'b': 1}]"),
    ("{'s', 't'}", "{'t', 's'}"),  # a set's members, in another order
    # a serialized dict holding a JSON string whose keys are in another order
    ("{'q': '{\"b\": 1, \"a\": 2}', 'p': 0}", "{'p': 0, 'q': '{\"a\": 2, \"b\": 1}'}"),
    ("{'k': '⟦redacted:hmac-sha256:ab⟧', 'c': 1}", "{'c': 1, 'k': '⟦redacted:hmac-sha256:ab⟧'}"),
])
def test_strings_holding_the_same_value_with_keys_in_another_order_are_equal(a, b):
    assert reordered_text(a, b) is True
    assert same_but_for_key_order({"x": [a, 1]}, {"x": [b, 1.0]}) is True


@pytest.mark.parametrize("a, b", [
    ("{'temp': 12, 'hum': 21}", "{'hum': 12, 'temp': 21}"),  # the same characters, other values
    ('{"a": 1.0}', '{"a": 1.00}'),  # the same value, other characters
    ("[16, 1]", "[0x10, 1]"),
    ("{'a': 1, 'b': True}", "{'b': 1, 'a': True}"),
    ("{'a': 1}", "{'a': True}"),
    ("(1, 2)", "(2, 1)"),  # a tuple's order is its value
    ("[1, 2]", "[2, 1]"),
    ("1.50", "1.05"),  # no container: never parsed
    ('{"a": NaN, "b": 1}', '{"b": 1, "a": NaN}'),  # NaN equals nothing
    ("{'b': 1, 'a': 2", "{'a': 2, 'b': 1"),  # not parseable
    ("{'b': __import__('os'), 'a': 2}", "{'a': 2, 'b': __import__('os')}"),  # never evaluated
])
def test_any_other_difference_in_a_string_still_differs(a, b):
    assert reordered_text(a, b) is False
    assert same_but_for_key_order({"x": a}, {"x": b}) is False


@pytest.mark.parametrize("a, b", [
    ("result: {'temp': 20, 'city': 'Paris'}", "result: {'city': 'Paris', 'temp': 20}"),
    ('Weather: {"temp": 20, "city": "Paris"}. Answer briefly.', 'Weather: {"city": "Paris", "temp": 20}. Answer briefly.'),
    # two serialized values in one text, with prose (and an apostrophe) between them
    ("a={'y': 1, 'x': 2}; it's b=[{'q': 0, 'p': 1}] (done)", "a={'x': 2, 'y': 1}; it's b=[{'p': 1, 'q': 0}] (done)"),
    # the inner dict reordered inside an outer one that is not
    ("got {'w': {'b': 1, 'a': 2}, 'z': 0}!", "got {'w': {'a': 2, 'b': 1}, 'z': 0}!"),
    # brackets inside the segment's strings
    ("x {'k': '}{', 'j': ']'} y", "x {'j': ']', 'k': '}{'} y"),
])
def test_a_serialized_value_inside_a_longer_text_with_keys_in_another_order_is_equal(a, b):
    assert reordered_text(a, b) is True
    assert same_but_for_key_order({"m": [a]}, {"m": [b]}) is True


@pytest.mark.parametrize("a, b", [
    ("result: {'temp': 20, 'city': 'Paris'}", "result: {'city': 'Paris', 'temp': 21}"),  # another value
    ("result: {'temp': 20, 'city': 'Paris'}", "Result: {'city': 'Paris', 'temp': 20}"),  # the text around it changed
    ("ok {'b': 1, 'a': 2} 12", "ok {'a': 2, 'b': 1} 21"),  # a change after the value, outside any value
    ("sum [1, 2] ok", "sum [2, 1] ok"),  # a list's order is its value
    ("see (it's {'b': 1, 'a': 2})", "see (it's {'a': 2, 'b': 1)}"),  # brackets moved: no longer parses
    ("call {'b': __import__('os'), 'a': 2}.", "call {'a': 2, 'b': __import__('os')}."),  # never evaluated
])
def test_any_other_difference_inside_a_longer_text_still_differs(a, b):
    assert reordered_text(a, b) is False
    assert same_but_for_key_order({"m": a}, {"m": b}) is False


RECORDS = [{"id": i, "name": f"n{i}"} for i in range(40)]


@pytest.mark.parametrize("recorded", [
    {"items": RECORDS, "page": 2, "next": "c2"},  # 40 closed brackets between the difference and its "{"
    {"name": "x", "items": RECORDS},  # 40 closing brackets between the difference and the one closing it
    {"items": RECORDS, "page": 2, "next": "c2", "more": {"z": RECORDS, "a": 1}},  # both, and again inside
])
def test_a_served_dict_holding_a_list_of_records_inside_a_longer_text_is_equal(recorded):
    """A tool result with a list of 40 records, served sorted, in ``f"result: {result}"``: more brackets
    than the 32 tried from the difference lie between it and the dict's own brackets; the brackets still
    open around it are tried first (docs/replay.md, "Serialized dicts")."""
    served = json.loads(json.dumps(recorded, sort_keys=True))
    for serialize in (lambda r: f"result: {r}", lambda r: f"Weather: {json.dumps(r)}. Answer briefly."):
        a, b = serialize(recorded), serialize(served)
        assert a != b and reordered_text(a, b) is True
        changed = json.loads(json.dumps(served))
        changed["items"][39]["name"] = "n38"
        assert reordered_text(a, serialize(changed)) is False


def test_a_served_dict_inside_a_longer_text_sent_to_the_model_replays_reproduced(store):
    """``f"result: {result}"``: the recorded text had the tool's key order, the replayed one has the
    record's (sorted); the run reproduces, and a changed value inside it still diverges."""
    serialize = lambda r: f"The tool said: {r}. Reply in one word."  # noqa: E731
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        agent_sending(serialize)(run)
    assert requests(store, run.run_id)[0]["messages"][0]["content"] == (
        "The tool said: {'temp': 20, 'city': 'Paris', 'wind': {'speed': 3, 'dir': 'N'}}. Reply in one word.")
    result = Replayer(store).replay(run.run_id, agent_sending(serialize))
    assert (result.reproduced, result.divergence, result.steps_compared) == (True, None, 2), result.divergence
    assert requests(store, result.new_run_id)[0]["messages"][0]["content"] == (
        "The tool said: {'city': 'Paris', 'temp': 20, 'wind': {'dir': 'N', 'speed': 3}}. Reply in one word.")
    changed = Replayer(store).replay(run.run_id, agent_sending(lambda r: serialize({**r, "temp": 21})))
    d = changed.divergence
    assert (changed.reproduced, d.kind, d.step, d.mismatched) == (False, "mismatch", "3", ("hash",))
    assert [(f.path, f.a, f.b) for f in d.diff] == [(
        "messages[0].content",
        "The tool said: {'temp': 20, 'city': 'Paris', 'wind': {'speed': 3, 'dir': 'N'}}. Reply in one word.",
        "The tool said: {'city': 'Paris', 'temp': 21, 'wind': {'dir': 'N', 'speed': 3}}. Reply in one word.")]


def test_contents_of_another_shape_differ():
    assert same_but_for_key_order({"a": "{'b': 1, 'c': 2}"}, {"a": "{'c': 2, 'b': 1}", "d": 1}) is False
    assert same_but_for_key_order(["{'b': 1, 'c': 2}"], ["{'c': 2, 'b': 1}", 1]) is False
    assert same_but_for_key_order({"a": 1}, {"a": "1"}) is False
    assert same_but_for_key_order({"a": None}, {"a": False}) is False
    assert same_but_for_key_order({"a": 1}, {"a": True}) is False


def test_a_string_too_long_to_parse_as_a_literal_differs():
    body = ", ".join(f"'k{i}': {i}" for i in range(MAX_LITERAL_CHARS // 10))
    a, b = "{" + body + ", 'z': 1}", "{'z': 1, " + body + "}"
    assert len(a) > MAX_LITERAL_CHARS and reordered_text(a, b) is False
    # the same as JSON is parsed (JSON's limit is higher)
    ja = json.dumps(dict([*((f"k{i}", i) for i in range(MAX_LITERAL_CHARS // 10)), ("z", 1)]))
    jb = json.dumps(dict([("z", 1), *((f"k{i}", i) for i in range(MAX_LITERAL_CHARS // 10))]))
    assert len(ja) > MAX_LITERAL_CHARS and reordered_text(ja, jb) is True


@pytest.mark.parametrize("serialize", [str, json.dumps, lambda r: f"The tool said: {r}."])
def test_a_served_whole_number_float_sent_to_the_model_as_text_replays_reproduced(store, serialize):
    """A tool returning ``{"temp": 20.0}`` (a temperature, a price) sent to the model as text: the record
    keeps 20.0 as 20 (RFC 8785), so the served dict prints ``20``; the agent behaved the same and the
    replay reproduces (docs/replay.md, "Serialized dicts"). Another value still diverges."""
    weather = lambda city: {"temp": 20.0, "city": city, "rain": [0.0, 1.5]}  # noqa: E731
    with Recorder(store, policy=ALLOW_ALL).run(agent="bot") as run:
        agent_sending(serialize, weather)(run)
    assert "20.0" in requests(store, run.run_id)[0]["messages"][0]["content"]
    result = Replayer(store).replay(run.run_id, agent_sending(serialize, weather))
    assert (result.reproduced, result.divergence) == (True, None)
    assert requests(store, result.new_run_id)[0]["messages"][0]["content"] == \
        serialize({"city": "Paris", "rain": [0, 1.5], "temp": 20})  # served: keys sorted, 20.0 and 0.0 as ints
    changed = Replayer(store).replay(run.run_id, agent_sending(lambda r: serialize({**r, "temp": 21}), weather))
    assert (changed.reproduced, changed.divergence.kind) == (False, "mismatch")


@pytest.mark.parametrize("a, b", [
    ("{'temp': 20.0, 'city': 'Paris'}", "{'city': 'Paris', 'temp': 20}"),
    ('{"temp": 20.0}', '{"temp": 20}'),
    ("said: {'t': 20.0, 'c': 'P'}.", "said: {'c': 'P', 't': 20}."),
    ("[1.0, 2.0] and {'b': 3.0, 'a': 1} ok", "[1, 2] and {'a': 1, 'b': 3} ok"),
    ("x {'r': [0.0, 1.5], 'z': 100.0} y", "x {'r': [0, 1.5], 'z': 100} y"),
])
def test_a_whole_number_float_printed_without_its_dot_zero_is_equal(a, b):
    assert reordered_text(a, b) is True
    assert same_but_for_key_order({"m": a}, {"m": b}) is True


@pytest.mark.parametrize("a, b", [
    ("{'temp': 20.0}", "{'temp': 21}"),  # another value
    ("{'t': 20}", "{'t': 20.0}"),  # the replay holds a .0 the record does not: not what serving does
    ("v 3.0 {'a': 1}", "v 3 {'a': 1}"),  # outside any serialized value
    ("{'t': 20.5}", "{'t': 205}"),  # not a .0 pair
    ("{'v': '3.0'}", "{'v': '3'}"),  # a string, not a number
    ("{'a': 1.00}", "{'a': 1}"),  # 1.00 is not how Python prints a float
])
def test_other_number_differences_still_differ(a, b):
    assert reordered_text(a, b) is False
    assert same_but_for_key_order({"m": a}, {"m": b}) is False
