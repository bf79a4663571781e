-- works(filter: {eventType, source}) walks the events of that kind in work id order, a page's worth, instead
-- of every work: at 1,000,000 papers (2.8 million work snapshots) a page of works with an event of a kind no
-- work has read every snapshot (0.5-4.6 s); by these indexes it reads the page (loaders/browse.py).
CREATE INDEX work_events_by_type ON work_events (event_type, work_id);
CREATE INDEX work_events_by_source ON work_events (source, work_id);
