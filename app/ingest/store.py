"""Write facts: COPY into staging tables, then set-based inserts that report conflicting facts (the loads of
app.ingest.load and the importers of app.ingest.sources both stage through Loader)."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any, Final

import asyncpg

from app.ingest.document import DocumentError, Facts


@dataclass(frozen=True)
class Table:
    fact: str  # the Facts attribute
    name: str
    key: tuple[str, ...]
    values: tuple[str, ...]
    # Values one fact may leave out (NULL) and another of its key give (app.ingest.document.LENIENT_POSITIONS):
    # they agree, and the stored fact gets the value; two different values contradict each other.
    lenient: tuple[str, ...] = ()
    # Stored with the fact, never compared: how an importer made it (a v1 document leaves them NULL).
    carried: tuple[str, ...] = ()


# In insert order: resolutions refer to observations.
TABLES: tuple[Table, ...] = (
    Table("papers", "paper_snapshots", ("arxiv_id", "observed_at"),
          ("title", "latest_version", "primary_category", "submitted_at", "last_updated"), ("primary_category",)),
    Table("works", "work_snapshots", ("work_id", "observed_at"),
          ("arxiv_id", "doi", "metadata_source", "pith_arxiv_id", "title", "venue", "year"), carried=("kept",)),
    Table("observations", "citation_observations", ("observation_id",),
          ("citing_arxiv_id", "reference_index", "source", "source_observed_at", "cited_arxiv_id", "work_id",
           "printed_title", "printed_year"), ("cited_arxiv_id", "work_id", "printed_title", "printed_year")),
    Table("resolutions", "resolutions", ("observation_id", "observed_at"), ("status", "resolver_source", "linked"),
          ("linked",)),
    Table("receipts", "standing_receipts", ("work_id", "source", "observed_at"), ()),
    Table("events", "work_events", ("work_id", "source", "event_type", "observed_at"), ("reported_at", "notice_doi")),
    Table("measurements", "external_measurements", ("arxiv_id", "source", "observed_at"), ("count",)),
    Table("work_measurements", "work_measurements", ("work_id", "source", "observed_at"), ("count",)),
    Table("paper_dois", "paper_dois", ("arxiv_id", "observed_at"), ("doi",)),
)

BATCH_DOCUMENTS = 500


class ImportRejected(Exception):
    """A file that was not loaded; nothing of it was written."""

    def __init__(self, file: str, message: str, line: int | None = None, path: str | None = None) -> None:
        where = file + (f", line {line}" if line is not None else "")
        super().__init__(f"{where}: {path + ': ' if path else ''}{message}")
        self.file, self.line, self.path, self.message = file, line, path, message


@dataclass
class LoadResult:
    file: str
    documents: int
    facts_added: int
    seconds: float


def _tuple_sql(alias: str, columns: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"{alias}.{c}" for c in columns) + ")"


def _differs(t: Table, x: str, s: str) -> str:
    """SQL true when row `s` of table t says something else than row `x` of the same key (a lenient value left
    out by either agrees with the other's)."""
    strict = tuple(c for c in t.values if c not in t.lenient)
    test = f"{_tuple_sql(x, strict)} IS DISTINCT FROM {_tuple_sql(s, strict)}"
    for c in t.lenient:
        test += f" OR ({x}.{c} IS NOT NULL AND {s}.{c} IS NOT NULL AND {x}.{c} <> {s}.{c})"
    return test


def _conflict_sql(t: Table) -> str:
    """A staged row whose key stands in the table with other content (after the insert every staged key
    is there): one join on the key, which the analyzed stage plans as a hash or merge join."""
    key_match = " AND ".join(f"x.{c} = s.{c}" for c in t.key)
    return f"""
SELECT s.origin, {', '.join(f's.{c}' for c in t.key + t.values)},
       'the database' AS other_origin, {', '.join(f'x.{c} AS other_{c}' for c in t.values)}
FROM stage_{t.name} AS s
JOIN {t.name} AS x ON {key_match}
WHERE {_differs(t, 'x', 's')}
LIMIT 1
"""


def _staged_conflict_sql(t: Table) -> str:
    """Two staged rows of one key with other content: each row is compared with the first staged row of
    its key (one sort of the stage, no join: the self-join this replaces compared every pair of rows
    when the planner had no statistics). For papers, the key's primary categories are counted apart: one
    given and one left out agree, two different ones do not."""
    key = ", ".join(t.key)
    window = f"(PARTITION BY {key} ORDER BY origin ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)"
    compared = tuple(c for c in t.values if c not in t.lenient)
    source = f"stage_{t.name}"
    categories = "false"
    if t.lenient:  # each lenient value apart: one given and one left out agree, two different ones do not
        # (the least and the greatest given differ: two plain aggregates, where count(DISTINCT ...) sorted the
        # stage once per value)
        spans = ", ".join(f"min({c}::text) IS DISTINCT FROM max({c}::text) AS n_{c}" for c in t.lenient)
        source = (f"(SELECT st.*, {', '.join(f'c.n_{c}' for c in t.lenient)} FROM stage_{t.name} AS st JOIN "
                  f"(SELECT {key}, {spans} FROM stage_{t.name} GROUP BY {key}) AS c USING ({key}))")
        categories = " OR ".join(f"f.n_{c}" for c in t.lenient)
    firsts = ", ".join(f"first_value({c}) OVER w AS first_{c}" for c in t.values)
    return f"""
SELECT f.origin, {', '.join(f'f.{c}' for c in t.key + t.values)},
       f.first_origin AS other_origin, {', '.join(f'f.first_{c} AS other_{c}' for c in t.values)}
FROM (SELECT *, first_value(origin) OVER w AS first_origin, {firsts}
      FROM {source} AS staged WINDOW w AS {window}) AS f
WHERE ({', '.join(f'f.first_{c}' for c in compared)}) IS DISTINCT FROM ({', '.join(f'f.{c}' for c in compared)})
   OR {categories}
ORDER BY f.origin
LIMIT 1
"""


def _insert_sql(t: Table, unique: bool = False, source: str = "stage_", width: int | None = None) -> str:
    """Set-based insert from the stage (or a batch of it: source="batch_"); unique=True when staged keys are
    known to be distinct; width: the staged rows give only the table's first so many columns (Loader.stage_rows)."""
    columns = ", ".join((t.key + t.values + t.carried)[:width])
    order = ", ".join(t.key)
    if unique and t.fact != "papers":
        # In key order: index pages fill left to right instead of at random.
        return f"INSERT INTO {t.name} ({columns}) SELECT {columns} FROM {source}{t.name} ORDER BY {order} ON CONFLICT DO NOTHING"
    if t.fact == "papers":
        # A stored snapshot that left its category out gets it; one it has stays (a different one was refused as
        # a conflict). (Other tables' lenient values are filled in after the conflict checks, _fill_sql: an
        # upsert would lock every row a load meets again, a rerun's million references.)
        return f"""
INSERT INTO {t.name} ({columns})
SELECT DISTINCT ON ({order}) {columns} FROM {source}{t.name}
ORDER BY {order}, {', '.join(f'{c} NULLS LAST' for c in t.lenient)}
ON CONFLICT ({order}) DO UPDATE SET {', '.join(f'{c} = coalesce({t.name}.{c}, EXCLUDED.{c})' for c in t.lenient)}
WHERE {' OR '.join(f'({t.name}.{c} IS NULL AND EXCLUDED.{c} IS NOT NULL)' for c in t.lenient)}
"""
    lenient = "".join(f", {c} NULLS LAST" for c in t.lenient if c in (t.key + t.values)[:width])
    return f"""
INSERT INTO {t.name} ({columns})
SELECT DISTINCT ON ({order}) {columns} FROM {source}{t.name}
ORDER BY {order}{lenient}
ON CONFLICT DO NOTHING
"""


def _fill_sql(t: Table) -> str:
    """Fill the lenient values a stored fact left out from a staged fact of its key that gives them (a reference
    shown unlinked, then linked; a resolution's link): one join of the stage with the table, as a conflict check
    is; a key with several staged facts giving different values in part may need a second pass."""
    key = " AND ".join(f"x.{c} = f.{c}" for c in t.key)
    wanted = " OR ".join(f"(x.{c} IS NULL AND s.{c} IS NOT NULL)" for c in t.lenient)
    return f"""
WITH fill AS (
    SELECT DISTINCT ON ({', '.join(f's.{c}' for c in t.key)}) {', '.join(f's.{c}' for c in t.key + t.lenient)}
    FROM stage_{t.name} AS s JOIN {t.name} AS x ON {' AND '.join(f'x.{c} = s.{c}' for c in t.key)}
    WHERE {wanted}
)
UPDATE {t.name} AS x SET {', '.join(f'{c} = coalesce(x.{c}, f.{c})' for c in t.lenient)}
FROM fill AS f WHERE {key}
"""


def _keeping_added(t: Table, insert: str) -> str:
    """The insert, copying what it added into new_{table} (for the change log; a paper's category filled in counts,
    as a snapshot it completes)."""
    return f"WITH added AS ({insert} RETURNING *) INSERT INTO new_{t.name} SELECT * FROM added"


class Loader:
    """Stages the facts of one file inside its transaction and merges them at the end."""

    def __init__(self, conn: asyncpg.Connection, file: str, *, check_conflicts: bool = True,
                 staged_unique: bool = False, merge_each_batch: bool = False) -> None:
        self.conn = conn
        # Each batch is merged into the fact tables as it is staged, while the caller reads the next documents:
        # the database's work (the inserts, their indexes and triggers) overlaps the reading instead of
        # following it. The checks for conflicting facts still run once, over the whole stage, at the end.
        self.merge_each_batch = merge_each_batch
        self._merging: asyncio.Task | None = None
        self.file = file
        self.check_conflicts = check_conflicts
        # The caller left one staged row per key (app.ingest.sources): only stored facts can conflict.
        self.staged_unique = staged_unique
        self.pending = Facts()
        self.origins: dict[str, dict[tuple, str]] = {}  # per table: each pending key's first origin
        # Set by the bulk path when the fact tables were empty: every staged row is then new, and the
        # change log is made from the stage itself instead of copies of what each insert added.
        self.all_new = False
        self.widths: dict[str, int] = {}  # per table, how many of its columns stage_rows was given

    async def start(self) -> None:
        for t in TABLES:
            await self.conn.execute(
                f"CREATE TEMP TABLE stage_{t.name} (LIKE {t.name}) ON COMMIT DROP;"
                f" ALTER TABLE stage_{t.name} ADD COLUMN origin text;"
                # What this import actually adds (for the change log).
                f" CREATE TEMP TABLE new_{t.name} (LIKE {t.name}) ON COMMIT DROP"
                # The batch being merged (merge_each_batch).
                + (f"; CREATE TEMP TABLE batch_{t.name} (LIKE stage_{t.name}) ON COMMIT DROP"
                   if self.merge_each_batch else "")
            )

    def add(self, facts: Facts, origin: str) -> None:
        # Facts.merge, with each new key's origin noted as it is added: most rows are new or the same again.
        pending = self.pending
        for t in TABLES:
            incoming = getattr(facts, t.fact)
            if not incoming:
                continue
            rows = getattr(pending, t.fact)
            origins = self.origins.setdefault(t.fact, {})
            for key, value in incoming.items():
                old = rows.get(key)
                if old is None:
                    rows[key] = value
                    origins[key] = origin
                elif old != value:
                    try:
                        pending.add(t.fact, key, value, origin)
                    except DocumentError as exc:
                        raise ImportRejected(self.file, exc.message, path=origin) from None

    async def flush(self) -> None:
        await self._copy_pending("stage_")

    async def _copy_pending(self, into: str) -> list[Table]:
        """COPY the pending facts, each with its origin, into the stage (or the batch) tables; the tables copied."""
        copied = []
        for t in TABLES:
            rows = getattr(self.pending, t.fact)
            if not rows:
                continue
            origins = self.origins[t.fact]
            records = [key + value + (origins[key],) for key, value in rows.items()]
            await self.conn.copy_records_to_table(f"{into}{t.name}", records=records,
                                                  columns=list(t.key + t.values) + ["origin"])
            copied.append(t)
        self.pending = Facts()
        self.origins.clear()
        return copied

    async def merge_batch(self) -> None:
        """COPY the pending facts into the batch tables and start merging them into the stage and the fact
        tables; the merge runs in the database while the caller reads on, and is awaited before the next."""
        await self.settle()
        merged = await self._copy_pending("batch_")
        if not merged:
            return
        sql = "; ".join(statement for t in merged for statement in (
            f"INSERT INTO stage_{t.name} SELECT * FROM batch_{t.name}",
            _keeping_added(t, _insert_sql(t, source='batch_')),
            f"TRUNCATE batch_{t.name}"))
        self._merging = asyncio.create_task(self.conn.execute(sql))
        await asyncio.sleep(0)  # the statements are sent: the database works while the caller reads

    async def settle(self) -> None:
        """Wait for the batch being merged (its error, if any, is raised here)."""
        task, self._merging = self._merging, None
        if task is not None:
            await task

    async def stage_rows(self, rows_by_fact: dict[str, list[tuple]], origin: str) -> None:
        """COPY rows straight into the staging tables (rows in each table's key + value column order)."""
        for t in TABLES:
            rows = rows_by_fact.get(t.fact)
            if rows:  # (rows may leave out the table's last values: a resolution's link, NULL: not known)
                self.widths[t.fact] = len(rows[0])
                await self.conn.copy_records_to_table(f"stage_{t.name}", records=[r + (origin,) for r in rows],
                                                      columns=list((t.key + t.values + t.carried)[:len(rows[0])])
                                                      + ["origin"])

    async def finish(self) -> int:
        if self.merge_each_batch:
            return await self._finish_merged()
        await self.flush()
        # Temporary tables get no statistics of their own (autovacuum never sees them): without them the
        # planner takes a stage of 19,001 rows for a few and joins it pair by pair (182 s).
        await self.conn.execute("; ".join(f"ANALYZE stage_{t.name}" for t in TABLES))
        added = 0
        for t in TABLES:
            # Insert first, then compare: a concurrent load's committed rows are then seen too.
            insert = _insert_sql(t, unique=not self.check_conflicts, width=self.widths.get(t.fact))
            if not self.all_new:
                insert = _keeping_added(t, insert)
            status = await self.conn.execute(insert)
            inserted = int(status.split()[-1])
            added += inserted
            if not t.values or not self.check_conflicts:
                continue
            # Every staged row (one per key) is one this insert added: none can say something else than a stored
            # fact, and the join that looks for one (every staged row against the table) is not needed. A refresh
            # (every fact at a new instant) and a first import are this case; an import again is not.
            if self.staged_unique and inserted == await self.conn.fetchval(f"SELECT count(*) FROM stage_{t.name}"):
                continue
            await self._refuse_conflicts(t, only_stored=self.staged_unique)
        await self._fill_lenient()
        await self._fill_kept()
        await self._announce(added)
        return added

    async def _refuse_conflicts(self, t: Table, only_stored: bool = False) -> None:
        """ImportRejected naming the first staged fact that says something else than another of its key (staged
        or stored); only_stored: the stage holds one row per key, so only stored facts are compared."""
        checks = [_conflict_sql(t)] if only_stored else [_staged_conflict_sql(t), _conflict_sql(t)]
        for check in checks:
            conflict = await self.conn.fetchrow(check)
            if conflict is not None:
                raise ImportRejected(self.file, _describe_conflict(t, conflict))

    async def _announce(self, added: int) -> None:
        """After facts were added: the data version, and the change log from what was added."""
        if not added:
            return
        if not self.all_new:
            await self.conn.execute("; ".join(f"ANALYZE new_{t.name}" for t in TABLES))
        # Validators of cached GraphQL answers change with the data, and live subscribers are told
        # (both taken last: the row and the lock are held only until this transaction commits).
        await self.conn.execute("UPDATE data_version SET version = version + 1")
        await append_changes(self.conn, "stage_" if self.all_new else "new_")

    async def _finish_merged(self) -> int:
        """finish() when each batch was merged as it came: check the whole stage for conflicts, then log."""
        await self.merge_batch()
        await self.settle()
        await self.conn.execute("; ".join(f"ANALYZE stage_{t.name}" for t in TABLES))
        # A paper snapshot's category can be filled in by a later batch (an update): count each key once.
        added = await self.conn.fetchval("SELECT " + " + ".join(
            f"(SELECT count(DISTINCT ({', '.join(t.key)})) FROM new_{t.name})" if t.fact == "papers"
            else f"(SELECT count(*) FROM new_{t.name})" for t in TABLES))
        if self.check_conflicts:
            for t in TABLES:
                if t.values:
                    await self._refuse_conflicts(t)
        await self._fill_lenient()
        await self._fill_kept()
        await self._announce(added)
        return added

    async def _fill_lenient(self) -> None:
        """Stored facts get the lenient values they left out and a staged fact of their key gives (no new fact:
        the resolution that shows a reference linked is one)."""
        if self.all_new:
            return  # (nothing was stored before: nothing to fill)
        for t in TABLES:
            if not t.lenient or t.fact == "papers" or self.widths.get(t.fact, len(t.key + t.values)) < len(
                    t.key + t.values):
                continue
            if await self.conn.fetchval(f"SELECT (SELECT count(*) FROM stage_{t.name}) = "
                                        f"(SELECT count(*) FROM new_{t.name})"):
                continue  # every staged fact was new
            for _ in t.lenient:  # (each pass fills at least one value of every key it touches)
                if (await self.conn.execute(_fill_sql(t))).split()[-1] == "0":
                    break

    async def _fill_kept(self) -> None:
        """A work snapshot added before later snapshots of its work (sources imported out of date order): the values
        those kept from an earlier description (work_snapshots.kept) become what date order would have kept."""
        if self.all_new:
            return
        added = await self.conn.fetchval("SELECT count(*) FROM new_work_snapshots")
        # The fill probes each added work. A big import first asks whether any stored snapshot is later than those
        # added, one scan that stops at the first (none for sources in date order, a monthly refresh: 0.1 s against
        # 0.8 s of probes at 200,000 works); a small load (a few documents) probes at once, not scanning the table.
        if added and (added < FILL_KEPT_SCAN_FROM or await self.conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM work_snapshots WHERE observed_at > "
                "(SELECT min(observed_at) FROM new_work_snapshots))")):
            await self.conn.execute(FILL_KEPT)


