"""The Query root and the strawberry.Schema."""

from __future__ import annotations

import asyncio
import functools
import logging
from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

import strawberry
from graphql import GraphQLError
from strawberry.extensions import MaxAliasesLimiter, QueryDepthLimiter
from strawberry.schema.config import StrawberryConfig
from strawberry.types import Info

from app.limits import (MAX_ALIASES, MAX_DEPTH, MAX_FIRST, MAX_IDS, argument_default, out_of_range,
                        MAX_NEIGHBOURHOOD_PAPERS, MAX_TOKENS)
from app.errors import UserInputError
from app.timeparse import BadInput, parse_arxiv_id, parse_search_words
from app.types.browse import PaperConnection, PaperEdge, PaperFilter, PaperOrder, WorkConnection, WorkEdge, WorkFilter
from app.types.enums import ChangeKind, Direction
from app.types.diff import RecordChange, RecordDiff
from app.types.node import GlobalId, Node, parse_global_id
from app.types.graph import CitationObservation, Paper, Work
from app.types.pageinfo import PageInfo
from app.types.paging import check_first
from app.types.record import CitationRecord
from app.types.scalars import SCALARS

log = logging.getLogger("pith.graphql")


SEARCH_UNITS = 800  # ranking titles by full text: the statement's work beyond its rows (bench/calibrate.py)

ArxivIdArg = Annotated[str, strawberry.argument(description="arXiv id without version, e.g. 2402.15627 or hep-th/9901001.")]
AsOfArg = Annotated[datetime | None, strawberry.argument(
    description="The instant to answer as of (default: now, whole seconds). Applies to everything below this field.")]


# The paging arguments of the top-level lists (browsePapers, works, searchPapers).
ListFirstArg = Annotated[int | None, strawberry.argument(description="How many, 1 to 100 (default 100).")]
ListAfterArg = Annotated[str | None, strawberry.argument(description="endCursor of the previous page.")]


def _arxiv_id(value: str, argument: str = "arxivId") -> str:
    try:
        return parse_arxiv_id(value)
    except BadInput as exc:
        raise UserInputError(f"{argument}: {exc}", argument=argument) from None


def _observation_key(value: object) -> tuple[UUID, datetime | None]:
    """The observation an `observation(id:)` names, and the instant its global id names (None: none)."""
    try:
        return UUID(str(value)), None
    except ValueError:
        pass
    try:
        found = parse_global_id(value)
    except BadInput:
        found = None
    if found is None or found.kind != "CitationObservation" or not isinstance(found.key, UUID):
        raise UserInputError(f"id: {value!r} is not an observation id; expected a CitationObservation's global id "
                             "or its observationId (a UUID)", argument="id")
    return found.key, found.pinned


async def _nodes(info: Info, ids: list, argument: str) -> list[Node | None]:
    """Objects by global id, each as of the instant its id names (now when it names none): one batched
    statement per kind and instant, all dispatched together."""
    parsed = []
    for i, value in enumerate(ids):
        try:
            parsed.append(parse_global_id(value))
        except BadInput as exc:
            where = argument if argument == "id" else f"{argument}[{i}]"
            raise UserInputError(f"{where}: {exc}", argument=argument) from None

    async def one(found: GlobalId) -> Node | None:
        at = info.context.instant(found.pinned)
        pinned = info.context.pinned(at)
        loaders = info.context.loaders(at)
        if found.kind == "Paper":
            paper = await loaders.paper.load(found.key)
            return Paper.of(paper, at, pinned) if paper is not None else None
        if found.kind == "Work":
            work = await loaders.work.load(found.key)
            return Work.of_snapshot(work, at, pinned) if work is not None else None
        obs = await loaders.observation.load(found.key)
        if obs is None:
            return None
        if found.kind == "CitationObservation":
            return CitationObservation.of(obs, at, pinned)
        return Work.of(obs, at, pinned)

    return list(await asyncio.gather(*(one(found) for found in parsed)))


