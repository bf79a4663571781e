-- An observation is visible from the later of its parse and its citing paper's first snapshot.
-- Stored on the row, so pages and counts are index range scans with no per-row look-up of the
-- citing paper's snapshots. NULL while the citing paper has no snapshot (not visible at all).
--
-- The database keeps it right for every writer (imports, bulk loads, hand-written SQL):
-- * a row inserted without it gets it from the citing paper's first snapshot;
-- * a snapshot that arrives later but is earlier than a paper's first one moves the paper's
--   observations earlier (set-based, once per statement).

ALTER TABLE citation_observations ADD COLUMN visible_from timestamptz;

CREATE FUNCTION pith_first_snapshot(paper text) RETURNS timestamptz
LANGUAGE sql STABLE AS $$
    SELECT observed_at FROM paper_snapshots WHERE arxiv_id = paper ORDER BY observed_at LIMIT 1
$$;

CREATE FUNCTION pith_observation_visible_from() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    first_snapshot timestamptz;
BEGIN
    IF NEW.visible_from IS NULL THEN
        first_snapshot := pith_first_snapshot(NEW.citing_arxiv_id);
        IF first_snapshot IS NOT NULL THEN
            NEW.visible_from := greatest(NEW.source_observed_at, first_snapshot);
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER citation_observations_visible_from
    BEFORE INSERT ON citation_observations
    FOR EACH ROW EXECUTE FUNCTION pith_observation_visible_from();

CREATE FUNCTION pith_snapshots_move_visibility() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE citation_observations AS o
    SET visible_from = greatest(o.source_observed_at, f.first_snapshot)
    FROM (SELECT a.arxiv_id, pith_first_snapshot(a.arxiv_id) AS first_snapshot
          FROM (SELECT DISTINCT arxiv_id FROM added) AS a) AS f
    WHERE o.citing_arxiv_id = f.arxiv_id
      AND (o.visible_from IS NULL OR o.visible_from > greatest(o.source_observed_at, f.first_snapshot));
    RETURN NULL;
END
$$;

CREATE TRIGGER paper_snapshots_move_visibility
    AFTER INSERT ON paper_snapshots
    REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION pith_snapshots_move_visibility();

UPDATE citation_observations AS o
SET visible_from = greatest(o.source_observed_at, f.first_snapshot)
FROM (SELECT arxiv_id, min(observed_at) AS first_snapshot FROM paper_snapshots GROUP BY arxiv_id) AS f
WHERE o.citing_arxiv_id = f.arxiv_id;

-- Keyset pages and counts filter on visible_from inside the index (index-only scans).
DROP INDEX citation_observations_inbound;
CREATE INDEX citation_observations_inbound
    ON citation_observations (cited_arxiv_id, citing_arxiv_id, reference_index, observation_id)
    INCLUDE (visible_from, work_id);
DROP INDEX citation_observations_outbound;
CREATE INDEX citation_observations_outbound
    ON citation_observations (citing_arxiv_id, reference_index, observation_id)
    INCLUDE (visible_from, work_id, cited_arxiv_id);
-- Counting a paper's visible citers: a range scan of a narrow index (a most-cited paper has tens
-- of thousands), with both conditions in the index condition.
CREATE INDEX citation_observations_inbound_count ON citation_observations (cited_arxiv_id, visible_from);
