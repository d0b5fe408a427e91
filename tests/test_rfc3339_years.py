"""Every time Sealbox writes is RFC 3339 with a four-digit year (``0999``, ``0001``): strftime's ``%Y``
writes ``999`` and ``1`` (glibc), which is not RFC 3339, fails the event schema's ``ts`` pattern and
sorts after ``2026`` as text. One helper, :func:`sealbox.events.rfc3339_utc`, formats them all."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from sealbox import access, approvals, identities, query, recorder
from sealbox.events import _TS, rfc3339_utc
from sealbox.gateway import pinning
from sealbox.interop.importers import common
from sealbox.events import _schema_regex

TS = _schema_regex(_TS["pattern"])
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
YEARS = [(999, "0999-03-04T05:06:07.000008Z"), (1, "0001-03-04T05:06:07.000008Z"),
         (2026, "2026-03-04T05:06:07.000008Z")]


@pytest.mark.parametrize("year,text", YEARS)
def test_the_helper_pads_the_year_and_converts_to_utc(year, text):
    moment = datetime(year, 3, 4, 5, 6, 7, 8, tzinfo=timezone.utc)
    assert rfc3339_utc(moment) == text and TS.search(text)
    assert rfc3339_utc(moment.astimezone(timezone(timedelta(hours=-2)))) == text  # any offset: the same UTC text


def test_sorting_as_text_is_sorting_in_time():
    times = [datetime(y, 1, 1, tzinfo=timezone.utc) for y in (2026, 999, 1, 1000)]
    assert sorted(times, key=rfc3339_utc) == sorted(times)


@pytest.mark.parametrize("year,text", YEARS)
def test_access_expiry(year, text):
    moment = datetime(year, 3, 4, 5, 6, 7, 8, tzinfo=timezone.utc)
    assert access.parse_expiry(moment) == text
    assert access.parse_expiry(text) == text


@pytest.mark.parametrize("year,text", YEARS)
def test_approval_request_expiry(year, text):
    spec = SimpleNamespace(groups=("ops",), identities=(), quorum=1, expires_s=3600)
    decision = SimpleNamespace(approval=spec, rule="r", policy_fingerprint="sha256:" + "0" * 64)
    payload = approvals.request_payload(approval_id="apr_1", call_id="c", server="s", tool="t", arguments={},
                                        encoded_arguments={}, decision=decision, requested_by="agent:a",
                                        now=datetime(year, 3, 4, 4, 6, 7, 8, tzinfo=timezone.utc))
    assert payload["expires_at"] == text


@pytest.mark.parametrize("year,text", YEARS)
def test_imported_source_times(year, text):
    moment = datetime(year, 3, 4, 5, 6, 7, 8, tzinfo=timezone.utc)
    ns = (moment - EPOCH) // timedelta(microseconds=1) * 1000
    assert common.rfc3339_from_ns(ns) == text and common.ts_field(ns) == text


@pytest.mark.parametrize("year,text", YEARS)
def test_every_other_writer_uses_the_helper(year, text):
    moment = datetime(year, 3, 4, 5, 6, 7, 8, tzinfo=timezone.utc)
    assert recorder._utc(moment) == text  # the policy's started_at and usage windows
    assert identities._utc_text(moment) == text  # compromised-since
    assert query._utc_text(moment) == text  # --since / --until bounds
    assert approvals._utc(moment) == text
    assert access._rfc3339(moment) == text