@strawberry.type(description=(
    "A bounded multi-hop walk from one paper: the papers reached and the edges followed. Each hop costs one "
    "batched statement per direction (a few when its frontier is larger than the walk has room left for)."))
class Neighbourhood:
    papers: list[Paper] = strawberry.field(description="Papers reached, the start first, then in order of discovery.")
    edges: list[CitationObservation] = strawberry.field(description="Edges followed, each once.")
    truncated: bool = strawberry.field(description=(
        "True when perPaper or the caps (10,000 papers, 10,000 edges) cut the walk."))


async def _walk(info: Info, root: str, direction: Direction, depth: int, per_paper: int,
                as_of: datetime, pinned: bool) -> Neighbourhood | None:
    from loaders.base import in_stretches
    from loaders.walk import walk

    found = await walk(info.context.loaders(as_of), root, DIRECTIONS[direction], depth, per_paper,
                       MAX_NEIGHBOURHOOD_PAPERS)
    if found is None:
        return None
    # (10,000 papers and 10,000 edges: in stretches, the event loop free between them)
    return Neighbourhood(papers=await in_stretches(found.papers.values(), lambda p: Paper.of(p, as_of, pinned)),
                         edges=await in_stretches(found.edges.values(),
                                                  lambda o: CitationObservation.of(o, as_of, pinned)),
                         truncated=found.truncated)


DIRECTIONS = {Direction.INBOUND: ("in",), Direction.OUTBOUND: ("out",), Direction.BOTH: ("in", "out")}


@strawberry.type(description="A title-search match.")
class SearchEdge:
    cursor: str = strawberry.field(description="Opaque cursor of this match; pass it as `after` to continue after it.")
    node: Paper = strawberry.field(description="The paper, as of the instant.")
    score: float = strawberry.field(description="Full-text rank of the title against the words (higher is better).")


@strawberry.type(description="A page of title-search matches, best first.")
class SearchConnection:
    edges: list[SearchEdge] = strawberry.field(description="The matches of this page, best first.")
    nodes: list[Paper] = strawberry.field(description="The papers of this page (a shortcut for edges { node }).")
    page_info: PageInfo = strawberry.field(description="Whether more matches follow, and where this page ends.")


@strawberry.type(description=(
    "The asking client's budget (GitHub's rateLimit): points per clock hour, charged before an operation runs "
    "(a point per 100 work units, at least 1) and settled to the work it did."))
class RateLimit:
    limit: int | None = strawberry.field(description="Points per hour; null when this client has no budget.")
    cost: int = strawberry.field(description="Points this operation was charged.")
    remaining: int | None = strawberry.field(description="Points left this hour (after this operation's charge).")
    reset_at: datetime | None = strawberry.field(description="When the budget is whole again (the hour's end).")
    used: int | None = strawberry.field(description="Points used this hour.")


