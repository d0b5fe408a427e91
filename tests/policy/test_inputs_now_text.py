"""CallContext.to_inputs writes ``now`` exactly as ``astimezone(utc).isoformat()`` with ``Z`` does."""

from __future__ import annotations

import datetime as dt

import pytest

from sealbox.policy.model import CallContext, _utc_text

UTC = dt.timezone.utc


class _Sub(dt.datetime):
    pass


@pytest.mark.parametrize("now", [
    dt.datetime(2026, 12, 5, 12, 48, 32, 123456, tzinfo=UTC),
    dt.datetime(2026, 12, 5, 12, 48, 32, 123456, tzinfo=UTC),  # the kept second
    dt.datetime(2026, 12, 5, 12, 48, 32, 0, tzinfo=UTC),  # no fraction
    dt.datetime(2026, 12, 5, 12, 48, 32, 7, tzinfo=UTC),
    dt.datetime(2026, 12, 5, 12, 48, 33, 500000, tzinfo=UTC),  # the next second
    dt.datetime(999, 1, 2, 3, 4, 5, 60, tzinfo=UTC),  # a year of three digits
    dt.datetime(2026, 12, 5, 14, 48, 32, 10, tzinfo=dt.timezone(dt.timedelta(hours=2))),
    dt.datetime(2026, 12, 5, 12, 48, 32, 10, tzinfo=dt.timezone(dt.timedelta(0))),  # UTC, not the singleton
    _Sub(2026, 12, 5, 12, 48, 32, 10, tzinfo=UTC),
])
def test_now_text_is_isoformat_with_z(now: dt.datetime) -> None:
    expected = now.astimezone(UTC).isoformat().replace("+00:00", "Z")
    assert _utc_text(now) == expected
    assert CallContext(server="s", tool="t", now=now).to_inputs()["now"] == expected


def test_a_naive_now_is_taken_as_utc() -> None:
    now = dt.datetime(2026, 12, 5, 12, 48, 32, 42)
    assert CallContext(server="s", tool="t", now=now).to_inputs()["now"] == "2026-12-05T12:48:32.000042Z"
