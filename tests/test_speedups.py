"""The optional C extension ``sealbox._speedups`` against its Python reference.

``copy_plain(value, limit)`` must give exactly what ``sealbox.canonical._copy_plain(value, 0,
limit, seen)`` gives -- the same copy (types included), the same float flag -- or raise where
the reference raises. Where the extension was not built (no C compiler), these tests skip,
unless ``SEALBOX_REQUIRE_SPEEDUPS=1`` (CI) makes its absence a failure.
"""

from __future__ import annotations

import enum
import gc
import os
import subprocess
import sys
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sealbox import canonical

try:
    from sealbox import _speedups
except ImportError:  # pragma: no cover - built without a C compiler
    _speedups = None

if _speedups is None and os.environ.get("SEALBOX_REQUIRE_SPEEDUPS") == "1":  # pragma: no cover
    raise RuntimeError("SEALBOX_REQUIRE_SPEEDUPS=1 but sealbox._speedups was not built (is gcc installed?)")

pytestmark = pytest.mark.skipif(_speedups is None, reason="sealbox._speedups was not built (no C compiler): "
                                "the Python reference is used, and tested by tests/test_canonical.py")


class _Colour(enum.Enum):
    RED = 1


class _Int(int):
    pass


class _Str(str):
    pass


class _Dict(dict):
    pass


class _List(list):
    pass


_ODD = [_Colour.RED, _Int(3), _Str("s"), _Dict(a=1), _List([1]), b"\x00", bytearray(b"x"), uuid.UUID(int=7),
        "\ud800", "a\udfffb", "\U0001F600", "é", "\x00\x1f", -0.0, 0.0, 1e300, 5e-324, float("nan"),
        float("inf"), float("-inf"), 2**53 - 1, -(2**53 - 1), 2**53, -(2**53), 2**64, True, False, None, ()]

_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**60), max_value=2**60)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text() | st.sampled_from(_ODD),
    lambda children: st.lists(children, max_size=4) | st.lists(children, max_size=3).map(tuple)
    | st.dictionaries(st.text(max_size=4) | st.sampled_from(["$blob", "a$", "é", "$", "", "\ud800", "k"]),
                      children, max_size=4)
    | st.dictionaries(st.integers(0, 3) | st.sampled_from([_Str("k"), None, 1.5]), children, max_size=2),
    max_leaves=25,
)


