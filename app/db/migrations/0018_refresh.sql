-- Refreshes (app/ingest/sources.py): an OpenAlex import links the references an earlier one kept unlinked
-- (their OpenAlex id as the printed title) once it describes their works; it finds them by that id.
CREATE INDEX citation_observations_unlinked ON citation_observations (printed_title)
    WHERE work_id IS NULL AND printed_title IS NOT NULL;

-- A check of a source's whole database at an instant (a Retraction Watch file imported without --partial):
-- every work with a DOI described by then was checked, found clean unless a row said otherwise. Kept so a
-- work that arrives later (a Crossref snapshot of an earlier month, imported after) gets those receipts too.
CREATE TABLE whole_source_checks (
    source      text NOT NULL,
    observed_at timestamptz NOT NULL,
    PRIMARY KEY (source, observed_at)
);
-- (Files imported before this migration recorded no such check: their receipts stay as they were.)
GRANT SELECT ON whole_source_checks TO pith_reader;

-- A source's citation count of a paper by the year the citations were made (OpenAlex counts_by_year), with
-- the count it belongs to (external_measurements: the same paper, source and instant).
CREATE TABLE external_measurement_years (
    arxiv_id    text COLLATE "C" NOT NULL,
    source      text NOT NULL,
    observed_at timestamptz NOT NULL,
    year        integer NOT NULL,
    count       integer NOT NULL CHECK (count >= 0),
    PRIMARY KEY (arxiv_id, source, observed_at, year)
);
GRANT SELECT ON external_measurement_years TO pith_reader;
