// Relay: the artifacts relay-compiler 21 generated from relay/*.js against schema.graphql, run by
// relay-runtime 21 as usePaginationFragment and useSubscription run them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { createClient } from "graphql-ws";
import WebSocket from "ws";
import { TRAVEL, URL_, WS_URL, addSampleCitation, decodeId, loadNextRecord, within } from "./lib.mjs";

const require = createRequire(import.meta.url);
const { ConnectionHandler, Environment, Network, Observable, RecordSource, Store, fetchQuery, getSelector,
        requestSubscription } = require("relay-runtime");
const artifact = (name) => require(`./build/__generated__/${name}.graphql.js`);

function environment(sent = []) {
  const ws = createClient({ url: WS_URL, webSocketImpl: WebSocket, lazy: true });
  const network = Network.create(
    async (params, variables) => {
      sent.push({ name: params.name, variables });
      const response = await fetch(URL_, { method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ query: params.text, variables }) });
      return response.json();
    },
    (params, variables) => Observable.create((sink) => ws.subscribe({ query: params.text, variables }, sink)),
  );
  const env = new Environment({ network, store: new Store(new RecordSource()) });
  env.ws = ws;
  return env;
}

const read = (env, fragment, ref) => env.lookup(getSelector(artifact(fragment), ref)).data;

// What usePaginationFragment's loadNext does: the refetch query from the fragment's end cursor, by node id.
async function pageToTheEnd(env, fragment, connection, pagination, ref, refetchVariables) {
  let data = read(env, fragment, ref);
  for (let pages = 0; data[connection].pageInfo.hasNextPage && pages < 100; pages++) {
    await fetchQuery(env, artifact(pagination), { ...refetchVariables, cursor: data[connection].pageInfo.endCursor }).toPromise();
    data = read(env, fragment, ref);
  }
  return data[connection];
}

test("the refetchable inbound fragment pages a February paper as of February", async () => {
  const text = artifact("PaperInboundPaginationQuery").params.text;
  assert.match(text, /node\(id: \$id\)/);
  assert.doesNotMatch(text, /asOf/);
  const sent = [];
  const env = environment(sent);
  const { paper } = await fetchQuery(env, artifact("PaperInboundQuery"), { id: TRAVEL.root, asOf: TRAVEL.feb }).toPromise();
  assert.equal(decodeId(paper.id), `Paper:${TRAVEL.root}@${TRAVEL.feb}`);
  const inbound = await pageToTheEnd(env, "PaperInbound_paper", "inbound", "PaperInboundPaginationQuery", paper,
                                     { id: paper.id, count: 4 });
  assert.ok(sent.filter((s) => s.name === "PaperInboundPaginationQuery").length >= 2);
  assert.equal(inbound.totalCount, TRAVEL.counts.feb);
  assert.deepEqual(inbound.edges.map((e) => e.node.citingPaper.arxivId), TRAVEL.citersFeb);
  assert.ok(inbound.edges.every((e) => e.node.resolution.status === "UNRESOLVED"));
});

test("outbound and timeline fragments page at the paper's instant", async () => {
  const env = environment();
  const out = await fetchQuery(env, artifact("PaperOutboundQuery"), { id: TRAVEL.root, asOf: TRAVEL.feb }).toPromise();
  const outbound = await pageToTheEnd(env, "PaperOutbound_paper", "outbound", "PaperOutboundPaginationQuery", out.paper,
                                      { id: out.paper.id, count: 4 });
  assert.equal(outbound.edges.length, TRAVEL.counts.outFeb);
  assert.equal(outbound.totalCount, TRAVEL.counts.outFeb);

  const walk = async (asOf) => {
    const { paper } = await fetchQuery(env, artifact("PaperTimelineQuery"), { id: TRAVEL.root, asOf }).toPromise();
    const timeline = await pageToTheEnd(env, "PaperTimeline_paper", "timeline", "PaperTimelinePaginationQuery", paper,
                                        { id: paper.id, count: 5 });
    return timeline.edges.map((e) => e.node.at);
  };
  const feb = await walk(TRAVEL.feb);
  const may = await walk(TRAVEL.may);
  assert.ok(feb.length > 5, "more than one page");
  assert.ok(feb.every((at) => at <= TRAVEL.feb));
  assert.deepEqual([...feb].sort(), feb);
  assert.deepEqual(may.slice(0, feb.length), feb);
  assert.ok(may.length > feb.length);
});

