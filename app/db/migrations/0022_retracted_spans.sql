-- citesRetracted and works(filter: {retracted: ...}) at any instant, kept by the database for every
-- writer, so a page of either is an index walk that stops after the page (loaders/browse.py) instead of
-- the standing rule checked on every retracting work and its citers for each page.
--
-- * work_retracted_spans: the spans of time in which a work is retracted by the standing rule
--   (loaders.citations.retracted_sql: linked by then, and of its standing retraction, withdrawal and
--   reinstatement events the deciding one retracts). The rule's answer can change only at a work's
--   snapshot, event or end instants, so it is evaluated at each of them and constant until the next.
-- * paper_retracted_citing_spans: the spans in which a paper has a visible reference whose work is
--   retracted then (the union, over its references, of [visible_from, oo) meeting the work's spans),
--   cut where the paper's latest snapshot changes and carrying that snapshot's key, submission time and
--   category, so pages in arXiv id and submission order are index walks of this table alone.
--
-- Spans are [from_at, until_at), until_at 'infinity' while they last; a paper's or a work's spans never
-- overlap, so at an instant a paper or work has at most one covering row. Spans are recomputed for the
-- works and papers a statement touches (statement triggers, transition tables), one writer of them at a
-- time (a transaction-level advisory lock), and only when a statement touches retracting events, their
-- ends, a work with such an event, or a paper citing one: an ordinary import pays one semi-join per
-- statement.

CREATE TABLE work_retracted_spans (
    work_id  uuid NOT NULL,
    from_at  timestamptz NOT NULL,
    until_at timestamptz NOT NULL CHECK (until_at > from_at),
    PRIMARY KEY (work_id, from_at)
);

CREATE TABLE paper_retracted_citing_spans (
    arxiv_id         text COLLATE "C" NOT NULL,
    from_at          timestamptz NOT NULL,
    until_at         timestamptz NOT NULL CHECK (until_at > from_at),
    snapshot_at      timestamptz NOT NULL,  -- the paper's latest snapshot throughout the span
    submitted_at     timestamptz NOT NULL,  -- that snapshot's
    primary_category text,                  -- that snapshot's
    PRIMARY KEY (arxiv_id, from_at)
);
CREATE INDEX paper_retracted_citing_spans_by_submitted ON paper_retracted_citing_spans (submitted_at, arxiv_id);

-- The standing rule at the instant `at` for the work `work` (the same condition as
-- loaders.citations.retracted_sql; tests/test_retracted_spans.py compares them at every instant).
CREATE FUNCTION pith_refresh_citing_spans(papers text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM paper_retracted_citing_spans WHERE arxiv_id = ANY (papers);
    INSERT INTO paper_retracted_citing_spans
        (arxiv_id, from_at, until_at, snapshot_at, submitted_at, primary_category)
    WITH pieces AS (
        SELECT o.citing_arxiv_id AS arxiv_id, greatest(o.visible_from, w.from_at) AS from_at, w.until_at
        FROM citation_observations AS o
        JOIN work_retracted_spans AS w ON w.work_id = o.work_id
        WHERE o.citing_arxiv_id = ANY (papers) AND o.work_id IS NOT NULL AND o.visible_from IS NOT NULL
          AND w.until_at > o.visible_from
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

CREATE FUNCTION pith_refresh_retracted_works(works uuid[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    citing text[];
BEGIN
    IF coalesce(cardinality(works), 0) = 0 THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(1885955180);  -- one writer of the spans at a time
    -- The papers citing them, before and after: a reference moved off a work is handled by its own trigger.
    citing := ARRAY(SELECT DISTINCT o.citing_arxiv_id FROM citation_observations AS o
                    WHERE o.work_id = ANY (works) ORDER BY 1);
    DELETE FROM work_retracted_spans WHERE work_id = ANY (works);
    INSERT INTO work_retracted_spans (work_id, from_at, until_at)
    WITH instants AS (
        SELECT DISTINCT k.work_id, k.at FROM (
            SELECT work_id, observed_at AS at FROM work_snapshots WHERE work_id = ANY (works)
            UNION ALL
            SELECT work_id, observed_at FROM work_events WHERE work_id = ANY (works)
            UNION ALL
            SELECT work_id, ended_at FROM work_event_ends WHERE work_id = ANY (works)
        ) AS k
        WHERE EXISTS (SELECT 1 FROM work_events AS r WHERE r.work_id = k.work_id
                        AND r.event_type IN ('retraction', 'withdrawal'))
    ), states AS (
        SELECT i.work_id, i.at,
               lead(i.at, 1, 'infinity') OVER (PARTITION BY i.work_id ORDER BY i.at) AS next_at,
               (EXISTS (SELECT 1 FROM work_snapshots AS ws WHERE ws.work_id = i.work_id AND ws.observed_at <= i.at)
                AND coalesce((
                    SELECT e.event_type IN ('retraction', 'withdrawal')
                    FROM work_events AS e
                    WHERE e.work_id = i.work_id
                      AND e.observed_at <= i.at
                      AND NOT EXISTS (SELECT 1 FROM work_event_ends AS x
                                      WHERE x.work_id = e.work_id AND x.source = e.source
                                        AND x.event_type = e.event_type AND x.observed_at = e.observed_at
                                        AND x.ended_at <= i.at)
                      AND e.event_type IN ('retraction', 'withdrawal', 'reinstatement')
                    ORDER BY coalesce(e.reported_at, e.observed_at) DESC, e.source DESC, e.observed_at DESC,
                             e.event_type DESC
                    LIMIT 1), false)) AS retracted
        FROM instants AS i
    ), runs AS (
        SELECT s.*, count(*) FILTER (WHERE NOT s.retracted) OVER (PARTITION BY s.work_id ORDER BY s.at) AS run
        FROM states AS s
    )
    SELECT work_id, min(at), max(next_at) FROM runs WHERE retracted GROUP BY work_id, run ORDER BY 1, 2;
    PERFORM pith_refresh_citing_spans(citing);
END
$$;

-- Works worth refreshing: those with a retracting event, or spans to remove.
CREATE FUNCTION pith_retracting_works(candidates uuid[]) RETURNS uuid[]
LANGUAGE sql STABLE AS $$
    SELECT ARRAY(SELECT DISTINCT c.work_id FROM unnest(candidates) AS c(work_id)
                 WHERE c.work_id IS NOT NULL
                   AND (EXISTS (SELECT 1 FROM work_events AS e WHERE e.work_id = c.work_id
                                  AND e.event_type IN ('retraction', 'withdrawal'))
                        OR EXISTS (SELECT 1 FROM work_retracted_spans AS w WHERE w.work_id = c.work_id))
                 ORDER BY 1)
$$;

-- work_snapshots, work_events, work_event_ends: the works of the statement's rows.
CREATE FUNCTION pith_retracted_spans_works() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    touched uuid[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        touched := ARRAY(SELECT DISTINCT work_id FROM added);
    ELSIF TG_OP = 'DELETE' THEN
        touched := ARRAY(SELECT DISTINCT work_id FROM removed);
    ELSE
        touched := ARRAY(SELECT work_id FROM after_rows UNION SELECT work_id FROM before_rows);
    END IF;
    PERFORM pith_refresh_retracted_works(pith_retracting_works(touched));
    RETURN NULL;
END
$$;

-- citation_observations: the citing papers of rows linked to a work with spans (a reference's work or
-- visibility changed, or a reference added or removed).
CREATE FUNCTION pith_retracted_spans_references() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    papers text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        papers := ARRAY(SELECT DISTINCT a.citing_arxiv_id FROM added AS a WHERE a.work_id IN
                        (SELECT w.work_id FROM work_retracted_spans AS w) ORDER BY 1);
    ELSIF TG_OP = 'DELETE' THEN
        papers := ARRAY(SELECT DISTINCT a.citing_arxiv_id FROM removed AS a WHERE a.work_id IN
                        (SELECT w.work_id FROM work_retracted_spans AS w) ORDER BY 1);
    ELSE
        papers := ARRAY(SELECT a.citing_arxiv_id FROM after_rows AS a WHERE a.work_id IN
                            (SELECT w.work_id FROM work_retracted_spans AS w)
                        UNION
                        SELECT b.citing_arxiv_id FROM before_rows AS b WHERE b.work_id IN
                            (SELECT w.work_id FROM work_retracted_spans AS w) ORDER BY 1);
    END IF;
    IF cardinality(papers) > 0 THEN
        PERFORM pg_advisory_xact_lock(1885955180);
        PERFORM pith_refresh_citing_spans(papers);
    END IF;
    RETURN NULL;
END
$$;

-- paper_snapshots: a paper with spans whose snapshots changed (the spans are cut at its snapshots).
CREATE FUNCTION pith_retracted_spans_papers() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    papers text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        papers := ARRAY(SELECT DISTINCT a.arxiv_id FROM added AS a WHERE a.arxiv_id IN
                        (SELECT c.arxiv_id FROM paper_retracted_citing_spans AS c) ORDER BY 1);
    ELSIF TG_OP = 'DELETE' THEN
        papers := ARRAY(SELECT DISTINCT a.arxiv_id FROM removed AS a WHERE a.arxiv_id IN
                        (SELECT c.arxiv_id FROM paper_retracted_citing_spans AS c) ORDER BY 1);
    ELSE
        papers := ARRAY(SELECT a.arxiv_id FROM after_rows AS a UNION SELECT b.arxiv_id FROM before_rows AS b
                        ORDER BY 1);
        papers := ARRAY(SELECT p FROM unnest(papers) AS p WHERE p IN
                        (SELECT c.arxiv_id FROM paper_retracted_citing_spans AS c));
    END IF;
    IF cardinality(papers) > 0 THEN
        PERFORM pg_advisory_xact_lock(1885955180);
        PERFORM pith_refresh_citing_spans(papers);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER work_snapshots_retracted_spans_insert AFTER INSERT ON work_snapshots
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_works();
CREATE TRIGGER work_snapshots_retracted_spans_update AFTER UPDATE ON work_snapshots
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_works();
CREATE TRIGGER work_snapshots_retracted_spans_delete AFTER DELETE ON work_snapshots
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_works();

CREATE TRIGGER work_events_retracted_spans_insert AFTER INSERT ON work_events
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_works();
CREATE TRIGGER work_events_retracted_spans_update AFTER UPDATE ON work_events
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_works();
CREATE TRIGGER work_events_retracted_spans_delete AFTER DELETE ON work_events
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_works();

CREATE TRIGGER work_event_ends_retracted_spans_insert AFTER INSERT ON work_event_ends
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_works();
CREATE TRIGGER work_event_ends_retracted_spans_update AFTER UPDATE ON work_event_ends
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_works();
CREATE TRIGGER work_event_ends_retracted_spans_delete AFTER DELETE ON work_event_ends
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_works();

CREATE TRIGGER citation_observations_retracted_spans_insert AFTER INSERT ON citation_observations
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_references();
CREATE TRIGGER citation_observations_retracted_spans_update AFTER UPDATE ON citation_observations
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_references();
CREATE TRIGGER citation_observations_retracted_spans_delete AFTER DELETE ON citation_observations
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_references();

CREATE TRIGGER paper_snapshots_retracted_spans_insert AFTER INSERT ON paper_snapshots
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_papers();
CREATE TRIGGER paper_snapshots_retracted_spans_update AFTER UPDATE ON paper_snapshots
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_papers();
CREATE TRIGGER paper_snapshots_retracted_spans_delete AFTER DELETE ON paper_snapshots
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION pith_retracted_spans_papers();

-- What is stored now.
SELECT pith_refresh_retracted_works(ARRAY(SELECT DISTINCT work_id FROM work_events
                                          WHERE event_type IN ('retraction', 'withdrawal') ORDER BY 1));
ANALYZE work_retracted_spans;
ANALYZE paper_retracted_citing_spans;

GRANT SELECT ON work_retracted_spans, paper_retracted_citing_spans TO pith_reader;
