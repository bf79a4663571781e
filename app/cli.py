"""The pith-graph command: serve, migrate, load, export."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import asyncpg

from app.db.pool import Session, connect
from app.limits import MAX_WS_MESSAGE_BYTES, WORKER_HEALTHCHECK_SECONDS
from app.settings import Settings, redact_url

log = logging.getLogger("pith")

GRACEFUL_SHUTDOWN_SECONDS = 5


def _database_url(settings: Settings) -> str:
    """The configured server, or the embedded one started in the data directory."""
    if settings.database_url:
        return settings.database_url
    from app.db import embedded

    return embedded.start(settings.data_dir)


class MigrationsBehind(Exception):
    """The database's schema is older than this release's: every command but migrate and serve refuses it."""

    def __init__(self, missing: list[str]) -> None:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        super().__init__(f"the database's migrations are behind this release ({len(missing)} pending: {shown}); "
                         "run `pith-graph migrate` first (or start `pith-graph serve`, which applies them); "
                         "nothing was done")
        self.missing = missing


def _ready_database(settings: Settings) -> str:
    """The database a command other than migrate and serve works on, refused when its migrations are
    behind (a command writes nothing into a schema it was not written for). The embedded server is
    this command's own: it is brought up to date as `serve` would."""
    dsn = _database_url(settings)
    if not settings.database_url:
        asyncio.run(_migrate(dsn))
        return dsn

    async def behind() -> list[str]:
        from app.db.migrate import pending

        conn = await connect(dsn)
        try:
            return await pending(conn)
        finally:
            await conn.close()

    missing = asyncio.run(behind())
    if missing:
        raise MigrationsBehind(missing)
    return dsn


async def _migrate(dsn: str) -> list[str]:
    """Apply pending migrations; with none pending, write nothing (a read-only role can serve)."""
    from app.db.migrate import migrate, pending

    conn = await connect(dsn)
    try:
        if not await pending(conn):
            return []
        notes: list[str] = []
        applied = await migrate(conn, notes)
        for note in notes:  # what a migration changed in stored data
            print(f"migrate: {note}", file=sys.stderr)
        return applied
    finally:
        await conn.close()


async def _load(dsn: str, paths: list[str], quiet: bool = False) -> int:
    from app.ingest.store import ImportRejected
    from app.ingest.load import load_file

    import gc

    # Documents are trees of dicts and lists without cycles: the collector's default pace (every 700
    # allocations) walks them again and again for nothing, a fifth of the time a large record takes to read.
    gc.set_threshold(100_000, 50, 100)
    conn = await connect(dsn, server_settings={"application_name": "pith-graph load"})
    failed = 0
    try:
        for path in paths:
            try:
                await load_file(conn, path, progress=None if quiet else sys.stderr)
            except ImportRejected as exc:
                failed += 1
                print(f"rejected: {exc} (nothing of this file was written)", file=sys.stderr)
            except asyncpg.InsufficientPrivilegeError as exc:
                failed += 1
                print(f"rejected: {path}: the database role may not write ({exc}); load with the owner role, "
                      "not pith_reader (nothing of this file was written)", file=sys.stderr)
    finally:
        await conn.close()
    return failed


async def _load_sample(dsn: str) -> None:
    from app.ingest.sample import load_sample

    conn = await connect(dsn, server_settings={"application_name": "pith-graph load"})
    try:
        await load_sample(conn)
    finally:
        await conn.close()


async def _is_empty(dsn: str) -> bool:
    conn = await connect(dsn)
    try:
        return not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM paper_snapshots)")
    finally:
        await conn.close()


def _metrics_folder() -> None:
    """Prometheus' multiprocess mode for every worker: a fresh folder, set before the client is imported
    (it picks its value store then), removed at exit. One given in PROMETHEUS_MULTIPROC_DIR is used
    as it is (it must be empty when the server starts)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="pith-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
    atexit.register(shutil.rmtree, folder, ignore_errors=True)


def _heavy_locks_folder() -> None:
    """The lock files through which a server's workers share its heavy slots (app.governor.SharedSlots):
    a folder of this supervisor's own, removed when it exits."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="pith-heavy-")
    os.environ["PITH_HEAVY_LOCKS"] = folder
    atexit.register(shutil.rmtree, folder, ignore_errors=True)