@strawberry.type(description="Ask who cites a paper, what it cites, how each reference resolved, and its standing.")
class Query:
    @strawberry.field(description="The asking client's budget, from the same accounting that admits operations.")
    def rate_limit(self, info: Info) -> RateLimit:
        context = info.context
        ticket = getattr(context, "ticket", None)
        governor = getattr(context, "governor", None)
        status = governor.status(getattr(context, "client", None)) if governor is not None else None
        cost = ticket.points if ticket is not None else 0
        if status is None:
            return RateLimit(limit=None, cost=cost, remaining=None, reset_at=None, used=None)
        return RateLimit(limit=status.limit, cost=cost, remaining=status.remaining, reset_at=status.reset_at,
                         used=status.used)

    @strawberry.field(description=(
        "The change-log position this operation read at: every import committed before it is in this answer, "
        "none after it. Pass it as `after` to citationAdded, standingChanged or recordChanged to receive "
        "exactly what was committed after this read (across server restarts too, within the log's retention)."))
    async def change_cursor(self, info: Info) -> str:
        from app.live import encode_cursor
        from loaders.live import change_position

        return encode_cursor(await change_position(info.context.session))

    @strawberry.field(description="One paper as of an instant; null when it has no snapshot by then.")
    async def paper(self, info: Info, arxiv_id: ArxivIdArg, as_of: AsOfArg = None) -> Paper | None:
        at = info.context.instant(as_of)
        found = await info.context.loaders(at).paper.load(_arxiv_id(arxiv_id))
        return Paper.of(found, at, info.context.pinned(at)) if found is not None else None

    @strawberry.field(description="Up to 100 papers in one call, in request order; null where unknown.")
    async def papers(
        self, info: Info,
        arxiv_ids: Annotated[list[str], strawberry.argument(description="1 to 100 arXiv ids.")],
        as_of: AsOfArg = None,
    ) -> list[Paper | None]:
        if not 1 <= len(arxiv_ids) <= MAX_IDS:
            raise UserInputError(f"arxivIds: {len(arxiv_ids)} ids given; give 1 to {MAX_IDS}", argument="arxivIds")
        at = info.context.instant(as_of)
        ids = [_arxiv_id(a, "arxivIds") for a in arxiv_ids]
        found = await info.context.loaders(at).paper.load_many(ids)
        return [Paper.of(p, at, info.context.pinned(at)) if p is not None else None for p in found]

    @strawberry.field(description="One citation observation by id; null when not visible at the instant.")
    async def observation(self, info: Info, id: Annotated[strawberry.ID, strawberry.argument(
                              description="The observation's global id, or its UUID (observationId).")],
                          as_of: AsOfArg = None) -> CitationObservation | None:
        key, named = _observation_key(id)
        # An explicit asOf wins; else the instant the global id names; else now.
        at = info.context.instant(as_of if as_of is not None else named)
        found = await info.context.loaders(at).observation.load(key)
        return CitationObservation.of(found, at, info.context.pinned(at)) if found is not None else None

    @strawberry.field(description=(
        "Any object with a global id (Paper, CitationObservation, Work), as of the instant the id names (an id "
        "read under a pinned asOf names it; one read as of now names none: now); null when unknown then."))
    async def node(self, info: Info, id: Annotated[strawberry.ID, strawberry.argument(description="A global id.")],
                   ) -> Node | None:
        (found,) = await _nodes(info, [id], "id")
        return found

    @strawberry.field(description=(
        "Up to 100 objects by global id, each as of the instant its id names, in request order; null where unknown."))
    async def nodes(self, info: Info,
                    ids: Annotated[list[strawberry.ID], strawberry.argument(description="1 to 100 global ids.")],
                    ) -> list[Node | None]:
        if not 1 <= len(ids) <= MAX_IDS:
            raise UserInputError(f"ids: {len(ids)} ids given; give 1 to {MAX_IDS}", argument="ids")
        return await _nodes(info, ids, "ids")

    @strawberry.field(description=(
        "The work a DOI names, as of the instant (case-insensitive; `https://doi.org/` and `doi:` forms "
        "accepted): the work described latest, of those with the DOI. Null when no work has it by then."))
    async def work(self, info: Info, doi: Annotated[str, strawberry.argument(description="A DOI, e.g. 10.1038/nature12373.")],
                   as_of: AsOfArg = None) -> Work | None:
        from app.ingest.doi import normalize_doi

        key = normalize_doi(doi)
        if key is None:
            shown = doi if len(doi) <= 60 else doi[:60] + "..."
            raise UserInputError(f"doi: {shown!r} is not a DOI; expected 10.<registrant>/<suffix>, e.g. "
                                 "10.1038/nature12373 (a https://doi.org/ or doi: prefix is fine)", argument="doi")
        at = info.context.instant(as_of)
        found = await info.context.loaders(at).work_by_doi.load(key)
        return Work.of_snapshot(found, at, info.context.pinned(at)) if found is not None else None

    @strawberry.field(description="The canonical v1 record of a paper; null when it has no snapshot by asOf.")
    async def citation_record(self, info: Info, arxiv_id: ArxivIdArg, as_of: AsOfArg = None) -> CitationRecord | None:
        at = info.context.instant(as_of)
        return CitationRecord.of(await info.context.loaders(at).record.load(_arxiv_id(arxiv_id)))

    @strawberry.field(description=(
        "What changed in a paper's v1 record between two instants: a JSON Patch and the typed changes behind it. "
        "Null when the paper has no snapshot at `to`."))
    async def record_diff(
        self, info: Info, arxiv_id: ArxivIdArg,
        from_: Annotated[datetime, strawberry.argument(name="from", description="The earlier instant.")],
        to: Annotated[datetime, strawberry.argument(description="The later instant (not before `from`).")],
        max_changes: Annotated[int, strawberry.argument(description=(
            "At most this many changes, the oldest first (1 to 10,000); `changesTruncated` says when more "
            "followed. Priced per change."))] = argument_default("maxChanges"),
        kinds: Annotated[list[ChangeKind] | None, strawberry.argument(description=(
            "Only changes of these kinds (the patch is the whole record's either way): "
            "[STANDING_EVENT] lists the retractions and corrections alone."))] = None,
    ) -> RecordDiff | None:
        from app import record
        from app.jsonpatch import diff
        from loaders.base import charge, in_stretches
        from loaders.changes import record_changes

        if to < from_:
            raise UserInputError(f"to: {record.as_of_text(to)} is before from ({record.as_of_text(from_)}); give "
                                 "to >= from", argument="to")
        paper = _arxiv_id(arxiv_id)
        context = info.context
        from_, to = context.instant(from_), context.instant(to)  # the future is read as of now
        before, after = await asyncio.gather(context.loaders(from_).record.load(paper),
                                             context.loaders(to).record.load(paper))
        if after is None:
            return None
        new = record.build_record(after)
        old = record.build_record(before) if before is not None else None
        patch = [{"op": "add", "path": "", "value": new}] if old is None else diff(old, new)
        refused = out_of_range("maxChanges", max_changes)
        if refused is not None:
            raise UserInputError(refused, argument="maxChanges")
        changes = await record_changes(context.session, paper, from_, to, max_changes + 1,
                                       [k.value for k in kinds] if kinds is not None else None)
        # The changes statement scans every observation of the paper (and their facts), whatever it returns.
        charge(context.session, 2 * (after.counts.inbound + after.counts.outbound))
        built = await in_stretches(changes[:max_changes], lambda change: RecordChange.of(change, to))
        return RecordDiff(from_=from_, to=to, from_context_digest=old["context_digest"] if old else None,
                          to_context_digest=new["context_digest"], patch=patch, changes=built,
                          changes_truncated=len(changes) > max_changes)

    @strawberry.field(description=(
        "Papers within `depth` hops (1 to 3), following at most `perPaper` edges (1 to 100) of each paper in the "
        "record's order, at most 10,000 papers and 10,000 edges."))
    async def neighbourhood(
        self, info: Info, arxiv_id: ArxivIdArg,
        direction: Annotated[Direction, strawberry.argument(
            description="INBOUND follows citing papers, OUTBOUND cited papers, BOTH both.")] = Direction.INBOUND,
        depth: Annotated[int, strawberry.argument(description="Hops, 1 to 3.")] = argument_default("depth"),
        per_paper: Annotated[int, strawberry.argument(
            description="Edges followed per paper, 1 to 100.")] = argument_default("perPaper"),
        as_of: AsOfArg = None,
    ) -> Neighbourhood | None:
        for name, value in (("depth", depth), ("perPaper", per_paper)):
            refused = out_of_range(name, value)
            if refused is not None:
                raise UserInputError(refused, argument=name)
        at = info.context.instant(as_of)
        return await _walk(info, _arxiv_id(arxiv_id), direction, depth, per_paper, at, info.context.pinned(at))

    @strawberry.field(description=(
        "Every paper known at the instant, filtered and ordered, page by page (keyset: a page costs the same "
        "wherever it starts). Each paper once, as of the instant."))
    async def browse_papers(
        self, info: Info,
        filter: Annotated[PaperFilter | None, strawberry.argument(description="Which papers (default: all).")] = None,
        order_by: Annotated[PaperOrder, strawberry.argument(description="The order.")] = PaperOrder.ARXIV_ID,
        first: ListFirstArg = None,
        after: ListAfterArg = None,
        as_of: AsOfArg = None,
    ) -> PaperConnection:
        from app import cursors
        from loaders.browse import browse_papers, sort_key

        size = check_first(first if first is not None else MAX_FIRST)
        order = order_by.value
        key = cursors.decode_browse(order, after, "browsePapers")
        f = filter or PaperFilter()
        _name(f.category, "filter.category", 64, "cs.LG")
        if f.submitted_from is not None and f.submitted_to is not None and f.submitted_to < f.submitted_from:
            raise UserInputError("filter.submittedTo: is before submittedFrom; give submittedTo >= submittedFrom",
                                 argument="filter")
        at = info.context.instant(as_of)
        page = await browse_papers(info.context.session, at, size, order, f.category, f.submitted_from,
                                   f.submitted_to, f.cites_retracted, key)
        loaders = info.context.loaders(at)
        edges = []
        for p, inbound in page.papers:
            loaders.paper.prime(p.arxiv_id, p)
            edges.append(PaperEdge(cursor=cursors.encode_browse(order, sort_key(order, p, inbound)),
                                   node=Paper.of(p, at, info.context.pinned(at)), inbound_count=inbound))
        return PaperConnection(edges=edges, nodes=[e.node for e in edges], page_info=_page_info(edges, page.more, key))

    @strawberry.field(description=(
        "Every work known at the instant (its latest snapshot), by work id, filtered by standing, page by page "
        "(keyset)."))
    async def works(
        self, info: Info,
        filter: Annotated[WorkFilter | None, strawberry.argument(description="Which works (default: all).")] = None,
        first: ListFirstArg = None,
        after: ListAfterArg = None,
        as_of: AsOfArg = None,
    ) -> WorkConnection:
        from app import cursors
        from loaders.browse import browse_works

        size = check_first(first if first is not None else MAX_FIRST)
        key = cursors.decode_browse("works", after, "works")
        f = filter or WorkFilter()
        _name(f.source, "filter.source", 200, "retraction_watch")
        at = info.context.instant(as_of)
        page = await browse_works(info.context.session, at, size, f.retracted,
                                  f.event_type.value if f.event_type is not None else None, f.source,
                                  key[0] if key else None)
        edges = [WorkEdge(cursor=cursors.encode_browse("works", [str(w.work_id)]),
                          node=Work.of_snapshot(w, at, info.context.pinned(at))) for w in page.works]
        return WorkConnection(edges=edges, nodes=[e.node for e in edges], page_info=_page_info(edges, page.more, key))

    @strawberry.field(description=(
        "Full-text search over titles as of the instant, best match first, page by page. Null (with an error) "
        "when the arguments are refused: the rest of the response stays."))
    async def search_papers(
        self, info: Info,
        query: Annotated[str, strawberry.argument(description="Words; quotes and - work as in web search.")],
        first: Annotated[int, strawberry.argument(description="How many, 1 to 100.")] = 10,
        after: ListAfterArg = None,
        as_of: AsOfArg = None,
    ) -> SearchConnection | None:
        from app import cursors
        from loaders.base import charge
        from loaders.papers import search_page

        check_first(first)
        try:
            query = parse_search_words(query)
        except BadInput as exc:
            raise UserInputError(f"query: {exc}", argument="query") from None
        key = cursors.decode_search(after)
        at = info.context.instant(as_of)
        found = await search_page(info.context.session, query, at, first + 1, key)
        charge(info.context.session, SEARCH_UNITS)
        loaders = info.context.loaders(at)
        shown = found[:first]
        for p, _ in shown:
            loaders.paper.prime(p.arxiv_id, p)
        edges = [SearchEdge(cursor=cursors.encode_search(rank, p.arxiv_id), node=Paper.of(p, at, info.context.pinned(at)),
                            score=rank)
                 for p, rank in shown]
        return SearchConnection(edges=edges, nodes=[e.node for e in edges],
                                page_info=_page_info(edges, len(found) > first, key))


