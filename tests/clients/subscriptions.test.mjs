// graphql-ws (graphql-transport-ws over WebSocket) and graphql-sse (distinct connections over HTTP):
// a subscription receives the citation a record load adds; refusals carry a code.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createClient as createWsClient } from "graphql-ws";
import { createClient as createSseClient } from "graphql-sse";
import WebSocket from "ws";
import { TRAVEL, URL_, WS_URL, loadNextRecord, within } from "./lib.mjs";

const CITATIONS = "subscription($id: String!) { citationAdded(arxivId: $id) { cursor observation { id citingPaper { arxivId } } } }";

async function firstEvent(client, what) {
  const events = [];
  let resolve, reject;
  const arrived = new Promise((res, rej) => { resolve = res; reject = rej; });
  const dispose = client.subscribe({ query: CITATIONS, variables: { id: TRAVEL.live } }, {
    next: (value) => { events.push(value); resolve(value); },
    error: reject,
    complete: () => {},
  });
  await new Promise((r) => setTimeout(r, 700)); // subscribed before the load commits
  loadNextRecord();
  const event = await within(15000, arrived, what);
  dispose();
  return event;
}

test("graphql-ws receives a new citation", async () => {
  const client = createWsClient({ url: WS_URL, webSocketImpl: WebSocket });
  const event = await firstEvent(client, "graphql-ws");
  await client.dispose();
  assert.equal(event.errors, undefined);
  assert.ok(event.data.citationAdded.observation.citingPaper.arxivId);
});

test("graphql-ws reports a validation error with its code", async () => {
  const client = createWsClient({ url: WS_URL, webSocketImpl: WebSocket });
  const errors = await new Promise((resolve) => {
    client.subscribe({ query: "subscription { nope }" }, { next: () => {}, error: resolve, complete: () => resolve([]) });
  });
  await client.dispose();
  assert.ok(Array.isArray(errors) && errors.length === 1, JSON.stringify(errors));
  assert.equal(errors[0].extensions.code, "GRAPHQL_VALIDATION_FAILED");
});

test("graphql-sse receives a new citation", async () => {
  const client = createSseClient({ url: URL_ });
  const event = await firstEvent(client, "graphql-sse");
  client.dispose();
  assert.equal(event.errors, undefined);
  assert.ok(event.data.citationAdded.cursor);
});