def _same(a: Any, b: Any) -> bool:
    """Equal with exactly the same types at every level (1 == 1.0 == True is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return repr(a) == repr(b)
    return a == b


def _reference(value: Any, limit: int) -> tuple[Any, bool] | None:
    seen = [False]
    try:
        return canonical._copy_plain(value, 0, limit, seen), seen[0]
    except canonical._NotPlain:
        return None


def _fast(value: Any, limit: int) -> tuple[Any, bool] | None:
    try:
        return _speedups.copy_plain(value, limit)
    except _speedups.NotPlain:
        return None


@settings(max_examples=1500, deadline=None)
@given(_values, st.integers(min_value=2, max_value=9))
def test_c_copy_plain_answers_exactly_as_the_python_reference(value: Any, limit: int) -> None:
    ref, fast = _reference(value, limit), _fast(value, limit)
    assert (ref is None) == (fast is None), (value, limit, ref, fast)
    if ref is not None:
        assert _same(fast[0], ref[0]), (value, fast, ref)
        assert fast[1] is ref[1]


@pytest.mark.parametrize("value", _ODD, ids=repr)
def test_c_copy_plain_agrees_on_every_odd_value_alone_and_nested(value: Any) -> None:
    for wrapped in (value, [value], {"k": value}, {"k": [1, {"j": value}]}, (value,)):
        ref, fast = _reference(wrapped, 10), _fast(wrapped, 10)
        assert (ref is None) == (fast is None), wrapped
        if ref is not None:
            assert _same(fast[0], ref[0]) and fast[1] is ref[1]


def test_c_copy_plain_copies_containers_and_shares_scalars() -> None:
    inner = {"query": "SELECT 1", "params": [1, "open", None, True, 2.5], "note": "café"}
    payload = {"arguments": inner, "tags": ("a", "b")}
    out, floats = _speedups.copy_plain(payload, canonical.MAX_DEPTH)
    assert out == {"arguments": {"query": "SELECT 1", "params": [1, "open", None, True, 2.5], "note": "café"},
                   "tags": ["a", "b"]}
    assert floats is True
    assert out is not payload and out["arguments"] is not inner and out["arguments"]["params"] is not inner["params"]
    assert out["arguments"]["query"] is inner["query"] and out["arguments"]["note"] is inner["note"]
    inner["params"].append("later")  # the caller's later change stays out of the copy
    assert out["arguments"]["params"] == [1, "open", None, True, 2.5]
    assert _speedups.copy_plain({"n": 1, "s": ["x"]}, canonical.MAX_DEPTH) == ({"n": 1, "s": ["x"]}, False)


def test_c_copy_plain_depth_limit_is_the_references() -> None:
    deep: Any = 1
    for _ in range(200):
        deep = [deep]
    for limit in (2, 3, 4, 5, 64, 128):
        ref, fast = _reference(deep, limit), _fast(deep, limit)
        assert ref is None and fast is None
    shallow: Any = 1
    for _ in range(4):
        shallow = {"k": shallow}
    # the innermost of 4 dicts sits inside 3: refused where 3 + 3 > limit (room for envelope and marker)
    assert _fast(shallow, 5) is None and _reference(shallow, 5) is None
    assert _fast(shallow, 6) == ({"k": {"k": {"k": {"k": 1}}}}, False) == _reference(shallow, 6)


def test_c_copy_plain_refuses_cycles_without_recursing_forever() -> None:
    loop: list = []
    loop.append(loop)
    ring: dict = {}
    ring["self"] = ring
    assert _fast(loop, canonical.MAX_DEPTH) is None and _fast(ring, canonical.MAX_DEPTH) is None
    assert canonical.encode(loop) == [{"$lossy": {"reason": "cycle", "type": "builtins.list"}}]


def test_c_copy_plain_rejects_bad_limits_with_a_typed_error() -> None:
    with pytest.raises(TypeError):
        _speedups.copy_plain({})
    with pytest.raises(TypeError):
        _speedups.copy_plain({}, "8")
    with pytest.raises(ValueError):
        _speedups.copy_plain({}, -1)


class _Mutator:
    """Garbage whose finalizer changes ``target`` while a collection runs (inside the copy)."""

    def __init__(self, target: dict) -> None:
        self.target = target
        self.cycle = self

    def __del__(self) -> None:
        self.target["added_by_a_finalizer"] = 1


def test_a_dict_changed_during_the_c_copy_is_left_to_the_encoder() -> None:
    """A collection inside the copy (its new dicts are tracked objects) can run finalizers, and a
    finalizer can change the dict being copied: the copy must not be taken (the Python reference
    raises "changed size during iteration" there), and encode gives the encoder's exact answer."""
    target = {f"k{i}": {"v": i} for i in range(50)}
    threshold = gc.get_threshold()
    try:
        gc.collect()
        gc.set_threshold(1)  # every new container may start a collection
        _Mutator(target)  # unreachable cycle: collected (finalizer run) during the copy below
        out = canonical.encode(target)
    finally:
        gc.set_threshold(*threshold)
    assert out == canonical._Encoder(canonical.MAX_DEPTH).enc(target, 0)
    assert "added_by_a_finalizer" in target


def test_the_pure_python_switch_is_honoured() -> None:
    code = ("import sealbox.canonical as c; "
            "print(c.SPEEDUPS, c.encode({'a': [1, 2.5, 'x']}), c._encode_noting_floats({'b': (1,)}))")
    outs = {}
    for flag in ("1", "0"):
        env = {**os.environ, "SEALBOX_PURE_PYTHON": flag}
        outs[flag] = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                    check=True).stdout.strip()
    assert outs["1"] == "False {'a': [1, 2.5, 'x']} ({'b': [1]}, False)"
    assert outs["0"] == "True {'a': [1, 2.5, 'x']} ({'b': [1]}, False)"


