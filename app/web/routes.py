"""HTTP routes of records and pages."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from app import record
from app.timeparse import BadInput, now_as_of, parse_arxiv_id, parse_as_of
from loaders.record import record_rows

if TYPE_CHECKING:
    from app.main import App

STATIC = __file__.rsplit("/", 1)[0] + "/static"


def etag_of(document: dict) -> str:
    return 'W/"' + document["context_digest"].removeprefix("sha256:") + '"'


def not_modified(request: Request, etag: str) -> bool:
    given = request.headers.get("if-none-match", "")
    return any(tag.strip() in (etag, etag.removeprefix("W/"), "*") for tag in given.split(","))


def routes(app: "App") -> list:
    from app.main import error_response

    async def load_document(request: Request) -> dict | Response:
        try:
            arxiv_id = parse_arxiv_id(request.path_params["arxiv_id"])
            raw_as_of = request.query_params.get("as_of")
            as_of = parse_as_of(raw_as_of) if raw_as_of is not None else now_as_of()
        except BadInput as exc:
            return error_response(400, str(exc))
        session = app.session()
        try:
            (rows,) = await record_rows(session, [arxiv_id], as_of)
        finally:
            await session.close()
        if rows is None:
            return error_response(404, f"no paper {arxiv_id} is known as of {record.as_of_text(as_of)}",
                                  arxiv_id=arxiv_id, as_of=record.as_of_text(as_of))
        return record.build_record(rows)

    async def record_json(request: Request) -> Response:
        document = await load_document(request)
        if isinstance(document, Response):
            return document
        etag = etag_of(document)
        headers = {"ETag": etag, "Cache-Control": "public, max-age=60"}
        if not_modified(request, etag):
            return Response(status_code=304, headers=headers)
        return Response(record.canonical_bytes(document), media_type="application/json", headers=headers)

    return [
        Route("/paper/{arxiv_id:path}/citation-record.json", record_json),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
