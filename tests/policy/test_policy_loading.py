"""Loading policy files: YAML 1.2, schema, errors with lines, fingerprints."""

from __future__ import annotations

import pytest
from policy_helpers import call, load, write

from sealbox.errors import PolicyLoadError
from sealbox.policy import ALLOW_ALL, Policy

BASE = """
version: 1
name: prod-db
rules:
  - id: reads-ok
    match: {server: db, tool: "read_*"}
    effect: allow
"""


def load_error(tmp_path, text) -> PolicyLoadError:
    with pytest.raises(PolicyLoadError) as info:
        load(tmp_path, text)
    return info.value


def test_yaml_11_no_stays_a_string_in_a_tool_match(tmp_path):
    policy = load(tmp_path, """
        version: 1
        rules:
          - id: r
            match: {tool: no, server: on}
            effect: allow
    """)
    assert policy.to_dict()["rules"][0]["match"]["tool"] == ["no"]
    assert policy.to_dict()["rules"][0]["match"]["server"] == ["on"]
    assert policy.evaluate(call(tool="no", server="on")).rule == "r"
    assert policy.evaluate(call(tool="false", server="on")).reason_code == "no_match"


@pytest.mark.parametrize("word", ["no", "y", "on", "off", "yes"])
def test_yaml_11_booleans_as_effect_are_errors_naming_the_line(tmp_path, word):
    err = load_error(tmp_path, f"""
        version: 1
        rules:
          - id: r
            effect: {word}
    """)
    assert err.line == 4
    assert err.problem == f"rules[0].effect: '{word}' is not one of allow, deny, require_approval"


def test_yaml_11_directive_turning_no_into_false_is_rejected_by_the_schema(tmp_path):
    err = load_error(tmp_path, """
        %YAML 1.1
        ---
        version: 1
        rules:
          - id: r
            match: {tool: no}
            effect: allow
    """)
    assert err.line == 6
    assert err.problem == "rules[0].match.tool: false is not a string or a list"


def test_unknown_field_is_an_error_naming_its_line(tmp_path):
    err = load_error(tmp_path, BASE + "    priority: 3\n")
    assert (err.line, err.problem) == (7, "unknown field 'rules[0].priority'")
    assert str(err) == f"{tmp_path / 'policy.yaml'}:7: unknown field 'rules[0].priority'"


def test_yaml_merge_keys_are_merged_and_a_merged_field_is_named_at_its_mapping(tmp_path):
    """A merged-in key has no line of its own in ruamel's map (it raised KeyError, "internal error")."""
    policy = load(tmp_path, """
        version: 1
        name: p
        rules:
          - &deny {id: r0, match: {tool: y}, effect: deny}
          - <<: *deny
            id: r1
            match: {tool: x}
    """)
    assert [(r["id"], r["effect"], r["match"]["tool"]) for r in policy.to_dict()["rules"]] == [
        ("r0", "deny", ["y"]), ("r1", "deny", ["x"])]
    err = load_error(tmp_path, "version: 1\nname: p\nrules:\n  - id: r1\n    match: {tool: x}\n    <<: {effect: deny, priority: 3}\n")
    assert (err.line, err.problem) == (4, "unknown field 'rules[0].priority'")


def test_unknown_top_level_field(tmp_path):
    err = load_error(tmp_path, BASE + "defaults: allow\n")
    assert (err.line, err.problem) == (7, "unknown field 'defaults'")


def test_default_allow_is_rejected(tmp_path):
    err = load_error(tmp_path, BASE.replace("name: prod-db", "name: p\ndefault: allow"))
    assert err.line == 3
    assert "default" in err.problem


def test_invalid_yaml_names_the_line(tmp_path):
    err = load_error(tmp_path, "version: 1\nrules: [\n  {id: a\nname: x\n")
    assert err.line == 4
    assert err.problem.startswith("invalid YAML:")


def test_duplicate_key_names_the_second_line(tmp_path):
    err = load_error(tmp_path, "version: 1\nrules: []\nrules: []\n")
    assert (err.line, err.problem) == (3, 'invalid YAML: found duplicate key "rules"')


def test_missing_file(tmp_path):
    with pytest.raises(PolicyLoadError) as info:
        Policy.load(tmp_path / "nope.yaml")
    assert (info.value.line, info.value.problem) == (None, "file not found")