def test_c_copy_plain_refuses_nesting_deeper_than_the_stack_as_the_reference_does() -> None:
    """copy_plain accepts limits up to 100000: a value nested that deep must raise (RecursionError,
    as the Python reference does), not overflow the C stack. In a child process: a crash there
    must fail this test, not end the test run."""
    code = ("import sys\n"
            "from sealbox import _speedups, canonical\n"
            "deep = 1\n"
            "for _ in range(100_000):\n"
            "    deep = [deep]\n"
            "for f in (lambda: canonical._copy_plain(deep, 0, 100_000, [False]),\n"
            "          lambda: _speedups.copy_plain(deep, 100_000)):\n"
            "    try:\n"
            "        f()\n"
            "    except RecursionError:\n"
            "        print('RecursionError')\n"
            "print(_speedups.copy_plain([[1]], 100_000))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split("\n") == ["RecursionError", "RecursionError", "([[1]], False)", ""]


# --------------------------------------------------------------------------- scan_text (the redactor's quick check)

from sealbox.redaction import ContentPolicy, Redactor, _norm_key, _required_literals, _scan_tables, _suffix_table  # noqa: E402

_NEEDLES = (b'"$map"', b"bearer", b"sk-", b"://")
_TABLES = _scan_tables(_NEEDLES, 0b0010)  # "bearer" in either case
_KEYS = (b"password", b"token", b"xapikey")


@pytest.mark.parametrize("text, expected", [
    (b'{"a":"plain text","n":[1,2]}', 0),
    (b'{"a":"Authorization: BEARER abc"}', 0b0010),
    (b'{"a":"bEaReR"}', 0b0010),
    (b'{"a":"bearxr"}', 0),
    (b'{"a":"sk","b":"-"}', 0),
    (b'{"a":"SK-1"}', 0),  # "sk-" is case-sensitive
    (b'{"u":"https://h/","k":"sk-x"}', 0b1100),
    (b'{"$map":[]}', 0b0001),
    (b'{"a":"ends in sk-"}', 0b0100),
    (b'{"Pass_Word":1}', -1),  # normalised as _norm_key does
    (b'{"X-Api-Key":null}', -1),
    (b'{"tokens":1,"my_token":2}', 0),  # a name containing a key is not the key
    (b'{"a":"token","b":["password"]}', 0),  # values are not names
    (b'{"to\\u006ben":1}', -1),  # a backslash: escapes, so nothing is decided
    (b'{"a":"\\\\"}', -1),
    ('{"\u212aey":1}'.encode(), -1),  # a name with a byte >= 0x80 (KELVIN SIGN lower-cases to "k")
    ('{"a":"\u212aey é"}'.encode(), 0),  # in a value it is only text
    (b"", 0),
    (b'"', 0),
    # a list whose first item is a key's name and has a second: a [name, value] pair (a header list)
    (b'{"h":[["X-Api-Key","v"],["Accept","j"]]}', -1),
    (b'[["Pass_Word",1]]', -1),
    (b'{"h":["token",null]}', -1),
    (b'{"h":["tokens","x"]}', 0),  # not the name
    (b'{"h":["a","token","x"]}', 0),  # not the first item
    (b'{"h":["x[","token"]}', 0),
    ('{"h":["\u212aey","x"]}'.encode(), -1),  # a byte >= 0x80 in the name: not decided here
    # a member "name" / "key" (normalised) whose string is a key's name: {"name": ..., "value": ...} (HAR headers)
    (b'[{"name":"X-Api-Key","value":"v"}]', -1),
    (b'{"Key":"token","Value":"v"}', -1),
    (b'{"NA_ME":"Pass_Word"}', -1),
    (b'{"name":"tokens","value":"v"}', 0),  # not the name
    (b'{"label":"token","value":"v"}', 0),  # not a name member
    (b'{"name":"a","b":"token"}', 0),  # the string of another member
    (b'{"name":1,"b":"token"}', 0),
    (b'{"name":":","b":"token"}', 0),
    (b'{"name":[],"b":"token"}', 0),
    ('{"name":"to\u212aen"}'.encode(), -1),  # a byte >= 0x80 in the named string
])
def test_scan_text_finds_keys_and_needles(text: bytes, expected: int) -> None:
    assert _speedups.scan_text(text, _NEEDLES, _TABLES, _KEYS) == expected


def test_scan_text_finds_the_default_keys_sorted_or_not() -> None:
    """Keys said to be sorted by length, then bytes (keys_sorted, as the redactor passes them) are looked up by
    bisection, others one by one: the same answers for every default key, its neighbours and the names around them."""
    from sealbox.redaction import DEFAULT_KEYS, _norm_key

    keys = sorted({_norm_key(k).encode() for k in DEFAULT_KEYS if not k.startswith("*")},  # ("*password": a suffix)
                  key=lambda k: (len(k), k))
    redactor = Redactor(b"k" * 32)
    if redactor._scan:  # (not under SEALBOX_PURE_PYTHON=1)
        assert redactor._key_bytes == tuple(keys)
    probes = [*keys, *(k[:-1] for k in keys), *(k + b"s" for k in keys), *(k[:-1] + b"~" for k in keys), b"", b"a",
              b"zzzz", b"maxtokens"]
    for order, said in ((tuple(keys), (True,)), (tuple(keys), ()), (tuple(sorted(keys)), ()), (tuple(reversed(keys)), ()),
                        (tuple(keys[1::2] + keys[::2]), (False,))):
        for probe in probes:
            for text in (b'{"' + probe + b'":1}', b'[{"name":"' + probe + b'","value":1}]'):
                assert _speedups.scan_text(text, _NEEDLES, _TABLES, order, *said) == (-1 if probe in keys else 0), (
                    probe, order[:2], said)


def test_scan_text_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError):
        _speedups.scan_text("str", _NEEDLES, _TABLES, _KEYS)
    with pytest.raises(TypeError):
        _speedups.scan_text(b"x", (b"a",), _scan_tables((b"ab",), 0), ())  # a needle under 2 bytes
    with pytest.raises(ValueError):
        _speedups.scan_text(b"x", _NEEDLES, b"short", _KEYS)
    with pytest.raises(TypeError):
        _speedups.scan_text(b"x", _NEEDLES, _TABLES, ("password",))


