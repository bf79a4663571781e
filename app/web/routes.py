"""HTTP routes of records and pages: JSON for programs, HTML for people, the same data behind both."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from html import escape
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from app import http, record
from app.cost import PRICES, Price
from app.errors import busy_error, deadline_error
from app.governor import RateLimited, TooFast, Unauthenticated, with_budget
from app.http import cache_control
from app.limits import (ARGUMENTS, DEFAULT_REQUEST_TIMEOUT_SECONDS, LIST_ROWS_PER_SECOND, LIST_STALL_SECONDS,
                        MAX_NEIGHBOURHOOD_PAPERS, argument_default)
from app.timeparse import (ARXIV_ID_RULE, AS_OF_RULE, BadInput, answered_as_of, is_pinned, now_as_of,
                           parse_arxiv_id, parse_search_words)
from app.web.layout import TEMPLATE_VERSION, page, time_tag
from app.web.ledger import render_ledger
from loaders.evidence import evidence
from loaders.papers import search_papers
from loaders.record import record_items

if TYPE_CHECKING:
    from datetime import datetime

STATIC = __file__.rsplit("/", 1)[0] + "/static"


def etag_of(*parts: str) -> str:
    if len(parts) == 1 and parts[0].startswith("sha256:"):
        return 'W/"' + parts[0].removeprefix("sha256:") + '"'
    return 'W/"' + hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:40] + '"'


def not_modified(request: Request, etag: str) -> bool:
    given = request.headers.get("if-none-match", "")
    return any(tag.strip() in (etag, etag.removeprefix("W/"), "*") for tag in given.split(","))


def wants_html(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "text/html" in accept and "application/json" not in accept.split(",")[0]


class BadRequest(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


class NotFound(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


def error_page(status: int, title: str, message: str) -> HTMLResponse:
    body = (f'<h1>{escape(title)}</h1><p>{escape(message)}</p>'
            '<p>Accepted arXiv ids: ' + escape(ARXIV_ID_RULE) + '.</p>'
            '<p>Accepted instants (<code>as_of</code>): ' + escape(AS_OF_RULE) + '.</p>'
            '<p><a href="/">Search the citation graph</a></p>')
    return HTMLResponse(page(title, body), status_code=status)


def error_for(request: Request, status: int, message: str, **extra: Any) -> Response:
    from app.http import error_response

    if wants_html(request):
        return error_page(status, {400: "Bad request", 404: "Not found"}.get(status, "Error"), message)
    return error_response(status, message, **extra)


def _unauthenticated(request: Request, exc: Unauthenticated) -> Response:
    response = error_for(request, exc.status, str(exc))
    response.headers.update(exc.headers)
    return response


def too_many(request: Request, exc: RateLimited | TooFast) -> Response:
    """429 for a client over its budget or its pace, with the wait in Retry-After."""
    response = error_for(request, 429, str(exc))
    response.headers["Retry-After"] = str(exc.status.retry_after if isinstance(exc, RateLimited) else exc.retry_after)
    return response


class ListResponse(StreamingResponse):
    """A streamed list (app.bulk) that ends within its bound, and whose end, however it comes (sent, cut at the
    bound, the client gone before or during it), closes its session and settles its ticket: a heavy slot and a
    transaction are never left with a reader that went away or stopped reading. A list cut at its bound ends
    without its last chunk, so the client sees it broken, never short."""

    def __init__(self, content: Any, end: Any, seconds: float, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.end, self.seconds = end, seconds

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def taken(message: Any) -> None:  # each part taken by the reader within LIST_STALL_SECONDS
            async with asyncio.timeout(LIST_STALL_SECONDS):
                await send(message)

        try:
            async with asyncio.timeout(self.seconds):
                await super().__call__(scope, receive, taken)
        except TimeoutError:  # the response unfinished: the connection dropped, its unsent bytes with it
            abort = scope.get("pith.abort")  # (app.protocol; a close would wait for them to be read)
            if abort is not None:
                abort()
            return
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]
            await self.end()


def known_parameters(request: Request, taken: tuple[str, ...]) -> None:
    """A route's query parameters are the ones it takes: another (GraphQL's `asOf` for `as_of`, a filter the
    route has not) is refused, naming what the route takes, rather than answered as if it were not there (a
    list as of now, unfiltered). What tools add to any URL is let through: a cache buster (`_`, jQuery's) and
    campaign tags (`utm_*`); and a page asked for by a browser keeps its links' extra parameters."""
    if wants_html(request):
        return
    unknown = [name for name in dict.fromkeys(request.query_params)
               if name not in taken and name != "_" and not name.startswith("utm_")]
    if not unknown:
        return
    said = []
    for name in unknown[:5]:
        snake = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
        meant = f" (did you mean {snake}?)" if snake != name and snake in taken else ""
        said.append((name if len(name) <= 40 else name[:40] + "...") + meant)
    takes = ", ".join(taken) if taken else "no query parameters"
    raise BadRequest(f"{'; '.join(said)}: not {'a parameter' if len(unknown) == 1 else 'parameters'} of this route; "
                     f"it takes {takes}")


def _arguments(request: Request) -> tuple[str, "datetime", bool]:
    known_parameters(request, ("as_of",))
    try:
        arxiv_id = parse_arxiv_id(request.path_params["arxiv_id"])
        now = now_as_of()
        at = answered_as_of(request.query_params.get("as_of"), now)
        return arxiv_id, at, is_pinned(at, now)
    except BadInput as exc:
        raise BadRequest(str(exc)) from None


def routes(app: Any) -> list:  # app.state.App
    async def document_for(request: Request) -> tuple[bytes, dict, bool]:
        """The record's canonical bytes and its document (items as their bytes), and whether it is pinned."""
        arxiv_id, as_of, pinned = _arguments(request)
        session = app.session()
        closing = None
        try:
            (items,) = await record_items(session, [arxiv_id], as_of)
            # The transaction ends (a round trip) while the document is made from the items already read.
            closing = asyncio.ensure_future(session.close())
            await asyncio.sleep(0)
            built = record.record_bytes(items) if items is not None else None
        finally:
            await (closing if closing is not None else session.close())
        if built is None:
            raise NotFound(f"no paper {arxiv_id} is known as of {record.as_of_text(as_of)}")
        return built[0], built[1], pinned

    def handled(handler, units: int = PRICES["record"]):
        """A page or file, governed as GraphQL operations are: who asks (401 for a bad key), their budget
        (429), a heavy slot for heavy work, the deadline (504), and the RateLimit fields."""
        async def endpoint(request: Request) -> Response:
            governor = app.governor
            try:
                client = await app.identify(request.scope)
            except Unauthenticated as exc:
                return _unauthenticated(request, exc)
            price = Price(0, units)
            try:
                fast = governor.pace(client, request.scope)
                if fast is not None:
                    raise fast
                ticket = await governor.admit(client, price.points, price.units, within=app.settings.request_timeout)
            except (RateLimited, TooFast) as exc:
                response = too_many(request, exc)
            except TimeoutError:
                response = error_for(request, 503, busy_error(app.settings.request_timeout or 0).message)
            else:
                spent: int | None = None  # the price admitted, unless the request did no work
                try:
                    async with asyncio.timeout(app.settings.request_timeout):
                        response = await handler(request)
                except BadRequest as exc:  # refused before any work (its arguments): a point, as a refusal costs
                    response, spent = error_for(request, 400, exc.message), 1
                except NotFound as exc:
                    response = error_for(request, 404, exc.message)
                except TimeoutError:
                    response = error_for(request, 504, deadline_error(app.settings.request_timeout or 0).message)
                finally:
                    governor.settle(ticket, spent)
            return with_budget(response, governor, client)

        return endpoint

    def cached(request: Request, etag: str, make: Any, pinned: bool) -> Response:
        headers = {"ETag": etag, "Cache-Control": cache_control(pinned), "Vary": http.CACHED_VARY}
        if not_modified(request, etag):
            return http.not_modified(headers)
        response = make()
        response.headers.update(headers)
        return http.vary_once(response)

    async def record_json(request: Request) -> Response:
        body, document, pinned = await document_for(request)
        return cached(request, etag_of(document["context_digest"]),
                      lambda: Response(body, media_type="application/json"), pinned)

    async def record_html(request: Request) -> Response:
        body, document, pinned = await document_for(request)
        etag = etag_of("ledger", TEMPLATE_VERSION, document["context_digest"], document["as_of"])
        return cached(request, etag, lambda: HTMLResponse(render_ledger(orjson.loads(body))), pinned)

    async def integrity(request: Request) -> Response:
        raw, document, _ = await document_for(request)
        parsed = json.loads(raw)
        checks = []
        for direction in ("inbound", "outbound"):
            for o in parsed[direction]:
                again = record.observation_digest(o)
                checks.append({"observation_id": o["observation_id"], "direction": direction,
                               "stated": o["observation_digest"], "recomputed": again,
                               "matches": again == o["observation_digest"]})
        context = record.context_digest(parsed)
        result = {
            "arxiv_id": parsed["paper"]["arxiv_id"],
            "as_of": parsed["as_of"],
            "record": document["links"]["json"] + "?" + urlencode({"as_of": parsed["as_of"]}),
            "record_sha256": "sha256:" + hashlib.sha256(raw).hexdigest(),
            "rules": {
                "canonical_json": "json.dumps(value, sort_keys=True, separators=(',', ':'), ensure_ascii=False), "
                                  "UTF-8, no trailing newline",
                "observation_digest": "'sha256:' + hex(sha256(canonical(observation without observation_digest)))",
                "context_digest": "'sha256:' + hex(sha256(canonical(document without context_digest and "
                                  "without as_of)))",
            },
            "context_digest": {"stated": parsed["context_digest"], "recomputed": context,
                               "matches": context == parsed["context_digest"]},
            "observations": checks,
            "all_match": context == parsed["context_digest"] and all(c["matches"] for c in checks),
        }
        headers = {"Cache-Control": cache_control(False), "Vary": "Accept"}
        if not wants_html(request):
            return JSONResponse(result, headers=headers)
        return HTMLResponse(page(f"Integrity of arXiv:{parsed['paper']['arxiv_id']}", integrity_body(result)),
                            headers=headers)

    async def paper_page(request: Request) -> Response:
        _, document, pinned = await document_for(request)
        p = document["paper"]
        as_of = document["as_of"]
        summary = {
            "paper": p,
            "as_of": as_of,
            "counts": {
                "inbound": document["coverage"][2]["denominator"],
                "outbound": document["reference_resolution"]["total_outbound_references"],
                "external_citation_measurements": document["external_citation_measurements"],
            },
            "record": {"context_digest": document["context_digest"], "thesis": document["thesis"]},
            "links": {**document["links"], "graphql": graphiql_link(p["arxiv_id"])},
        }
        html = wants_html(request)  # each representation its own validator (a 304 names the one the cache holds)
        etag = etag_of("paper", "html" if html else "json", TEMPLATE_VERSION, document["context_digest"], as_of)
        if not html:
            return cached(request, etag, lambda: JSONResponse(summary), pinned)
        q = "?" + urlencode({"as_of": as_of})
        measurements = "".join(f"<li>{m['count']} from {escape(m['source'])}, observed {time_tag(m['observed_at'])}</li>"
                               for m in document["external_citation_measurements"]) or "<li>none recorded</li>"
        versions = ", ".join(f"v{v}" for v in range(1, p["latest_version"] + 1))
        body = f"""
<p class="kicker">arXiv:{escape(p["arxiv_id"])}</p>
<h1>{escape(p["title"])}</h1>
<dl class="counts">
<div><dt>Versions</dt><dd>{versions}</dd></div>
<div><dt>Primary category</dt><dd>{escape(p["primary_category"] or "unknown")}</dd></div>
<div><dt>Submitted</dt><dd>{time_tag(p["submitted_at"])}</dd></div>
<div><dt>Last updated</dt><dd>{time_tag(p["last_updated"])}</dd></div>
<div><dt>Pith citing observations</dt><dd>{summary["counts"]["inbound"]}</dd></div>
<div><dt>Outbound references</dt><dd>{summary["counts"]["outbound"]}</dd></div>
</dl>
<h2>External citation measurements</h2><ul>{measurements}</ul>
<h2>Latest citation record</h2>
<p class="thesis">{escape(document["thesis"])}</p>
<p>Context digest <code>{escape(document["context_digest"])}</code></p>
<ul>
<li><a href="{document["links"]["html"]}{q}">Ledger (HTML)</a></li>
<li><a href="{document["links"]["json"]}{q}">Canonical record (JSON)</a></li>
<li><a href="{document["links"]["integrity"]}{q}">Integrity check</a></li>
<li><a href="{escape(summary["links"]["graphql"])}">This paper in the GraphQL API</a></li>
</ul>
<p class="formats">As of {time_tag(as_of)}; snapshot observed {time_tag(p["snapshot_observed_at"])}</p>
"""
        return cached(request, etag, lambda: HTMLResponse(page(p["title"], body)), pinned)

    async def home(request: Request) -> Response:
        query = request.query_params.get("q", "").strip()
        results = ""
        if query:
            try:
                query = parse_search_words(query)
            except BadInput as exc:
                raise BadRequest(f"search: {exc}") from None
            session = app.session()
            try:
                found = await search_papers(session, query, now_as_of(), 25)
            finally:
                await session.close()
            items = "".join(
                f'<li><a href="/paper/{quote(p.arxiv_id)}">{escape(p.title)}</a> '
                f'<span class="muted">arXiv:{escape(p.arxiv_id)} v{p.latest_version}</span> · '
                f'<a href="/paper/{quote(p.arxiv_id)}/citation-record">ledger</a></li>'
                for p in found)
            results = (f'<h2>Results for “{escape(query)}”</h2>'
                       + (f'<ul class="results">{items}</ul>' if items else "<p>No paper title matches.</p>"))
        body = f"""
<h1>The citation graph, as of any instant</h1>
<p>Who cites a paper, what it cites, how well each reference was resolved, and whether a cited work was
retracted, with the source and time of every fact. Every record is a canonical, hashed document anyone can verify.</p>
<form class="search" action="/" method="get" role="search">
<label for="q" class="muted">Search titles</label>
<input id="q" type="search" name="q" value="{escape(query)}" placeholder="e.g. megascale training" maxlength="500">
<button type="submit">Search</button></form>
{results}
<h2>Explore</h2>
<ul>
<li><a href="/paper/2402.15627/citation-record">A sample ledger: arXiv:2402.15627</a></li>
<li><a href="/graphql">GraphQL</a>: the API behind these pages, for your own queries</li>
<li><a href="/evidence">Evidence</a>: the sources behind the facts, and when each was last observed</li>
</ul>
"""
        return HTMLResponse(page("pith-graph", body))

    async def evidence_page(request: Request) -> Response:
        known_parameters(request, ("as_of",))
        raw = request.query_params.get("as_of")
        try:
            as_of = answered_as_of(raw, now_as_of())
        except BadInput as exc:
            raise BadRequest(str(exc)) from None
        session = app.session()
        try:
            sources = await evidence(session, as_of)
        finally:
            await session.close()
        listed = [{**s, "latest_observed_at": record.z_time(s["latest_observed_at"])} for s in sources]
        payload = {"as_of": record.as_of_text(as_of), "synthetic": any(s["synthetic"] for s in listed),
                   "sources": listed}
        headers = {"Cache-Control": cache_control(False), "Vary": "Accept"}  # JSON or HTML by Accept: both kept alike
        if not wants_html(request):
            return JSONResponse(payload, headers=headers)
        rows = "".join(f"<tr><td>{escape(s['role'])}</td><td><code>{escape(s['source'])}</code></td><td>{s['kind']}</td>"
                       f"<td>{time_tag(s['latest_observed_at'])}</td><td>{s['facts']}</td></tr>" for s in listed)
        synthetic = [s["source"] for s in listed if s["synthetic"]]
        warning = (f"<p role=\"note\"><strong>Synthetic data.</strong> {len(synthetic)} of these sources were generated "
                   "by <code>pith-graph synth</code> (named <code>synthetic_*</code>): their facts describe no real "
                   "paper or check.</p>") if synthetic else ""
        body = (f"<h1>Evidence</h1>{warning}<p>The sources behind the stored facts as of {time_tag(payload['as_of'])}: "
                "what each is used for, whether it is a live source, a cache or synthetic, and when it was last "
                "observed.</p>"
                f"<div class=\"table-wrap\" tabindex=\"0\" role=\"region\" aria-label=\"Sources\"><table><thead><tr><th>Role</th><th>Source</th><th>Kind</th><th>Latest observation</th>"
                f"<th>Facts</th></tr></thead><tbody>{rows}</tbody></table></div>")
        return HTMLResponse(page("Evidence", body), headers=headers)

    async def neighbourhood_export(request: Request) -> Response:
        from starlette.responses import StreamingResponse

        from app import export
        from loaders.dataloaders import Loaders, let_go
        from loaders.walk import walk

        format = request.path_params["format"]
        if format not in export.MEDIA_TYPES:
            raise NotFound(f"no export format {format!r}; use neighbourhood.csv, neighbourhood.graphml or "
                           "neighbourhood.ndjson")
        arxiv_id, directions, depth, per_paper, as_of, pinned = _walk_arguments(request)
        session = app.session()
        loaders = Loaders(session, as_of)
        try:
            found = await walk(loaders, arxiv_id, directions, depth, per_paper, MAX_NEIGHBOURHOOD_PAPERS)
            works = list(dict.fromkeys(o.work.work_id for o in (found.edges.values() if found else ())
                                       if o.work is not None))
            standing = dict(zip(works, await loaders.standing.load_many(works))) if works else {}
        finally:
            let_go(loaders.release())  # the walk keeps what it found; the loaders' cycle goes now
            await session.close()
        if found is None:
            raise NotFound(f"no paper {arxiv_id} is known as of {record.as_of_text(as_of)}")

        async def body():
            chunks = export.Chunks()
            writer = export.writer_for(format, chunks)
            for n, paper in enumerate(found.papers.values()):
                writer.node(export.paper_node(paper))
                if n % 500 == 499:
                    yield chunks.take()
            for n, obs in enumerate(found.edges.values()):
                writer.edge(export.paper_edge(obs, standing))
                if n % 500 == 499:
                    yield chunks.take()
            writer.close()
            yield chunks.take()

        name = f"neighbourhood-{arxiv_id.replace('/', '_')}" + (".zip" if format == "csv" else f".{format}")
        return StreamingResponse(body(), media_type=export.MEDIA_TYPES[format], headers={
            "Content-Disposition": f'attachment; filename="{name}"',
            "X-Truncated": "true" if found.truncated else "false",
            "Cache-Control": cache_control(pinned)})

    async def bulk_list(request: Request) -> Response:
        """A paper's whole inbound or outbound list (app.bulk), governed here: the ticket is held, and
        the charge settled to the rows sent, until the last byte has gone (or the client has)."""
        from app import bulk

        direction = request.url.path.rsplit("/", 1)[1].split(".", 1)[0]
        format = request.path_params["format"]
        governor = app.governor
        try:
            client = await app.identify(request.scope)
        except Unauthenticated as exc:
            return _unauthenticated(request, exc)

        def told(response: Response) -> Response:
            return with_budget(response, governor, client)

        fast = governor.pace(client, request.scope)
        if fast is not None:
            return told(too_many(request, fast))
        try:
            arxiv_id, as_of, pinned = _arguments(request)
        except BadRequest as exc:
            return told(error_for(request, 400, exc.message))
        if format not in bulk.formats():
            missing = " (Parquet needs pyarrow on the server)" if format == "parquet" else ""
            return told(error_for(request, 404, f"no list format {format!r}{missing}; use "
                                  + ", ".join(f"{direction}.{f}" for f in bulk.formats())))
        session = app.session()
        ticket = None
        try:
            known = await session.fetch("SELECT 1 FROM paper_snapshots WHERE arxiv_id = $1 AND observed_at <= $2 "
                                        "LIMIT 1", arxiv_id, as_of)
            if not known:
                return told(error_for(request, 404, f"no paper {arxiv_id} is known as of {record.as_of_text(as_of)}"))
            size = await bulk.sized(session, arxiv_id, direction)
            price = bulk.price(size)
            deadline = app.settings.request_timeout or DEFAULT_REQUEST_TIMEOUT_SECONDS
            name = f"{direction}-{arxiv_id.replace('/', '_')}-{record.as_of_text(as_of).replace(':', '')}.{format}"
            headers = {"Content-Disposition": f'attachment; filename="{name}"', "X-As-Of": record.as_of_text(as_of),
                       "X-Cost-Requested": str(price.units), "X-Cost-Points": str(price.points),
                       "Cache-Control": cache_control(pinned)}
            if request.method == "HEAD":  # what a GET would send (streamed: no length), reading and charging nothing
                return told(StreamingResponse(iter(()), media_type=bulk.MEDIA_TYPES[format], headers=headers))
            try:
                ticket = await governor.admit(client, price.points, price.units, session, deadline)
            except RateLimited as exc:
                return told(too_many(request, exc))
            except TimeoutError:  # no slot within the deadline: nothing ran
                return told(error_for(request, 503, busy_error(deadline).message))
        finally:
            if ticket is None:
                await session.close()
        rows = 0
        ended = False

        async def body() -> Any:
            nonlocal rows
            encoder = bulk.Encoder(format)
            async for batch in bulk.edges(session, arxiv_id, direction, as_of):
                rows += len(batch)
                yield encoder.batch(batch)
            yield encoder.close()

        async def end() -> None:
            nonlocal ended
            if not ended:
                ended = True
                try:
                    await session.close()
                finally:
                    governor.settle(ticket, bulk.price(rows).points)

        return told(ListResponse(body(), end, deadline + size / LIST_ROWS_PER_SECOND,
                                 media_type=bulk.MEDIA_TYPES[format], headers=headers))

    return [
        Route("/", handled(home, PRICES["search"])),
        # A walk's papers and edges, at most (priced as GraphQL prices neighbourhood).
        Route("/graph/neighbourhood.{format}", handled(neighbourhood_export, 3 * MAX_NEIGHBOURHOOD_PAPERS)),
        Route("/evidence", handled(evidence_page, PRICES["search"])),
        Route("/paper/{arxiv_id:path}/citation-record.json", handled(record_json)),
        Route("/paper/{arxiv_id:path}/citation-record", handled(record_html)),
        Route("/paper/{arxiv_id:path}/integrity", handled(integrity)),
        # A paper's whole citation list, streamed (app.bulk; governed inside, per row).
        Route("/paper/{arxiv_id:path}/inbound.{format}", bulk_list),
        Route("/paper/{arxiv_id:path}/outbound.{format}", bulk_list),
        Route("/paper/{arxiv_id:path}", handled(paper_page)),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
        # Browsers ask for /favicon.ico on every page: the site's icon (SVG, which they all read).
        Route("/favicon.ico", favicon),
    ]


async def favicon(request: Request) -> Response:
    from starlette.responses import FileResponse

    return FileResponse(STATIC + "/favicon.svg", media_type="image/svg+xml",
                        headers={"Cache-Control": "public, max-age=86400"})


DIRECTIONS = {"inbound": ("in",), "outbound": ("out",), "both": ("in", "out")}


def _bounded(request: Request, name: str, argument: str) -> int:
    """A query parameter bounded as the GraphQL argument it stands for (app.limits.ARGUMENTS)."""
    _, low, high = ARGUMENTS[argument]
    raw = request.query_params.get(name)
    if raw is None:
        return argument_default(argument)
    text = raw.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 9 and low <= int(text) <= high):
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise BadRequest(f"{name}: {shown!r} is not allowed; give a whole number from {low} to {high}")
    return int(text)


