-- The change log that live subscriptions read: appended by every import in the transaction of its
-- facts, one row per new citing observation (for the cited paper), per new work event (for each
-- paper citing the work) and per paper whose record the import may have changed. Imports append
-- under a transaction-level advisory lock taken just before commit, so positions are allocated in
-- commit order: a reader that has seen position N has seen every row below it. NOTIFY pith_changes
-- (delivered at commit) carries only the newest position; listeners read the rows.
CREATE TABLE change_log (
    position          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind              text NOT NULL CHECK (kind IN ('citation_added', 'standing_changed', 'record_changed')),
    arxiv_id          text COLLATE "C" NOT NULL,
    observation_id    uuid,
    work_id           uuid,
    event_source      text,
    event_type        text,
    event_observed_at timestamptz,
    event_reported_at timestamptz,
    event_notice_doi  text,
    committed_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX change_log_by_paper ON change_log (kind, arxiv_id, position);
CREATE INDEX change_log_by_time ON change_log (committed_at);

-- Positions at or below this were removed by retention: a resume from before it must refetch.
CREATE TABLE change_log_pruned (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    up_to     bigint NOT NULL
);
INSERT INTO change_log_pruned VALUES (true, 0);

GRANT SELECT ON change_log, change_log_pruned TO pith_reader;

-- New work events are announced to the papers citing the work: find them by work.
CREATE INDEX citation_observations_by_work ON citation_observations (work_id) WHERE work_id IS NOT NULL;
