"""The gateway config: an upstream ``url`` that can never be reached is refused at load.

Regression (input: a streamable-HTTP upstream URL that starts with ``http://`` but cannot be parsed):
``gateway check`` said ok for ``http://[::1`` or ``http://h:abc/`` and ``gateway serve`` started, then
failed every connection attempt to that upstream with ``InvalidURL``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import sealbox
from sealbox.errors import ConfigError
from sealbox.gateway import parse_config

SEALBOX = str(Path(sys.executable).parent / "sealbox")


def _config(url: str) -> str:
    return f"version: 1\nstore: ./st\npolicy: ALLOW_ALL\nupstreams:\n  - id: docs\n    url: '{url}'\n"


@pytest.mark.parametrize("url, problem", [
    ("http://[::1", "'http://[::1' is not a valid URL (Invalid IPv6 URL)"),
    ("http://[zz]/mcp", "'http://[zz]/mcp' is not a valid URL ('zz' does not appear to be an IPv4 or IPv6 address)"),
    ("http://h:abc/mcp", "'http://h:abc/mcp' is not a valid URL (Port could not be cast to integer value as 'abc')"),
    ("http://h:99999/mcp", "'http://h:99999/mcp' is not a valid URL (Port out of range 0-65535)"),
    ("http://h:0/mcp", "'http://h:0/mcp' needs a port from 1 to 65535"),
    ("http://:9000/mcp", "'http://:9000/mcp' has no host"),
    ("http://h x/mcp", "'http://h x/mcp' must not contain spaces or control characters"),
])
def test_an_unreachable_upstream_url_is_one_problem_at_its_line(url, problem):
    with pytest.raises(ConfigError) as caught:
        parse_config(_config(url), source="gw.yaml")
    assert str(caught.value) == f"gw.yaml:6: upstreams.0.url: {problem}"


@pytest.mark.parametrize("url", ["http://127.0.0.1:9000/mcp", "https://docs.example.com/mcp", "http://[::1]:9000/mcp",
                                 "http://localhost/mcp"])
def test_a_valid_upstream_url_is_kept_as_written(url):
    (up,) = parse_config(_config(url), source="gw.yaml").upstreams
    assert (up.id, up.url, up.command) == ("docs", url, None)


def test_gateway_check_refuses_an_unparsable_url_in_one_line(tmp_path):
    sealbox.init_store(tmp_path / "st").close()
    (tmp_path / "gw.yaml").write_text(_config("http://[::1"))
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    proc = subprocess.run([SEALBOX, "gateway", "check", "-c", str(tmp_path / "gw.yaml")], capture_output=True,
                          text=True, env=env)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"error: {tmp_path / 'gw.yaml'}:6: upstreams.0.url: 'http://[::1' is not a valid URL (Invalid IPv6 URL)\n"


def test_a_yaml_merge_key_in_the_config_is_merged():
    """A merged-in key has no line of its own in ruamel's map: it raised KeyError ("internal error")."""
    text = ("version: 1\nstore: ./st\npolicy: ALLOW_ALL\nupstreams:\n"
            "  - <<: {id: docs}\n    url: 'http://127.0.0.1:9000/mcp'\n")
    config = parse_config(text, source="gw.yaml")
    assert [(u.id, u.url) for u in config.upstreams] == [("docs", "http://127.0.0.1:9000/mcp")]
    with pytest.raises(ConfigError) as caught:
        parse_config(text.replace("<<: {id: docs}", "<<: {id: 'a__b'}"), source="gw.yaml")
    assert str(caught.value).startswith("gw.yaml:5: upstreams.0.id: ")


@pytest.mark.parametrize("sep, uid, read_as", [("__", "toy_", "toy"), ("__", "a__"[:2], "a"), ("--", "web-", "web"),
                                               ("_-", "x_", None), ("-", "toy_", None), ("___", "t__", "t")])