def _walk_arguments(request: Request) -> tuple[str, tuple[str, ...], int, int, "datetime", bool]:
    """arxiv_id, direction, depth, per_paper and as_of of a neighbourhood export, as GraphQL takes them, and
    whether the answer is fixed (app.timeparse.is_pinned)."""
    known_parameters(request, ("arxiv_id", "direction", "depth", "per_paper", "as_of"))
    params = request.query_params
    raw_id = params.get("arxiv_id")
    if raw_id is None:
        raise BadRequest(f"arxiv_id: required ({ARXIV_ID_RULE})")
    direction = params.get("direction", "inbound").strip().lower()
    if direction not in DIRECTIONS:
        raise BadRequest(f"direction: {direction[:40]!r} is not allowed; give inbound, outbound or both")
    depth = _bounded(request, "depth", "depth")
    per_paper = _bounded(request, "per_paper", "perPaper")
    raw_as_of = params.get("as_of")
    try:
        arxiv_id = parse_arxiv_id(raw_id)
    except BadInput as exc:
        raise BadRequest(f"arxiv_id: {exc}") from None
    now = now_as_of()
    try:
        as_of = answered_as_of(raw_as_of, now)
    except BadInput as exc:
        raise BadRequest(f"as_of: {exc}") from None
    return arxiv_id, DIRECTIONS[direction], depth, per_paper, as_of, is_pinned(as_of, now)


