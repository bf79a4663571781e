// The README's live recipes, run as written (tests/clients/recipes): Apollo Client splicing a live
// citation into loaded pages (updateQuery, and cache.modify) with no refetch, and graphql-ws resuming
// after the server restarts (close 1012) with the citation made while it was down.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:net";
import { createRequire } from "node:module";
import { openSync, readFileSync } from "node:fs";
import { createClient } from "graphql-ws";
import WebSocket from "ws";
import { TRAVEL, URL_, WS_URL, addSampleCitation, post, within } from "./lib.mjs";
import { CITATION_ADDED, spliceIntoCache, spliceWithUpdateQuery } from "./recipes/apollo.mjs";
import { RESUMING, subscribeResuming } from "./recipes/resume.mjs";
import { spliceCitation } from "./recipes/splice.mjs";

const require = createRequire(import.meta.url);
const { ApolloClient, InMemoryCache, HttpLink, gql, split } = require("@apollo/client/core");
const { relayStylePagination, getMainDefinition } = require("@apollo/client/utilities");
const { GraphQLWsLink } = require("@apollo/client/link/subscriptions");

const PAGE = gql`query LivePage($id: String!, $first: Int, $after: String) {
  changeCursor
  paper(arxivId: $id) {
    id arxivId
    inbound(first: $first, after: $after) {
      totalCount
      edges { cursor node { id observationId citingPaper { id arxivId } } }
      pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
    }
  }
}`;

function apolloClient(requests) {
  const http = new HttpLink({ uri: URL_, fetch: (uri, init) => { requests.push(JSON.parse(init.body).operationName); return fetch(uri, init); } });
  const ws = createClient({ url: WS_URL, webSocketImpl: WebSocket });
  const link = split(({ query }) => {
    const definition = getMainDefinition(query);
    return definition.kind === "OperationDefinition" && definition.operation === "subscription";
  }, new GraphQLWsLink(ws), http);
  const apollo = new ApolloClient({ link, cache: new InMemoryCache({
    typePolicies: { Paper: { fields: { inbound: relayStylePagination(["status"]) } } } }) });
  apollo.ws = ws;
  return apollo;
}

async function fresh(first) {
  const body = await post(PAGE.loc.source.body, { id: TRAVEL.live, first });
  assert.equal(body.errors, undefined);
  return body.data.paper.inbound;
}

const cursors = (inbound) => inbound.edges.map((e) => e.cursor);

