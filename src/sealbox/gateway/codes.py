"""JSON-RPC error codes the gateway answers with, for protocol errors only.

A tool that was denied, failed, timed out, or whose arguments did not match its
input schema is a normal ``CallToolResult`` with ``isError: true`` (the model
sees it). A *protocol* error — the request itself cannot be served — is a
JSON-RPC error with one of these codes. They lie in −32003…−32019: −32000 and
−32001 are used by the MCP Python SDK (connection closed, request timeout),
−32002 was "resource not found" until MCP 2025-11-25 and is never reused, and
−32020…−32099 are reserved by the MCP specification.
"""

from __future__ import annotations

__all__ = ["UNKNOWN_TOOL", "REQUEST_TOO_LARGE", "MALFORMED_REQUEST", "UNKNOWN_RUN", "UNAUTHORIZED",
           "INVALID_REQUEST_STATE", "RUN_IN_USE", "UNKNOWN_PROMPT", "UNKNOWN_RESOURCE", "AMBIGUOUS_RESOURCE", "DENIED",
           "NOT_RECORDED", "UPSTREAM_ERROR", "NOT_SUPPORTED", "TOO_MANY_CALLS", "CODES"]

#: ``tools/call`` names a tool that is not exposed (no such server, or no such tool on it).
UNKNOWN_TOOL = -32003
#: The request's params, as JSON, are larger than ``limits.max_request_bytes``; or the request nests arrays and
#: objects more than 200 levels deep (``transports.MAX_NESTING``, the most the SDK's JSON reader reads).
REQUEST_TOO_LARGE = -32004
#: The request is well-formed JSON-RPC but not a valid ``tools/call`` (no name, arguments not an object…),
#: or (HTTP) it carries ``Authorization``, ``mcp-session-id`` or ``mcp-protocol-version`` twice, or the id of a request still
#: in flight on its session (or ``"_GET_stream"``, the SDK's key for a session's GET stream), or a joined call names a ``sealbox/step``
#: or ``sealbox/call_id`` its run already has a tool call at / with (recorded by any writer of the run: checked in
#: the write that records the call, docs/gateway.md "Steps of a joined call").
MALFORMED_REQUEST = -32005
#: ``_meta["sealbox/run_id"]`` (or ``SEALBOX_RUN_ID``) names a run that does not exist or has ended.
UNKNOWN_RUN = -32006
#: An HTTP request carried no bearer token, or one the config does not map to an identity.
UNAUTHORIZED = -32007
#: A stateless (2026-07-28) retry carried a ``requestState`` that does not verify, has expired, or is bound
#: to other arguments or another principal (sealbox.gateway.holds).
INVALID_REQUEST_STATE = -32008
#: ``_meta["sealbox/run_id"]`` names the run of another MCP session of this gateway that is still
#: connected: only that session records into it (two would number their steps independently).
RUN_IN_USE = -32009
#: ``prompts/get`` names a prompt that is not exposed (no such server, or no such prompt on it).
UNKNOWN_PROMPT = -32010
#: ``resources/read`` names a URI no upstream listed and no upstream's resource template matches.
UNKNOWN_RESOURCE = -32011
#: ``resources/read`` names a URI that two or more upstreams list, or (listed by none) whose templates match.
AMBIGUOUS_RESOURCE = -32012
#: A ``prompts/get`` or ``resources/read`` was denied (policy rule, limit, breaker; a ``require_approval``
#: is a deny ``approval_unavailable`` for them): recorded, not forwarded; ``data`` names the rule.
DENIED = -32013
#: A ``prompts/get`` or ``resources/read`` could not be recorded (not forwarded), or was forwarded and its
#: result could not be recorded (not answered).
NOT_RECORDED = -32014
#: The upstream of a ``prompts/get`` or ``resources/read`` is down, timed out, or answered with an error
#: (recorded as the call's error).
UPSTREAM_ERROR = -32015
#: A request the gateway does not proxy (``resources/subscribe``, ``resources/unsubscribe``).
NOT_SUPPORTED = -32016
#: A ``tools/call`` arrived while its client (MCP session: a stdio connection, an HTTP session) already had
#: ``limits.max_calls_in_flight`` of them in flight: refused before anything is recorded or forwarded;
#: ``data``: ``{"limit": N}``.
TOO_MANY_CALLS = -32017

CODES: dict[int, str] = {
    UNKNOWN_TOOL: "unknown tool",
    REQUEST_TOO_LARGE: "request too large",
    MALFORMED_REQUEST: "malformed request",
    UNKNOWN_RUN: "unknown run",
    UNAUTHORIZED: "unauthorized",
    INVALID_REQUEST_STATE: "invalid request state",
    RUN_IN_USE: "run in use",
    UNKNOWN_PROMPT: "unknown prompt",
    UNKNOWN_RESOURCE: "unknown resource",
    AMBIGUOUS_RESOURCE: "ambiguous resource",
    DENIED: "denied",
    NOT_RECORDED: "not recorded",
    UPSTREAM_ERROR: "upstream error",
    NOT_SUPPORTED: "not supported",
    TOO_MANY_CALLS: "too many calls in flight",
}
