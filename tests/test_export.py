"""The graph out in analysis formats: HTTP neighbourhood exports and `pith-graph graph-export`, read back by
networkx, pandas and plain json, compared with GraphQL and with the database."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import subprocess
import sys
import tempfile
import uuid
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import asyncpg
import networkx as nx
import pandas as pd
import pytest
import pytest_asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.export import measured
from tests.conftest import LiveServer, StatementLog, drop_database, most_cited, serve, synthetic_database

pytestmark = pytest.mark.asyncio(loop_scope="session")

IDS = {"arxiv_id": str}  # the bare arXiv id column; node ids and edge ends need no option (typed: arxiv:...)


def node(arxiv_id: str) -> str:
    """A paper's node id in every export format."""
    return f"arxiv:{arxiv_id}"
HOOD = """query($id: String!, $direction: Direction!, $depth: Int!, $per: Int!, $asOf: DateTime) {
  neighbourhood(arxivId: $id, direction: $direction, depth: $depth, perPaper: $per, asOf: $asOf) {
    truncated papers { arxivId title latestVersion primaryCategory submittedAt }
    edges { observationId referenceIndex source citingPaper { arxivId } citedPaper { arxivId }
            resolution { status } standingNotice { state } } } }"""


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def synthetic(admin_url):
    url = await synthetic_database(admin_url, "pith_test_export", 300, 5)
    conn = await asyncpg.connect(url)
    try:
        high = await conn.fetchval("SELECT max(observed_at) FROM paper_snapshots")
    finally:
        await conn.close()
    async for served in serve(url, StatementLog()):
        yield served, url, high
    await drop_database(admin_url, url)


