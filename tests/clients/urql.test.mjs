// urql 6 with its defaults (its Accept list, GET for queries within the URL limit) and graphcache 9:
// queries, relay pagination at an instant, and subscriptions over SSE.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, fetchExchange, gql } from "@urql/core";
import { cacheExchange } from "@urql/exchange-graphcache";
import { relayPagination } from "@urql/exchange-graphcache/extras";
import { TRAVEL, URL_, decodeId, loadNextRecord, within } from "./lib.mjs";

const seen = [];
async function recording(input, init) {
  const response = await fetch(input, init);
  seen.push({ method: init?.method ?? "GET", accept: new Headers(init?.headers).get("accept"),
              type: response.headers.get("content-type"), etag: response.headers.get("etag") });
  return response;
}

// The setup the README shows.
function client() {
  return new Client({
    url: URL_,
    fetch: recording,
    fetchSubscriptions: true,
    exchanges: [cacheExchange({ resolvers: { Paper: { inbound: relayPagination() } } }), fetchExchange],
  });
}

const PAGE = gql`query UrqlInbound($id: String!, $asOf: DateTime, $first: Int, $after: String) {
  paper(arxivId: $id, asOf: $asOf) {
    id
    inbound(first: $first, after: $after) {
      totalCount
      edges { cursor node { id observationId resolution { status } } }
      pageInfo { hasNextPage endCursor }
    }
  }
}`;

test("queries with urql's default Accept get JSON (and GET answers their ETag)", async () => {
  const urql = client();
  const result = await urql.query(PAGE, { id: TRAVEL.root, asOf: TRAVEL.feb, first: 3 }).toPromise();
  assert.equal(result.error, undefined);
  assert.equal(result.data.paper.inbound.totalCount, TRAVEL.counts.feb);
  const request = seen.at(-1);
  assert.equal(request.method, "GET");
  assert.match(request.accept, /text\/event-stream/);
  assert.match(request.type, /^application\/graphql-response\+json/);
  assert.ok(request.etag);
});

test("graphcache keeps two instants apart and pages one of them", async () => {
  const urql = client();
  const feb = await urql.query(PAGE, { id: TRAVEL.root, asOf: TRAVEL.feb, first: 4 }).toPromise();
  const may = await urql.query(PAGE, { id: TRAVEL.root, asOf: TRAVEL.may, first: 4 }).toPromise();
  assert.equal(may.data.paper.inbound.totalCount, TRAVEL.counts.may);
  assert.equal(may.data.paper.inbound.edges[0].node.resolution.status, "VERIFIED_EXACT");
  const cached = await urql.query(PAGE, { id: TRAVEL.root, asOf: TRAVEL.feb, first: 4 }, { requestPolicy: "cache-only" }).toPromise();
  assert.equal(cached.data.paper.inbound.totalCount, TRAVEL.counts.feb);
  assert.equal(cached.data.paper.inbound.edges[0].node.resolution.status, "UNRESOLVED");
  // relayPagination: each page merged into February's connection.
  let info = feb.data.paper.inbound.pageInfo;
  let merged = feb.data.paper.inbound;
  while (info.hasNextPage) {
    const next = await urql.query(PAGE, { id: TRAVEL.root, asOf: TRAVEL.feb, first: 4, after: info.endCursor }).toPromise();
    merged = next.data.paper.inbound;
    info = merged.pageInfo;
  }
  assert.equal(merged.edges.length, TRAVEL.counts.feb);
  assert.ok(merged.edges.every((e) => decodeId(e.node.id).endsWith(`@${TRAVEL.feb}`)));
});

test("a subscription over SSE receives the citation a record load adds", async () => {
  const urql = client();
  const SUB = gql`subscription UrqlCitations($id: String!) { citationAdded(arxivId: $id) { cursor observation { id citingPaper { arxivId } } } }`;
  let resolve;
  const first = new Promise((r) => { resolve = r; });
  const errors = [];
  const { unsubscribe } = urql.subscription(SUB, { id: TRAVEL.live }).subscribe((result) => {
    if (result.error) errors.push(result.error);
    else resolve(result.data);
  });
  await new Promise((r) => setTimeout(r, 700)); // the stream is open before the load commits
  loadNextRecord();
  const event = await within(15000, first, "citationAdded over SSE");
  unsubscribe();
  assert.deepEqual(errors, []);
  assert.ok(event.citationAdded.cursor);
  assert.ok(event.citationAdded.observation.citingPaper.arxivId);
  assert.ok(seen.some((s) => s.method === "POST" && /^text\/event-stream/.test(s.type ?? "")));
});
