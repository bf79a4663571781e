"""The Subscription root: citations arriving, standing changes of cited works, records changing.

Each event is resolved as of the moment it is sent, in a database session of its own that is released
once the event has gone out (a subscription holds no connection while it waits). `after` replays the
change log after that cursor, then continues live; the seam is kept by position (no gap, no duplicate).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import AsyncGenerator
from datetime import datetime, timedelta
from typing import Annotated, Any

import strawberry
from graphql import GraphQLError
from strawberry.types import Info

from app import cursors, record
from app.live import EVENT_RETRY_SECONDS, LiveError, decode_cursor, encode_cursor, replay
from app.timeparse import BadInput, now_as_of, parse_arxiv_id
from app.types.enums import WorkEventType
from app.types.graph import CitationEdge, CitationObservation
from app.types.standing import WorkEvent
from loaders.system import REPLAY_BATCH

ArxivIdArg = Annotated[str, strawberry.argument(description="arXiv id without version, e.g. 2402.15627.")]
AfterArg = Annotated[str | None, strawberry.argument(description=(
    "An event's cursor, or a read's changeCursor: replay every matching event committed after it, then "
    "continue live. Without it, only events committed after the subscription starts are sent."))]


log = logging.getLogger("pith.live")


class SubscriptionError(GraphQLError):
    def __init__(self, message: str, code: str = "BAD_USER_INPUT", after: int | None = None, **more: Any) -> None:
        extensions: dict[str, Any] = {"code": code, **more}
        if after is not None:  # a subscription that ended early: where to resume it
            extensions["after"] = encode_cursor(after)
            message = f"{message}; resubscribe with after: {extensions['after']}"
        super().__init__(message, extensions=extensions)


def _ended(sub: Any) -> SubscriptionError:
    return SubscriptionError(sub.dropped or "the subscription ended", "SUBSCRIPTION_DROPPED", after=sub.last)


@strawberry.type(description=(
    "A new citing observation of the paper, with what a client cache needs to splice it into the paper's "
    "`inbound` connection (no filter) in place: the edge as that connection lists it, the cursor of the edge "
    "before it, and the connection's new totalCount. Each holds at the event's change-log position: "
    "observations logged after it arrive as later events, with their own place and total."))
class CitationAddedEvent:
    cursor: str = strawberry.field(description="Position in the change log; pass it as `after` to resume.")
    observation: CitationObservation = strawberry.field(description="The observation, as of when the event is sent.")
    edge: CitationEdge = strawberry.field(description=(
        "The observation as Paper.inbound lists it: its cursor in inbound order (citing arXiv id, reference "
        "index, observation id) and the node, as of when the event is sent."))
    previous_cursor: str | None = strawberry.field(description=(
        "The cursor of the edge just before this one in inbound order (null: it comes first). Insert the edge "
        "after the loaded edge with this cursor; when none of the loaded edges has it (or it is the last loaded "
        "edge while more pages follow), the edge belongs past the loaded pages (it will come with them): only "
        "totalCount changes."))
    total_count: int = strawberry.field(description=(
        "Paper.inbound's totalCount (no filter) with this observation, at the event's position."))


@strawberry.type(description=(
    "An event (retraction, correction, ...) on a work this paper cites began or ended: a source reported it, or "
    "a later check of the same source no longer reported it (docs/standing.md)."))
class StandingChangedEvent:
    cursor: str = strawberry.field(description="Position in the change log; pass it as `after` to resume.")
    observation: CitationObservation = strawberry.field(description=(
        "The paper's first reference (in record order) to the work, as of when the event is sent."))
    event: WorkEvent = strawberry.field(description="The event (for an end: the event that ended).")
    standing: bool = strawberry.field(description=(
        "True when the event is new; false when it ended (OpenAlex is_retracted true, then false; a Retraction "
        "Watch row withdrawn): from endedAt on it no longer counts toward the work's standing."))
    ended_at: datetime | None = strawberry.field(description=(
        "The check of the event's source that no longer reported it (null for a new event)."))


@strawberry.type(description="An import changed the paper's current record.")
class RecordChangedEvent:
    cursor: str = strawberry.field(description="Position in the change log; pass it as `after` to resume.")
    arxiv_id: str = strawberry.field(description="The paper.")
    context_digest: str = strawberry.field(description="The record's new context_digest (as the record JSON serves).")


async def _document(context: Any, paper: str, at: datetime) -> dict[str, Any] | None:
    from loaders.record import record_rows

    session = context.app.session()
    try:
        (rows,) = await record_rows(session, [paper], at)
    finally:
        await session.close()
    return record.build_record(rows) if rows is not None else None


def content_digest(document: dict[str, Any]) -> str:
    """The record's content, without what changes with the clock alone (as_of, and the dated thesis)."""
    rest = {k: v for k, v in document.items() if k not in ("as_of", "thesis", "context_digest")}
    return hashlib.sha256(record.canonical_bytes(rest)).hexdigest()