def concurrency_limit(settings: Settings) -> int:
    """Connections a worker serves at once: what its file descriptors allow, less those its pools, the change
    listener and the runtime keep (past it uvicorn answers 503 with Retry-After instead of failing accept)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65_536
    reserved = 64 + 2 * settings.pool_max * (1 + len(settings.replica_urls))
    return max(32, int(soft) - reserved)


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    _metrics_folder()
    import uvicorn

    from app.main import create_app
    from app.protocol import BoundedHttpToolsProtocol, StoppingWebSockets

    # From the first moment: as PID 1 (a container) a signal with no handler is ignored, so SIGTERM
    # during start-up (embedded server, migrations, sample) would do nothing. Exiting normally lets the
    # embedded server's exit handler stop PostgreSQL; uvicorn re-raises SIGTERM after its shutdown.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    dsn = _database_url(settings)
    # The migrations' lock is a session's: on the direct connection when the pool goes through a pooler.
    applied = asyncio.run(_migrate(settings.listen_database_url or dsn))
    if applied:
        log.info("applied migrations: %s", ", ".join(applied))
    if not settings.database_url and asyncio.run(_is_empty(dsn)):
        asyncio.run(_load_sample(dsn))
        log.info("loaded the bundled sample records")
    try:
        app = create_app(settings, dsn=dsn)
    except ValueError as exc:  # a configuration that cannot work: say why, before serving anything
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log.info("serving on http://%s:%s/graphql (GraphiQL in a browser)", settings.host, settings.port)
    if args.workers > 1:
        # Each worker process builds its own app (and pool) from the environment.
        os.environ["DATABASE_URL"] = dsn
        os.environ["PITH_WORKERS"] = str(args.workers)
        _heavy_locks_folder()
        target: object = "app.main:create_app"
        # This process only supervises: the gauges it made importing the app are no worker's.
        from app import metrics

        metrics.process_exits()
    else:
        target = app
    # log_config=None: uvicorn's loggers go through ours, so JSON logs stay JSON. Its INFO lines are left
    # out but one: a worker replaced by the supervisor, told as a warning with why (app.logs.WorkerReplaced).
    uvicorn.run(target, factory=args.workers > 1, host=settings.host, port=settings.port, workers=args.workers,
                log_config=None, log_level="info", proxy_headers=False, access_log=False,
                # Connections and requests at once, per worker, past which uvicorn answers 503 with
                # Retry-After (app.protocol) before the process runs out of file descriptors.
                limit_concurrency=concurrency_limit(settings),
                # The supervisor replaces a worker that does not answer its health check in this long: longer
                # than any request's deadline, so a worker busy with its work is not killed with it.
                timeout_worker_healthcheck=WORKER_HEALTHCHECK_SECONDS,
                # httptools with a bound on the request line and headers (431 past app.limits.MAX_HEADER_BYTES).
                http=BoundedHttpToolsProtocol,
                # SIGTERM: subscribers are told the cursor to resume from before their sockets close.
                ws=StoppingWebSockets,
                # Longer than the usual load balancer idle timeout (60 s), so the balancer closes first.
                timeout_keep_alive=75,
                # Subscription messages are small JSON: compressing each frame costs more than it saves.
                ws_per_message_deflate=False,
                # A message at most an HTTP body and its envelope (uvicorn's default is 16 MiB).
                ws_max_size=MAX_WS_MESSAGE_BYTES,
                # SIGTERM: requests still running after this are cancelled (their sessions roll back and
                # release), then the pool closes; the process is gone well within 10 s.
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS)
    return 0


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    applied = asyncio.run(_migrate(_database_url(settings)))
    print("applied: " + (", ".join(applied) if applied else "nothing (up to date)"))
    return 0


def cmd_load(args: argparse.Namespace, settings: Settings) -> int:
    if not args.paths and not args.sample:
        print("error: name the files to load (PATH..., - for standard input), or --sample", file=sys.stderr)
        return 2
    dsn = _ready_database(settings)
    if args.sample:
        asyncio.run(_load_sample(dsn))
        print("loaded the bundled sample (its records and sources' files; app/sample/sources/README.md says what "
              "they are): try { paper(arxivId: \"2402.15627\") { title inbound { totalCount } } }")
    failed = asyncio.run(_load(dsn, args.paths)) if args.paths else 0
    return 1 if failed else 0


def cmd_sample_citation(args: argparse.Namespace, settings: Settings) -> int:
    from app.ingest.store import ImportRejected
    from app.timeparse import BadInput, now_as_of, parse_arxiv_id

    try:
        cited = parse_arxiv_id(args.arxiv_id)
        citing = parse_arxiv_id(args.citing) if args.citing else None
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    dsn = _ready_database(settings)

    async def run():  # noqa: ANN202
        from app.ingest.sample_citation import add_sample_citation

        conn = await connect(dsn, server_settings={"application_name": "pith-graph sample-citation"})
        try:
            return await add_sample_citation(conn, cited, now_as_of(), citing)
        finally:
            await conn.close()

    try:
        made = asyncio.run(run())
    except ImportRejected as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{made.citing} now cites {made.cited} (observation {made.observation_id}); subscribers of "
          f'citationAdded(arxivId: "{made.cited}") receive it')
    return 0


def cmd_import(args: argparse.Namespace, settings: Settings) -> int:
    from app.ingest.sources import instant
    from app.timeparse import BadInput

    try:
        at = instant(args.observed_at)
    except BadInput as exc:
        print(f"error: --observed-at: {exc}", file=sys.stderr)
        return 2
    if args.partial and args.source not in ("retraction-watch", "opencitations"):
        print("error: --partial is for retraction-watch and opencitations (a file that is not the whole database "
              "or index)", file=sys.stderr)
        return 2
    dsn = _ready_database(settings)
    return asyncio.run(_import(dsn, args.source, at, args.paths, args.partial))


async def _import(dsn: str, source: str, at: datetime, paths: list[str], partial: bool) -> int:
    from app.ingest.sources import Importer
    from app.ingest.store import ImportRejected

    conn = await connect(dsn, server_settings={"application_name": f"pith-graph import {source}"})
    try:
        importer = Importer(conn, source, at, partial=partial, progress=sys.stderr if sys.stderr.isatty() else None)
        summary = await importer.run(paths)
    except ImportRejected as exc:
        print(f"rejected: {exc} (nothing of this import was written)", file=sys.stderr)
        return 1
    finally:
        await conn.close()
    print(summary.line(), file=sys.stderr)
    return 0


def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    from app.timeparse import BadInput, answered_as_of, now_as_of, parse_arxiv_id

    try:
        arxiv_id = parse_arxiv_id(args.arxiv_id)
        as_of = answered_as_of(args.as_of or None, now_as_of())
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    data = asyncio.run(_export(_ready_database(settings), arxiv_id, as_of, args.uncapped))
    if data is None:
        print(f"error: no paper {arxiv_id} as of {as_of.isoformat()}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


# A command's client that is killed (or loses its network) ends its backend: PostgreSQL checks the
# socket this often while a statement runs, instead of finishing it (and holding its locks) for nobody.
CLIENT_CHECK = "; SET LOCAL client_connection_check_interval = '2s'"


def command_statement_timeout_ms() -> int:
    """A command's own bound on each statement: PITH_STATEMENT_TIMEOUT_MS when the operator sets it, else
    none (the server's and the role's settings still hold). The server's 10 s default is for requests."""
    given = os.environ.get("PITH_STATEMENT_TIMEOUT_MS", "").strip()
    return Settings.from_env().statement_timeout_ms if given else 0


