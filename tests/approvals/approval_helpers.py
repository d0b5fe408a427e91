"""Helpers for approval tests: a policy that asks for approvals, event listings."""

from __future__ import annotations

import textwrap

from sealbox.policy import Policy

POLICY = """
version: 1
rules:
  - id: writes-need-ops
    match: {tool: write_query}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1h}
  - id: deploys-need-two
    match: {tool: deploy}
    effect: require_approval
    approval: {groups: [ops], identities: [carol], quorum: 2, expires: 1h}
  - id: quick-expiry
    match: {tool: quick}
    effect: require_approval
    approval: {groups: [ops], quorum: 1, expires: 1s}
  - id: reads
    match: {tool: read_query}
    effect: allow
"""


def policy(text: str = POLICY) -> Policy:
    return Policy.from_text(textwrap.dedent(text))


def kinds(store, run_id):
    return [e.kind for e in store.read_run(run_id)]


def request_of(store, run_id, call_id=None):
    reqs = [e.payload for e in store.read_run(run_id) if e.kind == "approval.requested"]
    return [r for r in reqs if call_id is None or r["call_id"] == call_id][-1]