_KEY_PIECES = ["pass", "word", "Pass", "WORD", "-", "_", "token", "tok", "en", "x", "api", "key", "é", "\u212a", "K"]


@settings(max_examples=400, deadline=None)
@given(names=st.lists(st.lists(st.sampled_from(_KEY_PIECES), max_size=5).map("".join), max_size=5),
       filler=st.text(alphabet="ab sk-:/BEARERbearer\"", max_size=30))
def test_scan_text_agrees_with_the_python_key_test(names: list[str], filler: str) -> None:
    """-1 exactly when a name normalises (``_norm_key``) to a key, or holds a non-ASCII character;
    otherwise the needles found are exactly those ``in`` the text (``bytes.lower`` for the folded one)."""
    import json

    text = json.dumps({**{n: filler for n in names}, "v": filler}, ensure_ascii=False, separators=(",", ":"))
    data = text.encode()
    got = _speedups.scan_text(data, _NEEDLES, _TABLES, _KEYS)
    if "\\" in text:
        assert got == -1
        return
    keyed = any(_norm_key(n).encode() in _KEYS or not n.isascii() for n in names)
    if keyed:
        assert got == -1
        return
    expected = sum(1 << j for j, n in enumerate(_NEEDLES) if (n in data.lower() if j == 1 else n in data))
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(names=st.lists(st.lists(st.sampled_from(_KEY_PIECES), max_size=5).map("".join), max_size=5),
       filler=st.text(alphabet="ab sk-:/BEARERbearer\"[],", max_size=30))