def whole(t: datetime) -> str:
    return t.astimezone(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def read_back(format: str, data: bytes) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(nodes, edges) as pandas reads them (CSV), as networkx reads them (GraphML), or line by line."""
    if format == "csv":
        members = zipfile.ZipFile(io.BytesIO(data))
        assert members.namelist() == ["nodes.csv", "edges.csv"]
        return (pd.read_csv(members.open("nodes.csv"), dtype=IDS, keep_default_na=False),
                pd.read_csv(members.open("edges.csv"), dtype=IDS, keep_default_na=False))
    if format == "graphml":
        g = nx.read_graphml(io.BytesIO(data), force_multigraph=True)
        nodes = pd.DataFrame([{"id": n, **a} for n, a in g.nodes(data=True)])
        edges = pd.DataFrame([{"source": u, "target": v, "edge_id": k, **a} for u, v, k, a in
                              g.edges(keys=True, data=True)])
        assert (edges["edge_id"] == edges["observation_id"]).all()
        return nodes, edges
    rows = [json.loads(line) for line in data.decode().splitlines()]
    kinds = [r["type"] for r in rows]
    assert kinds == sorted(kinds, key=lambda k: k != "node"), "nodes come before edges"
    return (pd.DataFrame([r for r in rows if r["type"] == "node"]),
            pd.DataFrame([r for r in rows if r["type"] == "edge"]))


CASES = [("INBOUND", 2, 10), ("OUTBOUND", 2, 100), ("BOTH", 1, 5), ("INBOUND", 3, 3), ("BOTH", 2, 20)]


@pytest.mark.parametrize("format", ["csv", "graphml", "ndjson"])
async def test_the_neighbourhood_exports_hold_what_graphql_neighbourhood_gives(synthetic, format):
    served, url, high = synthetic
    at = whole(high - timedelta(days=30))
    conn = await asyncpg.connect(url)
    try:
        # The most cited papers, and one from the middle, each known by the instant.
        known = "SELECT arxiv_id FROM paper_snapshots WHERE observed_at <= $1"
        roots = [r[0] for r in await conn.fetch(
            f"SELECT cited_arxiv_id FROM citation_observations WHERE cited_arxiv_id IN ({known}) "
            "GROUP BY 1 ORDER BY count(*) DESC, 1 LIMIT 3", high - timedelta(days=30))]
        middle = sorted({r[0] for r in await conn.fetch(known, high - timedelta(days=30))})
        roots.append(middle[len(middle) // 2])
    finally:
        await conn.close()
    compared = 0
    for (direction, depth, per), root in zip(CASES, roots + roots):
        body = await served.graphql(HOOD, {"id": root, "direction": direction, "depth": depth, "per": per,
                                           "asOf": at})
        assert "errors" not in body, body
        hood = body["data"]["neighbourhood"]
        response = await served.client.get(f"/graph/neighbourhood.{format}", params={
            "arxiv_id": root, "direction": direction.lower(), "depth": depth, "per_paper": per, "as_of": at})
        assert response.status_code == 200, response.text
        assert response.headers["x-truncated"] == str(hood["truncated"]).lower()
        nodes, edges = read_back(format, response.content)
        assert list(nodes["id"]) == [node(p["arxivId"]) for p in hood["papers"]]
        assert list(nodes["arxiv_id"]) == [p["arxivId"] for p in hood["papers"]]
        assert set(nodes["kind"]) == {"paper"}
        assert list(nodes["title"]) == [p["title"] for p in hood["papers"]]
        assert [int(v) for v in nodes["latest_version"]] == [p["latestVersion"] for p in hood["papers"]]
        assert list(nodes["submitted"]) == [p["submittedAt"] for p in hood["papers"]]
        if format == "graphml":  # networkx keeps edges by node, not in file order
            assert len(edges) == len(hood["edges"])
            edges = edges.set_index("observation_id").loc[[e["observationId"] for e in hood["edges"]]].reset_index()
        assert list(edges["observation_id"]) == [e["observationId"] for e in hood["edges"]]
        assert list(edges["source"]) == [node(e["citingPaper"]["arxivId"]) for e in hood["edges"]]
        assert list(edges["target"]) == [node(e["citedPaper"]["arxivId"]) for e in hood["edges"]]
        assert [int(v) for v in edges["reference_index"]] == [e["referenceIndex"] for e in hood["edges"]]
        assert list(edges["citation_source"]) == [e["source"] for e in hood["edges"]]
        assert [s.upper() for s in edges["resolution_status"]] == [e["resolution"]["status"] for e in hood["edges"]]
        assert [s.upper() for s in edges["standing_state"]] == [e["standingNotice"]["state"] for e in hood["edges"]]
        compared += len(hood["edges"])
    assert compared > 100


@pytest.mark.parametrize("query, status, message", [
    ("", 400, "arxiv_id: required"),
    ("arxiv_id=nonsense", 400, "arxiv_id:"),
    ("arxiv_id=1501.00001&depth=4", 400, "depth: '4' is not allowed; give a whole number from 1 to 3"),
    ("arxiv_id=1501.00001&depth=-1", 400, "depth:"),
    ("arxiv_id=1501.00001&per_paper=101", 400, "per_paper: '101' is not allowed"),
    ("arxiv_id=1501.00001&per_paper=ten", 400, "per_paper:"),
    ("arxiv_id=1501.00001&direction=sideways", 400, "give inbound, outbound or both"),
    ("arxiv_id=1501.00001&as_of=yesterday", 400, "as_of:"),
    ("arxiv_id=1501.00001&as_of=1990-01-01T00:00:00Z", 404, "no paper 1501.00001 is known"),
    ("arxiv_id=9912.99999", 404, "no paper 9912.99999"),
])
async def test_bad_export_requests_say_what_is_wrong(synthetic, query, status, message):
    served, _, _ = synthetic
    response = await served.client.get(f"/graph/neighbourhood.graphml?{query}")
    assert response.status_code == status, response.text
    assert message in response.json()["error"]["message"]


@settings(max_examples=int(os.environ.get("PITH_FUZZ_EXAMPLES", "80")), deadline=None,
          suppress_health_check=list(HealthCheck))
@given(format=st.sampled_from(["csv", "graphml", "ndjson", "xml", "csv.zip", ""]),
       params=st.dictionaries(
           st.sampled_from(["arxiv_id", "direction", "depth", "per_paper", "as_of", "other"]),
           st.one_of(st.text(max_size=40), st.sampled_from(
               ["1501.00001", "both", "OUTBOUND", "2", "100", "0", "²", "1e3", "-1", " 3 ", "2026-07-01T00:00:00Z",
                "2026-07-01", "9" * 40]))))
async def test_no_export_request_gets_a_server_error(synthetic, format, params):
    served, _, _ = synthetic
    response = await served.client.get(f"/graph/neighbourhood.{format}", params=params)
    assert response.status_code in (200, 400, 404), (params, response.status_code, response.text[:300])
    if response.status_code != 200:
        assert response.json()["error"]["message"]


async def test_an_unknown_export_format_is_not_found(synthetic):
    served, _, _ = synthetic
    response = await served.client.get("/graph/neighbourhood.xlsx?arxiv_id=1501.00001")
    assert response.status_code == 404 and "neighbourhood.graphml" in response.text


def export(url: str, *args: str, stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "graph-export", *args],
                          env={**os.environ, "DATABASE_URL": url}, stdout=subprocess.PIPE, stderr=stderr,
                          timeout=600)


async def facts(url: str, at: datetime) -> dict:
    conn = await asyncpg.connect(url)
    try:
        return {
            "edges": {str(r[0]) for r in await conn.fetch(
                "SELECT observation_id FROM citation_observations WHERE visible_from <= $1", at)},
            "papers": {r[0] for r in await conn.fetch(
                "SELECT DISTINCT arxiv_id FROM paper_snapshots WHERE observed_at <= $1", at)},
        }
    finally:
        await conn.close()


@pytest.mark.parametrize("format", ["csv", "graphml", "ndjson", "parquet"])
async def test_the_whole_graph_export_has_every_visible_observation_once(synthetic, tmp_path, format):
    served, url, high = synthetic
    at = high - timedelta(days=60)
    target = tmp_path / f"graph.{format}"
    done = export(url, "--format", format, "--as-of", whole(at), "--output", str(target))
    assert done.returncode == 0, done.stderr.decode()
    if format == "parquet":
        nodes = pd.read_parquet(target / "nodes.parquet")
        edges = pd.read_parquet(target / "edges.parquet")
    else:
        nodes, edges = read_back(format, target.read_bytes())
    if format == "graphml":
        import igraph

        g = igraph.Graph.Read_GraphML(str(target))
        assert (g.vcount(), g.ecount()) == (len(nodes), len(edges)) and g.is_directed()
        assert sorted(g.es["observation_id"]) == sorted(edges["observation_id"])
    expected = await facts(url, at)
    assert len(edges) == len(expected["edges"]) and set(edges["observation_id"]) == expected["edges"]
    ids = list(nodes["id"])
    assert len(ids) == len(set(ids)), "each node once"
    kinds = dict(zip(nodes["id"], nodes["kind"]))
    papers = {node(p) for p in expected["papers"]}
    assert {i for i, k in kinds.items() if k == "paper"} == papers
    assert set(edges["source"]) <= papers and set(edges["target"]) <= set(ids)
    assert {"paper", "work", "reference"} == set(kinds.values())
    references = [t for t in edges["target"] if kinds[t] == "reference"]
    assert len(references) == len(set(references)), "an unlinked reference is a node of its own"
    assert set(nodes["id"]) == set(edges["source"]) | set(edges["target"]) | papers
    assert f"{len(edges):,} edges" in done.stderr.decode()


async def test_a_notebook_reads_the_exports_with_no_options(synthetic, tmp_path):
    """pandas guesses column types: typed node ids (arxiv:1501.00010, never a number) keep every edge end
    equal to a node id, in CSV and ndjson alike."""
    _, url, high = synthetic
    done = export(url, "--format", "csv", "--as-of", whole(high), "--output", str(tmp_path / "g.csv"))
    assert done.returncode == 0, done.stderr.decode()
    members = zipfile.ZipFile(tmp_path / "g.csv")
    nodes, edges = pd.read_csv(members.open("nodes.csv")), pd.read_csv(members.open("edges.csv"))
    done = export(url, "--format", "ndjson", "--as-of", whole(high))
    lines = pd.read_json(io.BytesIO(done.stdout), lines=True)
    for nodes, edges in ((nodes, edges), (lines[lines["type"] == "node"], lines[lines["type"] == "edge"])):
        ids = set(nodes["id"])
        assert len(edges) > 1000 and set(edges["source"]) <= ids and set(edges["target"]) <= ids
        assert any(i.endswith("0") for i in ids), "ids with trailing zeros, the ones a float would change"
        assert {i.split(":")[0] for i in ids} == {"arxiv", "work", "reference"}
        assert {"cited_work_event_type", "cited_work_event_source", "cited_work_event_reported_at",
                "cited_work_event_observed_at"} <= set(edges.columns)


async def test_pagerank_over_the_graphml_export_with_what_the_analysis_extra_installs(synthetic, tmp_path):
    _, url, high = synthetic
    done = export(url, "--format", "graphml", "--as-of", whole(high))
    assert done.returncode == 0, done.stderr.decode()
    graph = nx.DiGraph(nx.read_graphml(io.BytesIO(done.stdout)))
    rank = nx.pagerank(graph)  # scipy's sparse solver (networkx >= 3)
    assert abs(sum(rank.values()) - 1.0) < 1e-6
    top = max(rank, key=rank.get)
    assert top.startswith("arxiv:") and graph.in_degree(top) > 0


async def test_edge_attributes_agree_with_graphql(synthetic, tmp_path):
    """Resolution, standing and the retraction flag of every edge, against GraphQL at the same instant."""
    served, url, high = synthetic
    at = whole(high)
    conn = await asyncpg.connect(url)
    try:
        # Retract a few checked works a day before the instant, and reinstate one of them: both rules show.
        works = [r[0] for r in await conn.fetch(
            "SELECT DISTINCT o.work_id FROM citation_observations AS o JOIN standing_receipts AS r USING (work_id) "
            "WHERE r.observed_at <= $1 ORDER BY 1 LIMIT 4", high - timedelta(days=2))]
        assert len(works) == 4
        await conn.executemany(
            "INSERT INTO work_events (work_id, source, event_type, observed_at) VALUES ($1, 'retraction_watch', $2, $3)"
            " ON CONFLICT DO NOTHING",
            [(w, "retraction", high - timedelta(days=1)) for w in works]
            + [(works[0], "reinstatement", high - timedelta(hours=1))])
    finally:
        await conn.close()
    done = export(url, "--format", "ndjson", "--as-of", at)
    assert done.returncode == 0
    _, edges = read_back("ndjson", done.stdout)
    by_id = edges.set_index("observation_id")
    papers = sorted({source.removeprefix("arxiv:") for source in edges["source"]})
    retracted = 0
    for start in range(0, len(papers), 10):
        batch = papers[start:start + 10]
        body = await served.graphql("""query($ids: [String!]!, $at: DateTime) { papers(arxivIds: $ids, asOf: $at) {
            arxivId outbound(first: 100) { totalCount edges { node { observationId resolution { status }
              standingNotice { state } citedPaper { arxivId } cited: citedWork { workId } } } }
            retracted: outbound(citesRetracted: true, first: 100) { edges { node { observationId } } } } }""",
                                    {"ids": batch, "at": at})
        assert "errors" not in body, body
        for paper in body["data"]["papers"]:
            flagged = {e["node"]["observationId"] for e in paper["retracted"]["edges"]}
            retracted += len(flagged)
            assert paper["outbound"]["totalCount"] <= 100
            for edge in paper["outbound"]["edges"]:
                edge_node = edge["node"]
                row = by_id.loc[edge_node["observationId"]]
                assert row["resolution_status"].upper() == edge_node["resolution"]["status"]
                assert row["standing_state"].upper() == edge_node["standingNotice"]["state"]
                assert bool(row["cited_work_retracted"]) == (edge_node["observationId"] in flagged)
                if edge_node["citedPaper"]:
                    assert row["target"] == node(edge_node["citedPaper"]["arxivId"])
                elif edge_node["cited"]["workId"]:
                    assert row["target"] in (f"work:{edge_node['cited']['workId']}",
                                             f"reference:{edge_node['observationId']}")
                else:
                    assert row["target"] == f"reference:{edge_node['observationId']}"
    assert retracted > 0, "the graph has retracted works to compare"


@pytest.mark.parametrize("direction, depth", [("outbound", 2), ("both", 1), ("inbound", 2)])
async def test_a_rooted_export_is_the_uncapped_neighbourhood(synthetic, direction, depth):
    """Where GraphQL's walk is not cut by perPaper (100), the uncapped export holds the same papers and edges."""
    served, url, high = synthetic
    at = whole(high)
    conn = await asyncpg.connect(url)
    try:
        # A root whose walk stays under the caps: few citers and few references at every hop.
        candidates = [r[0] for r in await conn.fetch(
            "SELECT arxiv_id FROM paper_snapshots GROUP BY 1 ORDER BY 1 DESC LIMIT 40")]
    finally:
        await conn.close()
    for root in candidates:
        body = await served.graphql(HOOD, {"id": root, "direction": direction.upper(), "depth": depth, "per": 100,
                                           "asOf": at})
        hood = body["data"]["neighbourhood"]
        if hood is None or hood["truncated"] or len(hood["edges"]) < 3:
            continue
        done = export(url, "--format", "ndjson", "--as-of", at, "--root", root, "--direction", direction,
                      "--depth", str(depth))
        assert done.returncode == 0, done.stderr.decode()
        nodes, edges = read_back("ndjson", done.stdout)
        assert set(nodes["id"]) == {node(p["arxivId"]) for p in hood["papers"]}
        assert set(edges["observation_id"]) == {e["observationId"] for e in hood["edges"]}
        assert len(edges) == len(hood["edges"])
        return
    pytest.fail("no root with an uncut walk among the candidates")


async def test_graph_export_refuses_bad_arguments(synthetic, tmp_path):
    _, url, _ = synthetic
    for args, message in [(["--format", "parquet"], "give --output FOLDER"),
                          (["--format", "csv", "--root", "1501.00001", "--depth", "0"], "--depth 0 is out of range"),
                          (["--format", "csv", "--as-of", "soon"], "not a valid instant"),
                          (["--format", "csv", "--root", "9912.99999", "-o", str(tmp_path / "x.zip")],
                           "no paper 9912.99999")]:
        done = export(url, *args)
        assert done.returncode != 0 and message in done.stderr.decode(), (args, done.stderr.decode())


async def test_a_progress_bar_on_a_terminal_only(synthetic, tmp_path):
    _, url, _ = synthetic
    plain = export(url, "--format", "ndjson", "-o", str(tmp_path / "a.ndjson"))
    assert "[###" not in plain.stderr.decode()
    leader, follower = pty.openpty()
    try:
        done = export(url, "--format", "ndjson", "-o", str(tmp_path / "b.ndjson"), stderr=follower)
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
    assert done.returncode == 0
    assert b"[##############################]" in seen and b"nodes and edges" in seen
    assert (tmp_path / "a.ndjson").read_bytes().count(b"\n") == (tmp_path / "b.ndjson").read_bytes().count(b"\n")


async def test_a_5000_paper_graph_exports_every_visible_observation_in_flat_memory(admin_url, tmp_path):
    """Uncapped, streamed: as many edges as visible observations (one count), and the exporter's peak memory
    stays far below what holding 200,000 edges would take (bench/export.py runs it at 100,000 and 1,000,000
    papers)."""
    url = await synthetic_database(admin_url, "pith_test_export5k", 5000, 3)
    try:
        conn = await asyncpg.connect(url)
        try:
            now = await conn.fetchval("SELECT date_trunc('second', now())")
            visible = await conn.fetchval("SELECT count(*) FROM citation_observations WHERE visible_from <= $1", now)
        finally:
            await conn.close()
        out = tmp_path / "graph.ndjson"
        run = measured([sys.executable, "-m", "app.cli", "graph-export", "--format", "ndjson", "--as-of", whole(now),
                        "-o", str(out)], {**os.environ, "DATABASE_URL": url}, timeout=600)
        assert run["exit"] == 0, run["stderr"]
        edges = 0
        with out.open("rb") as lines:
            for line in lines:
                edges += line.startswith(b'{"type":"edge"')
        assert visible > 150_000 and edges == visible
        # Holding the edges would take hundreds of MB; streaming keeps the exporter near its start-up size.
        assert run["peak_mb"] < 150, f"peak RSS {run['peak_mb']:.0f} MB"
    finally:
        await drop_database(admin_url, url)


# --- the README's research recipes, run from examples/ against a server over the same graph ----------

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def server(synthetic):
    _, url, _ = synthetic
    live = LiveServer(url)
    yield live
    live.stop()


def recipe(name: str, *args: str, plain: bool = True) -> subprocess.CompletedProcess:
    # -S (no site-packages): the standard-library recipes run on a plain Python install.
    return subprocess.run([sys.executable, *(["-S"] if plain else []), str(EXAMPLES / name), *args],
                          capture_output=True, text=True, timeout=300)


async def test_recipe_papers_citing_retracted_work_and_since_when(synthetic, server):
    _, url, high = synthetic
    start, end = high - timedelta(days=20), high - timedelta(days=5)
    conn = await asyncpg.connect(url)
    try:
        papers = [r[0] for r in await conn.fetch(
            "SELECT citing_arxiv_id FROM citation_observations WHERE work_id IS NOT NULL GROUP BY 1 "
            "ORDER BY count(*) DESC, 1 LIMIT 40")]
        # Retract one work cited by each of ten papers inside the window, one just after it, and reinstate one.
        works = [await conn.fetchval("SELECT work_id FROM citation_observations WHERE citing_arxiv_id = $1 AND "
                                     "work_id IS NOT NULL AND visible_from <= $2 ORDER BY reference_index DESC LIMIT 1",
                                     p, start) for p in papers[:12]]
        await conn.executemany(
            "INSERT INTO work_events (work_id, source, event_type, observed_at, notice_doi) "
            "VALUES ($1, 'retraction_watch', $2, $3, '10.5555/notice') ON CONFLICT DO NOTHING",
            [(w, "retraction" if i % 2 else "withdrawal", start + timedelta(days=1 + i)) for i, w in enumerate(works[:10])]
            + [(works[10], "retraction", end + timedelta(seconds=1)), (works[11], "retraction", start),
               (works[11], "reinstatement", start + timedelta(days=1))])
        # What the recipe must find, straight from the tables: every visible reference at `end` to a work whose
        # latest retraction, withdrawal or reinstatement by then is a retraction or withdrawal, with that event.
        retracted = """
            SELECT o.citing_arxiv_id, o.reference_index, d.event_type, d.observed_at FROM citation_observations AS o
            JOIN LATERAL (SELECT e.event_type, e.observed_at FROM work_events AS e WHERE e.work_id = o.work_id
                          AND e.observed_at <= $1 AND e.event_type IN ('retraction', 'withdrawal', 'reinstatement')
                          ORDER BY e.observed_at DESC, e.source DESC, e.reported_at DESC NULLS LAST,
                                   e.event_type DESC LIMIT 1) AS d ON d.event_type <> 'reinstatement'
            WHERE o.visible_from <= $1 AND EXISTS (SELECT 1 FROM work_snapshots AS w
                                                   WHERE w.work_id = o.work_id AND w.observed_at <= $1)"""
        every = sorted((r[0], r[1], r[2]) for r in await conn.fetch(retracted, end))
        recent = sorted((r[0], r[1], r[2]) for r in await conn.fetch(retracted, end) if r[3] > start)
    finally:
        await conn.close()
    assert len(recent) >= 10 and len(every) > len(recent)
    # Every paper, walked with browsePapers.
    done = recipe("retracted_references.py", "--url", server.base + "/graphql", "--as-of", whole(end))
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert sorted((r["arxiv_id"], int(r["reference_index"]), r["event"]) for r in rows) == every
    assert all(r["retracted_since"] and r["event_source"] for r in rows)
    citing = len({r[0] for r in every})
    assert f"{len(every)} retracted or withdrawn references among {citing} papers citing retracted work" in done.stderr
    # Named papers, and only retractions observed after --since.
    ids_file = Path(tempfile.mkdtemp()) / "corpus.txt"
    ids_file.write_text("# a corpus\n" + "\n".join(papers[20:]) + "\n")
    done = recipe("retracted_references.py", "--url", server.base + "/graphql", "--as-of", whole(end),
                  "--since", whole(start), *papers[:20], "--ids-file", str(ids_file))
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert sorted((r["arxiv_id"], int(r["reference_index"]), r["event"]) for r in rows) == \
        [r for r in recent if r[0] in papers]
    assert "among 40 papers" in done.stderr


async def test_recipe_citation_growth_by_publication_year(synthetic, server):
    _, url, _ = synthetic
    paper = await most_cited(url)
    conn = await asyncpg.connect(url)
    try:
        # Distinct citing papers by the year of their version 1, straight from the tables.
        expected = [(r[0], r[1]) for r in await conn.fetch(
            """SELECT extract(year FROM s.submitted_at AT TIME ZONE 'UTC')::int, count(*) FROM
               (SELECT DISTINCT citing_arxiv_id FROM citation_observations WHERE cited_arxiv_id = $1
                AND visible_from <= now()) AS c
               JOIN LATERAL (SELECT submitted_at FROM paper_snapshots WHERE arxiv_id = c.citing_arxiv_id
                             ORDER BY observed_at DESC LIMIT 1) AS s ON true GROUP BY 1 ORDER BY 1""", paper)]
        category = await conn.fetchval("SELECT primary_category FROM paper_snapshots WHERE arxiv_id = $1 LIMIT 1", paper)
        in_category = await conn.fetchval("SELECT count(DISTINCT arxiv_id) FROM paper_snapshots AS s WHERE NOT EXISTS "
                                          "(SELECT 1 FROM paper_snapshots AS n WHERE n.arxiv_id = s.arxiv_id AND "
                                          "n.observed_at > s.observed_at) AND s.primary_category = $1", category)
    finally:
        await conn.close()
    done = recipe("citation_growth.py", paper, "--url", server.base + "/graphql")
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [(int(r["year"]), int(r["citing_papers"])) for r in rows] == expected and sum(n for _, n in expected) > 10
    assert [int(r["cumulative"]) for r in rows] == [sum(n for _, n in expected[:i + 1]) for i in range(len(expected))]
    # What the recipe counts instead for a paper priced over the limit even alone (a hub): the bulk route's
    # whole inbound list and its citers' versions 1, the same years and counts.
    done = subprocess.run([sys.executable, "-S", "-c", "import json, sys; sys.path.insert(0, sys.argv[1]); "
                           "from citation_growth import by_year_from_bulk; "
                           "print(json.dumps(by_year_from_bulk(sys.argv[2], sys.argv[3], None)))",
                           str(EXAMPLES), server.base + "/graphql", paper], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [(r["year"], r["count"]) for r in json.loads(done.stdout)] == expected
    done = recipe("citation_growth.py", "--category", category, "--url", server.base + "/graphql")
    assert done.returncode == 0, done.stderr
    assert f"{in_category} papers" in done.stderr
    assert [(int(r["year"]), int(r["citing_papers"])) for r in csv.DictReader(io.StringIO(done.stdout))
            if r["arxiv_id"] == paper] == expected


async def test_recipe_two_hop_neighbourhood_into_networkx(synthetic, server):
    served, _, _ = synthetic
    root = "1501.00003"
    body = await served.graphql(HOOD, {"id": root, "direction": "BOTH", "depth": 2, "per": 20})
    hood = body["data"]["neighbourhood"]
    done = recipe("two_hop_networkx.py", root, "--base", server.base, "--direction", "both", "--per-paper", "20",
                  "--top", "5", plain=False)
    assert done.returncode == 0, done.stderr
    assert f"{len(hood['papers'])} papers, {len(hood['edges'])} citations" in done.stderr
    cited: dict[str, int] = {}
    for e in hood["edges"]:
        cited[e["citedPaper"]["arxivId"]] = cited.get(e["citedPaper"]["arxivId"], 0) + 1
    top = sorted(({p["arxivId"] for p in hood["papers"]}), key=lambda a: (-cited.get(a, 0), a))[:5]
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [(r["arxiv_id"], int(r["cited_within_walk"])) for r in rows] == [(a, cited.get(a, 0)) for a in top]


async def test_a_recipe_over_its_budget_stops_at_once_says_it_is_incomplete_and_runs_with_a_key(synthetic):
    """Anonymously over a small budget, a recipe waited out its patience (120 s) against a Retry-After of
    most of an hour, then exited with a CSV that did not say it was partial, and none of the recipes could
    send a key. Now a wait beyond the patience ends it at once, saying what the server asked for and that a
    key has a budget of its own; standard error says how much was written; with PITH_API_KEY it completes."""
    from tests.test_governance import new_key

    _, url, _ = synthetic
    conn = await asyncpg.connect(url)
    try:
        ids = [r[0] for r in await conn.fetch("SELECT DISTINCT arxiv_id FROM paper_snapshots ORDER BY 1 LIMIT 300")]
    finally:
        await conn.close()
    live = LiveServer(url, env={"PITH_ANONYMOUS_POINTS_PER_HOUR": "40"})
    try:
        done = recipe("citation_growth.py", *ids, "--url", live.base + "/graphql")
        assert done.returncode == 1, done.stderr
        assert "refused for now, 429" in done.stderr and "PITH_API_KEY" in done.stderr, done.stderr
        # It stopped when told of a wait beyond its patience (120 s), not after waiting that patience out.
        asked = re.search(r"the server asks for (\d+) s more, beyond this program's patience \(120 s", done.stderr)
        assert asked and int(asked.group(1)) > 120, done.stderr
        assert "incomplete: " in done.stderr and f" of {len(ids)} papers written" in done.stderr, done.stderr
        # Stopped while it lists the papers (browsePapers, with a key of a point an hour): nothing written, and
        # it says so; the CSV has its header.
        tiny = new_key(url, "tiny-" + uuid.uuid4().hex[:8], 1)
        listing = subprocess.run([sys.executable, "-S", str(EXAMPLES / "citation_growth.py"), "--submitted-from",
                                  "2000-01-01T00:00:00Z", "--url", live.base + "/graphql"], capture_output=True,
                                 text=True, timeout=300, env={**os.environ, "PITH_API_KEY": tiny})
        assert listing.returncode == 1 and "incomplete: 0 papers written" in listing.stderr, listing.stderr
        assert listing.stdout == "arxiv_id,year,citing_papers,cumulative\n"
        key = new_key(url, "recipe-" + uuid.uuid4().hex[:8], 100_000)
        env = {**os.environ, "PITH_API_KEY": key}
        keyed = subprocess.run([sys.executable, "-S", str(EXAMPLES / "citation_growth.py"), *ids, "--url",
                                live.base + "/graphql"], capture_output=True, text=True, timeout=300, env=env)
        assert keyed.returncode == 0, keyed.stderr
        assert f"{len(ids)} papers" in keyed.stderr and "incomplete" not in keyed.stderr
    finally:
        live.stop()


async def test_recipes_report_errors(server):
    done = recipe("citation_growth.py", "nonsense", "--url", server.base + "/graphql")
    assert done.returncode == 1 and "arxivId" in done.stderr
    done = recipe("retracted_references.py", "--since", "yesterday", "1501.00001", "--url", server.base + "/graphql")
    assert done.returncode == 1 and "--since: 'yesterday' is not a UTC instant" in done.stderr
    done = recipe("retracted_references.py", "nonsense", "--url", server.base + "/graphql")
    assert done.returncode == 1 and "arxivIds" in done.stderr


async def test_titles_xml_cannot_carry_still_give_readable_graphml(synthetic):
    """Markup characters are escaped; the few characters XML 1.0 forbids become U+FFFD; the rest is kept."""
    served, url, high = synthetic
    title = 'A & B <c> "d" \'e\' \x01\x0b tab\there é 🚀'
    conn = await asyncpg.connect(url)
    try:
        root = await conn.fetchval("SELECT cited_arxiv_id FROM citation_observations WHERE cited_arxiv_id IS NOT NULL "
                                   "ORDER BY cited_arxiv_id LIMIT 1")
        await conn.execute("INSERT INTO paper_snapshots (arxiv_id, observed_at, title, latest_version, primary_category,"
                           " submitted_at, last_updated) SELECT arxiv_id, $2, $3, latest_version + 1, primary_category,"
                           " submitted_at, last_updated FROM paper_snapshots WHERE arxiv_id = $1 ORDER BY observed_at"
                           " DESC LIMIT 1", root, high + timedelta(days=1), title)
    finally:
        await conn.close()
    response = await served.client.get("/graph/neighbourhood.graphml", params={
        "arxiv_id": root, "depth": 1, "as_of": whole(high + timedelta(days=2))})
    assert response.status_code == 200
    graph = nx.read_graphml(io.BytesIO(response.content), force_multigraph=True)
    assert graph.nodes[node(root)]["title"] == 'A & B <c> "d" \'e\' \ufffd\ufffd tab\there é 🚀'
    csv_response = await served.client.get("/graph/neighbourhood.csv", params={
        "arxiv_id": root, "depth": 1, "as_of": whole(high + timedelta(days=2))})
    nodes, _ = read_back("csv", csv_response.content)
    assert nodes.set_index("id").loc[node(root), "title"] == title  # CSV carries every character