def command_session(conn: asyncpg.Connection) -> Session:
    """One read-only snapshot for a command's reads (export, dump), bounded as command_statement_timeout_ms says."""
    return Session.from_connection(conn, command_statement_timeout_ms(), CLIENT_CHECK)


async def _record_bytes(session: Session, arxiv_ids: list[str], as_of: datetime,
                        uncapped: bool) -> list[bytes | None]:
    """Canonical records of several papers, read in the session's snapshot (six statements in all)."""
    from app import record
    from loaders.record import SERVED_CAPS, record_rows

    rows = await record_rows(session, arxiv_ids, as_of, caps=None if uncapped else SERVED_CAPS)
    return [None if r is None else record.canonical_bytes(record.build_record(r)) for r in rows]


async def _export(dsn: str, arxiv_id: str, as_of: datetime, uncapped: bool) -> bytes | None:
    conn = await connect(dsn, server_settings={"application_name": "pith-graph export"})
    try:
        session = command_session(conn)
        try:
            (data,) = await _record_bytes(session, [arxiv_id], as_of, uncapped)
        finally:
            await session.close()
    finally:
        await conn.close()
    return data


def cmd_synth(args: argparse.Namespace, settings: Settings) -> int:
    from app.ingest.bulk import write_synthetic

    if args.papers < 1:
        print("error: --papers must be at least 1", file=sys.stderr)
        return 2
    if args.hub_citations < 0 or (args.hub_citations and args.papers < 2):
        print("error: --hub-citations must be 0 or more, with at least 2 --papers (the hub is the first paper, "
              "cited by the papers after it)", file=sys.stderr)
        return 2
    dsn = _ready_database(settings)

    async def run() -> int:
        conn = await connect(dsn, server_settings={"application_name": "pith-graph synth"})
        try:
            held = await conn.fetchval("SELECT count(*) FROM paper_snapshots")
            if held and not args.append:
                print(f"error: the database already holds {held:,} paper snapshots; synth writes a graph of its own "
                      "(papers 1501.00001 ... and their references) and would merge into them. Use an empty "
                      "database, or --append to add the synthetic graph's facts beside what is there (facts that "
                      "contradict stored ones are refused)", file=sys.stderr)
                return 2
            result = await write_synthetic(conn, args.papers, args.seed, hub_citations=args.hub_citations)
        finally:
            await conn.close()
        print(f"synth: {result.papers} papers, {result.observations:,} observations, {result.rows:,} rows in "
              f"{result.seconds:.1f}s ({result.observations / result.seconds:,.0f} observations/s)", file=sys.stderr)
        return 0

    if asyncio.run(run()):
        return 2
    if args.ndjson:
        return cmd_dump(argparse.Namespace(path=args.ndjson, as_of=None), replace(settings, database_url=dsn))
    return 0


