-- Sealbox schema 3: drop the per-row BEFORE INSERT guards on events and tree_nodes.
--
-- 0001 guarded these two tables against INSERT OR REPLACE (which deletes the
-- old row without firing a DELETE trigger unless the connection set
-- recursive_triggers). Measured on SQLite 3.40, any row trigger on INSERT, even
-- one whose WHEN is false, costs about 17 µs per inserted row: more than the
-- insert itself, on the hottest path of the store (bench/bench_ledger.py).
-- Without the guard, a REPLACE typed at a sqlite3 prompt can rewrite a row,
-- exactly as a plain INSERT can already append a forged one: neither is a
-- trust boundary. `sealbox verify` recomputes every leaf hash, chain, tree node
-- and signed root from the stored bytes and names the rewritten event.
-- UPDATE and DELETE stay refused by the triggers of 0001; the guards on
-- checkpoints, runs, blobs and snapshots (rare inserts) stay.
DROP TRIGGER events_no_replace;
DROP TRIGGER tree_no_replace;