def test_an_id_whose_end_joins_the_separator_is_refused(sep, uid, read_as):
    """Server id ``toy_`` with separator ``__`` exposes ``toy___echo``, split at its first ``__`` into
    server ``toy`` and tool ``_echo``: its tools were listed, and every call was UNKNOWN_TOOL."""
    text = f"version: 1\nstore: ./st\npolicy: ALLOW_ALL\nseparator: '{sep}'\nupstreams:\n  - id: {uid}\n    command: x\n"
    if read_as is None:  # the separator is found where it was put: fine
        (up,) = parse_config(text, source="gw.yaml").upstreams
        assert up.id == uid
        return
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="gw.yaml")
    assert str(caught.value) == (f"gw.yaml:6: upstreams.0.id: {uid!r} followed by the separator {sep!r} would be read "
                                 f"as server {read_as!r}: its tools could not be called (end the id with a letter or "
                                 "digit)")


def _with_tokens(tokens: str) -> str:
    return f"version: 1\nstore: ./st\npolicy: ALLOW_ALL\nhttp:\n  tokens:\n{tokens}upstreams:\n  - id: a\n    command: x\n"


def test_a_token_no_http_request_can_carry_is_refused_without_showing_it(monkeypatch):
    """A token with a non-ASCII character (httpx refuses to send it; curl's UTF-8 bytes never compared
    equal) or a space at either end (dropped from the header) was accepted, and every request with it
    got 401. The value of a refused token is never shown (a short one was: 'secret' is too short)."""
    from sealbox.gateway.transports import token_identities

    text = _with_tokens('    - {token: "pässwörd-1234567890", identity: ci}\n'
                        '    - {token: " padded-token-123456", identity: pad}\n'
                        '    - {token: "inner space is fine 1", identity: ok}\n')
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="gw.yaml")
    why = "must be printable ASCII, without spaces at either end: no request could carry it in its " \
          "Authorization header (the value is not shown)"
    assert str(caught.value) == (f"gw.yaml:6: http.tokens.0.token (of ci) {why}; gw.yaml:7: http.tokens.1.token "
                                 f"(of pad) {why}")
    assert "pässwörd" not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        parse_config(_with_tokens('    - {token: "secret", identity: short}\n'), source="gw.yaml")
    assert str(caught.value) == ("gw.yaml:6: http.tokens.0.token: must be a string of at least 16 characters "
                                 "(the value is not shown)")

    cfg = parse_config(_with_tokens("    - {token_env: SEALBOX_T_ODD, identity: env}\n"), source="gw.yaml")
    monkeypatch.setenv("SEALBOX_T_ODD", "tok\u00e9n-0123456789abcdef")
    with pytest.raises(ConfigError) as caught:
        token_identities(cfg)
    assert str(caught.value) == f"environment variable SEALBOX_T_ODD (token of env) {why}"
    monkeypatch.setenv("SEALBOX_T_ODD", "token-0123456789abcdef")
    assert token_identities(cfg) == {"token-0123456789abcdef": "env"}


def test_upstream_headers_no_http_request_can_carry_are_refused():
    """``gateway check`` said ok, then each connection attempt of ``gateway serve`` failed: a value
    with a non-ASCII character (UnicodeEncodeError) or a name that is no HTTP token."""
    text = ("version: 1\nstore: ./st\npolicy: ALLOW_ALL\nupstreams:\n  - id: docs\n    url: http://127.0.0.1:9/mcp\n"
            "    headers:\n      Authorization: 'Bearer clé-0123456789'\n      Bad Name: x\n      X-Ok: 'a b;c=d'\n")
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="gw.yaml")
    assert str(caught.value) == ("gw.yaml:8: upstreams.0.headers.Authorization: the value must be printable ASCII (an "
                                 "HTTP header cannot carry it; the value is not shown); gw.yaml:9: upstreams.0.headers: "
                                 "'Bad Name' is not a valid HTTP header name")
    (up,) = parse_config(text.replace("      Authorization: 'Bearer clé-0123456789'\n      Bad Name: x\n", ""),
                         source="gw.yaml").upstreams
    assert up.headers == {"X-Ok": "a b;c=d"}


