"""GraphQL over HTTP as clients expect it: media types, status codes, error shapes, and no input reaches a 500."""

from __future__ import annotations

import base64
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import SEED_AS_OF

pytestmark = pytest.mark.asyncio(loop_scope="session")

GQL = "application/graphql-response+json"
JSON_ = "application/json"
PAPER = "2402.15627"


def cursor(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


# (name, method, body or query params, accept, expected status, expected code or None for a result)
CASES = [
    ("mutation over POST, json", "POST", {"query": "mutation { __typename }"}, JSON_, 200, "OPERATION_NOT_SUPPORTED"),
    ("mutation over POST, graphql", "POST", {"query": "mutation { __typename }"}, GQL, 400, "OPERATION_NOT_SUPPORTED"),
    ("mutation over GET", "GET", {"query": "mutation { __typename }"}, JSON_, 405, "METHOD_NOT_ALLOWED"),
    ("subscription over POST", "POST", {"query": "subscription { x }"}, GQL, 400, "OPERATION_NOT_SUPPORTED"),
    ("unknown operationName", "POST", {"query": "query A { __typename }", "operationName": "B"}, GQL, 400,
     "OPERATION_RESOLUTION_FAILURE"),
    ("two operations, no name", "POST", {"query": "query A { __typename } query B { __typename }"}, GQL, 400,
     "OPERATION_RESOLUTION_FAILURE"),
    ("two operations, no name, json", "POST", {"query": "query A { __typename } query B { __typename }"}, JSON_, 200,
     "OPERATION_RESOLUTION_FAILURE"),
    ("fragment only", "POST", {"query": "fragment F on Query { __typename }"}, GQL, 400,
     "OPERATION_RESOLUTION_FAILURE"),
    ("parse error", "POST", {"query": "{ paper("}, GQL, 400, "GRAPHQL_PARSE_FAILED"),
    ("parse error, json", "POST", {"query": "{ paper("}, JSON_, 200, "GRAPHQL_PARSE_FAILED"),
    ("unknown field", "POST", {"query": "{ nope }"}, GQL, 400, "GRAPHQL_VALIDATION_FAILED"),
    ("missing required variable", "POST", {"query": "query($id: String!) { paper(arxivId: $id) { title } }"}, GQL,
     400, "BAD_USER_INPUT"),
    ("variable of the wrong type", "POST", {"query": "query($f: Int!) { paper(arxivId: \"%s\") { inbound(first: $f) "
                                                     "{ totalCount } } }" % PAPER, "variables": {"f": "seven"}},
     GQL, 400, "BAD_USER_INPUT"),
    ("empty id list", "POST", {"query": "{ papers(arxivIds: []) { title } }"}, GQL, 400, "BAD_USER_INPUT"),
    ("empty id list by variable", "POST", {"query": "query($ids: [String!]!) { papers(arxivIds: $ids) { title } }",
                                           "variables": {"ids": []}}, GQL, 400, "BAD_USER_INPUT"),
    ("cursor with an index beyond int32", "POST",
     {"query": "query($c: String) { paper(arxivId: \"%s\") { inbound(after: $c) { totalCount } } }" % PAPER,
      "variables": {"c": cursor(["in", "2409.19256", 2**40, "5bbf6308-359d-4b6c-aba3-505a1ec8a955"])}},
     JSON_, 200, "BAD_USER_INPUT"),
    ("cursor with a NUL", "POST",
     {"query": "query($c: String) { paper(arxivId: \"%s\") { inbound(after: $c) { totalCount } } }" % PAPER,
      "variables": {"c": cursor(["in", "24\u000009", 1, "5bbf6308-359d-4b6c-aba3-505a1ec8a955"])}},
     JSON_, 200, "BAD_USER_INPUT"),
    ("cursor of the other direction", "POST",
     {"query": "query($c: String) { paper(arxivId: \"%s\") { inbound(after: $c) { totalCount } } }" % PAPER,
      "variables": {"c": cursor(["out", 1, "5bbf6308-359d-4b6c-aba3-505a1ec8a955"])}}, JSON_, 200, "BAD_USER_INPUT"),
    ("cursor nested deep", "POST",
     {"query": "query($c: String) { paper(arxivId: \"%s\") { outbound(after: $c) { totalCount } } }" % PAPER,
      "variables": {"c": base64.urlsafe_b64encode(b"[" * 5000).decode()}}, JSON_, 200, "BAD_USER_INPUT"),
    ("search with NUL", "POST", {"query": "query($q: String!) { searchPapers(query: $q) { nodes { title } } }",
                                 "variables": {"q": "mega\u0000scale"}}, JSON_, 200, "BAD_USER_INPUT"),
    ("search with a lone surrogate", "POST", {"query": "query($q: String!) { searchPapers(query: $q) { nodes { title } } }",
                                              "variables": {"q": "mega\ud800scale"}}, JSON_, 200, "BAD_USER_INPUT"),
    ("first from a float variable", "POST",
     {"query": "query($f: Int!) { paper(arxivId: \"%s\", asOf: \"%s\") { inbound(first: $f) { totalCount } } }"
               % (PAPER, SEED_AS_OF), "variables": {"f": 5.0}}, GQL, 200, None),
    ("field error stays 200", "POST", {"query": "{ paper(arxivId: \"nonsense\") { title } }"}, GQL, 200,
     "BAD_USER_INPUT"),
    ("batch", "POST", [{"query": "{ __typename }"}], JSON_, 400, "BAD_REQUEST"),
    ("not JSON", "POST", b"{", JSON_, 400, "BAD_REQUEST"),
    ("NaN is not JSON", "POST", b'{"query": "{ __typename }", "variables": {"a": NaN}}', JSON_, 400, "BAD_REQUEST"),
    ("a number past a double", "POST", b'{"query": "{ __typename }", "variables": {"a": 1e999}}', JSON_, 400,
     "BAD_REQUEST"),
    ("no query", "POST", {"variables": {}}, GQL, 400, "BAD_REQUEST"),
    ("variables not an object", "POST", {"query": "{ __typename }", "variables": [1]}, GQL, 400, "BAD_REQUEST"),
    ("GET variables not JSON", "GET", {"query": "{ __typename }", "variables": "{"}, GQL, 400, "BAD_REQUEST"),
    ("nothing acceptable", "POST", {"query": "{ __typename }"}, "text/plain", 406, "NOT_ACCEPTABLE"),
]


async def send(served, method: str, body, accept: str, headers: dict | None = None):
    headers = {"accept": accept, **(headers or {})}
    if method in ("GET", "HEAD"):
        return await served.client.request(method, "/graphql", params=body, headers=headers)
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await served.client.post("/graphql", content=content,
                                    headers={"content-type": "application/json", **headers})


@pytest.mark.parametrize("name,method,body,accept,status,code", CASES, ids=[c[0] for c in CASES])
async def test_malformed_request_corpus(served, name, method, body, accept, status, code):
    response = await send(served, method, body, accept)
    assert response.status_code == status, response.text
    assert response.headers.get("x-request-id"), "every response carries its request id"
    content_type = response.headers["content-type"]
    assert content_type.startswith(GQL if accept == GQL else JSON_), content_type
    payload = response.json()
    if code is None:
        assert "errors" not in payload and payload["data"] is not None
        return
    assert isinstance(payload.get("errors"), list) and payload["errors"], payload
    first = payload["errors"][0]
    assert first["extensions"]["code"] == code, payload
    assert first["extensions"]["requestId"] == response.headers["x-request-id"]
    assert "Undefined" not in first["message"] and "Traceback" not in first["message"]
    request_error = status != 200 or "data" not in payload
    if code in ("GRAPHQL_VALIDATION_FAILED", "GRAPHQL_PARSE_FAILED") or (code == "BAD_USER_INPUT" and request_error
                                                                         and status == 400 and method == "POST"):
        assert first.get("locations"), payload  # the client is shown where
    if status == 400 and accept == GQL and code not in ("BAD_REQUEST",):
        assert "data" not in payload  # a request error: no execution, no data key
    if status == 405:
        assert response.headers["allow"] == "POST"


async def test_head_is_get_without_a_body(served):
    response = await served.client.head("/graphql", params={"query": "{ __typename }"}, headers={"accept": GQL})
    assert response.status_code == 200 and response.content == b""
    assert response.headers["content-type"].startswith(GQL)


async def test_a_sane_request_id_is_kept_and_an_odd_one_replaced(served):
    kept = await served.client.post("/graphql", json={"query": "{ __typename }"}, headers={"x-request-id": "abc-123"})
    assert kept.headers["x-request-id"] == "abc-123"
    odd = await served.client.post("/graphql", json={"query": "{ __typename }"}, headers={"x-request-id": "a b;<>"})
    assert odd.headers["x-request-id"] != "a b;<>" and len(odd.headers["x-request-id"]) == 32


async def test_json_and_graphql_media_types_are_negotiated(served):
    for accept, expected in [(None, JSON_), ("*/*", JSON_), (f"{JSON_}, {GQL}", GQL), (f"{JSON_};q=1, {GQL};q=0.5", JSON_),
                             (f"{GQL}, */*;q=0.1", GQL)]:
        headers = {} if accept is None else {"accept": accept}
        response = await served.client.post("/graphql", json={"query": "{ __typename }"}, headers=headers)
        assert response.status_code == 200 and response.headers["content-type"].startswith(expected), accept


# --- anything at all in every string argument --------------------------------------------------------

EXAMPLES = int(os.environ.get("PITH_FUZZ_EXAMPLES", "25")) * 4
STRING_ARGUMENTS = [
    "query($v: String!) { paper(arxivId: $v) { title } }",
    "query($v: String!) { papers(arxivIds: [$v]) { title } }",
    "query($v: ID!) { observation(id: $v) { id } }",
    "query($v: String!) { searchPapers(query: $v) { nodes { title } } }",
    "query($v: String) { paper(arxivId: \"%s\") { inbound(first: 3, after: $v) { totalCount } } }" % PAPER,
    "query($v: String) { paper(arxivId: \"%s\") { outbound(first: 3, after: $v) { totalCount } } }" % PAPER,
    "query($v: DateTime) { paper(arxivId: \"%s\", asOf: $v) { title } }" % PAPER,
    "query($v: String!) { citationRecord(arxivId: $v) { contextDigest } }",
    "query($v: String!) { neighbourhood(arxivId: $v, depth: 1, perPaper: 2) { truncated } }",
]
ANY_TEXT = st.text(alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF,
                                          categories=None), max_size=80)
