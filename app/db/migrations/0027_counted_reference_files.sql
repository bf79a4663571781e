-- The files an import read whose reference lists it counted, not kept (skipped_reference_lists), as they were
-- then (size and modification time, as make and rsync tell a file unchanged). When an arXiv import or a load
-- then makes one of those DOIs a paper's, it reads the files again at their instant for those DOIs alone, if they
-- are still there as they were (app/ingest/sources.py, take_up_kept); otherwise it says which snapshot to import
-- again. A file read from standard input is not remembered (it cannot be read again).
CREATE TABLE counted_reference_files (
    source      text NOT NULL,
    observed_at timestamptz NOT NULL,
    import_id   uuid NOT NULL,
    position    integer NOT NULL,  -- the file's place in the import's command line
    path        text NOT NULL,     -- absolute
    size        bigint NOT NULL,
    mtime_ns    bigint NOT NULL,
    PRIMARY KEY (import_id, position)
);
