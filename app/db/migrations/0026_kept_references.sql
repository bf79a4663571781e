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

-- Crossref reference lists of works whose DOI was no arXiv paper's: every journal work has one, and keeping them
-- all would keep Crossref's references whole. Counted here by work and instant, so that an arXiv import loading a
-- paper with that DOI says which snapshot to import again (which then adds them, and clears the row).
CREATE TABLE skipped_reference_lists (
    citing      text NOT NULL,
    source      text NOT NULL,
    observed_at timestamptz NOT NULL,
    count       integer NOT NULL,
    PRIMARY KEY (citing, source, observed_at)
);