def test_upstream_command_args_and_env_no_process_can_be_started_with_are_refused():
    """``gateway check`` said ok, then each start of the upstream failed (ValueError: embedded null
    byte / illegal environment variable name)."""
    text = ("version: 1\nstore: ./st\npolicy: ALLOW_ALL\nupstreams:\n  - id: a\n    command: x\n"
            '    args: [ok, "a\\0b"]\n    env:\n      "A=B": x\n      C: "secret\\0z"\n      D: fine\n')
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="gw.yaml")
    assert str(caught.value) == (
        "gw.yaml:7: upstreams.0.args.1: must not contain a NUL character; gw.yaml:9: upstreams.0.env: 'A=B' is not a "
        "valid environment variable name (empty, or holds '=' or NUL); gw.yaml:10: upstreams.0.env.C: the value must "
        "not contain a NUL character (the value is not shown)")


def test_a_store_or_policy_path_holding_nul_is_one_problem_not_an_internal_error(tmp_path):
    """A policy path with a NUL byte ended ``gateway check`` and ``serve`` with 'internal error:
    ValueError: embedded null byte' (exit 70); a store path printed the NUL in its message."""
    (tmp_path / "gw.yaml").write_text('version: 1\nstore: "./s\\0t"\npolicy: "p\\0.yaml"\nupstreams:\n'
                                      '  - id: a\n    command: x\n')
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    for command in ("check", "serve"):
        proc = subprocess.run([SEALBOX, "gateway", command, "-c", str(tmp_path / "gw.yaml")], capture_output=True,
                              text=True, env=env, stdin=subprocess.DEVNULL, timeout=60)
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr == (f"error: {tmp_path / 'gw.yaml'}:2: store: must not contain a NUL character; "
                               f"{tmp_path / 'gw.yaml'}:3: policy: must not contain a NUL character\n")


def test_an_allowed_origin_no_browser_sends_is_refused_with_the_form_to_write():
    """Origins are compared exactly: ``http://localhost:3000/`` (a trailing slash), upper case or a
    default port was accepted and every request from that page got HTTP 403."""
    text = ("version: 1\nstore: ./st\npolicy: ALLOW_ALL\nhttp:\n  tokens: [{token: t0ken-0123456789abcdef, identity: a}]\n"
            "  allowed_origins:\n    - http://localhost:3000/\n    - http://LocalHost:3000\n    - https://app.example:443\n"
            "    - http://localhost:3000\n    - http://127.0.0.1:*\n    - http://[::1]:8080\n    - http://h:port\n"
            "upstreams:\n  - id: a\n    command: x\n")
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="gw.yaml")
    what = "never equals an Origin header a browser sends"
    form = "(scheme://host[:port], lower case, no path, no default port)"
    assert str(caught.value) == (
        f"gw.yaml:7: http.allowed_origins.0: 'http://localhost:3000/' {what}: write 'http://localhost:3000' {form}; "
        f"gw.yaml:8: http.allowed_origins.1: 'http://LocalHost:3000' {what}: write 'http://localhost:3000' {form}; "
        f"gw.yaml:9: http.allowed_origins.2: 'https://app.example:443' {what}: write 'https://app.example' {form}; "
        f"gw.yaml:13: http.allowed_origins.6: 'http://h:port' {what} {form}")
    kept = parse_config(text.replace("    - http://h:port\n", "").replace("    - http://localhost:3000/\n", "")
                        .replace("    - http://LocalHost:3000\n", "").replace("    - https://app.example:443\n", ""),
                        source="gw.yaml").allowed_origins
    assert kept == ("http://localhost:3000", "http://127.0.0.1:*", "http://[::1]:8080")


def test_a_restart_backoff_starting_above_its_maximum_is_refused():
    """``restart: {initial_s: 10, max_s: 1}`` was accepted: the first wait was 10 s, every later one 1 s."""
    text = "version: 1\nstore: ./st\npolicy: ALLOW_ALL\nrestart: {initial_s: 10, max_s: 1}\nupstreams:\n  - {id: a, command: x}\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="gw.yaml")
    assert str(caught.value) == "gw.yaml:4: restart.initial_s (10) is above restart.max_s (1)"
    cfg = parse_config(text.replace("max_s: 1", "max_s: 10"), source="gw.yaml")
    assert (cfg.restart_initial_s, cfg.restart_max_s) == (10.0, 10.0)
    cfg = parse_config(text.replace("restart: {initial_s: 10, max_s: 1}", "restart: {max_s: 0.2}"), source="gw.yaml")
    assert (cfg.restart_initial_s, cfg.restart_max_s) == (0.2, 0.2)  # the default start, 0.5, capped


