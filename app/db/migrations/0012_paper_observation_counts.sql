-- What a paper's data-sized work reads (app/cost.py prices it before it runs): a timeline, a recordDiff
-- or citationsByYear reads every observation citing the paper and every observation it makes, whatever
-- their visibility. Each paper's row counts both, for every writer, per statement; a row's count is an
-- upper bound at every instant (observations are counted once stored, visible or not). A paper without
-- a row has none. Each paper's row is its own: concurrent writers lock only the rows of the papers
-- whose observations they write.

CREATE TABLE paper_observation_counts (
    arxiv_id text COLLATE "C" PRIMARY KEY,
    inbound  bigint NOT NULL DEFAULT 0 CHECK (inbound >= 0),   -- observations citing the paper
    outbound bigint NOT NULL DEFAULT 0 CHECK (outbound >= 0)   -- the paper's own references
);

-- One aggregate per statement from its transition tables: +1 for each row added, -1 for each removed,
-- by the paper each end names (rows locked in arxiv_id order, so concurrent writers never deadlock).
CREATE FUNCTION pith_observation_counts_added() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO paper_observation_counts AS t (arxiv_id, inbound, outbound)
    SELECT arxiv_id, sum(i), sum(o) FROM (
        SELECT cited_arxiv_id AS arxiv_id, count(*) AS i, 0 AS o FROM added
        WHERE cited_arxiv_id IS NOT NULL GROUP BY 1
        UNION ALL
        SELECT citing_arxiv_id, 0, count(*) FROM added GROUP BY 1
    ) AS d
    GROUP BY arxiv_id ORDER BY arxiv_id
    ON CONFLICT (arxiv_id) DO UPDATE
    SET inbound = t.inbound + EXCLUDED.inbound, outbound = t.outbound + EXCLUDED.outbound;
    RETURN NULL;
END
$$;

CREATE FUNCTION pith_observation_counts_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Only a change of either end moves a count (an update of anything else nets to zero and writes nothing).
    INSERT INTO paper_observation_counts AS t (arxiv_id, inbound, outbound)
    SELECT arxiv_id, sum(i), sum(o) FROM (
        SELECT cited_arxiv_id AS arxiv_id, 1 AS i, 0 AS o FROM after_rows WHERE cited_arxiv_id IS NOT NULL
        UNION ALL
        SELECT cited_arxiv_id, -1, 0 FROM before_rows WHERE cited_arxiv_id IS NOT NULL
        UNION ALL
        SELECT citing_arxiv_id, 0, 1 FROM after_rows
        UNION ALL
        SELECT citing_arxiv_id, 0, -1 FROM before_rows
    ) AS d
    GROUP BY arxiv_id HAVING sum(i) <> 0 OR sum(o) <> 0 ORDER BY arxiv_id
    ON CONFLICT (arxiv_id) DO UPDATE
    SET inbound = t.inbound + EXCLUDED.inbound, outbound = t.outbound + EXCLUDED.outbound;
    RETURN NULL;
END
$$;

CREATE FUNCTION pith_observation_counts_removed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE paper_observation_counts AS t SET inbound = t.inbound - r.i, outbound = t.outbound - r.o
    FROM (SELECT arxiv_id, sum(i) AS i, sum(o) AS o FROM (
              SELECT cited_arxiv_id AS arxiv_id, 1 AS i, 0 AS o FROM removed WHERE cited_arxiv_id IS NOT NULL
              UNION ALL
              SELECT citing_arxiv_id, 0, 1 FROM removed) AS d
          GROUP BY arxiv_id ORDER BY arxiv_id) AS r
    WHERE t.arxiv_id = r.arxiv_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER citation_observations_counts_insert
    AFTER INSERT ON citation_observations REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION pith_observation_counts_added();
CREATE TRIGGER citation_observations_counts_update
    AFTER UPDATE ON citation_observations REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pith_observation_counts_changed();
CREATE TRIGGER citation_observations_counts_delete
    AFTER DELETE ON citation_observations REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION pith_observation_counts_removed();

-- What is stored now.
INSERT INTO paper_observation_counts (arxiv_id, inbound, outbound)
SELECT arxiv_id, sum(i), sum(o) FROM (
    SELECT cited_arxiv_id AS arxiv_id, count(*) AS i, 0 AS o FROM citation_observations
    WHERE cited_arxiv_id IS NOT NULL GROUP BY 1
    UNION ALL
    SELECT citing_arxiv_id, 0, count(*) FROM citation_observations GROUP BY 1
) AS d
GROUP BY arxiv_id;

GRANT SELECT ON paper_observation_counts TO pith_reader;
