-- browsePapers(orderBy: INBOUND_COUNT_DESC) walks papers most cited first, a page at a time: each
-- paper's inbound total (its visible observations: inbound { totalCount }) kept by the database for
-- every writer, in an index in that order. The totals count every observation with a visible_from;
-- they are every paper's total at any instant from the latest visible_from counted on (the largest
-- counted_until, an index probe), which is every ordinary "now". Earlier instants count from the
-- observations instead (loaders/browse.py). Each paper's row is its own: concurrent writers lock only
-- the rows of the papers they cite.

CREATE TABLE paper_inbound_totals (
    arxiv_id      text COLLATE "C" PRIMARY KEY,
    total         bigint NOT NULL DEFAULT 0 CHECK (total >= 0),
    counted_until timestamptz  -- the latest visible_from counted (NULL: none)
);
CREATE INDEX paper_inbound_totals_order ON paper_inbound_totals ((-total), arxiv_id);
CREATE INDEX paper_inbound_totals_counted ON paper_inbound_totals (counted_until);

-- Per statement, from its transition tables: one aggregate per statement whatever its size.
CREATE FUNCTION pith_inbound_totals_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO paper_inbound_totals AS t (arxiv_id, total, counted_until)
    SELECT cited_arxiv_id, count(*), max(visible_from) FROM added
    WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL
    GROUP BY cited_arxiv_id ORDER BY cited_arxiv_id
    ON CONFLICT (arxiv_id) DO UPDATE
    SET total = t.total + EXCLUDED.total, counted_until = greatest(t.counted_until, EXCLUDED.counted_until);
    RETURN NULL;
END
$$;

CREATE FUNCTION pith_inbound_totals_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- (A visibility moved earlier keeps counted_until: the totals are then exact from a later instant
    -- than they could be, never from an earlier one.)
    INSERT INTO paper_inbound_totals AS t (arxiv_id, total, counted_until)
    SELECT arxiv_id, sum(n), max(visible_from) FROM (
        SELECT cited_arxiv_id AS arxiv_id, 1 AS n, visible_from FROM after_rows
        WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL
        UNION ALL
        SELECT cited_arxiv_id, -1, NULL FROM before_rows
        WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL
    ) AS d
    GROUP BY arxiv_id HAVING sum(n) <> 0 OR max(visible_from) IS NOT NULL ORDER BY arxiv_id
    ON CONFLICT (arxiv_id) DO UPDATE
    SET total = t.total + EXCLUDED.total, counted_until = greatest(t.counted_until, EXCLUDED.counted_until);
    RETURN NULL;
END
$$;

CREATE FUNCTION pith_inbound_totals_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE paper_inbound_totals AS t SET total = t.total - r.n
    FROM (SELECT cited_arxiv_id, count(*) AS n FROM removed
          WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL GROUP BY cited_arxiv_id) AS r
    WHERE t.arxiv_id = r.cited_arxiv_id;
    RETURN NULL;
END
$$;

-- Every paper with a snapshot is listed, with 0 until it is cited.
CREATE FUNCTION pith_inbound_totals_papers() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO paper_inbound_totals (arxiv_id)
    SELECT DISTINCT arxiv_id FROM added ORDER BY arxiv_id
    ON CONFLICT (arxiv_id) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE TRIGGER citation_observations_inbound_totals_insert
    AFTER INSERT ON citation_observations REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION pith_inbound_totals_added();
CREATE TRIGGER citation_observations_inbound_totals_update
    AFTER UPDATE ON citation_observations REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pith_inbound_totals_changed();
CREATE TRIGGER citation_observations_inbound_totals_delete
    AFTER DELETE ON citation_observations REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION pith_inbound_totals_removed();
CREATE TRIGGER paper_snapshots_inbound_totals
    AFTER INSERT ON paper_snapshots REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION pith_inbound_totals_papers();

-- What is stored now.
INSERT INTO paper_inbound_totals (arxiv_id, total, counted_until)
SELECT arxiv_id, sum(n), max(until) FROM (
    SELECT cited_arxiv_id AS arxiv_id, count(*) AS n, max(visible_from) AS until FROM citation_observations
    WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL GROUP BY 1
    UNION ALL
    SELECT DISTINCT arxiv_id, 0, NULL::timestamptz FROM paper_snapshots
) AS c
GROUP BY arxiv_id;

GRANT SELECT ON paper_inbound_totals TO pith_reader;