def test_a_policy_file_is_read_no_further_than_its_size_limit(tmp_path):
    # `sealbox policy check /dev/zero` (or whatif --policy) read the whole "file" before checking its size:
    # MemoryError, "internal error", exit 70, once the machine's memory was gone. A pipe that delivers more
    # than the limit and stays open shows it safely: the load must answer without waiting for its end.
    import os
    import threading

    from sealbox.policy.loader import MAX_FILE_BYTES

    fifo = tmp_path / "policy.yaml"
    os.mkfifo(fifo)
    closed, answered = threading.Event(), threading.Event()

    def writer():
        with open(fifo, "wb") as fh:
            fh.write(b"#" * (MAX_FILE_BYTES + 4096))
            fh.flush()
            answered.wait(60)  # an endless source: still open until the test has its answer (a load
            # that reads to the end waits the 60 s for EOF, then `closed` fails the test)
        closed.set()

    t = threading.Thread(target=writer)
    t.start()
    try:
        with pytest.raises(PolicyLoadError) as info:
            Policy.load(fifo)
        assert not closed.is_set(), "the whole input was read, not only up to the limit"
        assert (info.value.line, info.value.problem) == (None, f"file is larger than {MAX_FILE_BYTES} bytes")
    finally:
        answered.set()
        t.join()


def test_non_compiling_condition_names_the_when_line(tmp_path):
    err = load_error(tmp_path, BASE + "    when: 'call.arguments.q =='\n")
    assert err.line == 7
    assert err.problem.startswith("rule 'reads-ok': condition does not compile:")


@pytest.mark.parametrize(
    ("when", "problem"),
    [
        ("secrets.x == 1", "condition reads unknown variable 'secrets'"),
        ("shell(call.tool)", "condition calls unknown function 'shell'"),
        ("call.arguments.rows.all(r, r.cols.all(c, c > 0))", "condition nests comprehension macros 2 deep, above the limit of 1"),
        ('call.tool.matches("(")', 'condition has an invalid regular expression "("'),
    ],
)
def test_conditions_rejected_at_load(tmp_path, when, problem):
    err = load_error(tmp_path, BASE + f"    when: '{when}'\n")
    assert err.line == 7
    assert err.problem.startswith(f"rule 'reads-ok': {problem}")


def test_nested_macros_are_accepted_when_expensive(tmp_path):
    policy = load(tmp_path, BASE + "    when: 'call.arguments.rows.all(r, r.cols.all(c, c > 0))'\n    expensive: true\n")
    assert policy.rules[0].condition.expensive is True


def test_duplicate_rule_id(tmp_path):
    err = load_error(tmp_path, BASE + "  - id: reads-ok\n    effect: deny\n")
    assert (err.line, err.problem) == (7, "duplicate rule id 'reads-ok'")


def test_require_approval_needs_an_approval_section(tmp_path):
    err = load_error(tmp_path, BASE.replace("effect: allow", "effect: require_approval"))
    assert (err.line, err.problem) == (6, "rule 'reads-ok': require_approval needs an 'approval' section")


def approval_policy(expires: str) -> str:
    return BASE.replace("effect: allow", f"effect: require_approval\n    approval: {{groups: [ops], expires: {expires}}}")


@pytest.mark.parametrize(("expires", "shown"), [
    ("1w", "'1w'"), ("-5", "-5"), ("0", "0"), ("1.5", "1.5"), ("0s", "'0s'"), ("'1'", "'1'"), ("true", "true"),
    ("null", "null"), (".inf", ".inf"), ("[.nan]", "[.nan]"), ("[60]", "[60]"),
])  # fmt: skip
def test_bad_duration_says_what_is_accepted(tmp_path, expires, shown):
    """-5, 0 and 1.5 used to be refused with "... is not a string", though whole seconds are accepted."""
    err = load_error(tmp_path, approval_policy(expires))
    assert err.line == 7
    assert err.problem == ("rules[0].approval.expires must be a positive whole number of seconds or a duration "
                           f"like 30s, 15m, 1h, 2d, not {shown}")  # fmt: skip


@pytest.mark.parametrize(("expires", "seconds"), [("3600", 3600), ("1h", 3600), ("90s", 90), ("2d", 172800),
                                                  ("60.0", 60), ("1e3", 1000)])  # fmt: skip