async function until(check, what, ms = 15000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const value = check();
    if (value) return value;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what}: not within ${ms} ms`);
}

test("the splice rule: in place, past the loaded pages, once", () => {
  const page = { totalCount: 3, pageInfo: { hasNextPage: true }, edges: [{ cursor: "a" }, { cursor: "c" }] };
  assert.deepEqual(cursors(spliceCitation(page, { edge: { cursor: "b" }, previousCursor: "a", totalCount: 4 })), ["a", "b", "c"]);
  assert.deepEqual(cursors(spliceCitation(page, { edge: { cursor: "0" }, previousCursor: null, totalCount: 4 })), ["0", "a", "c"]);
  for (const previousCursor of ["c", "x"]) {  // after the last loaded edge with more to come, or not loaded
    const spliced = spliceCitation(page, { edge: { cursor: "d" }, previousCursor, totalCount: 4 });
    assert.deepEqual(cursors(spliced), ["a", "c"]);
    assert.equal(spliced.totalCount, 4);
  }
  const all = { ...page, pageInfo: { hasNextPage: false } };
  assert.deepEqual(cursors(spliceCitation(all, { edge: { cursor: "d" }, previousCursor: "c", totalCount: 4 })), ["a", "c", "d"]);
  assert.deepEqual(cursors(spliceCitation(all, { edge: { cursor: "c" }, previousCursor: "a", totalCount: 3 })), ["a", "c"]);
});

test("Apollo updateQuery splices a live citation into two loaded pages, with no refetch", async () => {
  const requests = [];
  const apollo = apolloClient(requests);
  const observable = apollo.watchQuery({ query: PAGE, variables: { id: TRAVEL.live, first: 2 } });
  const watching = observable.subscribe({ next() {}, error() {} });
  await until(() => observable.getCurrentResult().data?.paper, "the first page");
  await observable.fetchMore({ variables: { after: observable.getCurrentResult().data.paper.inbound.pageInfo.endCursor } });
  const loaded = observable.getCurrentResult().data.paper.inbound;
  assert.equal(loaded.edges.length, 4);
  const stop = spliceWithUpdateQuery(observable, TRAVEL.live);
  await new Promise((r) => setTimeout(r, 700));  // subscribed
  const before = requests.length;
  addSampleCitation("0001.00002");  // sorts before every citing paper: it belongs on the first page
  const spliced = await until(() => {
    const now = observable.getCurrentResult().data.paper.inbound;
    return now.totalCount === loaded.totalCount + 1 && now;
  }, "the spliced citation");
  assert.equal(requests.length, before, `refetched: ${requests.slice(before)}`);
  assert.equal(spliced.edges.length, 5);
  assert.equal(spliced.edges[0].node.citingPaper.arxivId, "0001.00002");
  assert.deepEqual(cursors(spliced), cursors(await fresh(5)));
  stop();
  watching.unsubscribe();
  await apollo.ws.dispose();
});

test("Apollo cache.modify splices an event into the cached connection in place", async () => {
  const requests = [];
  const apollo = apolloClient(requests);
  const { data } = await apollo.query({ query: PAGE, variables: { id: TRAVEL.live, first: 4 } });
  const events = [];
  const ws = createClient({ url: WS_URL, webSocketImpl: WebSocket });
  const dispose = ws.subscribe({ query: CITATION_ADDED.loc.source.body, variables: { id: TRAVEL.live, after: data.changeCursor } }, {
    next: (result) => { events.push(result); spliceIntoCache(apollo.cache, apollo.cache.identify(data.paper), result.data.citationAdded); },
    error: (e) => events.push({ errors: [e] }), complete() {},
  });
  await new Promise((r) => setTimeout(r, 700));
  const before = requests.length;
  addSampleCitation("0001.00003");  // after the previous test's citation: into the middle of the list
  await until(() => events.length > 0, "citationAdded");
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(events.length, 1, JSON.stringify(events));
  assert.equal(events[0].errors, undefined, JSON.stringify(events[0].errors));
  assert.notEqual(events[0].data.citationAdded.previousCursor, null);
  const cached = apollo.readQuery({ query: PAGE, variables: { id: TRAVEL.live, first: 4 } }).paper.inbound;
  assert.equal(cached.totalCount, data.paper.inbound.totalCount + 1);
  assert.equal(cached.edges[1].node.citingPaper.arxivId, "0001.00003");
  assert.deepEqual(cursors(cached), cursors(await fresh(5)));
  assert.equal(requests.length, before);
  dispose();
  await ws.dispose();
});

async function freePort() {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => { const { port } = server.address(); server.close(() => resolve(port)); });
  });
}

function serve(port, log) {
  const out = openSync(log, "a");
  const child = spawn(process.env.PITH_PYTHON, ["-m", "app.cli", "serve", "--port", String(port)],
    { cwd: process.env.PITH_ROOT, env: process.env, stdio: ["ignore", out, out] });
  child.exited = new Promise((resolve) => child.on("exit", resolve));
  return child;
}

async function healthy(base) {
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline) {
    try { if ((await fetch(`${base}/healthz`)).ok) return; } catch { /* not yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("the server did not start");
}

test("graphql-ws resumes after a server restart with the citation made while it was down", async () => {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const log = `${process.env.PITH_LOGS ?? "/tmp"}/pith-resume-${port}.log`;
  let server = serve(port, log);
  await healthy(base);
  const read = await (await fetch(`${base}/graphql`, { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ query: "{ changeCursor }" }) })).json();
  const closes = [];
  const client = createClient({ url: base.replace("http", "ws") + "/graphql", webSocketImpl: WebSocket, ...RESUMING,
    on: { closed: (event) => closes.push(event.code) } });
  const events = [];
  const errors = [];
  const dispose = subscribeResuming(client, { query: CITATION_ADDED.loc.source.body,
    variables: { id: TRAVEL.live, after: read.data.changeCursor } }, {
    next: (result) => events.push(result.data.citationAdded), error: (e) => errors.push(e), complete() {} });
  await new Promise((r) => setTimeout(r, 700));
  addSampleCitation();
  await until(() => events.length === 1, "the first citation");
  server.kill("SIGTERM");
  await server.exited;
  await until(() => closes.includes(1012), "close 1012 from the restarting server", 5000);
  const made = addSampleCitation();  // committed while no server runs
  server = serve(port, log);
  await healthy(base);
  await within(30000, until(() => events.length === 2, "the citation made during the restart", 30000), "resume");
  dispose();
  await client.dispose();
  server.kill("SIGTERM");
  await server.exited;
  assert.deepEqual(errors, []);
  assert.ok(made.includes(events[1].edge.node.citingPaper.arxivId), `${made} / ${events[1].edge.node.citingPaper.arxivId}`);
  assert.equal(events[1].totalCount, events[0].totalCount + 1);
  const logs = readFileSync(log, "utf8");
  assert.doesNotMatch(logs, /Traceback|ERROR|Exception/, logs);
});
