"""Decision latency of the policy engine (prints figures, asserts nothing).

Cases:
* ALLOW_ALL (baseline);
* a 100-rule policy where the call's (server, tool) selects one rule with one condition;
* the same policy where ten conditions are evaluated for the call (nine false, the tenth decides).

Run: ``.venv/bin/python bench/bench_policy.py``
"""

from __future__ import annotations

import datetime as dt
import statistics
import time

from sealbox.policy import ALLOW_ALL, CallContext, Policy

N = 20_000


def _policy() -> Policy:
    rules = []
    for i in range(100):
        rules.append({"id": f"r{i}", "match": {"server": "db", "tool": f"tool_{i}"},
                      "when": 'call.arguments.query.startsWith("select")', "effect": "allow"})  # fmt: skip
    for i in range(10):
        rules.append({"id": f"ten{i}", "match": {"server": "db", "tool": "busy"},
                      "when": f'call.arguments.n == {i if i == 9 else -1}', "effect": "allow"})  # fmt: skip
    return Policy.from_dict({"version": 1, "name": "bench", "rules": rules})


def _measure(policy: Policy, call: CallContext) -> tuple[float, float]:
    for _ in range(1000):
        policy.evaluate(call)
    samples = []
    for _ in range(N):
        t0 = time.perf_counter_ns()
        policy.evaluate(call)
        samples.append((time.perf_counter_ns() - t0) / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


def main() -> None:
    now = dt.datetime(2026, 11, 29, tzinfo=dt.timezone.utc)
    principal = {"id": "agent-1", "role": "agent", "groups": ["bots"], "attributes": {}}
    one = CallContext("db", "tool_57", {"query": "select * from t"}, principal, now=now)
    ten = CallContext("db", "busy", {"n": 9}, principal, now=now)
    policy = _policy()
    assert policy.evaluate(one).rule == "r57" and policy.evaluate(ten).rule == "ten9"
    base_med, base_p99 = _measure(ALLOW_ALL, one)
    print(f"ALLOW_ALL                       median {base_med:6.1f} µs   p99 {base_p99:6.1f} µs")
    for label, call in (("100 rules, 1 condition", one), ("100 rules, 10 conditions", ten)):
        med, p99 = _measure(policy, call)
        print(f"{label:<31} median {med:6.1f} µs   p99 {p99:6.1f} µs   ratio to ALLOW_ALL {med / base_med:4.1f}x")


if __name__ == "__main__":
    main()
