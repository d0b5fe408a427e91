-- Sealbox on PostgreSQL, schema 4: rotated provider credentials of grants
-- (sealbox.access), as the SQLite store's migration 0009.
--
-- An OAuth provider that rotates refresh tokens (RFC 6749 §6, RFC 9700 §4.14)
-- issues a new refresh token on every refresh and invalidates the old one.
-- `sealbox access rotate` records each rotation: one row here per rotation
-- (seq 1, 2, ... per grant), in the same transaction as its signed
-- access.credential_rotated event; the row of the highest seq is the live
-- credential, the one revoked and introspected. Rows are appended, never
-- updated, and deleted only with the grant's credential. Each holds AES-256-GCM
-- ciphertext under the key of table credentials, with
-- "<grant id>/rotation/<seq>" as associated data.
CREATE TABLE credential_rotations (
    grant_id   TEXT COLLATE "C" NOT NULL,
    seq        INTEGER NOT NULL CHECK (seq >= 1),
    nonce      BYTEA NOT NULL,                 -- 12 random bytes
    ciphertext BYTEA NOT NULL,                 -- AES-GCM(JSON credential), tag appended
    created_at TEXT NOT NULL,
    PRIMARY KEY (grant_id, seq)
);

CREATE FUNCTION sealbox_credential_rotations_appended() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'sealbox: rotated credentials are appended, then only deleted' USING ERRCODE = 'restrict_violation';
END $$;
-- (INSERT ... ON CONFLICT DO UPDATE is an UPDATE: refused here too; a second INSERT of a
-- (grant id, seq) fails on the primary key)
CREATE TRIGGER credential_rotations_no_update BEFORE UPDATE ON credential_rotations FOR EACH ROW
    EXECUTE FUNCTION sealbox_credential_rotations_appended();