test("the refetchable search fragment pages on the Query root at its instant", async () => {
  const env = environment();
  const variables = { words: "time travel citer", asOf: TRAVEL.feb };
  const root = await fetchQuery(env, artifact("SearchResultsQuery"), variables).toPromise();
  const found = await pageToTheEnd(env, "SearchResults_query", "searchPapers", "SearchResultsPaginationQuery", root,
                                   { ...variables, count: 4 });
  assert.deepEqual(found.edges.map((e) => e.node.arxivId).sort(), TRAVEL.citersFeb);
  assert.ok(found.edges.every((e) => decodeId(e.node.id).endsWith(`@${TRAVEL.feb}`)));
});

test("@appendNode adds a live citation to the inbound connection on screen", async () => {
  const env = environment();
  const { paper } = await fetchQuery(env, artifact("PaperInboundQuery"), { id: TRAVEL.live }).toPromise();
  const before = read(env, "PaperInbound_paper", paper).inbound.edges.length;
  const connection = ConnectionHandler.getConnectionID(paper.id, "PaperInbound_inbound");
  let resolve;
  const arrived = new Promise((r) => { resolve = r; });
  const errors = [];
  const disposable = requestSubscription(env, {
    subscription: artifact("CitationAddedSubscription"),
    variables: { id: TRAVEL.live, connections: [connection] },
    onNext: resolve,
    onError: (e) => errors.push(e),
  });
  await new Promise((r) => setTimeout(r, 700));
  loadNextRecord();
  await within(15000, arrived, "citationAdded over graphql-ws");
  disposable.dispose();
  await env.ws.dispose();
  assert.deepEqual(errors, []);
  const after = read(env, "PaperInbound_paper", paper).inbound.edges;
  assert.equal(after.length, before + 1);
});

test("@appendEdge adds a live citation's edge, cursor included, and an updater keeps totalCount", async () => {
  const sent = [];
  const env = environment(sent);
  const { paper } = await fetchQuery(env, artifact("PaperInboundQuery"), { id: TRAVEL.live }).toPromise();
  const all = await pageToTheEnd(env, "PaperInbound_paper", "inbound", "PaperInboundPaginationQuery", paper,
                                 { id: paper.id, count: 4 });
  const connection = ConnectionHandler.getConnectionID(paper.id, "PaperInbound_inbound");
  const before = sent.length;
  let resolve;
  const arrived = new Promise((r) => { resolve = r; });
  const errors = [];
  const disposable = requestSubscription(env, {
    subscription: artifact("CitationEdgeAddedSubscription"),
    variables: { id: TRAVEL.live, connections: [connection] },
    // @appendEdge appends; the total is the event's (a fresh read's totalCount).
    updater: (store, data) => store.get(connection)?.setValue(data.citationAdded.totalCount, "totalCount"),
    onNext: resolve,
    onError: (e) => errors.push(e),
  });
  await new Promise((r) => setTimeout(r, 700));
  addSampleCitation();  // a new paper of this month: it sorts last, where @appendEdge puts it
  const event = await within(15000, arrived, "citationAdded over graphql-ws");
  disposable.dispose();
  await env.ws.dispose();
  assert.deepEqual(errors, []);
  assert.equal(sent.length, before, "no query after the event");
  const after = read(env, "PaperInbound_paper", paper).inbound;
  assert.equal(after.edges.length, all.edges.length + 1);
  assert.equal(after.totalCount, all.totalCount + 1);
  assert.equal(event.citationAdded.totalCount, all.totalCount + 1);
  assert.equal(after.edges.at(-1).node.observationId, event.citationAdded.edge.node.observationId);
  assert.notEqual(event.citationAdded.previousCursor, null);
});