def cmd_dump(args: argparse.Namespace, settings: Settings) -> int:
    from app.timeparse import BadInput, answered_as_of, now_as_of

    try:
        as_of = answered_as_of(args.as_of or None, now_as_of())
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    count = asyncio.run(_dump(_ready_database(settings), args.path, as_of))
    print(f"dump: {count} records as of {as_of.isoformat()} to {args.path}", file=sys.stderr)
    return 0


DUMP_BATCH = 100  # papers per round of record statements


async def _dump(dsn: str, path: str, as_of: datetime) -> int:
    """Every paper's uncapped record, one per line: what `load` reads back. One snapshot (an import
    committing meanwhile is in all of the dump or none of it), streamed: papers are read a batch at a
    time in id order, so memory stays that of one batch at any size."""
    conn = await connect(dsn, server_settings={"application_name": "pith-graph dump"})
    count = 0
    try:
        session = command_session(conn)
        out = sys.stdout.buffer if path == "-" else open(path, "wb")
        try:
            after = ""
            while True:
                ids = [r["arxiv_id"] for r in await session.fetch(
                    "SELECT DISTINCT arxiv_id FROM paper_snapshots WHERE observed_at <= $1 AND arxiv_id > $2 "
                    "ORDER BY 1 LIMIT $3", as_of, after, DUMP_BATCH)]
                if not ids:
                    break
                for data in await _record_bytes(session, ids, as_of, uncapped=True):
                    if data is not None:
                        out.write(data + b"\n")
                        count += 1
                after = ids[-1]
        finally:
            await session.close()
            if out is not sys.stdout.buffer:
                out.close()
            else:
                out.flush()
    finally:
        await conn.close()
    return count


