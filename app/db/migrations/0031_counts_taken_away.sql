-- An UPDATE that takes citations away from a paper (a cited id changed, a visibility withdrawn) was refused:
-- the update triggers of the kept totals (0011) and counts (0012) upserted each paper's net change, and the row
-- they proposed for a net decrease carried a negative total, which the CHECK refuses before the conflict turns
-- the proposal into an update. Now a net increase goes through the upsert as before (concurrent writers of a
-- new paper's row meet there) and a net decrease is an UPDATE of the row the paper already has (it holds the
-- citations being taken away).
--
-- A paper that loses citations (updated or deleted) also has its counted_until read again (the latest
-- visible_from of what it keeps, one probe of the index by paper and visible_from): it only ever grew, so a
-- citation dated after now, once deleted, kept its paper "ahead" of every instant until that date
-- (loaders.citations.inbound_total_sql, loaders.browse).

CREATE OR REPLACE FUNCTION pith_inbound_totals_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- (A visibility moved earlier keeps counted_until: the totals are then exact from a later instant
    -- than they could be, never from an earlier one.)
    WITH d AS (
        SELECT arxiv_id, sum(n) AS n, max(visible_from) AS until FROM (
            SELECT cited_arxiv_id AS arxiv_id, 1 AS n, visible_from FROM after_rows
            WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL
            UNION ALL
            SELECT cited_arxiv_id, -1, NULL FROM before_rows
            WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL
        ) AS d
        GROUP BY arxiv_id HAVING sum(n) <> 0 OR max(visible_from) IS NOT NULL
    ), taken AS (
        UPDATE paper_inbound_totals AS t
        SET total = t.total + d.n, counted_until = (SELECT max(o.visible_from) FROM citation_observations AS o
                                                    WHERE o.cited_arxiv_id = t.arxiv_id)
        FROM d WHERE d.n < 0 AND t.arxiv_id = d.arxiv_id
    )
    INSERT INTO paper_inbound_totals AS t (arxiv_id, total, counted_until)
    SELECT arxiv_id, n, until FROM d WHERE n >= 0 ORDER BY arxiv_id
    ON CONFLICT (arxiv_id) DO UPDATE
    SET total = t.total + EXCLUDED.total, counted_until = greatest(t.counted_until, EXCLUDED.counted_until);
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION pith_observation_counts_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Only a change of either end moves a count (an update of anything else nets to zero and writes nothing).
    WITH d AS (
        SELECT arxiv_id, sum(i) AS i, sum(o) AS o FROM (
            SELECT cited_arxiv_id AS arxiv_id, 1 AS i, 0 AS o FROM after_rows WHERE cited_arxiv_id IS NOT NULL
            UNION ALL
            SELECT cited_arxiv_id, -1, 0 FROM before_rows WHERE cited_arxiv_id IS NOT NULL
            UNION ALL
            SELECT citing_arxiv_id, 0, 1 FROM after_rows
            UNION ALL
            SELECT citing_arxiv_id, 0, -1 FROM before_rows
        ) AS d
        GROUP BY arxiv_id HAVING sum(i) <> 0 OR sum(o) <> 0
    ), taken AS (
        UPDATE paper_observation_counts AS t SET inbound = t.inbound + d.i, outbound = t.outbound + d.o
        FROM d WHERE (d.i < 0 OR d.o < 0) AND t.arxiv_id = d.arxiv_id
    )
    INSERT INTO paper_observation_counts AS t (arxiv_id, inbound, outbound)
    SELECT arxiv_id, i, o FROM d WHERE i >= 0 AND o >= 0 ORDER BY arxiv_id
    ON CONFLICT (arxiv_id) DO UPDATE
    SET inbound = t.inbound + EXCLUDED.inbound, outbound = t.outbound + EXCLUDED.outbound;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION pith_inbound_totals_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE paper_inbound_totals AS t
    SET total = t.total - r.n, counted_until = (SELECT max(o.visible_from) FROM citation_observations AS o
                                                WHERE o.cited_arxiv_id = t.arxiv_id)
    FROM (SELECT cited_arxiv_id, count(*) AS n FROM removed
          WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL GROUP BY cited_arxiv_id) AS r
    WHERE t.arxiv_id = r.cited_arxiv_id;
    RETURN NULL;
END
$$;
