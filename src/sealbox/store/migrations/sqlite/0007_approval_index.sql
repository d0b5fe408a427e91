-- Sealbox schema 7: find an approval request by its approval id through an index.
--
-- `sealbox approvals show / approve / deny` and sealbox.approvals.get_approval
-- name a request by its approval id alone; they read every approval.requested
-- event of the store (parsing each one's hashed bytes) to find it. This index
-- holds, for approval.requested rows only, the payload's approval_id as read
-- from the hashed bytes (NULL for bytes that are not JSON: changed below
-- Sealbox, which `sealbox verify` reports), then the leaf index: the requests
-- of one id in log order (two runs may hold requests with the same id; the
-- first in log order is the one a lookup without a run names, as before).
--
-- Nothing is stored that the hashed bytes do not say: SQLite computes the
-- entry from `raw` itself on every insert and when this migration builds the
-- index over the rows already there (in this migration's one transaction), so
-- it cannot disagree with the events and is never hashed into the log.
-- Reader.approval_requests and ids_with_prefix write the expression exactly
-- as here and name the kind literally, so that the planner uses this index
-- (tests/approvals/test_approval_index.py checks their plans).
CREATE INDEX events_approval ON events (
    (CASE WHEN json_valid(CAST(raw AS TEXT)) THEN CAST(raw AS TEXT) ->> '$.payload.approval_id' END), leaf_index)
    WHERE kind = 'approval.requested';
