"""One person answering from one host and login with `sealbox approvals approve`, before and after
upgrading Sealbox, answers from one client: the user agents `sealbox-cli/0.1.0` and
`sealbox-cli/0.2.0` name one program. Every answer of an on-call engineer for 24 h after an
upgrade used to be flagged `multiple_clients` (a shared-account alarm for a `pip install -U`).
User agents are compared by their product (the part before `/`, case-folded); another product on the
same host and login (`curl/8`) is still another client, and so is another host or login."""

from __future__ import annotations

import pytest
from approval_helpers import policy

from sealbox.approvals import ApprovalPending, answer, get_approval, list_approvals
from sealbox.recorder import Recorder


def request(store):
    rec = Recorder(store, policy=policy(), approvals="suspend")
    with pytest.raises(ApprovalPending) as info:
        with rec.run(agent="bot") as run:
            run.call_tool("db", "write_query", {"sql": "x"}, lambda **_: "ran")
    return info.value.approval_id


LAPTOP = {"hostname": "laptop", "os_user": "alice"}


def test_an_upgraded_cli_on_one_host_is_one_client(store, keys):
    answer(store, request(store), "approve", "ok", keys["alice"], client={**LAPTOP, "user_agent": "sealbox-cli/0.1.0"})
    after = answer(store, request(store), "approve", "ok", keys["alice"],
                   client={**LAPTOP, "user_agent": "sealbox-cli/0.2.0"})
    assert after.answers[0].flags == ()
    assert get_approval(store, after.approval_id).flags == []
    assert list_approvals(store, flagged=True) == []


def test_another_product_or_host_is_still_another_client(store, keys):
    answer(store, request(store), "approve", "ok", keys["alice"], client={**LAPTOP, "user_agent": "sealbox-cli/0.1.0"})
    curl = answer(store, request(store), "approve", "ok", keys["alice"], client={**LAPTOP, "user_agent": "curl/8"})
    assert [f["code"] for f in curl.answers[0].flags] == ["multiple_clients"]
    other = answer(store, request(store), "approve", "ok", keys["bob"],
                   client={"hostname": "laptop", "os_user": "bob", "user_agent": "sealbox-cli/0.1.0"})
    assert other.answers[0].flags == ()
    kiosk = answer(store, request(store), "approve", "ok", keys["bob"],
                   client={"hostname": "kiosk", "os_user": "bob", "user_agent": "sealbox-cli/0.1.0"})
    assert [f["code"] for f in kiosk.answers[0].flags] == ["multiple_clients"]