def cmd_graph_export(args: argparse.Namespace, settings: Settings) -> int:
    from app.timeparse import BadInput, answered_as_of, now_as_of, parse_arxiv_id

    try:
        as_of = answered_as_of(args.as_of or None, now_as_of())
        root = parse_arxiv_id(args.root) if args.root else None
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not 1 <= args.depth <= 10:
        print(f"error: --depth {args.depth} is out of range; allowed 1 to 10", file=sys.stderr)
        return 2
    if args.format == "parquet" and args.output == "-":
        print("error: parquet is written to a folder: give --output FOLDER", file=sys.stderr)
        return 2
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    try:
        return asyncio.run(_graph_export(_ready_database(settings), args, as_of, root, progress))
    except BrokenPipeError:
        return 1


async def _graph_export(dsn: str, args: argparse.Namespace, as_of: datetime, root: str | None,
                        progress: bool) -> int:
    from app import export
    from app.ingest.bulk import Progress
    from loaders.graph import Graph

    conn = await connect(dsn, server_settings={"application_name": "pith-graph graph-export"})
    try:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            graph = Graph(conn, as_of)
            directions = {"inbound": ("in",), "outbound": ("out",), "both": ("in", "out")}[args.direction]
            if root is not None and not await graph.walk(root, directions, args.depth):
                print(f"error: no paper {root} is known as of {as_of.isoformat()}", file=sys.stderr)
                return 1
            total = sum(await graph.count()) if progress else 0
            bar = Progress(sys.stderr if progress else None, total, "nodes and edges")
            out = None
            if args.format == "parquet":
                writer: export.Writer = export.ParquetWriter(args.output)
            else:
                out = sys.stdout.buffer if args.output == "-" else open(args.output, "wb")
                writer = export.writer_for(args.format, out)
            try:
                async for node in graph.nodes():
                    writer.node(node)
                    bar.update(writer.nodes, writer.nodes)
                async for edge in graph.edges():
                    writer.edge(edge)
                    bar.update(writer.nodes + writer.edges, writer.nodes + writer.edges)
                writer.close()
                bar.update(writer.nodes + writer.edges, writer.nodes + writer.edges, final=True)
            finally:
                if out is not None and out is not sys.stdout.buffer:
                    out.close()
                elif out is not None:
                    out.flush()
    finally:
        await conn.close()
    print(f"graph-export: {writer.nodes:,} nodes, {writer.edges:,} edges as of {as_of.isoformat()}"
          f" ({args.format}) to {args.output}", file=sys.stderr)
    return 0


def cmd_keys(args: argparse.Namespace, settings: Settings) -> int:
    """API keys: create (prints the secret once, alone on the last line), list, revoke."""
    return asyncio.run(_keys(_ready_database(settings), args))


async def _keys(dsn: str, args: argparse.Namespace) -> int:
    from app import governor

    conn = await connect(dsn)
    try:
        if args.action == "create":
            try:
                key_id, secret = await governor.create_key(conn, args.name, args.points_per_hour)
            except ValueError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
            print(f"created key {args.name!r} ({key_id}), {args.points_per_hour} points per hour; the secret is "
                  "shown once (send it as `Authorization: Bearer <secret>`):")
            print(secret)
        elif args.action == "list":
            rows = await governor.list_keys(conn)
            for r in rows:
                state = f"revoked {r['revoked_at']:%Y-%m-%dT%H:%M:%SZ}" if r["revoked_at"] else "active"
                print(f"{r['name']}\t{r['points_per_hour']} points/hour\t{state}\t"
                      f"created {r['created_at']:%Y-%m-%dT%H:%M:%SZ}\t{r['key_id']}")
            if not rows:
                print("no keys (create one with `pith-graph keys create --name NAME --points-per-hour N`)",
                      file=sys.stderr)
        else:
            if not await governor.revoke_key(conn, args.name):
                print(f"error: no active key named {args.name!r} (see `pith-graph keys list`)", file=sys.stderr)
                return 1
            print(f"revoked key {args.name!r}: servers refuse it within "
                  f"{governor.KEY_CACHE_SECONDS:.0f} s")
    finally:
        await conn.close()
    return 0


