-- A reference's canonical work link by instant. A reference kept unlinked by one import (an OpenAlex reference to
-- a work it did not describe yet) and linked by a later one holds that link from the later import's instant on:
-- as of earlier instants it is answered as it was then, unlinked (its printed title, no notice), though the work
-- it is linked to had snapshots then (nothing earlier is rewritten). NULL: linked from its first observation, or
-- never (app/ingest/sources.py keeps it for every import order; loaders.citations.linked_work_sql reads it).
ALTER TABLE citation_observations ADD COLUMN linked_from timestamptz;

-- Whether the reference held its work link at each resolution (an import: it met the work then; a v1 document: it
-- showed the work then). NULL for resolutions stored before: as the link was answered then, at every instant.
-- linked_from is the first linked resolution after the last one that was not (app/ingest/links.py).
ALTER TABLE resolutions ADD COLUMN linked boolean;
CREATE INDEX resolutions_unlinked ON resolutions (observation_id, observed_at) WHERE linked = false;

-- The DOI of each OpenAlex work id an import described, at the earliest instant one did: a snapshot imported after
-- a later one links its references to works only the later one described, from the later one's instant on, as
-- importing them in date order would (app/ingest/sources.py).
CREATE TABLE openalex_work_ids (
    wid         text PRIMARY KEY,
    doi         text NOT NULL,
    observed_at timestamptz NOT NULL
);

-- The spans in which a paper cites a retracted work (migration 0022) start no earlier than the reference's link.
CREATE OR REPLACE FUNCTION pith_refresh_citing_spans(papers text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM paper_retracted_citing_spans WHERE arxiv_id = ANY (papers);
    INSERT INTO paper_retracted_citing_spans
        (arxiv_id, from_at, until_at, snapshot_at, submitted_at, primary_category)
    WITH pieces AS (
        SELECT o.citing_arxiv_id AS arxiv_id,
               greatest(o.visible_from, coalesce(o.linked_from, o.visible_from), w.from_at) AS from_at, w.until_at
        FROM citation_observations AS o
        JOIN work_retracted_spans AS w ON w.work_id = o.work_id
        WHERE o.citing_arxiv_id = ANY (papers) AND o.work_id IS NOT NULL AND o.visible_from IS NOT NULL
          AND w.until_at > greatest(o.visible_from, coalesce(o.linked_from, o.visible_from))
    ), reached AS (
        SELECT p.*, max(p.until_at) OVER (PARTITION BY p.arxiv_id ORDER BY p.from_at, p.until_at
                                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
        FROM pieces AS p
    ), islands AS (
        SELECT r.*, count(*) FILTER (WHERE r.reach IS NULL OR r.reach < r.from_at)
                        OVER (PARTITION BY r.arxiv_id ORDER BY r.from_at, r.until_at) AS island
        FROM reached AS r
    ), merged AS (
        SELECT arxiv_id, min(from_at) AS from_at, max(until_at) AS until_at FROM islands GROUP BY arxiv_id, island
    ), snapshots AS (
        SELECT s.arxiv_id, s.observed_at, s.submitted_at, s.primary_category,
               lead(s.observed_at, 1, 'infinity') OVER (PARTITION BY s.arxiv_id ORDER BY s.observed_at) AS next_at
        FROM paper_snapshots AS s WHERE s.arxiv_id = ANY (papers)
    )
    SELECT m.arxiv_id, greatest(m.from_at, s.observed_at), least(m.until_at, s.next_at), s.observed_at,
           s.submitted_at, s.primary_category
    FROM merged AS m JOIN snapshots AS s ON s.arxiv_id = m.arxiv_id
    WHERE s.observed_at < m.until_at AND s.next_at > m.from_at
    ORDER BY 1, 2;
END
$$;
