"""The gateway's configuration file (``gateway.yaml``), read as YAML 1.2 and validated.

The problems are one :class:`~sealbox.errors.ConfigError` whose message lists each
as ``FILE:LINE: problem``, joined by ``; `` (the CLI prints it as one line). Relative paths (store,
policy, an upstream's ``cwd``) are relative to the config file's folder; an upstream ``command`` written
as a relative path (``./server.py``) is relative to its ``cwd`` if given, else to that folder; any of
these written ``~/...`` (or ``~``) is in the home folder (``$HOME``), as a shell reads it.
``${VAR}`` in an upstream's ``env`` or ``headers`` value is the gateway's environment variable VAR,
read when the gateway starts (:meth:`UpstreamSpec.resolved_env`); ``$${VAR}`` is the text ``${VAR}``.

Example::

    version: 1
    store: ./.sealbox
    durability: full               # or fast: commits not fsync'd (a power cut may lose the last calls)
    policy: ./policy.yaml          # or ALLOW_ALL (explicit, fingerprinted)
    principal: agent:desktop       # who acts for stdio clients
    separator: "__"                # exposed name = server + separator + tool
    http:
      tokens:                      # bearer token -> identity, for --http
        - {token_env: SEALBOX_TOKEN_CI, identity: ci-bot}
      allowed_origins: ["http://localhost:3000"]
      session_idle_s: 1800         # an HTTP session idle this long is closed
      max_sessions_per_identity: 100  # HTTP sessions one identity may have open at once
      max_sessions: 1000           # HTTP sessions of every identity together
      max_connections: 512         # TCP connections open at once, every client together
    limits:
      max_request_bytes: 1048576
      approval_hold_s: 4
      undelivered_keep_s: 900
      call_timeout_s: 60
      max_calls_in_flight: 64      # tools/call one client may have in flight at once
    breaker: {threshold: 5, cooldown_s: 30}
    upstreams:
      - id: time
        command: uvx
        args: [mcp-server-time]
      - id: docs
        url: http://127.0.0.1:9000/mcp
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from sealbox.errors import ConfigError, PolicyLoadError
from sealbox.yaml_text import written as _written
from sealbox.input_files import not_utf8_text, open_input

__all__ = ["GatewayConfig", "UpstreamSpec", "TokenSpec", "Limits", "load_config", "parse_config", "DEFAULT_SEPARATOR"]

#: Default separator between a server id and a tool name in an exposed tool name.
DEFAULT_SEPARATOR = "__"

#: the longest ``breaker.cooldown_s`` (a day), and ``restart.initial_s`` / ``restart.max_s`` (an hour), in seconds:
#: every seconds setting has a maximum (before, ``cooldown_s: 1e300`` was taken, its denials then said "next probe
#: in" a number of 301 digits, and a breaker that opened never closed)
MAX_BREAKER_COOLDOWN_S = 86400
MAX_RESTART_S = 3600

_ID = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,47}$"
_SEP = r"^[_.-]{1,3}$"

_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["version", "store", "policy", "upstreams"],
    "properties": {
        "version": {"const": 1},
        "store": {"type": "string", "minLength": 1},
        "durability": {"enum": ["full", "fast"]},
        "policy": {"type": "string", "minLength": 1},
        "principal": {"type": "string", "minLength": 1},
        "name": {"type": "string", "pattern": _ID},
        "separator": {"type": "string", "pattern": _SEP},
        "http": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "tokens": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["identity"],
                        "properties": {
                            "identity": {"type": "string", "minLength": 1},
                            "token": {"type": "string", "minLength": 16},
                            "token_env": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
                        },
                        "oneOf": [{"required": ["token"]}, {"required": ["token_env"]}],
                    },
                },
                "allowed_origins": {"type": "array", "items": {"type": "string", "pattern": r"^https?://"}},
                "session_idle_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400},
                "max_sessions_per_identity": {"type": "integer", "minimum": 1, "maximum": 10000},
                "max_sessions": {"type": "integer", "minimum": 1, "maximum": 100000},
                "max_connections": {"type": "integer", "minimum": 1, "maximum": 100000},
            },
        },
        "limits": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "max_request_bytes": {"type": "integer", "minimum": 1024, "maximum": 64 * 1024 * 1024},
                "approval_hold_s": {"type": "number", "minimum": 0, "maximum": 3600},
                "undelivered_keep_s": {"type": "number", "minimum": 0, "maximum": 86400},
                "call_timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400},
                "startup_timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 600},
                "max_calls_in_flight": {"type": "integer", "minimum": 1, "maximum": 100000},
            },
        },
        "breaker": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "threshold": {"type": "integer", "minimum": 1},
                "cooldown_s": {"type": "number", "minimum": 0, "maximum": MAX_BREAKER_COOLDOWN_S},
            },
        },
        "restart": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "initial_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_RESTART_S},
                "max_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_RESTART_S},
            },
        },
        "upstreams": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["id"],
                "properties": {
                    "id": {"type": "string", "pattern": _ID},
                    "command": {"type": "string", "minLength": 1},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}},
                    "cwd": {"type": "string"},
                    "url": {"type": "string", "pattern": r"^https?://"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                },
                "oneOf": [{"required": ["command"]}, {"required": ["url"]}],
            },
        },
    },
}
# "integer" is a whole number written as one: JSON Schema's own "integer" also takes a float whose fraction is
# zero (YAML's 1e6, 5.0), which went on as a float ("the limit is 1000000.0", a breaker threshold of 5.0)
_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _checker, value: isinstance(value, int) and not isinstance(value, bool))
_JSON_CONST = jsonschema.Draft202012Validator.VALIDATORS["const"]


def _const(validator: Any, const: Any, instance: Any, schema: Any) -> Any:
    """JSON Schema's ``const``, a whole number not matched by a float: its own takes ``1.0`` (and YAML's ``1e0``)
    for ``1``, so ``version: 1.0`` was accepted as version 1."""
    if isinstance(const, int) and not isinstance(const, bool) and isinstance(instance, float):
        yield jsonschema.ValidationError(f"{instance!r} was expected to be {const!r}")
        return
    yield from _JSON_CONST(validator, const, instance, schema)


_VALIDATOR = jsonschema.validators.extend(jsonschema.Draft202012Validator, validators={"const": _const},
                                          type_checker=_TYPES)(_SCHEMA)


@dataclass(frozen=True)
class UpstreamSpec:
    """One upstream MCP server: a stdio ``command`` (with ``args``, ``env``, ``cwd``) or a streamable-HTTP ``url``."""

    id: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """``"stdio"`` or ``"http"``."""
        return "stdio" if self.command else "http"

    def resolved_env(self) -> dict[str, str]:
        """``env`` with each ``${VAR}`` in a value replaced by the gateway's environment variable VAR
        (``$${VAR}``: the text ``${VAR}``).

        Raises:
            ConfigError: ``upstream ID: env.NAME names the environment variable VAR, which is unset``
                (every such problem of this upstream's env, joined by ``; ``; values are never shown).
        """
        env, problems = self._expand("env", self.env)
        if problems:
            raise ConfigError("; ".join(problems))
        return env

    def resolved_headers(self) -> dict[str, str]:
        """``headers`` with ``${VAR}`` replaced as in :meth:`resolved_env`.

        Raises:
            ConfigError: a variable named is unset, or its value is no printable ASCII (an HTTP header
                cannot carry it; the value is not shown).
        """
        headers, problems = self._expand("headers", self.headers)
        if problems:
            raise ConfigError("; ".join(problems))
        return headers

    def unresolved(self) -> list[str]:
        """Each problem :meth:`resolved_env` and :meth:`resolved_headers` would raise (empty: none)."""
        return self._expand("env", self.env)[1] + self._expand("headers", self.headers)[1]

    def _expand(self, key: str, values: dict[str, str]) -> tuple[dict[str, str], list[str]]:
        problems: list[str] = []

        def one(name: str, match: re.Match[str]) -> str:
            if match.group(1):
                return match.group(0)[1:]
            value = os.environ.get(match.group(2))
            if value is None:
                problems.append(f"upstream {self.id}: {key}.{name} names the environment variable "
                                f"{match.group(2)}, which is unset")
                return ""
            if key == "headers" and not (value.isascii() and value.isprintable()):
                problems.append(f"upstream {self.id}: {key}.{name}: the environment variable {match.group(2)} "
                                "must be printable ASCII (an HTTP header cannot carry it; the value is not shown)")
            return value

        out = {name: _VARIABLE.sub(lambda m, name=name: one(name, m), value) if "$" in value else value
               for name, value in values.items()}
        return out, list(dict.fromkeys(problems))


#: ``${VAR}`` in an upstream's env or header value (the gateway's environment variable VAR); ``$${VAR}``: the text
_VARIABLE = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class TokenSpec:
    """An HTTP bearer token (given literally or named by an environment variable) and the identity it maps to."""

    identity: str
    token: str | None = None
    token_env: str | None = None

    def resolve(self) -> str:
        """The token's value.

        Raises:
            ConfigError: ``token_env`` names an unset or too short variable.
        """
        if self.token is not None:
            return self.token
        value = os.environ.get(self.token_env or "", "")
        if len(value) < 16:
            raise ConfigError(f"environment variable {self.token_env} (token of {self.identity}) is unset or shorter than 16 characters")
        if not _sendable_token(value):
            raise ConfigError(f"environment variable {self.token_env} (token of {self.identity}) {_TOKEN_CHARS}")
        return value


#: why a token that :func:`_sendable_token` refuses can never be used (the value itself is never shown)
_TOKEN_CHARS = ("must be printable ASCII, without spaces at either end: no request could carry it in its "
                "Authorization header (the value is not shown)")


def _sendable_token(value: str) -> bool:
    """Whether a bearer token can arrive as written: HTTP clients send header values as ASCII (httpx
    refuses anything else, curl sends UTF-8 bytes that never compare equal) and drop spaces at either end."""
    return value.isascii() and value.isprintable() and value == value.strip()


@dataclass(frozen=True)
class Limits:
    """Gateway limits. ``max_request_bytes``: a request's JSON params above this are refused
    (``REQUEST_TOO_LARGE``); ``approval_hold_s``: how long a call waiting for an approval is held;
    ``undelivered_keep_s``: how long the outcome of a held call that could not be delivered (its client
    cancelled, timed out or disconnected) is kept for a retry with the same arguments (0: not kept), and
    how long a request decided or expired that no call retries stays in memory (then read from the store);
    ``call_timeout_s``: an upstream call longer than this is a recorded timeout;
    ``startup_timeout_s``: an upstream that does not answer ``initialize`` + ``tools/list`` within this is down;
    ``max_calls_in_flight``: ``tools/call`` requests one client (MCP session) may have in flight at once (held
    for an approval, forwarded, being recorded); one more is refused ``TOO_MANY_CALLS``."""

    max_request_bytes: int = 1024 * 1024
    approval_hold_s: float = 4.0
    undelivered_keep_s: float = 900.0
    call_timeout_s: float = 60.0
    startup_timeout_s: float = 30.0
    max_calls_in_flight: int = 64


@dataclass(frozen=True)
class GatewayConfig:
    """A validated ``gateway.yaml``."""

    source: str
    store: str
    policy: str
    upstreams: tuple[UpstreamSpec, ...]
    principal: str = "agent:mcp-client"
    name: str = "gateway"
    separator: str = DEFAULT_SEPARATOR
    tokens: tuple[TokenSpec, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    #: --http: a session with no request in flight (none being served, no open GET stream) for this long
    #: is closed (its id then answers 404; the client initializes a new session, a new run)
    session_idle_s: float = 1800.0
    #: --http: the sessions one identity may have open at once (the SDK's cap, 10 000, is for all together)
    max_sessions_per_identity: int = 100
    #: --http: the sessions of every identity together (each holds a server task and ~50 KB): one more is refused
    #: HTTP 503, TOO_MANY_CALLS (passed to the SDK too, whose own cap is 10 000)
    max_sessions: int = 1000
    #: --http: the TCP connections open at once, every client together (each a file descriptor): one more
    #: first closes the longest-idle connection (no request being served), else its request is answered HTTP 503
    max_connections: int = 512
    limits: Limits = field(default_factory=Limits)
    breaker_threshold: int = 5
    breaker_cooldown_s: float = 30.0
    restart_initial_s: float = 0.5
    restart_max_s: float = 30.0
    #: the store's durability (:class:`sealbox.store.sqlite.SqliteStore`): ``"full"`` fsyncs every commit
    #: (a call's record is on disk before it is forwarded); ``"fast"`` does not (a power cut may lose the last calls)
    durability: str = "full"

    def upstream(self, server_id: str) -> UpstreamSpec | None:
        """The upstream with this id, if any."""
        return next((u for u in self.upstreams if u.id == server_id), None)


def load_config(path: str | os.PathLike) -> GatewayConfig:
    """Read and validate a gateway config file.

    Raises:
        ConfigError: ``FILE:LINE: problem`` for a missing file, one above 1 MiB (read no further), one that is not
            UTF-8 text (``FILE is not UTF-8 text (byte N)``), invalid YAML, an
            unknown field, a wrong type, a duplicate upstream id, or a server id
            that contains the separator (or ends so that the separator would be found
            earlier in its exposed names); every such problem, joined by ``; ``.
    """
    from sealbox.policy.loader import MAX_FILE_BYTES

    p = Path(path)
    try:
        with open_input(p) as fh:  # no further than the limit: /dev/zero or a pipe may never end
            data = fh.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise ConfigError(f"{p}: file is larger than {MAX_FILE_BYTES} bytes")
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(not_utf8_text(p, exc) or f"{p}: cannot read: {exc}") from None
    return parse_config(text, source=str(p), base=p.resolve().parent)


def parse_config(text: str, *, source: str = "<string>", base: str | os.PathLike | None = None) -> GatewayConfig:
    """Validate YAML 1.2 ``text`` as a gateway config (see :func:`load_config`)."""
    from sealbox.policy import loader

    try:
        doc, lines = loader.read_text(text, source)
    except PolicyLoadError as exc:
        problem = exc.problem.replace("a policy file must be a YAML mapping (version, rules, ...)",
                                      "a gateway config must be a YAML mapping (version, store, policy, upstreams)")
        raise ConfigError(_where(source, exc.line, problem)) from None
    # every problem, in file order, in one error: a non-finite number is said once as such (not also as
    # "inf is greater than the maximum")
    infinite = {path: number for path, number in _numbers(doc, ()) if not math.isfinite(number)}
    errors = [(tuple(err.absolute_path), err) for err in _VALIDATOR.iter_errors(doc)]
    said = ("type", "enum", "const")  # where no such number belongs (principal: .nan), the schema says what does
    typed = {path for path, err in errors if path in infinite and err.validator in said}
    problems = [(loader.line_of(lines, path), _message(err, path)) for path, err in errors
                if path not in infinite or (path in typed and err.validator in said)]
    infinite = {path: number for path, number in infinite.items() if path not in typed}
    problems += [(loader.line_of(lines, path), f"{'.'.join(map(str, path))}: must be a finite number, not {_written(number)}")
                 for path, number in infinite.items()]
    _raise_all(source, problems)
    cfg = _build(doc, Path(base) if base is not None else Path.cwd(), source)
    _raise_all(source, _check_ids(cfg, lines))
    return cfg


def _raise_all(source: str, problems: list[tuple[int | None, str]]) -> None:
    """One ConfigError listing every ``FILE:LINE: problem``, ordered by line, separated by ``; ``."""
    if problems:
        ordered = sorted(problems, key=lambda p: p[0] or 0)
        raise ConfigError("; ".join(_where(source, line, problem) for line, problem in ordered))


def allow_all_hint(policy: str) -> str:
    """A hint when a policy path that does not exist looks like a misspelt ``ALLOW_ALL`` (else empty)."""
    name = os.path.basename(policy)
    if policy != "ALLOW_ALL" and re.sub(r"[-_ ]", "", name).upper() == "ALLOWALL" and not os.path.exists(policy):
        return " (the built-in allow-all policy is written exactly `policy: ALLOW_ALL`, in capitals; docs/gateway.md)"
    return ""


def _numbers(value: Any, path: tuple) -> list[tuple[tuple, float]]:
    """Every float in the document with its path (YAML allows .nan and .inf)."""
    if isinstance(value, float):
        return [(path, value)]
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in _numbers(v, (*path, k))]
    if isinstance(value, list):
        return [hit for i, v in enumerate(value) for hit in _numbers(v, (*path, i))]
    return []


def _where(source: str, line: int | None, problem: str) -> str:
    return f"{source}:{line}: {problem}" if line else f"{source}: {problem}"


def _message(err: jsonschema.ValidationError, path: tuple) -> str:
    where = ".".join(str(p) for p in path) or "document"
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = set(err.schema.get("properties", {}))
        extra = sorted(k for k in err.instance if k not in allowed)
        return f"unknown field '{'.'.join([*map(str, path), extra[0]]) if extra else where}'"
    if err.validator == "oneOf" and "upstreams" in path:
        return f"{where}: give exactly one of 'command' (stdio) or 'url' (streamable HTTP)"
    if err.validator == "oneOf":
        return f"{where}: give exactly one of 'token' or 'token_env'"
    if path and path[-1] == "token":  # a secret: its value is never shown
        return f"{where}: must be a string of at least 16 characters (the value is not shown)"
    if err.validator == "required":
        return f"{where}: {err.message}"
    # jsonschema's own messages quote the value as Python writes it (None, True, ['uvx', 'x'], {'a': 1}):
    # these say it as the YAML author wrote it (null, true, ["uvx", "x"], {"a": 1})
    if err.validator == "type":
        wanted = [err.validator_value] if isinstance(err.validator_value, str) else list(err.validator_value)
        if wanted == ["integer"] and isinstance(err.instance, float) and err.instance.is_integer():
            return f"{where}: must be a whole number written as digits ({int(err.instance)}), not {_written(err.instance)}"
        return f"{where}: must be {' or '.join(_TYPE_WORDS.get(t, t) for t in wanted)}, not {_written(err.instance)}"
    if err.validator == "enum":
        return f"{where}: {_written(err.instance)} is not one of {', '.join(map(str, err.validator_value))}"
    if err.validator == "const":
        return f"{where}: must be {_written(err.validator_value)}, not {_written(err.instance)}"
    if err.validator in ("minItems", "minLength") and err.validator_value == 1:
        return f"{where}: must not be empty"
    if err.validator == "pattern" and path and path[-1] == "separator":
        return "separator: must be 1-3 characters from '_', '-', '.' (so exposed names stay valid MCP tool names)"
    if err.validator == "pattern" and path and path[-1] in ("id", "name"):
        return f"{where}: {err.instance!r} must be 1-48 characters [A-Za-z0-9_-], starting with a letter or digit"
    return f"{where}: {err.message}"


_TYPE_WORDS = {"string": "a string", "integer": "a whole number", "number": "a number", "array": "a list",
               "object": "a mapping", "boolean": "true or false", "null": "null"}


def _build(doc: dict[str, Any], base: Path, source: str) -> GatewayConfig:
    def rel(value: str) -> str:
        if value == "~" or value.startswith("~/"):  # the home folder, as a shell reads it (not a folder named ~)
            return os.path.expanduser(value)
        return value if value == "ALLOW_ALL" or os.path.isabs(value) else str(base / value)

    def command(u: dict[str, Any]) -> str | None:
        # a command written as a path (./server.py, bin/server) is relative to the upstream's cwd, or to the
        # file's folder: not to the gateway's working directory (an MCP client may start it anywhere); a bare
        # name is looked up in PATH
        value = u.get("command")
        if not isinstance(value, str) or "/" not in value or os.path.isabs(value):
            return value
        if value.startswith("~/"):
            return os.path.expanduser(value)
        return str(Path(rel(u["cwd"]) if u.get("cwd") else base) / value)

    ups = tuple(
        UpstreamSpec(id=u["id"], command=command(u), args=tuple(u.get("args") or ()), env=dict(u.get("env") or {}),
                     cwd=rel(u["cwd"]) if u.get("cwd") else None, url=u.get("url"), headers=dict(u.get("headers") or {}))
        for u in doc["upstreams"]
    )
    http = doc.get("http") or {}
    lim = doc.get("limits") or {}
    brk = doc.get("breaker") or {}
    rst = doc.get("restart") or {}
    return GatewayConfig(
        source=source, store=rel(doc["store"]), policy=rel(doc["policy"]), upstreams=ups,
        principal=doc.get("principal", "agent:mcp-client"), name=doc.get("name", "gateway"),
        separator=doc.get("separator", DEFAULT_SEPARATOR),
        tokens=tuple(TokenSpec(t["identity"], t.get("token"), t.get("token_env")) for t in http.get("tokens") or ()),
        allowed_origins=tuple(http.get("allowed_origins") or ()),
        session_idle_s=float(http.get("session_idle_s", 1800.0)),
        max_sessions_per_identity=http.get("max_sessions_per_identity", 100),
        max_sessions=http.get("max_sessions", 1000),
        max_connections=http.get("max_connections", 512),
        limits=Limits(**{k: lim[k] for k in ("max_request_bytes", "approval_hold_s", "undelivered_keep_s",
                                             "call_timeout_s", "startup_timeout_s", "max_calls_in_flight")
                         if k in lim}),
        breaker_threshold=brk.get("threshold", 5), breaker_cooldown_s=float(brk.get("cooldown_s", 30.0)),
        restart_initial_s=float(rst.get("initial_s", min(0.5, rst.get("max_s", 30.0)))),
        restart_max_s=float(rst.get("max_s", 30.0)),
        durability=doc.get("durability", "full"),
    )


def _check_ids(cfg: GatewayConfig, lines: dict) -> list[tuple[int | None, str]]:
    from sealbox.policy import loader

    problems: list[tuple[int | None, str]] = []
    seen: set[str] = set()
    for i, up in enumerate(cfg.upstreams):
        line = loader.line_of(lines, ("upstreams", i, "id"))
        if cfg.separator in up.id:
            problems.append((line, f"upstreams.{i}.id: {up.id!r} contains the separator {cfg.separator!r}"))
        elif (cut := (up.id + cfg.separator).find(cfg.separator)) != len(up.id):
            # "toy_" + "__" + "echo" = "toy___echo", split at its first "__": server "toy", tool "_echo"
            problems.append((line, f"upstreams.{i}.id: {up.id!r} followed by the separator {cfg.separator!r} "
                                   f"would be read as server {up.id[:cut]!r}: its tools could not be called "
                                   f"(end the id with a letter or digit)"))
        elif up.id in seen:
            problems.append((line, f"upstreams.{i}.id: duplicate upstream id {up.id!r}"))
        seen.add(up.id)
        if up.url is not None and (why := _url_problem(up.url)):
            problems.append((loader.line_of(lines, ("upstreams", i, "url")), f"upstreams.{i}.url: {up.url!r} {why}"))
        # each start of the upstream failed on these (ValueError: embedded null byte, illegal environment variable name)
        for key, text in [("command", up.command), ("cwd", up.cwd), *((f"args.{j}", a) for j, a in enumerate(up.args))]:
            if text is not None and "\0" in text:
                where = ("upstreams", i, *(int(k) if k.isdigit() else k for k in key.split(".")))
                problems.append((loader.line_of(lines, where), f"upstreams.{i}.{key}: must not contain a NUL character"))
        for name, value in up.env.items():
            line_e = loader.line_of(lines, ("upstreams", i, "env", name))
            if not name or "=" in name or "\0" in name:
                problems.append((line_e, f"upstreams.{i}.env: {name!r} is not a valid environment variable name "
                                         "(empty, or holds '=' or NUL)"))
            elif "\0" in value:
                problems.append((line_e, f"upstreams.{i}.env.{name}: the value must not contain a NUL character "
                                         "(the value is not shown)"))
        for name, value in up.headers.items():
            # each connection attempt of `gateway serve` failed on it (UnicodeEncodeError, LocalProtocolError)
            line_h = loader.line_of(lines, ("upstreams", i, "headers", name))
            if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
                problems.append((line_h, f"upstreams.{i}.headers: {name!r} is not a valid HTTP header name"))
            elif not (value.isascii() and value.isprintable()):
                problems.append((line_h, f"upstreams.{i}.headers.{name}: the value must be printable ASCII (an HTTP "
                                         "header cannot carry it; the value is not shown)"))
    for i, token in enumerate(cfg.tokens):
        if token.token is not None and not _sendable_token(token.token):
            problems.append((loader.line_of(lines, ("http", "tokens", i, "token")),
                             f"http.tokens.{i}.token (of {token.identity}) {_TOKEN_CHARS}"))
    for i, origin in enumerate(cfg.allowed_origins):
        if (exact := _origin_as_sent(origin)) != origin:
            fix = f": write {exact!r}" if exact else ""
            problems.append((loader.line_of(lines, ("http", "allowed_origins", i)),
                             f"http.allowed_origins.{i}: {origin!r} never equals an Origin header a browser sends{fix} "
                             "(scheme://host[:port], lower case, no path, no default port)"))
    if cfg.restart_initial_s > cfg.restart_max_s:  # the first wait was initial_s, every later one max_s
        problems.append((loader.line_of(lines, ("restart", "initial_s")),
                         f"restart.initial_s ({cfg.restart_initial_s:g}) is above restart.max_s ({cfg.restart_max_s:g})"))
    for key in ("store", "policy"):  # open() raised ValueError (embedded null byte): internal error, exit 70
        if "\0" in getattr(cfg, key):
            problems.append((loader.line_of(lines, (key,)), f"{key}: must not contain a NUL character"))
    texts = [(("principal",), "principal", cfg.principal)] + [
        (("http", "tokens", i, "identity"), f"http.tokens.{i}.identity", t.identity) for i, t in enumerate(cfg.tokens)]
    for where, name, text in texts:  # "\ud800" in YAML: every call failed, a traceback on stderr, nothing recorded
        if any("\ud800" <= c <= "\udfff" for c in text):
            problems.append((loader.line_of(lines, where), f"{name}: {text!r} holds a lone surrogate, which a name "
                                                           "in the record cannot hold"))
        # the principal of calls, as the config's principal is for stdio: a newline in it splits the record's lines
        elif re.search(r"[\s\x00-\x1f\x7f-\x9f]", text):
            problems.append((loader.line_of(lines, where), f"{name}: must not contain whitespace or control characters"))
    return problems


def _origin_as_sent(origin: str) -> str | None:
    """``origin`` as a browser writes it in its ``Origin`` header (the gateway compares them exactly;
    a ``:*`` port is kept), or None when it is no origin at all."""
    from urllib.parse import urlsplit

    base, wildcard = (origin[:-2], ":*") if origin.endswith(":*") else (origin, "")
    try:
        parts = urlsplit(base)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if not host or any(c.isspace() for c in origin):
        return None
    scheme = parts.scheme.lower()
    sent = f"{scheme}://{'[' + host + ']' if ':' in host else host}"
    if port is not None and not wildcard and port != {"http": 80, "https": 443}.get(scheme):
        sent += f":{port}"
    return sent + wildcard


def _url_problem(url: str) -> str:
    """Why an upstream's streamable-HTTP ``url`` can never be reached ('' when it can be tried): the
    schema only checks that it starts with ``http(s)://``, and a URL the HTTP client cannot parse
    failed each connection attempt of ``gateway serve`` after ``gateway check`` had said ok."""
    from urllib.parse import urlsplit

    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        return "must not contain spaces or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # "http://[::1": Invalid IPv6 URL; "http://h:abc", "http://h:99999": the port
        return f"is not a valid URL ({exc})"
    if not parts.hostname:
        return "has no host"
    if port == 0:
        return "needs a port from 1 to 65535"
    return ""