AS_OF_HELP = ("an instant with a time zone, e.g. 2026-08-05T04:52:00Z, or a date, 2026-08-05 (its midnight UTC); "
              "default and anything later than now: now")


def build_parser() -> argparse.ArgumentParser:
    # The options every command shares work before the command and after it (`pith-graph serve
    # --data-dir X`); SUPPRESS keeps a subcommand from overwriting what was given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--database-url", default=argparse.SUPPRESS,
                        help="PostgreSQL URL (default: $DATABASE_URL, else the embedded server)")
    common.add_argument("--data-dir", type=Path, default=argparse.SUPPRESS,
                        help="embedded server's data directory ($PITH_DATA_DIR)")
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS)
    parser = argparse.ArgumentParser(prog="pith-graph", description=__doc__, parents=[common])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_parser = sub.add_parser
    sub.add_parser = lambda *a, **k: _add_parser(*a, parents=[common], **k)  # type: ignore[method-assign]

    serve = sub.add_parser("serve", help="migrate, then serve GraphQL, GraphiQL and the HTTP pages")
    serve.add_argument("--host", help="interface to listen on ($PITH_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port ($PITH_PORT, default 8000)")
    serve.add_argument("--workers", type=int, default=None,
                       help="worker processes ($PITH_WORKERS, default 1; one per core for throughput)")
    serve.set_defaults(func=cmd_serve)

    sub.add_parser("migrate", help="apply pending SQL migrations").set_defaults(func=cmd_migrate)

    load = sub.add_parser("load", help="import v1 documents (.json, .ndjson, or - for standard input)")
    load.add_argument("paths", nargs="*", metavar="PATH")
    load.add_argument("--sample", action="store_true",
                      help="also load the bundled sample (what the embedded server starts with: its records, "
                           "then the open sources' records in app/sample/sources)")
    load.set_defaults(func=cmd_load)

    sample = sub.add_parser("sample-citation", help=(
        "import one made-up citation of a paper, as of now (to see a live event, e.g. on the bundled sample)"))
    sample.add_argument("arxiv_id", nargs="?", default="2402.15627", help="the cited paper (default 2402.15627)")
    sample.add_argument("--citing", metavar="ARXIV_ID",
                        help="the citing paper (default: a new made-up one, YYMM.9NNNN of this month)")
    sample.set_defaults(func=cmd_sample_citation)

    from app.ingest.sources import SOURCES

    source = sub.add_parser("import", help="import an open source's records: " + ", ".join(SOURCES))
    source.add_argument("source", choices=SOURCES)
    source.add_argument("paths", nargs="+", metavar="FILE", help="files (gzipped or not), or - for standard input")
    source.add_argument("--observed-at", help="when the source was looked at, e.g. 2026-08-05T00:00:00Z "
                                              "(default: now; never later than now); nothing of the import is "
                                              "visible before it")
    source.add_argument("--partial", action="store_true",
                        help="the file is an excerpt: retraction-watch, not the whole database (no receipt for the "
                             "others); opencitations, not the whole index (citations, no count of them)")
    source.set_defaults(func=cmd_import)

    export = sub.add_parser("export", help="write a paper's canonical v1 record to standard output")
    export.add_argument("arxiv_id")
    export.add_argument("--as-of", help=AS_OF_HELP)
    export.add_argument("--uncapped", action="store_true", help="itemize every observation (caps raised to fit)")
    export.set_defaults(func=cmd_export)

    synth = sub.add_parser("synth", help="generate a deterministic synthetic citation graph into the database")
    synth.add_argument("--papers", type=int, required=True)
    synth.add_argument("--seed", type=int, default=1)
    synth.add_argument("--hub-citations", type=int, default=0, metavar="N",
                       help="make the first paper a hub: later papers cite it N more times in all (arXiv's most "
                            "cited papers have 100,000 and more)")
    synth.add_argument("--ndjson", metavar="PATH", help="then also write every record as ndjson to PATH")
    synth.add_argument("--append", action="store_true",
                       help="write into a database that holds data (the synthetic facts are added beside it)")
    synth.set_defaults(func=cmd_synth)

    dump = sub.add_parser("dump", help="write every paper's uncapped v1 record as ndjson (- for standard output)")
    dump.add_argument("path", metavar="PATH")
    dump.add_argument("--as-of", help=AS_OF_HELP)
    dump.set_defaults(func=cmd_dump)

    graph = sub.add_parser("graph-export", help=(
        "write the whole graph (or a paper's neighbourhood), uncapped, for networkx, pandas or igraph"))
    graph.add_argument("--format", required=True, choices=("csv", "graphml", "ndjson", "parquet"),
                       help="csv: a zip of nodes.csv and edges.csv; parquet: a folder of nodes.parquet and "
                            "edges.parquet (pip install 'pith-graph[parquet]')")
    graph.add_argument("--output", "-o", default="-",
                       help="file (a folder for parquet); - for standard output (not for parquet)")
    graph.add_argument("--as-of", help=AS_OF_HELP)
    graph.add_argument("--root", metavar="ARXIV_ID", help="only the papers within --depth hops of this paper")
    graph.add_argument("--direction", choices=("inbound", "outbound", "both"), default="inbound",
                       help="with --root: follow citing papers, cited papers or both (default inbound)")
    graph.add_argument("--depth", type=int, default=2, help="with --root: hops, 1 to 10 (default 2)")
    graph.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="a progress bar on standard error (default: when it is a terminal)")
    graph.set_defaults(func=cmd_graph_export)

    keys = sub.add_parser("keys", help="API keys: each client's budget of points per hour")
    actions = keys.add_subparsers(dest="action", required=True)
    _add_action = actions.add_parser
    actions.add_parser = lambda *a, **k: _add_action(*a, parents=[common], **k)  # type: ignore[method-assign]
    create = actions.add_parser("create", help="create a key; its secret is printed once, alone on the last line")
    create.add_argument("--name", required=True, help="a unique name (shown in logs and `keys list`)")
    create.add_argument("--points-per-hour", type=int, required=True,
                        help="the key's budget (a point is 100 work units; a lookup costs 1)")
    actions.add_parser("list", help="every key with its budget and state (never the secret)")
    revoke = actions.add_parser("revoke", help="revoke a key by name")
    revoke.add_argument("--name", required=True)
    keys.set_defaults(func=cmd_keys)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()
    except ValueError as exc:  # settings that cannot work: say which and why before doing anything
        for line in str(exc).splitlines():
            print(f"error: {line}", file=sys.stderr)
        return 2
    if getattr(args, "workers", 0) is None:
        args.workers = int(os.environ.get("PITH_WORKERS") or 1)  # checked by Settings.from_env
    if getattr(args, "workers", 1) < 1:
        print(f"error: --workers: {args.workers} is out of range; give a whole number from 1 up", file=sys.stderr)
        return 2
    overrides = {
        "database_url": getattr(args, "database_url", None),
        "data_dir": getattr(args, "data_dir", None),
        "host": getattr(args, "host", None),
        "port": getattr(args, "port", None),
    }
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    from app.logs import configure_logging

    configure_logging(settings.log_format, verbose=getattr(args, "verbose", False))
    if not settings.access_log:
        logging.getLogger("pith.access").setLevel(logging.WARNING)
    try:
        return args.func(args, settings)
    except MigrationsBehind as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except asyncpg.InsufficientPrivilegeError as exc:
        print(f"error: the database role may not do this ({exc}); migrations and loads need the owner role "
              "(the API itself can run as a member of pith_reader)", file=sys.stderr)
        return 1
    except (OSError, asyncpg.PostgresError) as exc:
        message = str(exc).replace(settings.database_url or "\0", redact_url(settings.database_url))
        print(f"error: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
