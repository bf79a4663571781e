-- browsePapers with a category, a submission window or both: each paper's kept inbound total (migration 0011)
-- filed under the submission month and category of each of its snapshots. Most cited first, a page is a walk of the
-- category, or of each month the window covers, in most-cited order, that stops after the page (the walk of all the
-- totals met an old year's papers or a small category's only after every paper cited more: 456,277 rows for a
-- year's first page at 1,000,000 papers). In arXiv id order, each month's first and last id bound a window's walk
-- (loaders/browse.py).
--
-- A paper has one row per distinct (month, category) among its snapshots, so whichever snapshot is its latest
-- at an instant, a row names it: a page keeps a row only where it matches that snapshot, so each paper is
-- listed once and only where its latest snapshot puts it. The month is the submission time's, in UTC; a paper
-- without a category is filed under ''. Each row's total is its paper's kept total, written in the same
-- statement as the total (a trigger on paper_inbound_totals), so the rows are exact wherever the kept totals
-- are (loaders.citations.TOTALS_EXACT). A writer of snapshots locks the papers' totals rows before it reads
-- them (in arXiv id order, as the totals' writers do), so a total written at the same time is never lost.

CREATE TABLE paper_placements (
    arxiv_id         text COLLATE "C" NOT NULL,
    month            timestamp NOT NULL,     -- date_trunc('month') of a snapshot's submitted_at, in UTC
    primary_category text NOT NULL,          -- that snapshot's ('' none)
    total            bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (arxiv_id, month, primary_category)
);
CREATE INDEX paper_placements_by_month ON paper_placements (month, (-total), arxiv_id);
CREATE INDEX paper_placements_by_category_month ON paper_placements (primary_category, month, (-total), arxiv_id);
CREATE INDEX paper_placements_by_category ON paper_placements (primary_category, (-total), arxiv_id);
-- ... and each month's first and last arXiv id (of a category): the bounds of a window's walk in arXiv id order.
CREATE INDEX paper_placements_by_month_id ON paper_placements (month, arxiv_id);
CREATE INDEX paper_placements_by_category_month_id ON paper_placements (primary_category, month, arxiv_id);

-- The papers' rows from their snapshots, with their kept totals.
CREATE FUNCTION pith_refresh_placements(papers text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM paper_inbound_totals AS t WHERE t.arxiv_id = ANY (papers) ORDER BY t.arxiv_id FOR UPDATE;
    DELETE FROM paper_placements AS p WHERE p.arxiv_id = ANY (papers);
    INSERT INTO paper_placements (arxiv_id, month, primary_category, total)
    SELECT DISTINCT s.arxiv_id, date_trunc('month', s.submitted_at AT TIME ZONE 'UTC'),
           coalesce(s.primary_category, ''), coalesce(t.total, 0)
    FROM paper_snapshots AS s LEFT JOIN paper_inbound_totals AS t ON t.arxiv_id = s.arxiv_id
    WHERE s.arxiv_id = ANY (papers)
    ORDER BY 1, 2, 3;
END
$$;

CREATE FUNCTION pith_placements_papers() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    papers text[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- Only rows not there yet (an ordinary new snapshot adds none to a known paper).
        papers := ARRAY(SELECT DISTINCT a.arxiv_id FROM added AS a WHERE NOT EXISTS (
                            SELECT 1 FROM paper_placements AS p WHERE p.arxiv_id = a.arxiv_id
                            AND p.month = date_trunc('month', a.submitted_at AT TIME ZONE 'UTC')
                            AND p.primary_category = coalesce(a.primary_category, ''))
                        ORDER BY 1);
    ELSIF TG_OP = 'DELETE' THEN
        papers := ARRAY(SELECT DISTINCT r.arxiv_id FROM removed AS r ORDER BY 1);
    ELSE
        papers := ARRAY(SELECT a.arxiv_id FROM after_rows AS a UNION SELECT b.arxiv_id FROM before_rows AS b
                        ORDER BY 1);
    END IF;
    IF cardinality(papers) > 0 THEN
        PERFORM pith_refresh_placements(papers);
    END IF;
    RETURN NULL;
END
$$;

-- (The papers as an array, each probed by key: joined to the transition table, which has no statistics, the plan
-- compared every row of one with every row of the other, 20 s of a 10,000-paper synth's 43.)
CREATE FUNCTION pith_placements_totals() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE paper_placements AS p SET total = t.total
    FROM paper_inbound_totals AS t
    WHERE p.arxiv_id = ANY (ARRAY(SELECT c.arxiv_id FROM changed AS c)) AND t.arxiv_id = p.arxiv_id
      AND p.total <> t.total;
    RETURN NULL;
END
$$;

CREATE TRIGGER paper_snapshots_placements_insert AFTER INSERT ON paper_snapshots
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION pith_placements_papers();
CREATE TRIGGER paper_snapshots_placements_update AFTER UPDATE ON paper_snapshots
    REFERENCING OLD TABLE AS before_rows NEW TABLE AS after_rows
    FOR EACH STATEMENT EXECUTE FUNCTION pith_placements_papers();
CREATE TRIGGER paper_snapshots_placements_delete AFTER DELETE ON paper_snapshots
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION pith_placements_papers();
CREATE TRIGGER paper_inbound_totals_placements_insert AFTER INSERT ON paper_inbound_totals
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION pith_placements_totals();
CREATE TRIGGER paper_inbound_totals_placements_update AFTER UPDATE ON paper_inbound_totals
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION pith_placements_totals();

-- What is stored now.
INSERT INTO paper_placements (arxiv_id, month, primary_category, total)
SELECT DISTINCT s.arxiv_id, date_trunc('month', s.submitted_at AT TIME ZONE 'UTC'),
       coalesce(s.primary_category, ''), coalesce(t.total, 0)
FROM paper_snapshots AS s LEFT JOIN paper_inbound_totals AS t ON t.arxiv_id = s.arxiv_id;
ANALYZE paper_placements;

GRANT SELECT ON paper_placements TO pith_reader;