def _paper(info: Info, value: str) -> str:
    """The subscription's paper; an id that is not one refuses the subscription as it starts. Its start was admitted
    at an event's price (app.pipeline: recordChanged reads the record then); refused before any of that work, all of
    it but a refusal's point is given back, as a query refused for its argument costs a point."""
    try:
        return parse_arxiv_id(value)
    except BadInput as exc:
        context = info.context
        ticket, governor = getattr(context, "ticket", None), getattr(context, "governor", None)
        if ticket is not None and governor is not None and ticket.points > 1:
            governor.budgets.refund(ticket.client, ticket.points - 1)
            ticket.points = 1
        raise SubscriptionError(f"arxivId: {exc}") from None


async def _changes(info: Info, kind: str, arxiv_id: str, after: str | None) -> AsyncGenerator[Any, None]:
    """Change-log rows for (kind, paper): the replay after `after`, then live ones; each in a fresh session."""
    context = info.context
    hub = context.hub
    if hub is None:
        raise SubscriptionError("subscriptions are served over WebSocket or streaming HTTP at /graphql",
                                "OPERATION_NOT_SUPPORTED")
    try:
        start = decode_cursor(after) if after is not None else None
        await hub.ready()
        client = getattr(context, "client", None)
        sub = hub.subscribe(kind, arxiv_id, client.id if client is not None else None,
                            getattr(context, "connection", None))
    except LiveError as exc:
        raise SubscriptionError(str(exc)) from None
    try:
        # sub.last: only what is dispatched from here on, unless replaying; each row is handled (sent, or
        # found not visible) before the next, so resuming after sub.last loses nothing and repeats nothing.
        if start is not None:  # a batch at a time (REPLAY_BATCH), each read once the one before was sent
            sub.last = start
            while True:
                async with context.app.connection() as conn:
                    try:
                        rows = await replay(conn, kind, arxiv_id, sub.last, first=sub.last == start)
                    except LiveError as exc:
                        raise SubscriptionError(str(exc), "CURSOR_EXPIRED") from None
                for row in rows:
                    if sub.dropped:
                        raise _ended(sub)
                    yield row
                    sub.last = row["position"]
                if len(rows) < REPLAY_BATCH:
                    break
        while True:
            row = await sub.queue.get()
            if row is None or sub.dropped:
                raise _ended(sub)
            if row["position"] <= sub.last:  # already replayed
                continue
            yield row
            sub.last = row["position"]
    finally:
        hub.unsubscribe(sub)


async def _observation(context: Any, row: Any) -> Any:
    """The row's observation as of now, read once (in a session of its own) for all who send it now."""
    from loaders.citations import observations_by_id

    async def read() -> Any:
        session = context.app.session()
        try:
            return (await observations_by_id(session, [row["observation_id"]], context.now))[0]
        finally:
            await session.close()

    return await context.hub.shared(("observation", row["observation_id"], context.now), read)