def _kept_value(column: str, bit: int) -> str:
    """A later snapshot's value: its own, or (kept) that of the latest earlier snapshot that gave its own."""
    return (f"CASE WHEN l.kept & {bit} = 0 THEN l.{column} ELSE (SELECT s.{column} FROM work_snapshots AS s "
            f"WHERE s.work_id = l.work_id AND s.observed_at < l.observed_at AND coalesce(s.kept, 0) & {bit} = 0 "
            f"ORDER BY s.observed_at DESC LIMIT 1) END AS {column}")


FILL_KEPT_SCAN_FROM: Final = 20_000  # added snapshots from which _fill_kept asks first (0.08 s of probes)
KEPT_BITS: Final = {"title": 1, "venue": 2, "year": 4, "pith_arxiv_id": 8}  # migration 0024
# One probe of each added snapshot's work for later snapshots (none, when sources arrive in date order), whatever
# the statistics say: as a join, a refresh planned `kept <> 0` at one row while tens of thousands had it, and
# compared every added snapshot with each of them (a monthly refresh slower each month until ANALYZE).
FILL_KEPT: Final = f"""
UPDATE work_snapshots AS w SET {', '.join(f'{c} = f.{c}' for c in KEPT_BITS)}
FROM (
    SELECT l.work_id, l.observed_at, {', '.join(_kept_value(c, bit) for c, bit in KEPT_BITS.items())}
    FROM (SELECT work_id, min(observed_at) AS since FROM new_work_snapshots GROUP BY work_id) AS n
    CROSS JOIN LATERAL (SELECT * FROM work_snapshots AS x WHERE x.work_id = n.work_id AND x.observed_at > n.since
                        AND x.kept <> 0 OFFSET 0) AS l
) AS f
WHERE w.work_id = f.work_id AND w.observed_at = f.observed_at
  AND ({', '.join(f'w.{c}' for c in KEPT_BITS)}) IS DISTINCT FROM ({', '.join(f'f.{c}' for c in KEPT_BITS)})
"""


