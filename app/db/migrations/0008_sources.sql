-- Real sources (app/ingest/sources.py): works meet on their DOI, whatever its case; a work's own
-- citation counts (Crossref's is-referenced-by-count, OpenAlex's cited_by_count, OpenCitations'
-- citing rows); a paper's journal DOI, from the arXiv metadata, which links it to its work.
CREATE INDEX work_snapshots_by_doi ON work_snapshots (lower(doi)) WHERE doi IS NOT NULL;

CREATE TABLE work_measurements (
    work_id     uuid NOT NULL,
    source      text NOT NULL,
    observed_at timestamptz NOT NULL,
    count       integer NOT NULL CHECK (count >= 0),
    PRIMARY KEY (work_id, source, observed_at)
);

CREATE TABLE paper_dois (
    arxiv_id    text COLLATE "C" NOT NULL,
    observed_at timestamptz NOT NULL,
    doi         text NOT NULL CHECK (doi = lower(doi)),
    PRIMARY KEY (arxiv_id, observed_at)
);
CREATE INDEX paper_dois_by_doi ON paper_dois (doi);
