-- Sealbox schema 4: partial indexes, holding only the rows their queries read.
--
-- Every index entry an insert writes dirties a B-tree page, i.e. a 4 KB WAL
-- frame in that commit. 0001 indexed every event with a server or tool in its
-- payload under (tool, kind) and (server, tool, kind): tool.call, but also
-- policy.decision (the recorder and the gateway copy server and tool into it),
-- approval.requested, access.granted, breaker.changed, tools.changed and
-- tool.reapproved; and every event with a call_id under (call_id): tool.call,
-- policy.decision, tool.result, model.call, approval.requested,
-- guardrail.tripped. The only queries reading them are those of tool calls
-- (SqliteStore.query_calls, `sealbox calls`): "calls to tool X / on server S"
-- read tool.call rows, and a call's decision and result are looked up by
-- call_id among policy.decision and tool.result rows.
--
-- SQLite uses a partial index only where the query's WHERE implies the index's
-- WHERE, so the queries in store/sqlite_queries.py name the kind literally
-- (kind = 'tool.call', kind = 'tool.result'); tests/query/test_query_plan.py
-- checks their plans. The per-tool limit counter (calls_minute_tool) reads the
-- last minute of decisions through events_kind_ts, as calls_minute_agent does.
-- events_access_grant (0002) is already partial: its JSON expression is
-- computed only for access.granted / access.revoked rows.
DROP INDEX events_tool;
DROP INDEX events_server_tool;
DROP INDEX events_call;
CREATE INDEX events_tool ON events (tool) WHERE kind = 'tool.call';
CREATE INDEX events_server_tool ON events (server, tool) WHERE kind = 'tool.call';
CREATE INDEX events_call ON events (call_id, kind) WHERE kind = 'policy.decision' OR kind = 'tool.result';
