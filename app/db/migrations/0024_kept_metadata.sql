-- Which of a work snapshot's values its source did not give, so the snapshot kept them from the work's latest earlier
-- description (app/ingest/sources.py): bit 1 the title, 2 the venue, 4 the year, 8 the Pith paper. NULL: every value
-- is the snapshot's own (a v1 document states them all; snapshots stored before this column).
-- An earlier description that arrives after a later snapshot (sources imported out of date order) fills the later
-- snapshots' kept values as date order would have (app/ingest/store.py, Loader._fill_kept).
ALTER TABLE work_snapshots ADD COLUMN kept smallint;