def test_a_principal_or_identity_holding_a_lone_surrogate_is_refused():
    """``principal: "agent:\\ud800"`` was accepted; every call then failed with a traceback on stderr."""
    text = ('version: 1\nstore: ./st\npolicy: ALLOW_ALL\nprincipal: "agent:\\ud800x"\nhttp:\n  tokens:\n'
            '    - {token: t0ken-0123456789abcdef, identity: "b\\udc80t"}\nupstreams:\n  - {id: a, command: x}\n')
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="gw.yaml")
    assert str(caught.value) == (
        "gw.yaml:4: principal: 'agent:\\ud800x' holds a lone surrogate, which a name in the record cannot hold; "
        "gw.yaml:7: http.tokens.0.identity: 'b\\udc80t' holds a lone surrogate, which a name in the record cannot hold")


@pytest.mark.parametrize("lines, problem", [
    ("upstreams:\n  - id: db\n    command: [uvx, mcp-server-sqlite]\n",
     'gw.yaml:6: upstreams.0.command: must be a string, not ["uvx", "mcp-server-sqlite"]'),
    ("principal: null\nupstreams:\n  - id: db\n    command: uvx\n", "gw.yaml:4: principal: must be a string, not null"),
    ("upstreams:\n  - id: db\n    command: uvx\n    args: [--ro, true]\n",
     "gw.yaml:7: upstreams.0.args.1: must be a string, not true"),
    ("upstreams:\n  - id: db\n    command: uvx\n    env: {DEBUG: 1}\n",
     "gw.yaml:7: upstreams.0.env.DEBUG: must be a string, not 1"),
    ("durability: {mode: full}\nupstreams:\n  - id: db\n    command: uvx\n",
     'gw.yaml:4: durability: {"mode": "full"} is not one of full, fast'),
    ("limits: {max_request_bytes: 2048.5}\nupstreams:\n  - id: db\n    command: uvx\n",
     "gw.yaml:4: limits.max_request_bytes: must be a whole number, not 2048.5"),
    # YAML 1.2 reads 1e6 and 5.0 as floats: JSON Schema's "integer" took them, the gateway then said
    # "the limit is 1000000.0" and compared failures against a threshold of 5.0
    ("limits: {max_request_bytes: 1e6}\nupstreams:\n  - id: db\n    command: uvx\n",
     "gw.yaml:4: limits.max_request_bytes: must be a whole number written as digits (1000000), not 1000000.0"),
    ("breaker: {threshold: 5.0}\nupstreams:\n  - id: db\n    command: uvx\n",
     "gw.yaml:4: breaker.threshold: must be a whole number written as digits (5), not 5.0"),
    ("upstreams: []\n", "gw.yaml:4: upstreams: must not be empty"),
    # YAML's .nan / .inf where no number belongs: what does belong, the value as written
    ("principal: .nan\nupstreams:\n  - id: db\n    command: uvx\n", "gw.yaml:4: principal: must be a string, not .nan"),
    ("durability: -.inf\nupstreams:\n  - id: db\n    command: uvx\n", "gw.yaml:4: durability: -.inf is not one of full, fast"),
    ("limits: {max_request_bytes: .inf}\nupstreams:\n  - id: db\n    command: uvx\n",
     "gw.yaml:4: limits.max_request_bytes: must be a whole number, not .inf"),
])
def test_a_config_value_of_the_wrong_type_is_quoted_as_written(lines, problem):
    """jsonschema's messages quoted the value as Python writes it: None is not of type 'string',
    True, ['uvx', 'mcp-server-sqlite'], {'mode': 'full'} is not one of ['full', 'fast'], [] should be
    non-empty."""
    with pytest.raises(ConfigError) as err:
        parse_config("version: 1\nstore: ./s\npolicy: ALLOW_ALL\n" + lines, source="gw.yaml")
    assert str(err.value) == problem


def test_a_config_of_another_version_says_which_it_must_be():
    with pytest.raises(ConfigError) as err:
        parse_config("version: 2\nstore: ./s\npolicy: ALLOW_ALL\nupstreams:\n  - id: db\n    command: uvx\n",
                     source="gw.yaml")
    assert str(err.value) == "gw.yaml:1: version: must be 1, not 2"