CHANGE_LOG_LOCK = 7_411_000  # the advisory lock that orders change-log positions by commit
RETENTION_DAYS = int(os.environ.get("PITH_CHANGE_LOG_RETENTION_DAYS", "30"))

# Papers whose record the new facts may change: the paper itself, both ends of a new or re-resolved
# observation, the papers whose lists show a paper with a new snapshot, those citing a work with new
# facts and those it is cited as, and papers with new measurements. Subscribers compare records before
# telling. A work's new facts (metadata, a standing check, an event) show on every observation linked to it: in
# the record of the paper citing it, and in that of the paper it is (the cited paper's inbound notices).
# The observations of works with new facts, and those with new resolutions, are read once each (a semi-join
# and a join by key), and each branch over them gives each paper once: a refresh checks every work again, and
# the union of one row per observation (540,000 at 10,000 papers) was sorted whole, its size unknown to the
# planner; each branch scanned every observation again (four scans for an OpenAlex refresh). Both in one
# scan ("work_id IN ... OR observation_id IN ...") made the second a subplan, not hashed once the new
# resolutions passed work_mem: every observation against every new resolution, over 8 minutes for a dump of
# 20,000 papers.
_AFFECTED_PAPERS = """
WITH works AS MATERIALIZED (SELECT work_id FROM new_work_snapshots UNION ALL SELECT work_id FROM new_standing_receipts
                            UNION ALL SELECT work_id FROM new_work_events),
touched AS MATERIALIZED (SELECT o.citing_arxiv_id, o.cited_arxiv_id FROM citation_observations AS o
                         WHERE o.work_id IN (SELECT work_id FROM works)
                         UNION ALL
                         SELECT o.citing_arxiv_id, o.cited_arxiv_id FROM new_resolutions AS r
                         JOIN citation_observations AS o ON o.observation_id = r.observation_id)
SELECT arxiv_id FROM new_paper_snapshots
UNION SELECT cited_arxiv_id FROM new_citation_observations WHERE cited_arxiv_id IS NOT NULL
UNION SELECT citing_arxiv_id FROM new_citation_observations
UNION SELECT o.cited_arxiv_id FROM new_paper_snapshots AS p JOIN citation_observations AS o
      ON o.citing_arxiv_id = p.arxiv_id WHERE o.cited_arxiv_id IS NOT NULL
UNION SELECT o.citing_arxiv_id FROM new_paper_snapshots AS p JOIN citation_observations AS o
      ON o.cited_arxiv_id = p.arxiv_id
UNION (SELECT citing_arxiv_id FROM touched GROUP BY 1)
UNION (SELECT cited_arxiv_id FROM touched WHERE cited_arxiv_id IS NOT NULL GROUP BY 1)
UNION SELECT arxiv_id FROM new_external_measurements
"""


