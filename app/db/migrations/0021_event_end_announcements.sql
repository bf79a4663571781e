-- standingChanged announces an event's end as well as its start (docs/standing.md: a source's newer check that
-- no longer reports an event ends its effect from that check on). The change-log row of an end names the event
-- it ends, as a new event's row does, and carries the end's instant; a new event's row has none.
ALTER TABLE change_log ADD COLUMN event_ended_at timestamptz;