def test_good_durations_are_seconds(tmp_path, expires, seconds):
    """A whole float (60.0, which JSON Schema counts as an integer) used to end in an internal TypeError."""
    policy = load(tmp_path, approval_policy(expires))
    assert policy.rules[0].approval.expires_s == seconds
    assert policy.to_dict()["rules"][0]["approval"]["expires"] == seconds
    assert type(policy.to_dict()["rules"][0]["approval"]["expires"]) is int


@pytest.mark.parametrize(("expires", "shown"), [
    ("3000000d", "'3000000d'"), ("367d", "'367d'"), ("8785h", "'8785h'"), ("31622401", "31622401"),
    ("31622401s", "'31622401s'"), ("1e30", "1e+30"), ("9" * 5000 + "d", repr("9" * 5000 + "d")),
    (str(10**400), str(10**400)),
])  # fmt: skip
def test_a_duration_longer_than_366_days_is_refused(tmp_path, expires, shown):
    """3000000d passed the pattern, then every call reaching the rule failed to record (date out of range)."""
    err = load_error(tmp_path, approval_policy(expires))
    assert (err.line, err.problem) == (
        7, f"rules[0].approval.expires must be at most 366d (31622400 seconds), not {shown}")


def test_the_longest_duration_is_366_days_also_from_dict(tmp_path):
    assert load(tmp_path, approval_policy("366d")).rules[0].approval.expires_s == 31622400
    assert load(tmp_path, approval_policy("31622400")).rules[0].approval.expires_s == 31622400
    doc = load(tmp_path, approval_policy("366d")).to_dict()
    assert Policy.from_dict(doc).rules[0].approval.expires_s == 31622400
    doc["rules"][0]["approval"]["expires"] = 31622401
    with pytest.raises(PolicyLoadError) as info:
        Policy.from_dict(doc)
    assert (info.value.line, info.value.problem) == (
        1, "rules[0].approval.expires must be at most 366d (31622400 seconds), not 31622401")


def test_an_approval_expiring_in_366_days_is_recorded(tmp_path):
    """The longest accepted expiry still records the call and its request (expires_at 366 days on)."""
    import datetime as dt

    from sealbox import ApprovalPending, init_store
    from sealbox.recorder import Recorder

    store = init_store(tmp_path / "store")
    try:
        rec = Recorder(store, policy=load(tmp_path, approval_policy("366d")), approvals="suspend")
        with pytest.raises(ApprovalPending):
            with rec.run(agent="a", principal="agent:x") as run:
                run.call_tool("db", "read_rows", {}, lambda: 1)
        events = store.read_run(run.run_id)
        kinds = [e.kind for e in events]
        assert kinds[kinds.index("tool.call"):] == [
            "tool.call", "policy.decision", "approval.requested", "run.suspended"]
        requested = next(e for e in events if e.kind == "approval.requested")
        at = dt.datetime.fromisoformat(requested.ts.replace("Z", "+00:00"))
        expires = dt.datetime.fromisoformat(requested.payload["expires_at"].replace("Z", "+00:00"))
        # the request time is the store's clock, the event's own timestamp
        assert expires - at == dt.timedelta(days=366)
    finally:
        store.close()


# Every number field that may hold a float. NaN passes JSON Schema's "minimum" (nan < 0 is false) and a
# NaN bound never trips (x > nan is false): such a limit failed open.
FLOAT_FIELDS = [
    ("limits: {cost: {per_run: V}}", "limits.cost.per_run"),
    ("limits: {cost: {per_day: V}}", "limits.cost.per_day"),
    ("limits: {max_run_seconds: V}", "limits.max_run_seconds"),
    ('prices: {"openai/gpt-4o": {input: V, output: 1}}', "prices.openai/gpt-4o.input"),
    ('prices: {"openai/gpt-4o": {input: 1, output: V}}', "prices.openai/gpt-4o.output"),
]
BAD_NUMBERS = [(".nan", ".nan is not a finite number"), (".inf", ".inf is not a finite number"),
               ("-.inf", "-.inf is not a finite number"), ("-2.5", "-2.5 is less than the minimum of 0")]  # fmt: skip


@pytest.mark.parametrize(("line", "field"), FLOAT_FIELDS)
@pytest.mark.parametrize(("value", "problem"), BAD_NUMBERS)
def test_non_finite_or_negative_float_fields_are_refused(tmp_path, line, field, value, problem):
    err = load_error(tmp_path, BASE + line.replace("V", value) + "\n")
    assert (err.line, err.problem) == (7, f"{field}: {problem}")


