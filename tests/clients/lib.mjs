// What every client test shares: where the server is, what the graph holds, and how to make an event.
import { execFileSync } from "node:child_process";
import assert from "node:assert/strict";

export const BASE = process.env.PITH_BASE;
export const URL_ = `${BASE}/graphql`;
export const WS_URL = URL_.replace(/^http/, "ws");
// The time-travel graph (tests/graphs.py time_travel): counts and statuses as the fixture computed them.
export const TRAVEL = JSON.parse(process.env.PITH_TRAVEL);
// Documents that each add one citation of TRAVEL.live when loaded (`pith-graph load`).
const LOADS = JSON.parse(process.env.PITH_LOADS || "[]");
let loaded = 0;

assert.ok(BASE, "PITH_BASE names the server");

export function loadNextRecord() {
  const file = LOADS[loaded++];
  assert.ok(file, "no more documents to load for this test file");
  execFileSync(process.env.PITH_PYTHON, ["-m", "app.cli", "load", file], { cwd: process.env.PITH_ROOT, stdio: "pipe" });
}

export function decodeId(id) {
  return Buffer.from(id, "base64url").toString("utf8");
}

export function within(ms, promise, what) {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what}: nothing in ${ms} ms`)), ms); }),
  ]);
}

export async function post(query, variables) {
  const response = await fetch(URL_, { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ query, variables }) });
  return response.json();
}

// One made-up citation of TRAVEL.live, imported as of now (`pith-graph sample-citation`), by `citing`
// (an arXiv id; it decides where the citation sorts in inbound order) or by a new made-up paper.
export function addSampleCitation(citing) {
  const args = ["-m", "app.cli", "sample-citation", TRAVEL.live, ...(citing ? ["--citing", citing] : [])];
  return execFileSync(process.env.PITH_PYTHON, args, { cwd: process.env.PITH_ROOT, stdio: "pipe" }).toString();
}