def _name(value: str | None, argument: str, most: int, example: str) -> None:
    """A name a filter compares with stored text (a category, a source): printable, at most `most` characters."""
    from app.timeparse import has_surrogate

    if value is not None and not (0 < len(value) <= most and value.isprintable() and not has_surrogate(value)):
        shown = value[:60].encode("unicode_escape").decode()
        raise UserInputError(f"{argument}: {shown!r} is not a name to filter on; give 1 to {most} printable "
                             f"characters, e.g. {example}", argument="filter")


def _page_info(edges: list, more: bool, after: object) -> PageInfo:
    return PageInfo(has_next_page=more, has_previous_page=after is not None,
                    start_cursor=edges[0].cursor if edges else None, end_cursor=edges[-1].cursor if edges else None)


class Schema(strawberry.Schema):
    """Logs only unexpected errors: a client's bad input is the client's answer, not an incident."""

    @functools.cached_property
    def type_names(self) -> frozenset[str]:
        """The names of the schema's own types (not the roots' or the built-in scalars'): production errors
        never quote them (app.pipeline.MaskingPolicy)."""
        from app.pipeline import PUBLIC_NAMES

        return frozenset(self._schema.type_map) - PUBLIC_NAMES

    async def stream(self, query: str | None, variable_values: dict[str, Any] | None = None,  # type: ignore[override]
                     context_value: Any | None = None, root_value: Any | None = None,
                     operation_name: str | None = None, operation_extensions: dict[str, Any] | None = None,
                     allowed_operation_types: Any = None) -> Any:
        """Strawberry's streaming entry (SSE, multipart, both WebSocket protocols), behind the trusted-documents
        rule the HTTP path applies (PITH_PERSISTED_ONLY: only the manifest's documents run, by text or hash)."""
        from app.http import NO_MUTATIONS, stream_operation_problem
        from app.pipeline import over_budget

        # Paced already: an HTTP stream's operation with its request, a WebSocket's with its message.
        refused = over_budget(getattr(context_value, "governor", None), getattr(context_value, "client", None),
                              pace=False)
        if refused is not None:
            return _refused(refused.message, "RATE_LIMITED", refused.extensions)
        app = getattr(context_value, "app", None)
        persisted = getattr(app, "persisted", None)
        given, sha = query, None
        if persisted is not None:  # a persisted or trusted document, as POST and GET resolve it
            from app.persisted import PersistedQueryError

            try:
                query, sha = await persisted.document(getattr(app, "pool", None), query, operation_extensions)
            except PersistedQueryError as exc:
                return _refused(exc.message, exc.code)
        if not isinstance(query, str) or not query.strip():  # as POST and GET say it (app.http.GraphQLParams)
            return _refused("query: a GraphQL document (string) is required", "BAD_REQUEST")
        from app.http import variables_too_large
        from app.limits import MAX_VARIABLES_BYTES

        too_large = variables_too_large(variable_values, MAX_VARIABLES_BYTES)  # (a WebSocket's: HTTP's were)
        if too_large is not None:
            return _refused(too_large, "PAYLOAD_TOO_LARGE")
        problem = stream_operation_problem(query, operation_name)  # as POST and GET say it
        if problem is not None:
            from app.pipeline import charge_refusal

            await charge_refusal(getattr(context_value, "governor", None), getattr(context_value, "client", None))
            return _refused(problem, "OPERATION_NOT_SUPPORTED" if problem == NO_MUTATIONS
                            else "OPERATION_RESOLUTION_FAILURE")
        stream = await super().stream(query, variable_values, context_value, root_value, operation_name,
                                      operation_extensions, allowed_operation_types)
        if sha is not None and given is not None and query is not None:  # sent with its text: kept once it runs
            return _registering(stream, persisted, getattr(app, "pool", None), sha, query,
                                getattr(context_value, "client", None))
        return stream

    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        """The one place an error is logged (before the masking policy replaces what clients see)."""
        import asyncpg

        from app.db.pool import DeadlinePassed
        from app.pipeline import STATEMENT_TIMEOUTS, UNAVAILABLE, bad_literal, request_error_code

        for error in errors:
            original = error.original_error
            if original is None or isinstance(original, GraphQLError) or request_error_code(original) is not None \
                    or bad_literal(error):
                continue
            if isinstance(original, STATEMENT_TIMEOUTS):
                log.warning("query cancelled (statement timeout) at %s", error.path)
            elif isinstance(original, UNAVAILABLE):
                log.warning("database unavailable at %s: %s", error.path, type(original).__name__)
            elif isinstance(original, DeadlinePassed):  # the request's time spent before it could wait: said
                log.warning("deadline passed at %s: %s", error.path, original)  # as TIMEOUT (masked)
            elif isinstance(original, asyncpg.InvalidSQLStatementNameError):
                log.error("prepared statement lost at %s: behind a pooler in transaction mode, set "
                          "PITH_DB_PREPARED_STATEMENTS=0", error.path)
            else:
                log.error("unexpected error in %s: %s", error.path, type(original).__name__, exc_info=original)