@pytest.mark.parametrize(("line", "field"), FLOAT_FIELDS)
@pytest.mark.parametrize(("value", "problem"), [(float("nan"), ".nan is not a finite number"),
                                                (float("inf"), ".inf is not a finite number"),
                                                (float("-inf"), "-.inf is not a finite number"),
                                                (-0.5, "-0.5 is less than the minimum of 0")])  # fmt: skip
def test_non_finite_or_negative_float_fields_are_refused_by_from_dict(line, field, value, problem):
    doc = {"version": 1, "rules": [{"id": "a", "effect": "allow"}]}
    if line.startswith("limits"):
        keys = field.split(".")[1:]
        doc["limits"] = {keys[0]: value} if len(keys) == 1 else {keys[0]: {keys[1]: value}}
    else:
        side = field.rsplit(".", 1)[1]
        doc["prices"] = {"openai/gpt-4o": {"input": 1, "output": 1, side: value}}
    with pytest.raises(PolicyLoadError) as info:
        Policy.from_dict(doc)
    assert info.value.problem == f"{field}: {problem}"


def test_non_finite_match_values_are_refused(tmp_path):
    err = load_error(tmp_path, BASE.replace("tool: \"read_*\"}", "tool: \"read_*\", labels: {score: .nan}}"))
    assert (err.line, err.problem) == (5, "rules[0].match.labels.score: .nan is not a finite number")


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", "-1"])
def test_integer_limits_refuse_the_same_values(tmp_path, value):
    err = load_error(tmp_path, BASE + f"limits: {{tokens: {{per_run: {value}}}}}\n")
    shown = {".nan": ".nan", ".inf": ".inf", "-.inf": "-.inf"}.get(value)
    expected = f" must be a whole number or null, not {shown}" if shown else ": -1 is less than the minimum of 0"
    assert (err.line, err.problem) == (7, f"limits.tokens.per_run{expected}")


def test_zero_limits_are_accepted_and_allow_nothing(tmp_path):
    """0 is a bound like any other: for the integer limits 0 calls, for cost 0 spent, for time 0 seconds."""
    policy = load(tmp_path, BASE + "limits: {max_tool_calls_per_run: 0, cost: {per_run: 0, per_day: 0.0}, "
                                   "max_run_seconds: 0}\n")  # fmt: skip
    assert policy.limit_bounds == (("max_run_seconds", 0), ("max_tool_calls_per_run", 0), ("cost.per_run", 0),
                                   ("cost.per_day", 0.0))  # fmt: skip
    d = policy.evaluate(call(run={"elapsed_s": 0.0}, usage={"tool_calls_run": 0}))
    assert (d.effect, d.reason_code, d.reason) == ("deny", "limit_exceeded", "limit max_tool_calls_per_run exceeded: 1 > 0")
    d = policy.evaluate(call(run={"elapsed_s": 0.5}))
    assert (d.effect, d.reason) == ("deny", "limit max_run_seconds exceeded: 0.5 > 0")
    d = policy.evaluate(call(run={"elapsed_s": 0.0}, usage={"cost_run": 0.001}))
    assert (d.effect, d.reason) == ("deny", "limit cost.per_run exceeded: 0.001 > 0")
    d = policy.evaluate(call(run={"elapsed_s": 0.0}, usage={"cost_run": 0.0, "cost_day": 0.0}))
    assert (d.effect, d.rule) == ("allow", "reads-ok")


@pytest.mark.parametrize(("when", "problem"), [
    ('"1"', "condition is always the int 1, never true or false"),
    ("'\"yes\"'", 'condition is always the string "yes", never true or false'),
    ("'1.5'", "condition is always the double 1.5, never true or false"),
    ("'null'", "condition is always null, never true or false"),
    ("'[true]'", "condition is always the list [true], never true or false"),
    ("'1 + 2'", "condition is always the int 3, never true or false"),
    ("'1 / 0'", "condition always fails (ZeroDivisionError: division by zero in CEL expression)"),
    ("'call.arguments.n + 1'", "condition is arithmetic (top-level '+'), never true or false"),
    ("'(size(call.arguments) * 2)'", "condition is arithmetic (top-level '*'), never true or false"),
    ("'[call.tool]'", "condition is a list literal, never true or false"),
    ("'{\"k\": call.tool}'", "condition is a map literal, never true or false"),
])  # fmt: skip
def test_a_condition_that_can_never_be_a_bool_is_refused(tmp_path, when, problem):
    """It used to load, then deny every call it reached with guardrail_error."""
    err = load_error(tmp_path, BASE + f"    when: {when}\n")
    assert (err.line, err.problem) == (
        7, f"rule 'reads-ok': {problem}: every call it reaches would be denied with guardrail_error")


