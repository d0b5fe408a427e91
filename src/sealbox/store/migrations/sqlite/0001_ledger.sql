-- Sealbox ledger, schema 1: events, the Merkle tree's full subtrees, signed
-- checkpoints, runs and blobs. Events, tree nodes, checkpoints and runs are
-- append-only: triggers abort every UPDATE and DELETE on them.

CREATE TABLE store_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- The per-store secret (blob salts, redaction HMACs). Never exported.
CREATE TABLE store_secret (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    secret BLOB NOT NULL
);

CREATE TABLE events (
    leaf_index INTEGER PRIMARY KEY,            -- 0-based position in the log (RFC 9162)
    run_id     TEXT    NOT NULL,
    run_seq    INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    ts         TEXT    NOT NULL,
    principal  TEXT    NOT NULL,
    step       TEXT    NOT NULL,
    server     TEXT,                           -- derived from the payload, for queries
    tool       TEXT,
    call_id    TEXT,
    effect     TEXT,                           -- policy.decision: allow / deny / require_approval
    ok         INTEGER,                        -- tool.result: 1 ok, 0 error
    tokens     INTEGER,                        -- model.call: input + output tokens
    cost       REAL,                           -- model.call: cost from the policy's price table
    raw        BLOB    NOT NULL,               -- the hashed bytes (RFC 8785)
    leaf_hash  BLOB    NOT NULL                -- SHA-256(0x00 || raw), derived
);
CREATE UNIQUE INDEX events_run ON events (run_id, run_seq);
CREATE INDEX events_tool ON events (tool, kind) WHERE tool IS NOT NULL;
CREATE INDEX events_server_tool ON events (server, tool, kind) WHERE server IS NOT NULL;
CREATE INDEX events_call ON events (call_id) WHERE call_id IS NOT NULL;
CREATE INDEX events_kind_ts ON events (kind, ts);
CREATE INDEX events_run_kind ON events (run_id, kind);

-- Configuration snapshots, by fingerprint (sha256 of their RFC 8785 bytes).
CREATE TABLE snapshots (
    fingerprint TEXT PRIMARY KEY,
    content     BLOB NOT NULL,
    created_at  TEXT NOT NULL
) WITHOUT ROWID;

-- Hashes of full subtrees: (level, idx) covers leaves [idx*2^level, (idx+1)*2^level).
CREATE TABLE tree_nodes (
    level INTEGER NOT NULL,
    idx   INTEGER NOT NULL,
    hash  BLOB    NOT NULL,
    PRIMARY KEY (level, idx)
) WITHOUT ROWID;

CREATE TABLE checkpoints (
    id         INTEGER PRIMARY KEY,
    tree_size  INTEGER NOT NULL,
    root_hash  BLOB    NOT NULL,
    note       TEXT    NOT NULL,               -- the C2SP signed note
    created_at TEXT    NOT NULL
);
CREATE INDEX checkpoints_size ON checkpoints (tree_size);

CREATE TABLE runs (
    run_id        TEXT PRIMARY KEY,
    agent         TEXT NOT NULL,
    principal     TEXT NOT NULL,
    parent_run_id TEXT,
    replay_of     TEXT,
    snapshot      TEXT,
    started_at    TEXT NOT NULL,
    leaf_index    INTEGER NOT NULL              -- of its run.started event
) WITHOUT ROWID;
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;
CREATE INDEX runs_started ON runs (started_at);

-- Content, committed to by SHA-256(salt || content). Erasure (later) removes
-- salt and content and records a content.erased event.
CREATE TABLE blobs (
    ref     TEXT PRIMARY KEY,                  -- sha256:<hex>
    salt    BLOB,
    content BLOB,
    size    INTEGER NOT NULL
) WITHOUT ROWID;

-- INSERT OR REPLACE deletes the old row without firing DELETE triggers: refuse
-- an insert that would replace a row (blobs: ignore it, since identical content
-- is stored once and INSERT OR IGNORE is how Sealbox adds a blob).
CREATE TRIGGER events_no_replace BEFORE INSERT ON events
    WHEN EXISTS (SELECT 1 FROM events WHERE leaf_index = NEW.leaf_index)
      OR EXISTS (SELECT 1 FROM events WHERE run_id = NEW.run_id AND run_seq = NEW.run_seq)
    BEGIN SELECT RAISE(ABORT, 'sealbox: events are append-only'); END;
