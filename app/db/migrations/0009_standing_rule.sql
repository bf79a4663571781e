-- One standing rule, kept by the database for every writer (importers, bulk loads, the generator,
-- hand-written SQL): a source that reports an event about a work checked that work at that instant,
-- so every event stands with its source's receipt at its observed_at.
--
-- * An event inserted without its receipt gets it (a BEFORE trigger, in the event's statement).
-- * A foreign key keeps the pair: a receipt cannot be deleted or moved from under its events.
--
-- Every reader then agrees: a work with an event has a measured notice from the event's instant on,
-- so citesRetracted, Work.retracted, the notices, recordDiff, the timeline, standingChanged and the
-- exports all read the same events.

-- What migrations changed in stored data, one row per repair (also sent as a NOTICE to the migrator).
CREATE TABLE data_repairs (
    version    text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    rows       bigint NOT NULL,
    what       text NOT NULL
);

CREATE FUNCTION pith_event_receipt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO standing_receipts (work_id, source, observed_at)
    VALUES (NEW.work_id, NEW.source, NEW.observed_at)
    ON CONFLICT DO NOTHING;
    RETURN NEW;
END
$$;

CREATE TRIGGER work_events_receipt
    BEFORE INSERT OR UPDATE OF work_id, source, observed_at ON work_events
    FOR EACH ROW EXECUTE FUNCTION pith_event_receipt();

-- The repair: a receipt for every stored event recorded without one.
CREATE TEMP TABLE repaired_receipts ON COMMIT DROP AS
SELECT DISTINCT e.work_id, e.source, e.observed_at
FROM work_events AS e
WHERE NOT EXISTS (SELECT 1 FROM standing_receipts AS r
                  WHERE r.work_id = e.work_id AND r.source = e.source AND r.observed_at = e.observed_at);
INSERT INTO standing_receipts (work_id, source, observed_at) SELECT * FROM repaired_receipts;

DO $$
DECLARE
    added bigint;
    works bigint;
    papers bigint;
BEGIN
    SELECT count(*), count(DISTINCT work_id) INTO added, works FROM repaired_receipts;
    SELECT count(DISTINCT o.citing_arxiv_id) INTO papers
    FROM citation_observations AS o WHERE o.work_id IN (SELECT work_id FROM repaired_receipts);
    INSERT INTO data_repairs (version, rows, what)
    VALUES ('0009_standing_rule', added,
            format('added %s standing receipts (on %s works, cited by %s papers) for events recorded without '
                   'their source''s receipt', added, works, papers));
    IF added > 0 THEN
        RAISE NOTICE '0009_standing_rule: added % standing receipts (on % works, cited by % papers) for events recorded without their source''s receipt', added, works, papers;
    END IF;
END
$$;

-- Records and cached answers that showed those notices as unavailable change now: validators move on,
-- and live subscribers are told (change_log, as an import tells them).
UPDATE data_version SET version = version + 1 WHERE EXISTS (SELECT 1 FROM repaired_receipts);
INSERT INTO change_log (kind, arxiv_id)
SELECT 'record_changed', p.arxiv_id
FROM (SELECT DISTINCT o.citing_arxiv_id AS arxiv_id FROM citation_observations AS o
      WHERE o.work_id IN (SELECT work_id FROM repaired_receipts)) AS p
ORDER BY p.arxiv_id;

ALTER TABLE work_events
    ADD CONSTRAINT work_events_have_receipts FOREIGN KEY (work_id, source, observed_at)
    REFERENCES standing_receipts (work_id, source, observed_at);

GRANT SELECT ON data_repairs TO pith_reader;
