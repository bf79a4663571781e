-- Receipts a v1 document implies only by an event's observation: the store keeps every event with its source's
-- receipt at that instant (migration 0009), but a document shows the full listing of each source's latest check
-- alone. Such a receipt says the check reported that event, not that it reported nothing else: a later file's
-- event observed at that check is no contradiction, and no end is derived from it (app/ingest/checks.py).
-- A receipt leaves this table once a document's notice shows it, or an import makes it, as a whole check.
CREATE TABLE implied_checks (
    work_id     uuid NOT NULL,
    source      text NOT NULL,
    observed_at timestamptz NOT NULL,
    PRIMARY KEY (work_id, source, observed_at)
);
