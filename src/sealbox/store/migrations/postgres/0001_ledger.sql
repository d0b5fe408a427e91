-- Sealbox ledger on PostgreSQL, schema 1: the same tables as the SQLite store's
-- migrations 0001-0006 (events with their derived query columns, the Merkle tree's
-- full subtrees, signed checkpoints, runs, blobs, snapshots, store settings), in
-- the store's own schema (the connection's search_path). The store secret and the
-- signing key are NOT here: they stay in the store's folder (docs/storage.md).
-- Events, tree nodes, checkpoints, runs and snapshots are append-only: triggers
-- abort every UPDATE, DELETE and TRUNCATE on them.

CREATE TABLE store_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE events (
    leaf_index  BIGINT PRIMARY KEY,            -- 0-based position in the log (RFC 9162)
    run_id      TEXT COLLATE "C"    NOT NULL,
    run_seq     BIGINT  NOT NULL,
    kind        TEXT COLLATE "C"    NOT NULL,
    ts          TEXT COLLATE "C"    NOT NULL,
    principal   TEXT COLLATE "C"    NOT NULL,
    step        TEXT COLLATE "C"    NOT NULL,
    server      TEXT COLLATE "C",                          -- derived from the payload, for queries
    tool        TEXT COLLATE "C",
    call_id     TEXT COLLATE "C",
    effect      TEXT COLLATE "C",
    ok          INTEGER,
    tokens      BIGINT,
    cost        DOUBLE PRECISION,
    rule        TEXT COLLATE "C",
    reason_code TEXT COLLATE "C",
    duration_us BIGINT,
    raw         BYTEA   NOT NULL,              -- the hashed bytes (RFC 8785)
    leaf_hash   BYTEA   NOT NULL               -- SHA-256(0x00 || raw), derived
);
CREATE UNIQUE INDEX events_run ON events (run_id, run_seq);
CREATE INDEX events_tool ON events (tool, kind) WHERE tool IS NOT NULL;
CREATE INDEX events_server_tool ON events (server, tool, kind) WHERE server IS NOT NULL;
CREATE INDEX events_call ON events (call_id, kind) WHERE call_id IS NOT NULL;
CREATE INDEX events_kind_ts ON events (kind, ts);
CREATE INDEX events_run_kind ON events (run_id, kind);

CREATE TABLE snapshots (
    fingerprint TEXT COLLATE "C" PRIMARY KEY,
    content     BYTEA NOT NULL,
    created_at  TEXT  NOT NULL
);

-- Hashes of full subtrees of 16 leaves or more: (level, idx) covers leaves
-- [idx*2^level, (idx+1)*2^level); smaller ones are computed from the leaves.
CREATE TABLE tree_nodes (
    level INTEGER NOT NULL,
    idx   BIGINT  NOT NULL,
    hash  BYTEA   NOT NULL,
    PRIMARY KEY (level, idx)
);

CREATE TABLE checkpoints (
    id         BIGINT PRIMARY KEY,             -- 1, 2, 3 ... (written by Sealbox, no sequence: a gap shows a deletion)
    tree_size  BIGINT NOT NULL,
    root_hash  BYTEA  NOT NULL,
    note       TEXT   NOT NULL,                -- the C2SP signed note
    created_at TEXT   NOT NULL
);
CREATE INDEX checkpoints_size ON checkpoints (tree_size);

CREATE TABLE runs (
    run_id        TEXT COLLATE "C" PRIMARY KEY,
    agent         TEXT COLLATE "C" NOT NULL,
    principal     TEXT COLLATE "C" NOT NULL,
    parent_run_id TEXT COLLATE "C",
    replay_of     TEXT COLLATE "C",
    snapshot      TEXT COLLATE "C",
    started_at    TEXT COLLATE "C" NOT NULL,
    leaf_index    BIGINT NOT NULL              -- of its run.started event
);
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX runs_started ON runs (started_at);

CREATE TABLE blobs (
    ref     TEXT COLLATE "C" PRIMARY KEY,                  -- sha256:<hex>
    salt    BYTEA,
    content BYTEA,
    size    BIGINT NOT NULL
);

CREATE FUNCTION sealbox_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'sealbox: % is append-only (% refused)', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END $$;

CREATE FUNCTION sealbox_blob_erase_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.ref IS DISTINCT FROM OLD.ref OR NEW.size IS DISTINCT FROM OLD.size
       OR NEW.salt IS NOT NULL OR NEW.content IS NOT NULL THEN
        RAISE EXCEPTION 'sealbox: blobs can only be erased' USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events FOR EACH ROW EXECUTE FUNCTION sealbox_append_only();
CREATE TRIGGER events_no_truncate BEFORE TRUNCATE ON events FOR EACH STATEMENT EXECUTE FUNCTION sealbox_append_only();
CREATE TRIGGER tree_append_only BEFORE UPDATE OR DELETE ON tree_nodes FOR EACH ROW EXECUTE FUNCTION sealbox_append_only();
CREATE TRIGGER tree_no_truncate BEFORE TRUNCATE ON tree_nodes FOR EACH STATEMENT EXECUTE FUNCTION sealbox_append_only();
CREATE TRIGGER checkpoints_append_only BEFORE UPDATE OR DELETE ON checkpoints FOR EACH ROW EXECUTE FUNCTION sealbox_append_only();
CREATE TRIGGER checkpoints_no_truncate BEFORE TRUNCATE ON checkpoints FOR EACH STATEMENT EXECUTE FUNCTION sealbox_append_only();
CREATE TRIGGER runs_append_only BEFORE UPDATE OR DELETE ON runs FOR EACH ROW EXECUTE FUNCTION sealbox_append_only();
CREATE TRIGGER runs_no_truncate BEFORE TRUNCATE ON runs FOR EACH STATEMENT EXECUTE FUNCTION sealbox_append_only();
CREATE TRIGGER snapshots_append_only BEFORE UPDATE OR DELETE ON snapshots FOR EACH ROW EXECUTE FUNCTION sealbox_append_only();
CREATE TRIGGER snapshots_no_truncate BEFORE TRUNCATE ON snapshots FOR EACH STATEMENT EXECUTE FUNCTION sealbox_append_only();
CREATE TRIGGER blobs_erase_only BEFORE UPDATE ON blobs FOR EACH ROW EXECUTE FUNCTION sealbox_blob_erase_only();
CREATE TRIGGER blobs_no_delete BEFORE DELETE ON blobs FOR EACH ROW EXECUTE FUNCTION sealbox_append_only();
CREATE TRIGGER blobs_no_truncate BEFORE TRUNCATE ON blobs FOR EACH STATEMENT EXECUTE FUNCTION sealbox_append_only();
