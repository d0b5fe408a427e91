"""How a ``resources/read`` is decided: on the URI read, and on the forms of it an upstream may take
for the same resource, the strictest decision winning.

The gateway records a ``resources/read`` as a call of tool ``resource:<uri>`` (docs/gateway.md,
"Prompts and resources"). A rule denying ``resource:toy://notes/secret`` exactly was dodged by
reading ``toy://notes/secret?x``, ``toy://notes/secret/``, ``toy://notes//secret`` or
``toy://notes%2Fsecret``: other text, so the rule did not match, but an upstream that ignores the
query, serves files (``a/`` is ``a``, ``a//b`` is ``a/b``) or reads the URI through a resource
template (the MCP SDK's ``UriTemplate.match`` percent-decodes a variable: ``%2F`` to ``/``, ``%28``
to ``(``) reads that resource. :func:`evaluate_read` judges the read as each form :func:`read_forms` gives and keeps
the strictest decision (deny > require_approval > allow), recording which form decided
(``Decision.judged_as``). The recorder decides a ``resources/read`` with it, and a re-evaluation of
a recorded one (``sealbox whatif``, :mod:`sealbox.policy.audit`) does too: the same decision.

Pure: no I/O. See docs/policy.md, "Resource reads".
"""

from __future__ import annotations

import dataclasses
import re
from itertools import combinations
from typing import Any
from urllib.parse import unquote

from sealbox.policy.model import CallContext, Decision

__all__ = ["RESOURCE_TOOL_PREFIX", "evaluate_read", "judged_text", "normalize_uri", "read_forms", "without_fragment"]

#: A ``resources/read`` is recorded as a call of tool ``"resource:" + the URI`` (arguments ``{"uri": …}``,
#: ``method: "resources/read"``).
RESOURCE_TOOL_PREFIX = "resource:"

_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_KEPT_ENCODED = re.compile(r"(%25|%3[Ff]|%23)")
_EMPTY_SEGMENTS = re.compile(r"//+")
_JUDGED = "; judged as "
_STRICTNESS = {"allow": 0, "require_approval": 1, "deny": 2}


def normalize_uri(uri: str) -> str:
    """``uri`` in the normal form of RFC 3986 §6.2.2 (syntax-based normalization): the scheme
    lowercased, a percent-encoded unreserved character (letters, digits, ``-._~``) decoded, the hex
    digits of every other percent-encoding uppercased, and the dot segments (``.``, ``..``) of a path
    that starts with ``/`` removed (§5.2.4; the query and fragment as they are). The host keeps its
    case (MCP servers compare URIs as text).

    >>> normalize_uri("TOY://files/public/%2E%2E/private/%6Bey%2f")
    'toy://files/private/key%2F'
    """
    scheme = _SCHEME.match(uri)
    if scheme:
        uri = scheme.group().lower() + uri[scheme.end():]

    def one(m: re.Match[str]) -> str:
        ch = chr(int(m.group(1), 16))
        return ch if ch in _UNRESERVED else "%" + m.group(1).upper()

    uri = _PERCENT.sub(one, uri)
    head, path, tail = _split(uri)
    if not path.startswith("/"):
        return uri
    return head + _remove_dot_segments(path) + tail


def without_fragment(uri: str) -> str:
    """``uri`` without its fragment (``#…``): never part of what is read (RFC 3986 §3.5, "the
    fragment identifier is not used in the scheme-specific processing of a URI")."""
    return uri.partition("#")[0]


