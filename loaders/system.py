"""The reads about the database itself, not its papers: the data version, readiness, replica lag, the
change log's ends, the data's scale for pricing, API keys and persisted documents. The modules that decide
with them (app.state, app.ops, app.live, app.cost, app.governor, app.persisted) send these statements."""

from __future__ import annotations

from typing import Final

PING: Final = "SELECT 1"
DATA_VERSION: Final = "SELECT version FROM data_version"
READ_ONLY: Final = "SELECT current_setting('transaction_read_only') = 'on'"
# How far a standby's replay is behind: 0 when it has replayed everything it received, else the age
# of the last commit it replayed.
REPLICA_LAG: Final = """SELECT CASE WHEN pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn() THEN 0
                   ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp()) END::float8"""

# The change log: its newest position, what is logged after a position (in batches), how far retention
# pruned it, and one (kind, paper)'s rows after a position (a subscription resumed with `after`).
NEWEST_POSITION: Final = "SELECT coalesce(max(position), 0) AS position FROM change_log"
CHANGES_BATCH: Final = 5000
CHANGES_AFTER: Final = f"""
SELECT position, kind, arxiv_id, observation_id, work_id, event_source, event_type, event_observed_at,
       event_reported_at, event_notice_doi, event_ended_at, committed_at
FROM change_log WHERE position > $1 ORDER BY position LIMIT {CHANGES_BATCH}"""
PRUNED_UP_TO: Final = "SELECT up_to FROM change_log_pruned"
# A replay is read a batch at a time, each once the rows before it were sent: a subscription resumed from the
# start of a hub's log (tens of thousands of rows) reads no more than its client takes and is charged for.
REPLAY_BATCH: Final = 100
REPLAY: Final = f"""SELECT * FROM change_log WHERE kind = $1 AND arxiv_id = $2 AND position > $3 ORDER BY position
LIMIT {REPLAY_BATCH}"""

# PostgreSQL's statistics: the most common cited (citing) paper's share of the observations, times
# their number, is the planner's own estimate of the largest degree; the snapshots' row estimate bounds
# the papers. Before ANALYZE (reltuples -1, no pg_stats) a small table is counted instead.
SCALE_ESTIMATE: Final = """
SELECT (SELECT max(f * c.reltuples)::bigint
          FROM pg_stats AS s, unnest(s.most_common_freqs) AS f, pg_class AS c
         WHERE s.tablename = 'citation_observations' AND s.attname IN ('cited_arxiv_id', 'citing_arxiv_id')
           AND c.relname = 'citation_observations' AND c.reltuples >= 0) AS max_degree,
       (SELECT reltuples::bigint FROM pg_class WHERE relname = 'citation_observations') AS observations,
       (SELECT reltuples::bigint FROM pg_class WHERE relname = 'paper_snapshots') AS snapshots,
       -- the sources counting citations (n_distinct: a count, or minus a fraction of the rows)
       (SELECT max(CASE WHEN s.n_distinct >= 0 THEN s.n_distinct ELSE -s.n_distinct * greatest(c.reltuples, 0) END)
               ::bigint
          FROM pg_stats AS s JOIN pg_class AS c ON c.relname = s.tablename
         WHERE s.tablename IN ('external_measurements', 'work_measurements') AND s.attname = 'source'
           AND s.schemaname = current_schema()) AS measurement_sources
"""
SMALL: Final = 200_000  # rows that are counted exactly when statistics are missing
EXACT_SCALE: Final = f"""
SELECT (SELECT count(*) FROM (SELECT 1 FROM paper_snapshots LIMIT {SMALL + 1}) AS s) AS snapshots,
       (SELECT count(*) FROM (SELECT 1 FROM citation_observations LIMIT {SMALL + 1}) AS s) AS observations
"""
EXACT_DEGREE: Final = """
SELECT greatest((SELECT max(n) FROM (SELECT count(*) AS n FROM citation_observations GROUP BY cited_arxiv_id) a),
                (SELECT max(n) FROM (SELECT count(*) AS n FROM citation_observations GROUP BY citing_arxiv_id) b))
"""
# The longest reference list (a paper's outbound observations), exactly: each paper's count is kept
# (paper_observation_counts, migration 0012); read with the scale, every few minutes, off requests' paths.
MAX_OUTBOUND: Final = "SELECT coalesce(max(outbound), 0) FROM paper_observation_counts"
EXACT_MEASUREMENT_SOURCES: Final = """
SELECT greatest((SELECT count(DISTINCT source) FROM external_measurements),
                (SELECT count(DISTINCT source) FROM work_measurements))
"""
# Each paper's size (observations in and out), for an operation's price, read on its own session.
PAPER_SIZES: Final = """
SELECT c.arxiv_id, c.inbound, c.outbound FROM paper_observation_counts AS c WHERE c.arxiv_id = ANY($1::text[])
"""

KEYS: Final = "SELECT key_id, name, points_per_hour, created_at, revoked_at FROM api_keys ORDER BY name"
LIVE_KEYS: Final = "SELECT secret_sha256, key_id, name, points_per_hour FROM api_keys WHERE revoked_at IS NULL"
PERSISTED_DOCUMENT: Final = "SELECT document FROM persisted_queries WHERE sha256 = $1"