CURSORS = st.one_of(
    st.builds(lambda v: cursor(v), st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), ANY_TEXT),
        lambda inner: st.lists(inner, max_size=5), max_leaves=12)),
    st.binary(max_size=200).map(lambda b: base64.urlsafe_b64encode(b).decode()),
    ANY_TEXT,
)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(query=st.sampled_from(STRING_ARGUMENTS), value=st.one_of(ANY_TEXT, CURSORS))
async def test_no_string_reaches_a_server_error(served, query, value):
    body = json.dumps({"query": query, "variables": {"v": value}}, ensure_ascii=True).encode()
    response = await served.client.post("/graphql", content=body, headers={"content-type": "application/json"})
    assert response.status_code < 500, response.text
    payload = response.json()
    codes = [e.get("extensions", {}).get("code") for e in payload.get("errors", [])]
    assert "INTERNAL_SERVER_ERROR" not in codes, payload


@pytest.mark.parametrize("arguments", ["first: 500", "first: 0", "first: -1", "last: 101"])
async def test_a_connection_with_an_argument_out_of_range_is_null_and_its_siblings_stay(served, arguments):
    """As a bad cursor: the refused connection is null with its error (its path, the argument, what is
    allowed), its parent and siblings answered, 200 under the GraphQL media type (a field error, not a
    request error: pricing takes the least the field could ask, and the field refuses it when it runs)."""
    query = '{ paper(arxivId: "%s") { arxivId inbound(%s) { totalCount } outbound(first: 1) { totalCount } } }' % (
        PAPER, arguments)
    response = await send(served, "POST", {"query": query}, GQL)
    assert response.status_code == 200, response.text
    body = response.json()
    paper = body["data"]["paper"]
    assert paper["arxivId"] == PAPER and paper["inbound"] is None and paper["outbound"]["totalCount"] >= 0, body
    (error,) = body["errors"]
    assert error["path"] == ["paper", "inbound"] and error["extensions"]["code"] == "BAD_USER_INPUT", error
    assert "allowed 1 to 100" in error["message"] and error["extensions"]["argument"] in ("first", "last"), error