@pytest.mark.parametrize("written", ["1.0", "1e0"])
def test_version_written_as_a_decimal_is_refused(written):
    """JSON Schema's ``const`` takes 1.0 for 1 (as its "integer" took 5.0, e9f3cff): ``version: 1.0`` was
    accepted as version 1."""
    with pytest.raises(ConfigError) as err:
        parse_config(f"version: {written}\nstore: ./s\npolicy: ALLOW_ALL\nupstreams:\n  - id: db\n    command: uvx\n",
                     source="gw.yaml")
    assert str(err.value) == "gw.yaml:1: version: must be 1, not 1.0"


@pytest.mark.parametrize("lines, problem", [
    ("breaker: {cooldown_s: 1e300}", "gw.yaml:4: breaker.cooldown_s: 1e+300 is greater than the maximum of 86400"),
    ("breaker: {cooldown_s: 86401}", "gw.yaml:4: breaker.cooldown_s: 86401 is greater than the maximum of 86400"),
    ("restart: {max_s: 1e300}", "gw.yaml:4: restart.max_s: 1e+300 is greater than the maximum of 3600"),
    ("restart:\n  initial_s: 3600.5\n  max_s: 3600",
     "gw.yaml:5: restart.initial_s: 3600.5 is greater than the maximum of 3600"),
    ("restart: {max_s: .inf}", "gw.yaml:4: restart.max_s: must be a finite number, not .inf"),
    ("breaker: {cooldown_s: .inf}", "gw.yaml:4: breaker.cooldown_s: must be a finite number, not .inf"),
])
def test_every_seconds_setting_has_a_maximum(lines, problem):
    """``breaker.cooldown_s`` and ``restart.initial_s`` / ``max_s`` had no upper bound: ``cooldown_s: 1e300`` was
    taken (a breaker that opened never closed; its denials said "next probe in" a number of 301 digits)."""
    text = "version: 1\nstore: ./s\npolicy: ALLOW_ALL\n%s\nupstreams:\n  - id: db\n    command: uvx\n"
    with pytest.raises(ConfigError) as err:
        parse_config(text % lines, source="gw.yaml")
    assert str(err.value) == problem
    cfg = parse_config(text % "breaker: {cooldown_s: 86400}\nrestart: {initial_s: 3600, max_s: 3600}", source="gw.yaml")
    assert (cfg.breaker_cooldown_s, cfg.restart_initial_s, cfg.restart_max_s) == (86400.0, 3600.0, 3600.0)


