-- Sealbox schema 9: rotated provider credentials of grants (sealbox.access).
--
-- An OAuth provider that rotates refresh tokens (RFC 6749 §6, RFC 9700 §4.14)
-- issues a new refresh token on every refresh and invalidates the old one. The
-- credential stored with a grant (table credentials, written once) then names a
-- dead token: revoking and introspecting it proves nothing about the live one.
-- `sealbox access rotate` records each rotation: one row here per rotation
-- (seq 1, 2, ... per grant), in the same transaction as its signed
-- access.credential_rotated event; the row of the highest seq is the live
-- credential, the one revoked and introspected. Rows are appended, never updated
-- or replaced, and deleted only with the grant's credential (as credentials').
-- Each holds AES-256-GCM ciphertext of the whole credential under the key of
-- table credentials, with "<grant id>/rotation/<seq>" as associated data (a row
-- moved to another grant or seq does not decrypt).
CREATE TABLE credential_rotations (
    grant_id   TEXT NOT NULL,
    seq        INTEGER NOT NULL CHECK (seq >= 1),
    nonce      BLOB NOT NULL,                  -- 12 random bytes
    ciphertext BLOB NOT NULL,                  -- AES-GCM(JSON credential), tag appended
    created_at TEXT NOT NULL,
    PRIMARY KEY (grant_id, seq)
) WITHOUT ROWID;

CREATE TRIGGER credential_rotations_no_update BEFORE UPDATE ON credential_rotations BEGIN SELECT RAISE(ABORT, 'sealbox: rotated credentials are appended, then only deleted'); END;
-- INSERT OR REPLACE would delete the old row without firing an UPDATE trigger: refuse it.
CREATE TRIGGER credential_rotations_no_replace BEFORE INSERT ON credential_rotations WHEN EXISTS (SELECT 1 FROM credential_rotations WHERE grant_id = NEW.grant_id AND seq = NEW.seq) BEGIN SELECT RAISE(ABORT, 'sealbox: rotated credentials are appended, then only deleted'); END;