def read_forms(uri: str) -> list[tuple[str, str]]:
    """The URIs a read of ``uri`` is judged as (:func:`evaluate_read`): ``(uri, "")`` first, then each
    distinct form with how it was made from ``uri`` (``"without its query"``…), fewest changes first.

    Every other form is ``uri`` normalized (:func:`normalize_uri`) and without its fragment, and then,
    in every combination, in this order: without its query; percent-decoded before its query (``%2F``
    as ``/``, ``%28`` as ``(``, ``%C3%A9`` as ``é``…, in the path and the authority:
    ``toy://notes%2Fsecret``; not ``%25``, ``%3F``, ``%23``), and the dot segments that makes removed;
    without empty path segments (``//`` as ``/``); without its trailing slash(es) (a path of only ``/``
    after an authority becomes empty: ``toy://h/`` is judged as ``toy://h`` too). At most 16 forms
    besides ``uri``; a URI with none of these parts has none.
    A URL of a scheme a URL parser (WHATWG URL; RFC 8089 for ``file:``) reads otherwise than as text
    (``file``, ``http``, ``https``, ``ws``, ``wss``, ``ftp``) is judged also, first and in every
    combination, as it reads it (:func:`_as_url`: ``file:/etc/passwd``, ``file://localhost/etc/passwd``
    and ``file:///etc\\passwd`` as ``file:///etc/passwd``; ``https://Host:443/a`` as ``https://host/a``):
    at most 31 forms then.

    >>> read_forms("toy://notes/secret/?x")[1:]
    [('toy://notes/secret/', 'without its query'), ('toy://notes/secret?x', 'without its trailing slash'), \
('toy://notes/secret', 'without its query, without its trailing slash')]
    """
    base = without_fragment(normalize_uri(uri))
    made = [how for how, changed in (("normalized", normalize_uri(uri) != uri),
                                     ("without its fragment", "#" in normalize_uri(uri))) if changed]
    steps = ((_drop_query, "without its query"), (_percent_decode, "percent-decoded"),
             (_collapse_segments, "without empty path segments"), (_drop_trailing_slash, "without its trailing slash"))
    if _as_url(base) != base:  # a file:, http:… URL a URL parser reads otherwise: that too, in every combination
        steps = ((_as_url, "as a URL parser reads it"), *steps)
    seen = {uri}
    out = [(uri, "")]
    for size in range(len(steps) + 1):
        for chosen in combinations(steps, size):
            form, how = base, list(made)
            for step, label in chosen:
                changed = step(form)
                if changed != form:
                    form = changed
                    how.append(label)
            if form not in seen:
                seen.add(form)
                out.append((form, ", ".join(how)))
    return out


def evaluate_read(policy: Any, call: CallContext) -> Decision:
    """The decision for a ``resources/read`` recorded as ``call`` (tool ``resource:<uri>``): ``policy``
    evaluated on the call as read and on each other form of its URI (:func:`read_forms`; tool
    ``resource:<form>``, argument ``uri`` the form, everything else as read), the strictest winning
    (deny > require_approval > allow; a tie: the earlier form). A form no rule matches
    (``no_match``) does not decide: no rule speaks of that resource (the read as asked is denied
    ``no_match`` itself when no rule matches it). A decision made on another form than the one read
    has ``judged_as`` set to that form's tool and its reason ends ``"; judged as resource:<form>
    (the URI <how>)"``. ``eval_us`` is the time of all evaluations. Never raises (as
    ``Policy.evaluate``). A call of another tool: ``policy.evaluate(call)``.
    """
    decision = policy.evaluate(call)
    if not call.tool.startswith(RESOURCE_TOOL_PREFIX):
        return decision
    forms = read_forms(call.tool[len(RESOURCE_TOOL_PREFIX):])
    if len(forms) == 1:
        return decision
    best, spent = decision, decision.eval_us
    for form, how in forms[1:]:
        arguments = call.arguments
        if isinstance(arguments, dict) and "uri" in arguments:
            arguments = {**arguments, "uri": form}
        other = policy.evaluate(dataclasses.replace(call, tool=RESOURCE_TOOL_PREFIX + form, arguments=arguments))
        spent += other.eval_us
        if other.reason_code == "no_match" or _STRICTNESS[other.effect] <= _STRICTNESS[best.effect]:
            continue
        best = dataclasses.replace(other, judged_as=RESOURCE_TOOL_PREFIX + form,
                                   reason=f"{other.reason}{_JUDGED}{RESOURCE_TOOL_PREFIX}{form} (the URI {how})")
    return dataclasses.replace(best, eval_us=spent)


def judged_text(decision: Decision) -> str:
    """The end of the reason of a decision :func:`evaluate_read` made on another form than the URI read
    (``"; judged as resource:<form> (the URI <how>)"``), else ``""``: kept by a deny that replaces the
    reason (``approval_unavailable`` for a ``require_approval``), so the record still says which form
    decided."""
    if decision.judged_as is None:
        return ""
    at = decision.reason.rfind(_JUDGED)
    return decision.reason[at:] if at >= 0 else ""