async def test_a_method_a_path_does_not_take_is_405_with_allow_in_the_paths_error_shape(served):
    for method in ("PUT", "DELETE", "PATCH"):
        response = await served.client.request(method, "/graphql", content=b"{}")
        assert response.status_code == 405, response.text
        assert {"GET", "POST"} <= {m.strip() for m in response.headers["allow"].split(",")}, response.headers
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "METHOD_NOT_ALLOWED" and method in error["message"], error
    response = await served.client.post("/healthz")
    assert response.status_code == 405 and "GET" in response.headers["allow"], response.headers
    assert "POST is not allowed here" in response.json()["error"]["message"], response.text


async def test_a_compressed_request_body_is_refused_and_a_request_id_is_kept_only_when_sane(served):
    """A body labelled with a Content-Encoding is not read as if it were plain (415, whichever path would answer
    it); a client's X-Request-ID is echoed when it is a plain token, else replaced (never re-encoded)."""
    body = json.dumps({"query": '{ paper(arxivId: "%s") { title } }' % PAPER}).encode()
    for encoding in ("gzip", "br"):
        for _ in range(2):  # (the second, once the document has a plan)
            response = await served.client.post("/graphql", content=body, headers={
                "content-type": "application/json", "content-encoding": encoding})
            assert response.status_code == 415 and response.headers["accept-encoding"] == "identity", response.text
            assert response.json()["errors"][0]["extensions"]["code"] == "UNSUPPORTED_MEDIA_TYPE"
    plain = await served.client.post("/graphql", content=body, headers={"content-type": "application/json",
                                                                      "content-encoding": "identity"})
    assert plain.status_code == 200 and plain.json()["data"]["paper"]["title"], plain.text
    for given, kept in (("ok-1_2.3:4", True), ("\u00fc".encode().decode("latin-1"), False), ("a b", False),
                        ("x" * 65, False)):
        response = await served.client.get("/healthz", headers={"x-request-id": given.encode("latin-1")})
        assert (response.headers["x-request-id"] == given) is kept, (given, response.headers["x-request-id"])
        assert response.headers["x-request-id"].isascii()