def integrity_body(result: dict) -> str:
    """The integrity check for people: the verdict, the rules, and every digest stated and recomputed."""
    def verdict(ok: bool) -> str:
        return '<strong class="ok">matches</strong>' if ok else '<strong class="bad">does not match</strong>'

    context = result["context_digest"]
    rows = "".join(
        f"<tr><td>{escape(c['direction'])}</td><td><code>{escape(c['observation_id'])}</code></td>"
        f"<td><code>{escape(c['stated'])}</code></td><td>{verdict(c['matches'])}</td></tr>"
        for c in result["observations"])
    rules = "".join(f"<div><dt>{escape(name.replace('_', ' '))}</dt><dd><code>{escape(rule)}</code></dd></div>"
                    for name, rule in result["rules"].items())
    overall = ("Every digest matches the canonical bytes." if result["all_match"]
               else "At least one digest does not match the canonical bytes.")
    return f"""
<p class="kicker">arXiv:{escape(result["arxiv_id"])} · as of {time_tag(result["as_of"])}</p>
<h1>Integrity check</h1>
<p>{overall} The record was recomputed from <a href="{escape(result["record"])}">its canonical JSON</a>
(<code>{escape(result["record_sha256"])}</code>).</p>
<h2>Context digest</h2>
<p><code>{escape(context["stated"])}</code> {verdict(context["matches"])}</p>
<h2>Rules</h2><dl class="rules">{rules}</dl>
<h2>Observation digests</h2>
<div class="table-wrap" tabindex="0" role="region" aria-label="Observation digests"><table><thead><tr><th>Direction</th><th>Observation</th><th>Stated digest</th><th>Recomputed</th></tr></thead>
<tbody>{rows}</tbody></table></div>
<p class="formats">The same check as JSON: request this page with <code>Accept: application/json</code>.</p>
"""


def graphiql_link(arxiv_id: str) -> str:
    query = (f'{{ paper(arxivId: "{arxiv_id}") {{ title inbound(first: 10) {{ totalCount edges {{ node {{ '
             'referenceIndex citingPaper { arxivId title } resolution { status } standingNotice { state } } } } } }')
    return "/graphql?" + urlencode({"query": query})


async def not_found(request: Request, exc: HTTPException) -> Response:
    """404 and 405 as every error of its path is said (the GraphQL shape on /graphql), with the headers
    Starlette gave it (a 405's Allow: the methods the path takes)."""
    allowed = (exc.headers or {}).get("Allow")
    message = f"{request.method} is not allowed here; use {allowed}" if exc.status_code == 405 and allowed \
        else exc.detail or "not found"
    if wants_html(request):
        response = error_for(request, exc.status_code, message)
    else:
        from app.http import error_response

        response = error_response(exc.status_code, message, request.url.path)
    response.headers.update(exc.headers or {})
    return response
