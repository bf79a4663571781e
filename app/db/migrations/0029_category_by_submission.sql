-- browsePapers(filter: {category}, orderBy: SUBMITTED_AT) walks the category's papers in submission order (and a
-- window within it, from the window's start): without this index the pool's generic plan read every snapshot of
-- the category and sorted them (1.9 million index and heap rows, 0.3-0.5 s a page at 1,000,000 papers).
CREATE INDEX paper_snapshots_by_category_submitted ON paper_snapshots (primary_category, submitted_at, arxiv_id)
    WHERE primary_category IS NOT NULL;
