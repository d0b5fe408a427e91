-- Sealbox on PostgreSQL, schema 3: provider credentials of grants
-- (sealbox.access), and an index to find a grant's access.* events (as the
-- SQLite store's migration 0002).
--
-- credentials is the ONE table where DELETE is allowed. A credential (an OAuth
-- access and refresh token, client secret, provider endpoints) is not evidence:
-- it is a secret Sealbox holds so that it can revoke the grant at its provider.
-- It never enters the hashed bytes of an event, a blob or an export; the log
-- keeps only that the grant had a credential (access.granted "credential").
-- Deleting it removes the ability to revoke at the provider, nothing else.
-- Rows hold AES-256-GCM ciphertext under a key derived (HKDF-SHA256) from the
-- store secret (kept in the store's folder, never in the database), with the
-- grant id as associated data. Rows are never updated.
CREATE TABLE credentials (
    grant_id   TEXT COLLATE "C" PRIMARY KEY,
    nonce      BYTEA NOT NULL,                 -- 12 random bytes
    ciphertext BYTEA NOT NULL,                 -- AES-GCM(JSON credential), tag appended
    created_at TEXT NOT NULL
);

CREATE FUNCTION sealbox_credentials_written_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'sealbox: credentials are written once, then only deleted' USING ERRCODE = 'restrict_violation';
END $$;
-- (INSERT ... ON CONFLICT DO UPDATE is an UPDATE: refused here too; a second INSERT of a grant id
-- fails on the primary key)
CREATE TRIGGER credentials_no_update BEFORE UPDATE ON credentials FOR EACH ROW
    EXECUTE FUNCTION sealbox_credentials_written_once();

-- access.granted / access.revoked events of one grant, in log order: the payload's
-- grant_id read from the hashed bytes by sealbox_grant_id (NULL for bytes that are
-- not UTF-8 JSON: changed below Sealbox; a \u0000 escape is read as \ufffe, as
-- every other query of the store reads it), then the leaf index. Computed by
-- PostgreSQL from `raw` (IMMUTABLE: it reads only its argument), never stored
-- apart from it. sealbox.access writes the expression exactly as here and names
-- the kinds literally, so that the planner uses this index.
CREATE OR REPLACE FUNCTION sealbox_grant_id(raw bytea) RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    doc text;
BEGIN
    doc := convert_from(raw, 'UTF8');
    IF position('\u0000' IN doc) > 0 THEN
        doc := regexp_replace(regexp_replace(doc, '(^|[^\\])((\\\\)*)\\u0000', '\1\2\\ufffe', 'g'),
                              '(^|[^\\])((\\\\)*)\\u0000', '\1\2\\ufffe', 'g');
    END IF;
    RETURN doc::json -> 'payload' ->> 'grant_id';
EXCEPTION WHEN OTHERS THEN
    RETURN NULL;
END $$;
CREATE INDEX events_access_grant ON events ((sealbox_grant_id(raw) COLLATE "C"), leaf_index)
    WHERE kind IN ('access.granted', 'access.revoked');