def test_scan_text_finds_pairs_as_the_python_key_test_would(names: list[str], filler: str) -> None:
    """[name, value] pairs (``[["Cookie", "..."]]``): -1 exactly when a pair's name normalises to a key
    or holds a non-ASCII character, as for ``"name":``; otherwise the needles."""
    import json

    text = json.dumps({"v": [[n, filler] for n in names] + [filler, [filler]]}, ensure_ascii=False,
                      separators=(",", ":"))
    data = text.encode()
    got = _speedups.scan_text(data, _NEEDLES, _TABLES, _KEYS)
    if "\\" in text:
        assert got == -1
        return
    if any(_norm_key(n).encode() in _KEYS or not n.isascii() for n in names):
        assert got == -1
        return
    if got == -1:  # a filler holding [" ... ", (a false alarm, only costs the walk) is the one other way
        assert "[" in filler and "," in filler
        return
    expected = sum(1 << j for j, n in enumerate(_NEEDLES) if (n in data.lower() if j == 1 else n in data))
    assert got == expected


def test_required_literals_of_the_default_patterns() -> None:
    from sealbox.redaction import DEFAULT_PATTERNS

    got = [_required_literals(p) for p in DEFAULT_PATTERNS]
    assert got[:9] == [((b"bearer", True),), ((b"sk-", False),), ((b"KIA", False), (b"SIA", False)),
                       ((b"gh", False),), ((b"github_pat_", False),), ((b"xox", False),), ((b".eyJ", False),),
                       ((b"://", False),), ((b"PRIVATE KEY", False),)]
    assert all(g is not None for g in got)


@pytest.mark.parametrize("pattern, expected", [
    (r"(?i)\btok(en)?\b", ((b"to", True),)),  # "k" also matches U+212A under IGNORECASE: the run stops
    (r"(?i)\bsecret|hunter2", ((b"ecret", True), (b"hunter2", True))),
    (r"\d{3}-\d{2}", None),  # no literal of two characters
    (r"(?i:AbCd)xy", ((b"abcd", True),)),
    (r"(?:abc)?xyz", ((b"xyz", False),)),  # an optional group gives nothing
    (r"(?:abcd)+x", ((b"abcd", False),)),
    (r"a|bc", None),  # one branch has no literal of two characters
    (r"caf\u00e9s", (("caf\u00e9s".encode(), False),)),
    (r"(?i)caf\u00e9", ((b"caf", True),)),  # é has a non-ASCII upper case
    (r"[", None),  # not a pattern at all
])
def test_required_literals(pattern: str, expected) -> None:
    assert _required_literals(pattern) == expected


def test_the_redactor_uses_the_c_scan_and_gets_the_same_answers() -> None:
    policy = ContentPolicy(patterns=(r"(?i)\btok(en)?\b", r"\d{3}-\d{2}"), keys=("Password",))
    redactor = Redactor(b"k" * 32, policy)
    assert redactor._scan is True and len(redactor._always) == 1  # \d{3}-\d{2} always runs
    cases = {b'{"a":"nothing here"}': True, b'{"a":"TOKEN x"}': False, b'{"a":"555-12"}': False,
             b'{"a":"totem"}': True, b'{"pass-word":1}': False, b'{"a":"\\u0000"}': False}
    for text, clean in cases.items():
        assert redactor._clean_text(text) is clean, text


def test_scan_text_declines_a_configured_key_longer_than_its_buffer() -> None:
    """A sensitive key of more than 256 normalised bytes cannot be compared in the scan's buffer:
    the scan says "not decided" (-1) rather than "no key", and the redactor still redacts it."""
    long_key = "k" * 300
    text = ('{"' + long_key + '":"v","a":"b"}').encode()
    assert _speedups.scan_text(text, _NEEDLES, _TABLES, (long_key.encode(),)) == -1
    assert _speedups.scan_text(b'{"a":"b"}', _NEEDLES, _TABLES, (long_key.encode(),)) == 0
    redactor = Redactor(b"k" * 32, ContentPolicy(keys=(long_key,)))
    assert redactor._scan is True
    out, changed = redactor.apply("arguments", {long_key: "secret-value", "a": "b"})
    assert changed is True and out[long_key] != "secret-value"


