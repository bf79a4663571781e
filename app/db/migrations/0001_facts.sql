-- Normalized, time-stamped facts. A citation record is computed from these at an instant;
-- no document is stored. Every re-observed fact keeps each observation with its instant, so
-- "latest at or before as_of" is one backward index scan.
-- Identifier columns use the C collation so that SQL ordering equals byte ordering (the
-- order the canonical record documents), whatever the database's default collation.

CREATE TABLE paper_snapshots (
    arxiv_id         text COLLATE "C" NOT NULL,
    observed_at      timestamptz NOT NULL,
    title            text NOT NULL,
    latest_version   integer NOT NULL CHECK (latest_version >= 1),
    -- NULL when the snapshot is only known from a short form (a citing or cited paper).
    primary_category text,
    submitted_at     timestamptz NOT NULL,
    last_updated     timestamptz NOT NULL,
    PRIMARY KEY (arxiv_id, observed_at)
);

CREATE TABLE work_snapshots (
    work_id         uuid NOT NULL,
    observed_at     timestamptz NOT NULL,
    arxiv_id        text COLLATE "C",
    doi             text,
    metadata_source text,
    pith_arxiv_id   text COLLATE "C",
    title           text,
    venue           text,
    year            integer,
    PRIMARY KEY (work_id, observed_at)
);

-- One parsed reference of a citing paper: the edge. The Pith paper it is attributed to and
-- its canonical work link are facts of the parse; the resolution changes over time.
CREATE TABLE citation_observations (
    observation_id     uuid PRIMARY KEY,
    citing_arxiv_id    text COLLATE "C" NOT NULL,
    reference_index    integer NOT NULL,
    source             text NOT NULL,
    source_observed_at timestamptz NOT NULL,
    cited_arxiv_id     text COLLATE "C",
    work_id            uuid,
    -- What the bibliography printed; shown when there is no canonical work link.
    printed_title      text,
    printed_year       integer
);

-- Inbound pages: keyset over (citing, reference index, id) within one cited paper.
CREATE INDEX citation_observations_inbound
    ON citation_observations (cited_arxiv_id, citing_arxiv_id, reference_index, observation_id)
    INCLUDE (source_observed_at, work_id);
-- Outbound pages: keyset over (reference index, id) within one citing paper.
CREATE INDEX citation_observations_outbound
    ON citation_observations (citing_arxiv_id, reference_index, observation_id)
    INCLUDE (source_observed_at, work_id, cited_arxiv_id);

CREATE TABLE resolutions (
    observation_id  uuid NOT NULL REFERENCES citation_observations (observation_id),
    observed_at     timestamptz NOT NULL,
    status          text NOT NULL CHECK (status IN ('verified_exact', 'verified_fuzzy', 'unresolved',
                                                    'parse_uncertain', 'malformed_identifier',
                                                    'metadata_mismatch')),
    resolver_source text,
    PRIMARY KEY (observation_id, observed_at)
);

-- A standing source checked a work at an instant (a receipt), whatever it found.
CREATE TABLE standing_receipts (
    work_id     uuid NOT NULL,
    source      text NOT NULL,
    observed_at timestamptz NOT NULL,
    PRIMARY KEY (work_id, source, observed_at)
);

CREATE TABLE work_events (
    work_id     uuid NOT NULL,
    source      text NOT NULL,
    event_type  text NOT NULL CHECK (event_type IN ('retraction', 'correction', 'expression_of_concern',
                                                   'withdrawal', 'reinstatement')),
    observed_at timestamptz NOT NULL,
    reported_at timestamptz,
    notice_doi  text,
    PRIMARY KEY (work_id, source, event_type, observed_at)
);

CREATE TABLE external_measurements (
    arxiv_id    text COLLATE "C" NOT NULL,
    source      text NOT NULL,
    observed_at timestamptz NOT NULL,
    count       integer NOT NULL CHECK (count >= 0),
    PRIMARY KEY (arxiv_id, source, observed_at)
);

-- Title search, as of an instant: the snapshot's own title vector.
CREATE INDEX paper_snapshots_title_search
    ON paper_snapshots USING gin (to_tsvector('english', title));
