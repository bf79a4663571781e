-- browsePapers (loaders/browse.py): pages by submission time, and by category in arXiv id order, are
-- index walks that stop after the page. (By arXiv id, the primary key serves.)
CREATE INDEX paper_snapshots_by_submitted ON paper_snapshots (submitted_at, arxiv_id);
CREATE INDEX paper_snapshots_by_category ON paper_snapshots (primary_category, arxiv_id)
    WHERE primary_category IS NOT NULL;
