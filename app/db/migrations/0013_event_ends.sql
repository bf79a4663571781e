-- The standing rule's second half (docs/standing.md): a source that checks a work again and no longer
-- reports an event it once reported (OpenAlex is_retracted true, then false; a Retraction Watch row
-- withdrawn from the database) ends that event's effect from that check on. The event stays on record as
-- observed; the end is a fact of its own, at the instant of the check that ended it.
--
-- * An end names the event it ends (a foreign key: the event cannot go from under it; an event that an
--   import re-dates to an earlier check of its source carries its end along).
-- * An end stands with its source's receipt at that instant, as an event does (migration 0009): a
--   trigger adds it for every writer, a foreign key keeps the pair.
CREATE TABLE work_event_ends (
    work_id     uuid NOT NULL,
    source      text NOT NULL,
    event_type  text NOT NULL,
    observed_at timestamptz NOT NULL,  -- the event's
    ended_at    timestamptz NOT NULL CHECK (ended_at > observed_at),
    PRIMARY KEY (work_id, source, event_type, observed_at),
    FOREIGN KEY (work_id, source, event_type, observed_at)
        REFERENCES work_events (work_id, source, event_type, observed_at) ON UPDATE CASCADE ON DELETE CASCADE
);

CREATE FUNCTION pith_event_end_receipt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO standing_receipts (work_id, source, observed_at)
    VALUES (NEW.work_id, NEW.source, NEW.ended_at)
    ON CONFLICT DO NOTHING;
    RETURN NEW;
END
$$;

CREATE TRIGGER work_event_ends_receipt
    BEFORE INSERT OR UPDATE OF work_id, source, ended_at ON work_event_ends
    FOR EACH ROW EXECUTE FUNCTION pith_event_end_receipt();

ALTER TABLE work_event_ends
    ADD CONSTRAINT work_event_ends_have_receipts FOREIGN KEY (work_id, source, ended_at)
    REFERENCES standing_receipts (work_id, source, observed_at);

-- recordDiff and the timeline list a work's ends in a window.
CREATE INDEX work_event_ends_by_time ON work_event_ends (work_id, ended_at);

GRANT SELECT ON work_event_ends TO pith_reader;
