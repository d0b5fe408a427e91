-- Sealbox schema 2: provider credentials of grants (sealbox.access), and an
-- index to find a grant's access.* events.
--
-- credentials is the ONE table where DELETE is allowed. A credential (an OAuth
-- access and refresh token, client secret, provider endpoints) is not evidence:
-- it is a secret Sealbox holds so that it can revoke the grant at its provider.
-- It never enters the hashed bytes of an event, a blob or an export; the log
-- keeps only that the grant had a credential (access.granted "credential").
-- Deleting it removes the ability to revoke at the provider, nothing else.
-- Rows hold AES-256-GCM ciphertext under a key derived (HKDF-SHA256) from the
-- store secret, with the grant id as associated data. Rows are never updated.
CREATE TABLE credentials (
    grant_id   TEXT PRIMARY KEY,
    nonce      BLOB NOT NULL,                  -- 12 random bytes
    ciphertext BLOB NOT NULL,                  -- AES-GCM(JSON credential), tag appended
    created_at TEXT NOT NULL
) WITHOUT ROWID;

CREATE TRIGGER credentials_no_update BEFORE UPDATE ON credentials BEGIN SELECT RAISE(ABORT, 'sealbox: credentials are written once, then only deleted'); END;
-- INSERT OR REPLACE would delete the old row without firing an UPDATE trigger: refuse it.
CREATE TRIGGER credentials_no_replace BEFORE INSERT ON credentials WHEN EXISTS (SELECT 1 FROM credentials WHERE grant_id = NEW.grant_id) BEGIN SELECT RAISE(ABORT, 'sealbox: credentials are written once, then only deleted'); END;

-- access.granted / access.revoked events of one grant, in log order.
CREATE INDEX events_access_grant ON events ((CAST(raw AS TEXT) ->> '$.payload.grant_id'), leaf_index)
    WHERE kind IN ('access.granted', 'access.revoked');