_ALL_PAPERS_STAGED = """
SELECT arxiv_id FROM new_paper_snapshots
UNION SELECT cited_arxiv_id FROM new_citation_observations WHERE cited_arxiv_id IS NOT NULL
UNION SELECT arxiv_id FROM new_external_measurements
"""


async def append_changes(conn: asyncpg.Connection, added: str = "new_") -> None:
    """Append this import's changes to the change log, set-based, and announce the newest position.

    `added` names the tables holding what the import added: new_* (copies of what each insert added),
    or stage_* when every staged row is known to be new (a bulk load into empty tables).
    """
    await conn.execute("SELECT pg_advisory_xact_lock($1)", CHANGE_LOG_LOCK)
    statements = f"""
INSERT INTO change_log (kind, arxiv_id, observation_id, committed_at)
SELECT 'citation_added', cited_arxiv_id, observation_id, clock_timestamp()
FROM (SELECT * FROM new_citation_observations WHERE cited_arxiv_id IS NOT NULL
      ORDER BY cited_arxiv_id, citing_arxiv_id, reference_index, observation_id) AS o;

INSERT INTO change_log (kind, arxiv_id, observation_id, work_id, event_source, event_type, event_observed_at,
                        event_reported_at, event_notice_doi, committed_at)
SELECT 'standing_changed', x.citing_arxiv_id, x.observation_id, x.work_id, x.source, x.event_type, x.observed_at,
       x.reported_at, x.notice_doi, clock_timestamp()
FROM (  -- one row per (event, citing paper), on that paper's first reference to the work (a join, not a loop)
    SELECT DISTINCT ON (e.work_id, e.source, e.event_type, e.observed_at, c.citing_arxiv_id)
           c.citing_arxiv_id, c.observation_id, e.work_id, e.source, e.event_type, e.observed_at, e.reported_at,
           e.notice_doi
    FROM new_work_events AS e JOIN citation_observations AS c ON c.work_id = e.work_id
    ORDER BY e.work_id, e.source, e.event_type, e.observed_at, c.citing_arxiv_id, c.reference_index, c.observation_id
) AS x
ORDER BY x.observed_at, x.work_id, x.source, x.event_type, x.citing_arxiv_id;

INSERT INTO change_log (kind, arxiv_id, committed_at)
SELECT 'record_changed', a.arxiv_id, clock_timestamp() FROM ({{affected}}) AS a ORDER BY a.arxiv_id;

WITH gone AS (DELETE FROM change_log WHERE committed_at < now() - make_interval(days => {RETENTION_DAYS})
              RETURNING position)
UPDATE change_log_pruned SET up_to = greatest(up_to, (SELECT max(position) FROM gone))
WHERE EXISTS (SELECT 1 FROM gone);

SELECT pg_notify('pith_changes', coalesce((SELECT max(position) FROM change_log), 0)::text);
"""
    if added == "new_":
        await conn.execute(statements.replace("{affected}", _AFFECTED_PAPERS))
    else:  # everything is new: every paper with a fact has a new record, no need to look further
        await conn.execute(statements.replace("{affected}", _ALL_PAPERS_STAGED).replace("new_", added))