@pytest.mark.parametrize("when", ["true", "1 > 2", "call.arguments.n - 1 > 0", "[call.tool][0] == 'x'",
                                  "-call.arguments.n < 0", "[1].all(x, x > 0)", "!has(call.arguments.x)",
                                  "call.tool == 'a' // a comment, not variables",
                                  "size(call.arguments) - 1 == 0 ? true : false", "principal.attributes.ok"])  # fmt: skip
def test_conditions_that_may_be_a_bool_still_load(tmp_path, when):
    """Unary minus used to be refused as the unknown function '-_', and words in a // comment as unknown variables."""
    policy = load(tmp_path, BASE + f'    when: "{when}"\n')
    assert policy.rules[0].condition.source == when


def test_fingerprint_ignores_comments_key_order_and_omitted_defaults(tmp_path):
    a = load(tmp_path, BASE)
    b = Policy.from_text("""
# the same policy, spelled differently
rules:
  - effect: allow          # allow reads
    match: {tool: ["read_*"], server: db, principal: {}}
    id: reads-ok
    expensive: false
name: prod-db
default: deny
version: 1
evaluation: {timeout_ms: 50}
limits: {tokens: {per_run: null}}
""")
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint.startswith("sha256:") and len(a.fingerprint) == 71
    assert Policy.from_dict(a.to_dict()).fingerprint == a.fingerprint


def test_fingerprint_changes_with_a_rule(tmp_path):
    a = load(tmp_path, BASE)
    b = Policy.from_text(BASE.replace("read_*", "read_rows"))
    assert a.fingerprint != b.fingerprint


def test_normalized_form_fills_defaults(tmp_path):
    d = load(tmp_path, BASE).to_dict()
    assert d["rules"][0] == {
        "id": "reads-ok", "description": "", "effect": "allow", "when": None, "expensive": False, "approval": None,
        "match": {"server": ["db"], "tool": ["read_*"], "principal": {}, "agent": {}, "labels": {}},
    }  # fmt: skip
    assert d["evaluation"] == {"timeout_ms": 50, "max_input_bytes": 65536}
    assert d["default"] == "deny"
    assert d["limits"]["cost"] == {"per_run": None, "per_day": None, "currency": "USD"}


def test_allow_all_is_explicit_and_fingerprinted():
    assert ALLOW_ALL.name == "ALLOW_ALL"
    assert [r.id for r in ALLOW_ALL.rules] == ["allow-all"]
    assert ALLOW_ALL.fingerprint == Policy.from_dict(ALLOW_ALL.to_dict()).fingerprint
    d = ALLOW_ALL.evaluate(call(tool="anything", server="anywhere"))
    assert (d.effect, d.reason_code, d.rule) == ("allow", "policy_allow", "allow-all")


@pytest.mark.parametrize(("replacement", "problem"), [
    ("id: null", "rules[0].id must be a string, not null"),
    ("id: [a, 1]", 'rules[0].id must be a string, not ["a", 1]'),
    ("id: {x: true}", 'rules[0].id must be a string, not {"x": true}'),
    ("effect: [allow]", 'rules[0].effect: ["allow"] is not one of allow, deny, require_approval'),
])
def test_a_wrongly_typed_value_is_quoted_as_the_yaml_spells_it(tmp_path, replacement, problem):
    """jsonschema's own wording quoted it as Python writes it: "None is not of type 'string'",
    "['a', 1] is not of type 'string'", "['allow'] is not one of ..."."""
    field = replacement.split(":")[0]
    line = {"id": "  - id: reads-ok", "effect": "    effect: allow"}[field]
    indent = line[:len(line) - len(line.lstrip(" -"))]
    err = load_error(tmp_path, BASE.replace(line, indent + replacement))
    assert err.problem == problem
