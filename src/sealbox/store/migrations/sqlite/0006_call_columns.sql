-- Sealbox schema 6: call listings read a decision's rule and reason_code and a
-- result's duration_us from columns, as they read effect and ok.
--
-- "Every call to tool X" (`sealbox calls`, Store.query_calls) spent about a third
-- of its SQL parsing decision and result payloads for these three fields. Like
-- server, tool, call_id, effect and ok they are derived from the hashed payload
-- when the event is appended (events.derived_columns), and verify recomputes them.
--
-- NULL means "not derived: read the payload" (rows written before this migration,
-- which are never updated, and fields whose value is not a string / an integer):
-- the listing falls back to the hashed bytes for them, so a NULL can never make it
-- show something the bytes do not say, and verify accepts NULL or the derived value.
ALTER TABLE events ADD COLUMN rule TEXT;
ALTER TABLE events ADD COLUMN reason_code TEXT;
ALTER TABLE events ADD COLUMN duration_us INTEGER;