_SUFFIX_NAMES = ("word", "apikey")
_SUFFIXES = _suffix_table((b"word", b"apikey"))  # as scan_text takes them


@settings(max_examples=400, deadline=None)
@given(names=st.lists(st.lists(st.sampled_from(_KEY_PIECES + ["s", "max", "A"]), max_size=5).map("".join), max_size=5),
       filler=st.text(alphabet="ab sk-:/BEARERbearer\"[],", max_size=30), shape=st.sampled_from(["keys", "pairs", "named"]))
def test_scan_text_finds_suffixed_names_as_the_python_key_test_would(names: list[str], filler: str, shape: str) -> None:
    """Suffix keys (``*password`` in a policy: ``MY_APP_PASSWORD``): -1 exactly when a name (a key, a pair's first item,
    a ``name`` member's string) normalises to a key or ends with a suffix, or holds a non-ASCII character, as the
    redactor's ``name in keys`` (``_KeyNames``) decides; otherwise the needles found."""
    import json

    from sealbox.redaction import _KeyNames

    keys = _KeyNames({k.decode() for k in _KEYS}, _SUFFIX_NAMES)
    if shape == "keys":
        value: Any = {**{n: filler for n in names}, "v": filler}
    elif shape == "pairs":
        value = {"v": [[n, filler] for n in names] + [filler, [filler]]}
    else:
        value = [{"name": n, "value": filler} for n in names]
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    data = text.encode()
    got = _speedups.scan_text(data, _NEEDLES, _TABLES, _KEYS, False, _SUFFIXES)
    if "\\" in text:
        assert got == -1
        return
    if any(_norm_key(n) in keys or not n.isascii() for n in names):
        assert got == -1, (names, data)
        return
    if got == -1:  # a filler holding [" ... ", or "name":" inside a pair list (a false alarm, only costs the walk)
        assert shape != "keys" and ("[" in filler or ":" in filler)
        return
    expected = sum(1 << j for j, n in enumerate(_NEEDLES) if (n in data.lower() if j == 1 else n in data))
    assert got == expected, (names, data)


@pytest.mark.parametrize("text, expected", [
    (b'{"MY_APP_PASSWORD":1}', -1), (b'{"my-app-pass_word":1}', -1), (b'[["X-Stripe-Api-Key","v"]]', -1),
    (b'[{"name":"myApiKey","value":"v"}]', -1), (b'{"wordy":1}', 0), (b'{"passwords":1}', 0), (b'{"word":1}', -1),
    (b'{"apike":1}', 0), (b'{"a":"MY_APP_PASSWORD"}', 0),  # a value, not a name
])
def test_scan_text_finds_names_ending_with_a_suffix(text: bytes, expected: int) -> None:
    assert _speedups.scan_text(text, _NEEDLES, _TABLES, (), True, _SUFFIXES) == expected
    assert _speedups.scan_text(text, _NEEDLES, _TABLES, (), True) == 0  # without suffixes: no key at all


def test_scan_text_rejects_bad_suffixes() -> None:
    head = _SUFFIXES[:33]
    for bad in (b"\x00", head[:32] + b"\x41" + b"\x41" + b"a" * 65, head[:32] + b"\x00" + b"\x01a"):  # short, too long
        with pytest.raises(ValueError):
            _speedups.scan_text(b"x", _NEEDLES, _TABLES, _KEYS, True, bad)
    for bad in (head + b"\x00", head + b"\x05word", head + b"\x04word\x07apikey", head + b"\x07abcdefg"):
        with pytest.raises(ValueError):  # an entry empty, past the end, longer than the longest: where it is read
            _speedups.scan_text(b'{"xd":1}', _NEEDLES, _TABLES, _KEYS, True, bad)
    with pytest.raises(TypeError):
        _speedups.scan_text(b"x", _NEEDLES, _TABLES, _KEYS, True, (b"word",))
    assert _speedups.scan_text(b'{"apikey":1}', _NEEDLES, _TABLES, (), True, b"") == 0  # no suffix