async def _registering(stream: Any, persisted: Any, pool: Any, sha: str, query: str, client: Any) -> Any:
    """The stream as it is, its document registered (APQ) once a result shows it validated, as POST and GET
    register a document that ran; closed with it (its session's end with the stream's)."""
    from strawberry.types.execution import PreExecutionError

    registered = False
    try:
        async for result in stream:
            if not registered and not isinstance(result, PreExecutionError):
                registered = True
                await persisted.register(pool, sha, query, client)
            yield result
    finally:
        await stream.aclose()


async def _refused(message: str, code: str, extensions: dict | None = None) -> Any:
    """A stream of one result: the operation refused before parsing (the transports send it as an error)."""
    from strawberry.types.execution import PreExecutionError

    from app.logs import request_id

    yield PreExecutionError(data=None, errors=[GraphQLError(message, extensions={
        **(extensions or {}), "code": code, "requestId": request_id.get()})])


# The limiters' validation rules, built once: Strawberry's limiters make new rule classes each time they
# are constructed, so a per-request factory would give every request rules of its own and the
# validation cache (keyed by document and rules) would never hit.
LIMIT_RULES: tuple = (*QueryDepthLimiter(max_depth=MAX_DEPTH).validation_rules,
                      *MaxAliasesLimiter(max_alias_count=MAX_ALIASES).validation_rules)