def test_a_relative_command_path_is_relative_to_the_config_file_or_its_cwd(tmp_path):
    """'Relative paths are relative to the file' held for store, policy and cwd, not for a command
    written as a path (./server.py): it was resolved against the gateway's working directory, so a
    gateway launched by an MCP client from another folder (Claude Desktop starts it in /) could not
    start it, and `gateway check` run elsewhere said 'not found or not executable'. A command holding a
    slash is now relative to the upstream's cwd when one is given, else to the config file's folder;
    a bare name is still looked up in PATH."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "work" / "bin").mkdir(parents=True)
    for where in (tmp_path / "bin" / "server", tmp_path / "work" / "bin" / "server"):
        where.write_text("#!/bin/sh\nexit 0\n")
        where.chmod(0o755)
    sealbox.init_store(tmp_path / "st").close()
    text = ("version: 1\nstore: ./st\npolicy: ALLOW_ALL\nupstreams:\n"
            "  - {id: here, command: ./bin/server}\n"
            "  - {id: there, command: bin/server, cwd: work}\n"
            "  - {id: named, command: python3}\n"
            "  - {id: absolute, command: /bin/sh}\n")
    ups = parse_config(text, source="gw.yaml", base=tmp_path).upstreams
    assert [u.command for u in ups] == [str(tmp_path / "bin" / "server"), str(tmp_path / "work" / "bin" / "server"),
                                        "python3", "/bin/sh"]
    (tmp_path / "gw.yaml").write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    proc = subprocess.run([SEALBOX, "gateway", "check", "-c", str(tmp_path / "gw.yaml")], capture_output=True,
                          text=True, env=env, cwd="/")
    assert (proc.returncode, proc.stderr) == (0, "")


def test_a_config_file_is_read_no_further_than_its_size_limit(tmp_path):
    # `sealbox gateway serve --config /dev/zero` read the whole "file": MemoryError, "internal error",
    # exit 70, once the machine's memory was gone. A pipe that delivers more than the policy loader's
    # limit and stays open shows it safely: the load must answer without waiting for its end.
    import threading

    from sealbox.gateway.config import load_config
    from sealbox.policy.loader import MAX_FILE_BYTES

    fifo = tmp_path / "gateway.yaml"
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
        with pytest.raises(ConfigError) as info:
            load_config(fifo)
        assert not closed.is_set(), "the whole input was read"
        assert str(info.value) == f"{fifo}: file is larger than {MAX_FILE_BYTES} bytes"
    finally:
        answered.set()
        t.join()


def test_a_bare_command_name_found_only_in_the_upstreams_cwd_is_not_found(tmp_path):
    """A bare command name is looked up in PATH (docs/gateway.md), as the upstream is started; `gateway
    check` also accepted a file of that name in the upstream's cwd (or its own working directory), so it
    said ok for `command: server, cwd: work` and `gateway serve` then failed every start of that upstream
    (FileNotFoundError: 'server'). It is now one problem; `./server` (a path) is the way to name it."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "server").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "work" / "server").chmod(0o755)
    sealbox.init_store(tmp_path / "st").close()
    env = {k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}
    text = "version: 1\nstore: ./st\npolicy: ALLOW_ALL\nupstreams:\n  - {id: bare, command: server, cwd: work}\n"
    (tmp_path / "gw.yaml").write_text(text)
    for cwd in (tmp_path / "work", "/"):
        proc = subprocess.run([SEALBOX, "gateway", "check", "-c", str(tmp_path / "gw.yaml")], capture_output=True,
                              text=True, env=env, cwd=cwd)
        assert (proc.returncode, proc.stdout, proc.stderr) == (
            2, "", f"error: {tmp_path / 'gw.yaml'}: upstream bare: command 'server' is not found or not executable "
                   "(a bare command name is looked up in PATH; write ./server for a file in the upstream's cwd)\n")
    (tmp_path / "gw.yaml").write_text(text.replace("command: server", "command: ./server"))
    proc = subprocess.run([SEALBOX, "gateway", "check", "-c", str(tmp_path / "gw.yaml")], capture_output=True,
                          text=True, env=env, cwd="/")
    assert (proc.returncode, proc.stderr) == (0, "")


def test_an_http_identity_with_whitespace_or_a_control_character_is_refused_as_a_principal_is():
    """``principal: "agent me"`` was refused (a name in the record holds no whitespace) but the identity of an
    HTTP token, which is the principal of its calls, was not: ``identity: "ci\\nbot"`` or ``"ci\\u0000bot"``
    was accepted and recorded as written (a newline in `sealbox calls` and `runs show` lines); nor was a
    control character in ``principal``. Both are now one problem at their line."""
    text = ('version: 1\nstore: ./st\npolicy: ALLOW_ALL\nprincipal: "agent:\\u0000x"\nhttp:\n  tokens:\n'
            '    - {token: t0ken-0123456789abcdef, identity: "ci\\nbot"}\n'
            '    - {token: t0ken-0123456789abcdeX, identity: "ci bot"}\n'
            '    - {token: t0ken-0123456789abcdeY, identity: "ci\\u0007bot"}\n'
            '    - {token: t0ken-0123456789abcdeZ, identity: "ci-bot"}\n'
            'upstreams:\n  - {id: a, command: x}\n')
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="gw.yaml")
    assert str(caught.value) == (
        "gw.yaml:4: principal: must not contain whitespace or control characters; "
        "gw.yaml:7: http.tokens.0.identity: must not contain whitespace or control characters; "
        "gw.yaml:8: http.tokens.1.identity: must not contain whitespace or control characters; "
        "gw.yaml:9: http.tokens.2.identity: must not contain whitespace or control characters")