@pytest.mark.parametrize("pure", [False, True], ids=["c-scan", "pure-python"])
def test_the_redactor_quick_check_and_walk_agree_on_suffixed_names(monkeypatch, pure: bool) -> None:
    """The quick check (C scan, or the regex searches without it) never says "clean" for a value the walk redacts
    by a suffix key, and (the C scan) says "clean" for the token counts that merely contain a secret word; the walk
    keeps those."""
    from sealbox import redaction

    if pure:
        monkeypatch.setattr(redaction, "_c_scan_text", None)
    r = Redactor(b"k" * 32)
    assert bool(r._scan) is not pure
    redacted = [{"MY_APP_PASSWORD": "v"}, {"my_app_secret": "v"}, {"webhookSecret": "v"}, {"SECRET_KEY_BASE": "v"},
                [["X-Stripe-Api-Key", "v"]], [{"Name": "MY_APP_PASSWORD", "Value": "v"}],
                {"env": [{"key": "slack_bot_token", "value": "v"}]}, {"a": {"STRIPE_LIVE_API_KEY": 1}}]
    kept = [{"max_tokens": 1, "input_tokens": 2, "output_tokens": 3, "total_tokens": 4, "token_count": 5,
             "num_tokens": 6, "page_token": "p", "next_token": "n", "eos_token": "</s>", "password_file": "/x",
             "tokens": 7, "passwords_checked": 2}]
    for value in redacted:
        assert r._clean(value) is False, value
        assert r.apply("arguments", value)[1] is True, value
    for value in kept:
        if not pure:  # (the regex searches' prefilters drop the pattern's \b: page_token": is a false alarm there)
            assert r._clean(value) is True, value
        assert r.apply("arguments", value) == (value, False)


def test_a_store_with_many_custom_patterns_keeps_the_c_scan_and_its_answers() -> None:
    """More needles than one scan call holds (the defaults' and a store's own patterns, each with a literal): the scan
    used to be dropped for the regex searches on every text (a 1 MB tool output: ~0.12-0.15 s per _scrub instead of
    ~0.01 s). Now the needles are looked for in passes of 128; a needle of a later pass still gates its pattern."""
    import json

    from sealbox.redaction import DEFAULT_PATTERNS

    custom = tuple(rf"\bACME{i:02d}-[0-9]{{6}}" for i in range(80)) + tuple(rf"corp{i:02d}_id=[a-z]{{8}}" for i in range(10))
    redactor = Redactor(b"k" * 32, ContentPolicy(patterns=DEFAULT_PATTERNS + custom))
    assert redactor._scan is True and len(redactor._needles) > 128 and len(redactor._passes) == 2
    for i in (0, 19, 79):
        text = f"ticket ACME{i:02d}-123456 is open"
        data = json.dumps({"a": text}, separators=(",", ":")).encode()
        assert redactor._clean_text(data) is False
        out, changed = redactor.apply("result", {"a": text})
        assert changed is True and "123456" not in out["a"] and out["a"].startswith("ticket ")
        scrubbed = redactor._scrub(text, [False])
        assert scrubbed == out["a"]
    out, changed = redactor.apply("result", {"a": "corp09_id=abcdefgh; password=hunter22; ACME05-12345 (5 digits)"})
    assert changed is True and "abcdefgh" not in out["a"] and "hunter22" not in out["a"] and "ACME05-12345 (5" in out["a"]
    clean = {"a": "ACME-123456 corp_id=abcdefgh nothing to redact"}
    assert redactor._clean_text(json.dumps(clean, separators=(",", ":")).encode()) is True
    assert redactor.apply("result", clean) == (clean, False)