def make_schema(*, introspection: bool = True, production: bool = False, direct: bool = True,
                compiled: bool = True, scale: Any = None, statement_timeout_ms: int = 10_000,
                tracer_provider: Any = None) -> strawberry.Schema:
    from functools import partial

    from strawberry.extensions import DisableIntrospection

    from app.pipeline import MaskingPolicy, OperationSession, RequestPipeline

    from app.settings import hides_names

    hidden = hides_names(production, introspection)
    extensions: list = [OperationSession,
                        partial(RequestPipeline, rules=LIMIT_RULES, max_tokens=MAX_TOKENS, scale=scale),
                        partial(MaskingPolicy, statement_timeout_ms=statement_timeout_ms, production=hidden)]
    if not introspection:
        extensions.insert(0, DisableIntrospection)
    if tracer_provider is not None:  # OpenTelemetry (app.tracing): the operation's spans, outermost
        from app.tracing import graphql_spans

        extensions.insert(0, graphql_spans(tracer_provider))
    from app.execution import CompiledExecutionContext, DirectExecutionContext

    from app.types.live import Subscription

    return Schema(
        query=Query,
        subscription=Subscription,
        extensions=extensions,
        execution_context_class=(CompiledExecutionContext if direct and compiled else DirectExecutionContext
                                 if direct else None),
        config=StrawberryConfig(disable_field_suggestions=hidden, scalar_map=SCALARS),
    )


schema = make_schema()