async def _splice(context: Any, row: Any, found: Any) -> tuple[str | None, int]:
    """The cursor of the edge before the event's in inbound order, and the connection's totalCount, at the
    event's position (loaders.live.splice): read once for all who send the event now."""
    from loaders.dataloaders import CountRequest, Loaders
    from loaders.live import splice

    async def read() -> tuple[str | None, int]:
        session = context.app.session()
        try:
            key = (found.citing_arxiv_id, found.reference_index, found.observation_id)
            previous, later = await splice(session, row["arxiv_id"], key, context.now, row["position"])
            # The total as Paper.inbound { totalCount } counts it (the same loader), less what came later.
            total = await Loaders(session, context.now).count.load(CountRequest(row["arxiv_id"], "in"))
        finally:
            await session.close()
        cursor = None
        if previous:
            cursor = cursors.encode_key(["in", previous[0], previous[1], str(previous[2]), row["arxiv_id"]])
        return cursor, total - later

    return await context.hub.shared(("splice", row["position"], context.now), read)


async def _in_session(info: Info, rows: AsyncGenerator[Any, None], build) -> AsyncGenerator[Any, None]:
    """Resolve each row in a session of its own, released after the event has been sent; each event charged
    the price of the subscription's selection (_admitted)."""
    context = info.context
    try:
        async for row in rows:
            ticket = await _admitted(context, row)
            try:
                event = await _resolved(context, row, build)
                try:
                    if event is not None:
                        yield event
                finally:
                    await context.session.close()
            finally:
                if ticket is not None:
                    context.governor.settle(ticket, None)
    finally:
        await rows.aclose()


async def _admitted(context: Any, row: Any) -> Any:
    """An event's admission at the subscription's price (app.pipeline set it as the operation began): its
    points charged to the client's hour, within the event's deadline. A client over budget ends the
    subscription with the cursor just before this event (resume with `after` once the hour allows)."""
    from app.governor import RateLimited
    from app.pipeline import rate_limited_error

    price, governor, client = context.event_price, context.governor, context.client
    if price is None or governor is None or client is None:
        return None  # in-process execution: priced, not governed
    context.restart_deadline()
    try:  # points, not slots: an event's work is done once for all who send it (hub.shared), whoever waits
        return await governor.admit(client, price.points, 0, None, context.remaining())
    except RateLimited as exc:  # the pipeline's RATE_LIMITED, and where to resume
        told = rate_limited_error(exc)
        raise SubscriptionError(f"{told.message} (each event costs {price.points} points, the price of its "
                                "selection)", after=row["position"] - 1, **(told.extensions or {})) from None
    except TimeoutError:
        # units 0 waits for no slot: only the budget's claim of the points can take this long
        raise SubscriptionError("this event's points could not be charged within its deadline; resume with "
                                "`after` shortly", "TIMEOUT", after=row["position"] - 1) from None


def _unavailable() -> tuple[type[BaseException], ...]:
    """What a read of an event may meet that a later try can pass: no connection free in time, a
    connection lost, the database restarting or cancelling a statement."""
    import asyncpg

    from app.db.pool import DeadlinePassed, StatementTimeout

    return (TimeoutError, OSError, ConnectionError, DeadlinePassed, StatementTimeout, asyncpg.InterfaceError,
            asyncpg.PostgresConnectionError, asyncpg.CannotConnectNowError, asyncpg.QueryCanceledError,
            asyncpg.AdminShutdownError)


