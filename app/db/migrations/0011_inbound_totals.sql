-- browsePapers(orderBy: INBOUND_COUNT_DESC) walks papers most cited first, a page at a time: each
-- paper's inbound total (its visible observations: inbound { totalCount }) kept by the database for
-- every writer, in an index in that order. The totals count every observation with a visible_from;
-- they are a paper's total at any instant from the latest visible_from counted (exact_from) on, which
-- is every ordinary "now". Earlier instants count from the observations instead (loaders/browse.py).

CREATE TABLE paper_inbound_totals (
    arxiv_id text COLLATE "C" PRIMARY KEY,
    total    bigint NOT NULL DEFAULT 0 CHECK (total >= 0)
);
CREATE INDEX paper_inbound_totals_order ON paper_inbound_totals ((-total), arxiv_id);

CREATE TABLE paper_inbound_totals_exact (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    exact_from timestamptz  -- NULL: no visible observation yet (exact at every instant)
);

-- Per statement, from its transition tables: one aggregate per statement whatever its size.
CREATE FUNCTION pith_inbound_totals_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO paper_inbound_totals AS t (arxiv_id, total)
    SELECT cited_arxiv_id, count(*) FROM added
    WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL
    GROUP BY cited_arxiv_id ORDER BY cited_arxiv_id
    ON CONFLICT (arxiv_id) DO UPDATE SET total = t.total + EXCLUDED.total;
    UPDATE paper_inbound_totals_exact
    SET exact_from = greatest(exact_from, (SELECT max(visible_from) FROM added))
    WHERE EXISTS (SELECT 1 FROM added WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL);
    RETURN NULL;
END
$$;

CREATE FUNCTION pith_inbound_totals_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO paper_inbound_totals AS t (arxiv_id, total)
    SELECT arxiv_id, sum(n) FROM (
        SELECT cited_arxiv_id AS arxiv_id, 1 AS n FROM after_rows
        WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL
        UNION ALL
        SELECT cited_arxiv_id, -1 FROM before_rows WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL
    ) AS d
    GROUP BY arxiv_id HAVING sum(n) <> 0 ORDER BY arxiv_id
    ON CONFLICT (arxiv_id) DO UPDATE SET total = t.total + EXCLUDED.total;
    UPDATE paper_inbound_totals_exact
    SET exact_from = greatest(exact_from, (SELECT max(visible_from) FROM after_rows))
    WHERE EXISTS (SELECT 1 FROM after_rows WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL);
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
INSERT INTO paper_inbound_totals (arxiv_id, total)
SELECT arxiv_id, sum(n) FROM (
    SELECT cited_arxiv_id AS arxiv_id, count(*) AS n FROM citation_observations
    WHERE cited_arxiv_id IS NOT NULL AND visible_from IS NOT NULL GROUP BY 1
    UNION ALL
    SELECT DISTINCT arxiv_id, 0 FROM paper_snapshots
) AS c
GROUP BY arxiv_id;
INSERT INTO paper_inbound_totals_exact (exact_from)
SELECT max(visible_from) FROM citation_observations WHERE cited_arxiv_id IS NOT NULL;

GRANT SELECT ON paper_inbound_totals, paper_inbound_totals_exact TO pith_reader;
