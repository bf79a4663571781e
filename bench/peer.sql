-- PostGraphile's view of the same database, with pith-graph's as-of semantics, in a schema of its own.
-- Views give PostGraphile the types; computed columns (functions named <view>_<field> that take the
-- row first) give it the relations at an instant, so a whole GraphQL query compiles to one SQL
-- statement. Every function is a one-statement SQL function, which PostgreSQL can inline.
--
--   paper_at(arxiv_id, as_of)            the latest snapshot at the instant (as `paper`)
--   paper.inbound(as_of)                 visible citing observations, in the record's order
--   observation.citing_paper(as_of)      the citing paper's latest snapshot at the instant
--   observation.resolution(as_of)        the latest resolution, or "unresolved" as of the parse
--
-- The same rules as pith-graph, on the same columns and indexes (visible_from included).
DROP SCHEMA IF EXISTS peer CASCADE;
CREATE SCHEMA peer;

CREATE VIEW peer.paper AS
    SELECT arxiv_id, observed_at, title, latest_version, primary_category, submitted_at, last_updated
    FROM public.paper_snapshots;

CREATE VIEW peer.observation AS
    SELECT observation_id, citing_arxiv_id, reference_index, source, source_observed_at, cited_arxiv_id, work_id
    FROM public.citation_observations;

CREATE VIEW peer.resolution AS
    SELECT observation_id, observed_at, status, resolver_source FROM public.resolutions;

CREATE FUNCTION peer.paper_at(arxiv_id text, as_of timestamptz) RETURNS peer.paper
LANGUAGE sql STABLE AS $$
    SELECT * FROM peer.paper AS p
    WHERE p.arxiv_id = paper_at.arxiv_id AND p.observed_at <= as_of
    ORDER BY p.observed_at DESC LIMIT 1
$$;

CREATE FUNCTION peer.paper_inbound(p peer.paper, as_of timestamptz) RETURNS SETOF peer.observation
LANGUAGE sql STABLE AS $$
    SELECT o.observation_id, o.citing_arxiv_id, o.reference_index, o.source, o.source_observed_at,
           o.cited_arxiv_id, o.work_id
    FROM public.citation_observations AS o
    WHERE o.cited_arxiv_id = p.arxiv_id AND o.visible_from <= as_of
    ORDER BY o.citing_arxiv_id, o.reference_index, o.observation_id
$$;

CREATE FUNCTION peer.observation_citing_paper(o peer.observation, as_of timestamptz) RETURNS peer.paper
LANGUAGE sql STABLE AS $$
    SELECT * FROM peer.paper AS s
    WHERE s.arxiv_id = o.citing_arxiv_id AND s.observed_at <= as_of
    ORDER BY s.observed_at DESC LIMIT 1
$$;

CREATE FUNCTION peer.observation_resolution(o peer.observation, as_of timestamptz) RETURNS peer.resolution
LANGUAGE sql STABLE AS $$
    SELECT o.observation_id, coalesce(r.observed_at, o.source_observed_at), coalesce(r.status, 'unresolved'),
           r.resolver_source
    FROM (SELECT 1) AS one
    LEFT JOIN LATERAL (
        SELECT * FROM public.resolutions AS x
        WHERE x.observation_id = o.observation_id AND x.observed_at <= as_of
        ORDER BY x.observed_at DESC LIMIT 1) AS r ON true
$$;

-- Every paper's latest snapshot at the instant, by arXiv id (pith-graph's browsePapers, ARXIV_ID order;
-- bench/browse.py). PostGraphile pages a function's rows by position (first / offset / its cursors).
CREATE FUNCTION peer.papers_at(as_of timestamptz) RETURNS SETOF peer.paper
LANGUAGE sql STABLE AS $$
    SELECT * FROM peer.paper AS p
    WHERE p.observed_at <= as_of
      AND NOT EXISTS (SELECT 1 FROM public.paper_snapshots AS n WHERE n.arxiv_id = p.arxiv_id
                      AND n.observed_at > p.observed_at AND n.observed_at <= as_of)
    ORDER BY p.arxiv_id
$$;

GRANT USAGE ON SCHEMA peer TO PUBLIC;
GRANT SELECT ON ALL TABLES IN SCHEMA peer TO PUBLIC;