def _split(uri: str) -> tuple[str, str, str]:
    """``(scheme and authority, path, query and fragment)`` of ``uri`` (RFC 3986 §3)."""
    scheme = _SCHEME.match(uri)
    start = scheme.end() if scheme else 0
    end = min((i for i in (uri.find("?", start), uri.find("#", start)) if i >= 0), default=len(uri))
    path_at = start
    if uri.startswith("//", start):  # the authority, up to the path
        slash = uri.find("/", start + 2, end)
        path_at = end if slash < 0 else slash
    return uri[:path_at], uri[path_at:end], uri[end:]


_SPECIAL_PORTS = {"file": None, "http": "80", "https": "443", "ws": "80", "wss": "443", "ftp": "21"}


def _as_url(uri: str) -> str:
    """``uri`` as a URL parser (WHATWG URL: ``new URL()``, which resource servers use) reads a URL of a
    special scheme (:data:`_SPECIAL_PORTS`), before its query: ``\\`` as ``/``; for ``file:`` an absent
    authority or host ``localhost`` as the empty one (``file:///…``, RFC 8089 §2); else the host
    lowercased and an empty or default port dropped; the dot segments of the path removed. Any other
    URI (and an ``http:`` one without ``//``): as it is."""
    scheme = _SCHEME.match(uri)
    name = scheme.group()[:-1].lower() if scheme else ""
    if name not in _SPECIAL_PORTS:
        return uri
    head, path, tail = _split(uri)
    rest = (head + path)[len(name) + 1:].replace("\\", "/")
    if name == "file":
        if not rest.startswith("//"):  # file:/p and file:p: no authority
            rest = "//" + ("" if rest.startswith("/") else "/") + rest
        host, slash, path = rest[2:].partition("/")
        host = "" if host.lower() == "localhost" else host
    else:
        if not rest.startswith("//"):
            return uri
        host, slash, path = rest[2:].partition("/")
        userinfo, at, hostport = host.rpartition("@")
        hostname, colon, port = hostport.rpartition(":")
        if not colon or hostname.startswith("[") and not hostname.endswith("]"):  # no port (an IPv6 address's ":")
            hostname, port = hostport, ""
        kept = f":{port}" if port and port != _SPECIAL_PORTS[name] else ""
        host = f"{userinfo}{at}{hostname.lower()}{kept}"
    path = slash + path
    return f"{name}://{host}" + (_remove_dot_segments(path) if path else "") + tail


def _drop_query(uri: str) -> str:
    head, path, _ = _split(uri)
    return head + path


def _percent_decode(uri: str) -> str:
    """The percent-encodings before the query decoded (UTF-8), as the MCP SDK's ``UriTemplate.match``
    decodes a variable: ``%2F`` to ``/``, ``%28`` to ``(``, ``%C3%A9`` to ``é``…, in the path and in the
    text RFC 3986 reads as the authority (``toy://notes%2Fsecret``: a template ``toy://{+path}`` reads it
    as ``toy://notes/secret``), the result split again and the dot segments of its path removed. ``%25``,
    ``%3F`` and ``%23`` stay encoded: decoded, they would read as another encoding, a query, a fragment."""
    head, path, tail = _split(uri)
    parts = _KEPT_ENCODED.split(head + path)
    decoded = "".join(part if i % 2 else unquote(part) for i, part in enumerate(parts))
    if decoded == head + path:
        return uri
    head, path, _ = _split(decoded)
    return head + (_remove_dot_segments(path) if path.startswith("/") else path) + tail


def _collapse_segments(uri: str) -> str:
    head, path, tail = _split(uri)
    return head + _EMPTY_SEGMENTS.sub("/", path) + tail


def _drop_trailing_slash(uri: str) -> str:
    head, path, tail = _split(uri)
    stripped = path.rstrip("/")
    if not stripped and "//" not in head:  # no authority: a path of only "/" stays
        return uri
    return head + stripped + tail


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4 on a path starting with ``/``."""
    segments = path.split("/")[1:]
    out: list[str] = []
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment in (".", ".."):
            if segment == ".." and out:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(segment)
    return "/" + "/".join(out)
