-- Budgets per client (app/governor.py). An API key is stored as the SHA-256 of its secret, never the
-- secret itself; `pith-graph keys create` prints the secret once.
CREATE TABLE api_keys (
    key_id          uuid PRIMARY KEY,
    name            text NOT NULL UNIQUE CHECK (length(name) BETWEEN 1 AND 100),
    secret_sha256   bytea NOT NULL UNIQUE CHECK (length(secret_sha256) = 32),
    points_per_hour integer NOT NULL CHECK (points_per_hour > 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    revoked_at      timestamptz
);

-- Points claimed per client and clock hour, by every server process sharing the database. A process
-- claims a chunk of a client's budget at a time (one write per chunk, not per request) and spends it
-- locally; claims never pass the limit, so no process can admit more than the budget in total.
CREATE TABLE rate_limit_windows (
    client       text NOT NULL CHECK (length(client) <= 200),
    window_start timestamptz NOT NULL,
    claimed      bigint NOT NULL DEFAULT 0 CHECK (claimed >= 0),
    PRIMARY KEY (client, window_start)
);

-- Claim up to `wanted` points of `lim` for (client, hour): how many were granted, and the total claimed.
CREATE FUNCTION pith_claim_points(p_client text, p_window timestamptz, wanted bigint, lim bigint)
RETURNS TABLE (granted bigint, claimed bigint) LANGUAGE plpgsql AS $$
DECLARE
    before bigint;
BEGIN
    INSERT INTO rate_limit_windows AS w (client, window_start, claimed) VALUES (p_client, p_window, 0)
    ON CONFLICT (client, window_start) DO NOTHING;
    SELECT w.claimed INTO before FROM rate_limit_windows AS w
     WHERE w.client = p_client AND w.window_start = p_window FOR UPDATE;
    granted := greatest(0, least(wanted, lim - before));
    claimed := before + granted;
    UPDATE rate_limit_windows AS w SET claimed = pith_claim_points.claimed
     WHERE w.client = p_client AND w.window_start = p_window;
    -- Windows of past hours are of no use to anyone: a claim now and then clears them.
    IF random() < 0.01 THEN
        DELETE FROM rate_limit_windows AS w WHERE w.window_start < p_window - interval '2 hours';
    END IF;
    RETURN NEXT;
END
$$;

-- Persisted queries: the least recently used go first when the table is full (a flood of registrations
-- cannot evict documents in use, nor lock new ones out). last_used is refreshed at most once a minute.
ALTER TABLE persisted_queries ADD COLUMN last_used timestamptz NOT NULL DEFAULT now();
CREATE INDEX persisted_queries_last_used ON persisted_queries (last_used);

GRANT SELECT ON api_keys TO pith_reader;
GRANT SELECT, INSERT, UPDATE, DELETE ON rate_limit_windows TO pith_reader;
GRANT UPDATE (last_used), DELETE ON persisted_queries TO pith_reader;
GRANT EXECUTE ON FUNCTION pith_claim_points(text, timestamptz, bigint, bigint) TO pith_reader;