async def append_ends(conn: asyncpg.Connection) -> None:
    """standingChanged rows for the ends this import added (one per end and citing paper, on that paper's first
    reference to the work), and recordChanged rows for those papers; then the newest position is announced."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", CHANGE_LOG_LOCK)  # (held already when facts were added)
    await conn.execute("""
INSERT INTO change_log (kind, arxiv_id, observation_id, work_id, event_source, event_type, event_observed_at,
                        event_reported_at, event_notice_doi, event_ended_at, committed_at)
SELECT 'standing_changed', x.citing_arxiv_id, x.observation_id, x.work_id, x.source, x.event_type, x.observed_at,
       x.reported_at, x.notice_doi, x.ended_at, clock_timestamp()
FROM (SELECT DISTINCT ON (n.work_id, n.source, n.event_type, n.observed_at, c.citing_arxiv_id)
             c.citing_arxiv_id, c.observation_id, n.work_id, n.source, n.event_type, n.observed_at, e.reported_at,
             e.notice_doi, n.ended_at
      FROM new_work_event_ends AS n
      JOIN work_events AS e USING (work_id, source, event_type, observed_at)
      JOIN citation_observations AS c ON c.work_id = n.work_id
      ORDER BY n.work_id, n.source, n.event_type, n.observed_at, c.citing_arxiv_id, c.reference_index,
               c.observation_id) AS x