@pytest.mark.parametrize("value", ["0", "10001", "2.5", "'many'"])
def test_http_max_sessions_per_identity_is_a_validated_setting(value, tmp_path):
    text = ("version: 1\nstore: ./st\npolicy: ALLOW_ALL\nhttp: {max_sessions_per_identity: %s}\n"
            "upstreams:\n  - {id: a, command: x}\n")
    assert parse_config(text.replace("http: {max_sessions_per_identity: %s}\n", ""),
                        source="gw.yaml").max_sessions_per_identity == 100
    assert parse_config(text % "1", source="gw.yaml").max_sessions_per_identity == 1
    assert parse_config(text % "10000", source="gw.yaml").max_sessions_per_identity == 10000
    with pytest.raises(ConfigError) as caught:
        parse_config(text % value, source="gw.yaml")
    assert str(caught.value).startswith("gw.yaml:4: http.max_sessions_per_identity: ")


@pytest.mark.parametrize("value, problem", [
    ("0", "gw.yaml:4: http.session_idle_s: 0 is less than or equal to the minimum of 0"),
    ("90000", "gw.yaml:4: http.session_idle_s: 90000 is greater than the maximum of 86400"),
    ("'1h'", "gw.yaml:4: http.session_idle_s: must be a number, not '1h'"),
])
def test_http_session_idle_s_is_a_validated_setting(value, problem, tmp_path):
    text = ("version: 1\nstore: ./st\npolicy: ALLOW_ALL\nhttp: {session_idle_s: %s}\n"
            "upstreams:\n  - {id: a, command: x}\n")
    assert parse_config(text.replace("http: {session_idle_s: %s}\n", ""), source="gw.yaml").session_idle_s == 1800.0
    assert parse_config(text % "90", source="gw.yaml").session_idle_s == 90.0
    with pytest.raises(ConfigError) as caught:
        parse_config(text % value, source="gw.yaml")
    assert str(caught.value) == problem
    sealbox.init_store(tmp_path / "st").close()
    (tmp_path / "gw.yaml").write_text(text % value)
    out = subprocess.run([SEALBOX, "gateway", "check", "--config", str(tmp_path / "gw.yaml")], capture_output=True,
                         text=True, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (
        2, "", "error: " + problem.replace("gw.yaml", str(tmp_path / "gw.yaml")) + "\n")


def test_a_path_starting_with_a_tilde_is_in_the_home_folder(tmp_path, monkeypatch):
    """``store: ~/.sealbox`` was read as relative to the config file's folder (``<folder>/~/.sealbox``) and
    ``gateway check`` said to create a store there (``sealbox init <folder>/~/.sealbox``): a folder named
    ``~``. A store, policy, cwd or command written ``~/...`` is now in the home folder ($HOME), as a shell
    reads it; other relative paths are still relative to the config file's folder."""
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    (home / "work").mkdir()
    (home / "bin" / "server").write_text("#!/bin/sh\nexit 0\n")
    (home / "bin" / "server").chmod(0o755)
    sealbox.init_store(home / "st").close()
    monkeypatch.setenv("HOME", str(home))
    text = ("version: 1\nstore: ~/st\npolicy: ALLOW_ALL\nupstreams:\n"
            "  - {id: here, command: ~/bin/server, cwd: ~/work}\n"
            "  - {id: there, command: bin/server, cwd: '~'}\n"
            "  - {id: named, command: ./~/server}\n")
    cfg = parse_config(text, source="gw.yaml", base=tmp_path / "conf")
    assert cfg.store == str(home / "st")
    assert [(u.command, u.cwd) for u in cfg.upstreams] == [
        (str(home / "bin" / "server"), str(home / "work")), (str(home / "bin" / "server"), str(home)),
        (str(tmp_path / "conf" / "~" / "server"), None)]
    (tmp_path / "gw.yaml").write_text(text.replace("  - {id: named, command: ./~/server}\n", ""))
    env = {**{k: v for k, v in os.environ.items() if k != "SEALBOX_DEBUG"}, "HOME": str(home)}
    proc = subprocess.run([SEALBOX, "gateway", "check", "-c", str(tmp_path / "gw.yaml")], capture_output=True,
                          text=True, env=env, cwd="/")
    assert (proc.returncode, proc.stderr) == (0, "")
    assert f"store {home / 'st'} (durability full)" in proc.stdout
