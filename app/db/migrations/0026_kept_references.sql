-- References a source gave before the arXiv paper citing them was loaded (an arXiv snapshot imported after the
-- source's snapshot of the same or a later instant). Date order would have stored them as the paper's outbound
-- at the source's instant; kept here, they are, when an arXiv import loads the paper (app/ingest/sources.py).
-- `citing` is the arXiv id the reference names as citing, or the citing DOI when no arXiv paper had it yet.
-- Each row is one reference as read, in the importer's own layout (app.ingest.sources.Reference, as JSON).
CREATE TABLE kept_references (
    citing      text NOT NULL,
    source      text NOT NULL,
    observed_at timestamptz NOT NULL,
    key         text NOT NULL,
    reference   jsonb NOT NULL,
    PRIMARY KEY (citing, source, observed_at, key)
);

-- References whose citing DOI was no arXiv paper's (a Crossref work's `reference` list, OpenCitations rows): every
-- journal work has them, and keeping them would keep those sources' references whole. Their citing DOIs are counted
-- here, a row per import batch (arrays: a refresh writes a few rows, not one per work), so that an arXiv import (or a
-- load) bringing a paper with one of them says which snapshot to import again (which then adds them; the count stays,
-- and is no longer said once they are there). import_id: one import's rows (the same snapshot imported twice at its
-- instant is counted once).
CREATE TABLE skipped_reference_lists (
    source      text NOT NULL,
    observed_at timestamptz NOT NULL,
    import_id   uuid NOT NULL,
    dois        text[] NOT NULL,
    counts      integer[] NOT NULL
);