async def test_a_get_kept_by_caches_varies_alike_on_200_and_304_and_one_no_cache_may_keep_says_so(served):
    """A cached GET answer (small here: no gzip) and its 304 vary alike; an answer that holds the client's own
    budget (rateLimit) has no validator and is kept by no cache; an APQ miss, an error, likewise."""
    def tokens(response):
        listed = [token.strip().lower() for token in response.headers["vary"].split(",")]
        assert len(listed) == len(set(listed)), response.headers  # each once (the app's Vary and GZip's)
        return set(listed)

    query = '{ paper(arxivId: "%s", asOf: "%s") { arxivId } }' % (PAPER, SEED_AS_OF)
    for encoding in ("gzip", "identity"):
        first = await served.client.get("/graphql", params={"query": query}, headers={"accept-encoding": encoding})
        assert first.status_code == 200 and len(first.content) < 1000 and first.headers["etag"], first.headers
        again = await served.client.get("/graphql", params={"query": query}, headers={
            "accept-encoding": encoding, "if-none-match": first.headers["etag"]})
        assert again.status_code == 304 and tokens(again) == tokens(first), (again.headers, first.headers)
    # A big one (gzip's size): the same, its Vary naming each field once.
    big = ('{ paper(arxivId: "%s", asOf: "%s") { arxivId title inbound(first: 50) { edges { node { referenceIndex '
           'citingPaper { arxivId title } resolution { status } } } } } }' % (PAPER, SEED_AS_OF))
    for encoding in ("gzip", "identity"):
        first = await served.client.get("/graphql", params={"query": big}, headers={"accept-encoding": encoding})
        assert first.status_code == 200 and len(first.content) >= 1000, first.headers
        again = await served.client.get("/graphql", params={"query": big}, headers={
            "accept-encoding": encoding, "if-none-match": first.headers["etag"]})
        assert again.status_code == 304 and tokens(again) == tokens(first) == {"accept", "accept-encoding"}, \
            (again.headers, first.headers)
    for params in ({"query": "{ rateLimit { used remaining } }"},
                   {"query": 'query A { ...F } fragment F on Query { rateLimit { used } }'},
                   {"extensions": json.dumps({"persistedQuery": {"version": 1, "sha256Hash": "0" * 64}})},
                   {"query": "{ nope }"}):
        response = await served.client.get("/graphql", params=params)
        assert response.headers["cache-control"] == "no-store" and "etag" not in response.headers, \
            (params, response.status_code, response.headers)