ORDER BY x.ended_at, x.work_id, x.source, x.event_type, x.citing_arxiv_id;

INSERT INTO change_log (kind, arxiv_id, committed_at)
SELECT 'record_changed', p.arxiv_id, clock_timestamp()
FROM (SELECT o.citing_arxiv_id AS arxiv_id FROM new_work_event_ends AS n JOIN citation_observations AS o USING (work_id)
      UNION SELECT o.cited_arxiv_id FROM new_work_event_ends AS n JOIN citation_observations AS o USING (work_id)
      WHERE o.cited_arxiv_id IS NOT NULL) AS p
ORDER BY p.arxiv_id;

UPDATE data_version SET version = version + 1;
SELECT pg_notify('pith_changes', coalesce((SELECT max(position) FROM change_log), 0)::text);
""")


def _describe_conflict(t: Table, row: Any) -> str:
    key = ", ".join(f"{c}={_fmt(row[c])}" for c in t.key)
    ours = ", ".join(f"{c}={_fmt(row[c])}" for c in t.values)
    theirs = ", ".join(f"{c}={_fmt(row['other_' + c])}" for c in t.values)
    return (f"conflicting {t.name} fact for {key}: {ours} (at {row['origin']}) "
            f"but {theirs} (in {row['other_origin']})")


def _fmt(value: Any) -> str:
    return value.isoformat() if hasattr(value, "isoformat") else repr(value) if isinstance(value, str) else str(value)