CREATE TRIGGER tree_no_replace BEFORE INSERT ON tree_nodes
    WHEN EXISTS (SELECT 1 FROM tree_nodes WHERE level = NEW.level AND idx = NEW.idx)
    BEGIN SELECT RAISE(ABORT, 'sealbox: the tree is append-only'); END;
CREATE TRIGGER checkpoints_no_replace BEFORE INSERT ON checkpoints
    WHEN EXISTS (SELECT 1 FROM checkpoints WHERE id = NEW.id)
    BEGIN SELECT RAISE(ABORT, 'sealbox: checkpoints are append-only'); END;
CREATE TRIGGER runs_no_replace BEFORE INSERT ON runs
    WHEN EXISTS (SELECT 1 FROM runs WHERE run_id = NEW.run_id)
    BEGIN SELECT RAISE(ABORT, 'sealbox: runs are append-only'); END;
CREATE TRIGGER blobs_no_replace BEFORE INSERT ON blobs
    WHEN EXISTS (SELECT 1 FROM blobs WHERE ref = NEW.ref)
    BEGIN SELECT RAISE(IGNORE); END;
CREATE TRIGGER snapshots_no_replace BEFORE INSERT ON snapshots
    WHEN EXISTS (SELECT 1 FROM snapshots WHERE fingerprint = NEW.fingerprint)
    BEGIN SELECT RAISE(ABORT, 'sealbox: snapshots are append-only'); END;
CREATE TRIGGER events_no_update BEFORE UPDATE ON events BEGIN SELECT RAISE(ABORT, 'sealbox: events are append-only'); END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events BEGIN SELECT RAISE(ABORT, 'sealbox: events are append-only'); END;
CREATE TRIGGER tree_no_update BEFORE UPDATE ON tree_nodes BEGIN SELECT RAISE(ABORT, 'sealbox: the tree is append-only'); END;
CREATE TRIGGER tree_no_delete BEFORE DELETE ON tree_nodes BEGIN SELECT RAISE(ABORT, 'sealbox: the tree is append-only'); END;
CREATE TRIGGER checkpoints_no_update BEFORE UPDATE ON checkpoints BEGIN SELECT RAISE(ABORT, 'sealbox: checkpoints are append-only'); END;
CREATE TRIGGER checkpoints_no_delete BEFORE DELETE ON checkpoints BEGIN SELECT RAISE(ABORT, 'sealbox: checkpoints are append-only'); END;
CREATE TRIGGER snapshots_no_update BEFORE UPDATE ON snapshots BEGIN SELECT RAISE(ABORT, 'sealbox: snapshots are append-only'); END;
CREATE TRIGGER snapshots_no_delete BEFORE DELETE ON snapshots BEGIN SELECT RAISE(ABORT, 'sealbox: snapshots are append-only'); END;
CREATE TRIGGER runs_no_update BEFORE UPDATE ON runs BEGIN SELECT RAISE(ABORT, 'sealbox: runs are append-only'); END;
CREATE TRIGGER runs_no_delete BEFORE DELETE ON runs BEGIN SELECT RAISE(ABORT, 'sealbox: runs are append-only'); END;
CREATE TRIGGER blobs_no_update BEFORE UPDATE OF ref, size ON blobs BEGIN SELECT RAISE(ABORT, 'sealbox: a blob commitment never changes'); END;
-- The only change a blob may see is erasure: salt and content set to NULL.
CREATE TRIGGER blobs_erase_only BEFORE UPDATE OF salt, content ON blobs WHEN NEW.salt IS NOT NULL OR NEW.content IS NOT NULL BEGIN SELECT RAISE(ABORT, 'sealbox: blobs can only be erased'); END;
CREATE TRIGGER blobs_no_delete BEFORE DELETE ON blobs BEGIN SELECT RAISE(ABORT, 'sealbox: blobs are erased, never deleted'); END;