async def _resolved(context: Any, row: Any, build) -> Any:
    """The row's event, built in a fresh session (left open for its fields: the caller closes it). A read
    that fails as unavailable is tried again, with back-off, for EVENT_RETRY_SECONDS; past that (or when
    the server stops) the subscription ends with the cursor just before this row, so resuming loses nothing."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + EVENT_RETRY_SECONDS
    delay = 0.2
    while True:
        context.renew(context.app.session())
        try:
            return await build(row, context)
        except _unavailable() as exc:
            await context.session.close()
            hub = context.hub
            if loop.time() + delay > give_up or (hub is not None and hub.stopping.is_set()):
                raise SubscriptionError(f"the event at position {row['position']} could not be read "
                                        f"({type(exc).__name__})", "SUBSCRIPTION_DROPPED",
                                        after=row["position"] - 1) from None
            log.warning("event at position %d not read (%s); trying again in %.1f s", row["position"],
                        type(exc).__name__, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
        except BaseException:
            await context.session.close()
            raise


@strawberry.type(description="Live changes, pushed as they are committed (WebSocket, SSE or multipart HTTP).")
class Subscription:
    @strawberry.subscription(description="New citing observations of a paper, in import order.")
    async def citation_added(self, info: Info, arxiv_id: ArxivIdArg,
                             after: AfterArg = None) -> AsyncGenerator[CitationAddedEvent, None]:
        async def build(row: Any, context: Any) -> CitationAddedEvent | None:
            found = await _observation(context, row)
            if found is None:  # not visible (yet): its citing paper has no snapshot
                return None
            previous, total = await _splice(context, row, found)
            node = CitationObservation.of(found, context.now, pinned=False)
            return CitationAddedEvent(cursor=encode_cursor(row["position"]), observation=node,
                                      edge=CitationEdge(cursor=cursors.encode("in", found, row["arxiv_id"]),
                                                        node=node),
                                      previous_cursor=previous, total_count=total)

        async for event in _in_session(info, _changes(info, "citation_added", _paper(info, arxiv_id), after), build):
            yield event

    @strawberry.subscription(description=(
        "New events (retraction, correction, expression of concern, withdrawal, reinstatement) on works this "
        "paper cites, and their ends (`standing: false`) when a source's later check no longer reports them."))
    async def standing_changed(self, info: Info, arxiv_id: ArxivIdArg,
                               after: AfterArg = None) -> AsyncGenerator[StandingChangedEvent, None]:
        async def build(row: Any, context: Any) -> StandingChangedEvent | None:
            found = await _observation(context, row)
            if found is None:
                return None
            event = WorkEvent(event_type=WorkEventType(row["event_type"]), source=row["event_source"],
                              observed_at=row["event_observed_at"], reported_at=row["event_reported_at"],
                              notice_doi=row["event_notice_doi"])
            ended = row["event_ended_at"]
            return StandingChangedEvent(cursor=encode_cursor(row["position"]),
                                        observation=CitationObservation.of(found, context.now, pinned=False), event=event,
                                        standing=ended is None, ended_at=ended)

        async for event in _in_session(info, _changes(info, "standing_changed", _paper(info, arxiv_id), after), build):
            yield event

    @strawberry.subscription(description=(
        "An import changed the paper's current record: its new contextDigest (the thesis date turning over is "
        "no change)."))
    async def record_changed(self, info: Info, arxiv_id: ArxivIdArg,
                             after: AfterArg = None) -> AsyncGenerator[RecordChangedEvent, None]:
        paper = _paper(info, arxiv_id)
        seen: dict[str, str | None] = {"content": None}
        if after is None:  # live only: compare with the record as the subscription starts
            document = await _document(info.context, paper, now_as_of())
            seen["content"] = content_digest(document) if document is not None else None

        async def build(row: Any, context: Any) -> RecordChangedEvent | None:
            # A replayed change is shown as of its commit (whole seconds, rounded up); a live one as of now.
            committed: datetime = row["committed_at"]
            at = min(context.now, (committed + timedelta(seconds=1)).replace(microsecond=0)) \
                if committed < context.now - timedelta(seconds=1) else context.now
            document = await context.hub.shared(("record", paper, at), lambda: _document(context, paper, at))
            if document is None:
                return None
            content = content_digest(document)
            if content == seen["content"]:
                return None
            seen["content"] = content
            return RecordChangedEvent(cursor=encode_cursor(row["position"]), arxiv_id=paper,
                                      context_digest=document["context_digest"])

        async for event in _in_session(info, _changes(info, "record_changed", paper, after), build):
            yield event


__all__ = ["Subscription", "now_as_of"]
