-- Sealbox on PostgreSQL, schema 2: find an approval request by its approval id
-- through an index (as the SQLite store's migration 0007).
--
-- `sealbox approvals show / approve / deny` and sealbox.approvals.get_approval
-- name a request by its approval id alone; they read every approval.requested
-- event of the store to find it. events_approval holds, for approval.requested
-- rows only, the payload's approval_id read from the hashed bytes by
-- sealbox_approval_id (NULL for bytes that are not UTF-8 JSON: changed below
-- Sealbox, which `sealbox verify` reports; a \u0000 escape is read as \ufffe,
-- as every other query of the store reads it), then the leaf index.
--
-- Nothing is stored that the hashed bytes do not say: PostgreSQL computes the
-- entry from `raw` on every insert and when this migration builds the index
-- over the rows already there (in this migration's one transaction), so it
-- cannot disagree with the events and is never hashed into the log. The
-- function is IMMUTABLE (an index needs it): it reads only its argument
-- (convert_from is merely STABLE because of encodings other than UTF-8).
-- PgReader.approval_requests and ids_with_prefix write the expression exactly
-- as here and name the kind literally, so that the planner uses this index.
CREATE OR REPLACE FUNCTION sealbox_approval_id(raw bytea) RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    doc text;
BEGIN
    doc := convert_from(raw, 'UTF8');
    IF position('\u0000' IN doc) > 0 THEN
        doc := regexp_replace(regexp_replace(doc, '(^|[^\\])((\\\\)*)\\u0000', '\1\2\\ufffe', 'g'),
                              '(^|[^\\])((\\\\)*)\\u0000', '\1\2\\ufffe', 'g');
    END IF;
    RETURN doc::json -> 'payload' ->> 'approval_id';
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END $$;
CREATE INDEX events_approval ON events ((sealbox_approval_id(raw) COLLATE "C"), leaf_index)
    WHERE kind = 'approval.requested';