def test_scan_text_looks_for_128_needles_in_one_call() -> None:
    """scan_text held 64 needles per call, and the defaults used 62 of them: a store adding a few patterns with a
    literal each (or new defaults) cost a second pass over every text. Now one call looks for up to 128 needles,
    bit i of the answer for needles[i] (above bit 63 too), case folding per needle in either word."""
    needles = tuple(f"n{j:03d}".encode() for j in range(128))
    folded = 1 << 100 | 1 << 3
    tables = _scan_tables(needles, folded)
    assert _speedups.scan_text(b"", needles, tables, ()) == 0
    assert _speedups.scan_text(b"x n000 n063 n064 n127 y", needles, tables, ()) == (1 | 1 << 63 | 1 << 64 | 1 << 127)
    assert _speedups.scan_text(b"N100 N003 N101 n1", needles, tables, ()) == (1 << 100 | 1 << 3)  # 101 not folded
    assert _speedups.scan_text(b" ".join(needles), needles, tables, ()) == (1 << 128) - 1
    assert _speedups.scan_text(b'{"password":1} n127', needles, tables, (b"password",)) == -1
    with pytest.raises(ValueError):
        _speedups.scan_text(b"x", needles + (b"n128",), _scan_tables(needles + (b"n128",), 0), ())


def test_the_defaults_and_a_store_s_own_patterns_are_scanned_in_one_pass() -> None:
    """The default patterns and 40 custom ones, each with its literal (over 64 needles, under 128): one scan pass
    (before: two), with the same answers."""
    import json

    from sealbox.redaction import DEFAULT_PATTERNS

    custom = tuple(rf"\bACME{i:02d}-[0-9]{{6}}" for i in range(40))
    redactor = Redactor(b"k" * 32, ContentPolicy(patterns=DEFAULT_PATTERNS + custom))
    assert redactor._scan is True and 64 < len(redactor._needles) <= 128 and len(redactor._passes) == 1
    for i in (0, 39):
        text = f"ticket ACME{i:02d}-123456 is open"
        assert redactor._clean_text(json.dumps({"a": text}, separators=(",", ":")).encode()) is False
        out, changed = redactor.apply("result", {"a": text})
        assert changed is True and "123456" not in out["a"] and redactor._scrub(text, [False]) == out["a"]
    clean = {"a": "ACME-123456 nothing to redact"}
    assert redactor._clean_text(json.dumps(clean, separators=(",", ":")).encode()) is True


def test_scrub_and_the_quick_check_search_the_same_patterns_whatever_the_scan_found(monkeypatch) -> None:
    """_scrub and _clean_text search only the patterns whose needles the scan found (kept per scan answer): the same
    texts as the pure-Python substring tests, in the policy's order, a later pattern still searched after an earlier
    one's match changed the text; a repeated answer gives the same result."""
    import json

    import sealbox.redaction as redaction_module

    texts = ["plain log line user=alice ok", "password=hunter22 then sk-ABCDEFGHIJKLMNOPQRSTUV and AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
             "glpat-xXy1Zz2AbCdEfGhIjKlM, curl -u bob:pw1234 http://h, https://u:p@h/x", "sk_live_ but short",
             "Authorization: Bearer abcdefghijk; token=xyz; api_key=1 npm_abcdefghijklmnopqrstuvwxyz0123456789"]
    datas = [json.dumps({"a": text}, separators=(",", ":")).encode() for text in texts]
    monkeypatch.setattr(redaction_module, "_c_scan_text", None)
    pure = Redactor(b"k" * 32)
    assert not pure._scan
    expected = []
    for text, data in zip(texts, datas):
        changed = [False]
        expected.append((pure._scrub(text, changed), changed[0], pure._clean_text(data)))
    monkeypatch.undo()
    with_scan = Redactor(b"k" * 32)
    assert with_scan._scan
    assert [(text, changed, clean) for text, changed, clean in expected][0] == (texts[0], False, True)
    for _ in range(2):
        for text, data, (scrubbed, changed, clean) in zip(texts, datas, expected):
            got = [False]
            assert with_scan._scrub(text, got) == scrubbed and got[0] is changed and clean is (not changed), text
            assert with_scan._clean_text(data) is clean, text
