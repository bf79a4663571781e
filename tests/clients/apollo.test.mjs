// Apollo Client 3 as a frontend uses it: one normalized cache, relayStylePagination, APQ over GET.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { createRequire } from "node:module";
import { TRAVEL, URL_, decodeId } from "./lib.mjs";

const require = createRequire(import.meta.url);
const { ApolloClient, InMemoryCache, HttpLink, gql } = require("@apollo/client/core");
const { relayStylePagination } = require("@apollo/client/utilities");
const { createPersistedQueryLink } = require("@apollo/client/link/persisted-queries");

// The setup the README shows.
function client(link = new HttpLink({ uri: URL_ })) {
  return new ApolloClient({
    link,
    cache: new InMemoryCache({
      typePolicies: { Paper: { fields: { inbound: relayStylePagination(["status"]), outbound: relayStylePagination(["status", "citesRetracted"]) } } },
    }),
  });
}

const PAGE = gql`query TravelInbound($id: String!, $asOf: DateTime, $first: Int, $after: String, $last: Int, $before: String) {
  paper(arxivId: $id, asOf: $asOf) {
    id arxivId
    inbound(first: $first, after: $after, last: $last, before: $before) {
      totalCount
      edges { cursor node { id observationId resolution { status } citingPaper { id arxivId } } }
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    }
  }
}`;

test("two instants of one paper stay apart in one cache", async () => {
  const apollo = client();
  const feb = await apollo.query({ query: PAGE, variables: { id: TRAVEL.root, asOf: TRAVEL.feb, first: 5 } });
  const may = await apollo.query({ query: PAGE, variables: { id: TRAVEL.root, asOf: TRAVEL.may, first: 5 } });
  assert.equal(feb.data.paper.inbound.totalCount, TRAVEL.counts.feb);
  assert.equal(may.data.paper.inbound.totalCount, TRAVEL.counts.may);
  assert.notEqual(feb.data.paper.id, may.data.paper.id);
  // Read back from the cache alone: February is still February.
  const again = apollo.readQuery({ query: PAGE, variables: { id: TRAVEL.root, asOf: TRAVEL.feb, first: 5 } });
  assert.equal(again.paper.inbound.totalCount, TRAVEL.counts.feb);
  assert.equal(again.paper.inbound.edges[0].node.resolution.status, "UNRESOLVED");
  const mayAgain = apollo.readQuery({ query: PAGE, variables: { id: TRAVEL.root, asOf: TRAVEL.may, first: 5 } });
  assert.equal(mayAgain.paper.inbound.edges[0].node.resolution.status, "VERIFIED_EXACT");
  assert.equal(decodeId(again.paper.id), `Paper:${TRAVEL.root}@${TRAVEL.feb}`);
  // The same observation at two instants: two cache entries.
  const cached = apollo.extract();
  const observations = Object.keys(cached).filter((k) => k.startsWith("CitationObservation:"));
  assert.equal(observations.length, 10);
});

async function walk(apollo, forward) {
  const variables = forward ? { id: TRAVEL.root, asOf: TRAVEL.feb, first: 4 } : { id: TRAVEL.root, asOf: TRAVEL.feb, last: 4 };
  await apollo.query({ query: PAGE, variables });
  const watched = apollo.watchQuery({ query: PAGE, variables });
  const subscription = watched.subscribe({ next() {}, error() {} });
  let result = watched.getCurrentResult();
  for (let pages = 1; pages < 100; pages++) {
    const info = result.data.paper.inbound.pageInfo;
    if (forward ? !info.hasNextPage : !info.hasPreviousPage) break;
    await watched.fetchMore({ variables: forward ? { after: info.endCursor } : { last: 4, before: info.startCursor } });
    result = watched.getCurrentResult();
  }
  subscription.unsubscribe();
  return result.data.paper.inbound;
}

test("relayStylePagination walks a pinned paper forward and backward as of its instant", async () => {
  const forward = await walk(client(), true);
  const backward = await walk(client(), false);
  const ids = (c) => c.edges.map((e) => e.node.observationId);
  assert.equal(forward.edges.length, TRAVEL.counts.feb);
  assert.equal(new Set(ids(forward)).size, TRAVEL.counts.feb);
  assert.deepEqual(ids(backward), ids(forward));
  assert.deepEqual(forward.edges.map((e) => e.node.citingPaper.arxivId), TRAVEL.citersFeb);
  assert.ok(forward.edges.every((e) => decodeId(e.node.id).endsWith(`@${TRAVEL.feb}`)));
});

test("automatic persisted queries over GET: the hash alone, then a cacheable GET hit", async () => {
  const seen = [];
  const recording = async (uri, init) => {
    const response = await fetch(uri, init);
    seen.push({ method: init.method, url: String(uri), status: response.status, etag: response.headers.get("etag") });
    return response;
  };
  const link = createPersistedQueryLink({ sha256: (q) => createHash("sha256").update(q).digest("hex"), useGETForHashedQueries: true })
    .concat(new HttpLink({ uri: URL_, fetch: recording }));
  const apollo = client(link);
  const variables = { id: TRAVEL.root, asOf: TRAVEL.feb, first: 3 };
  // A document this server has not seen (an alias unique to this run), so the hash starts unknown.
  const query = gql`query Persisted($id: String!, $asOf: DateTime, $first: Int) { paper(arxivId: $id, asOf: $asOf) {
    id run${process.pid}x${Date.now()}: arxivId inbound(first: $first) { totalCount edges { node { id } } } } }`;
  const first = await apollo.query({ query, variables, fetchPolicy: "network-only" });
  const second = await apollo.query({ query, variables, fetchPolicy: "network-only" });
  assert.equal(first.data.paper.inbound.totalCount, TRAVEL.counts.feb);
  assert.deepEqual(second.data, first.data);
  // Unknown hash (GET), registered with the document (POST), then the hash alone answered by GET.
  assert.deepEqual(seen.map((s) => s.method), ["GET", "POST", "GET"]);
  const hit = seen[2];
  assert.equal(hit.status, 200);
  assert.ok(!hit.url.includes("query="), hit.url);
  assert.ok(hit.etag, "a GET answer carries an ETag");
});
