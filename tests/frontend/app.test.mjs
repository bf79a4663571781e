// The Vite + React app (dist/, built by tests/test_frontend_app.py) served from its own origin, driven in
// headless Chromium (playwright-core, Debian's chromium): Apollo Client 4 pages citations, switches
// instants, shows a retraction after an import, splices a live citation with no query sent, and after
// the API restarts resumes with the citation made while it was down; urql splices a live citation too.
// The API is `pith-graph serve` started here (so it can be restarted); its log must hold no error.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { createServer } from "node:http";
import { openSync, readFileSync } from "node:fs";
import { extname, join } from "node:path";
import { chromium } from "playwright-core";

const { PITH_PYTHON: PYTHON, PITH_ROOT: ROOT, PITH_API_PORT: API_PORT, PITH_APP_PORT: APP_PORT, PITH_DIST: DIST,
        PITH_RETRACTION: RETRACTION, PITH_LOG: LOG, PITH_CHROMIUM: CHROMIUM } = process.env;
const API = `http://127.0.0.1:${API_PORT}`;
const APP = `http://127.0.0.1:${APP_PORT}`;
const PAPER = "2402.15627";

function cli(...args) {
  return execFileSync(PYTHON, ["-m", "app.cli", ...args], { cwd: ROOT, stdio: "pipe" }).toString();
}

function serveApi() {
  const out = openSync(LOG, "a");
  const child = spawn(PYTHON, ["-m", "app.cli", "serve", "--port", API_PORT], { cwd: ROOT, stdio: ["ignore", out, out],
    env: { ...process.env, PITH_CORS_ORIGINS: APP } });
  child.exited = new Promise((resolve) => child.on("exit", resolve));
  return child;
}

async function healthy() {
  for (let i = 0; i < 300; i++) {
    try { if ((await fetch(`${API}/healthz`)).ok) return; } catch { /* starting */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("the API did not start");
}

const TYPES = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css" };
const app = createServer((req, res) => {
  const path = new URL(req.url, APP).pathname;
  try {
    const body = readFileSync(join(DIST, path === "/" ? "apollo.html" : path));
    res.writeHead(200, { "content-type": TYPES[extname(path)] ?? "application/octet-stream" }).end(body);
  } catch { res.writeHead(404).end(); }
});

async function open(browser, page_) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const queries = [];
  page.on("request", (r) => { if (r.url().startsWith(API) && r.method() === "POST") queries.push(r.postDataJSON()?.operationName); });
  const problems = [];
  page.on("console", (m) => { if (m.type() === "error") problems.push(m.text()); });
  page.on("pageerror", (e) => problems.push(String(e)));
  await page.goto(`${APP}/${page_}`);
  return { page, queries, problems };
}

const items = (page) => page.locator("[data-testid=citations] li");
const total = async (page) => parseInt(await page.getByTestId("total").innerText(), 10);
// Inbound order: by citing arXiv id first (byte order), as a fresh read lists them.
async function inOrder(page) {
  const ids = await items(page).evaluateAll((lis) => lis.map((li) => li.dataset.arxiv));
  assert.deepEqual(ids, [...ids].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
  return ids;
}

let api;
let browser;
test.before(async () => {
  await new Promise((r) => app.listen(Number(APP_PORT), "127.0.0.1", r));
  api = serveApi();
  await healthy();
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"] });
});

test.after(async () => {
  await browser?.close();
  api?.kill("SIGTERM");
  await api?.exited;
  app.close();
  const logs = readFileSync(LOG, "utf8");
  assert.doesNotMatch(logs, /Traceback|ERROR|Exception|(?:GET|POST|HEAD|OPTIONS) \S+ 5\d\d /, logs.slice(-4000));
  assert.match(logs, /OPTIONS \/graphql 200/, "the browser sent preflights");
});

test("Apollo Client 4: pages, instants, a retraction, a live citation spliced, a restart resumed", async () => {
  const { page, queries, problems } = await open(browser, "apollo.html");
  await items(page).first().waitFor();
  const all = await total(page);
  assert.equal(await items(page).count(), 3);
  while (await page.getByRole("button", { name: "More" }).count()) {
    const shown = await items(page).count();
    await page.getByRole("button", { name: "More" }).click();
    await page.waitForFunction((n) => document.querySelectorAll("[data-testid=citations] li").length > n, shown);
  }
  await page.waitForFunction((n) => document.querySelectorAll("[data-testid=citations] li").length === n, all);

  // An earlier instant (a date: its midnight UTC) has fewer citations; now again has them all.
  await page.getByLabel("As of").fill("2026-08-06");
  await page.waitForFunction(() => document.querySelector("[data-testid=total]")?.textContent.includes("as of"));
  const earlier = await total(page);
  assert.ok(earlier < all, `${earlier} < ${all}`);
  await page.getByRole("button", { name: "Now" }).click();
  await page.waitForFunction((n) => parseInt(document.querySelector("[data-testid=total]")?.textContent) === n, all);

  // A retraction of the work the paper is cited as, imported: the page shows it once refreshed.
  assert.equal(await page.locator(".badge").count(), 0);
  cli("load", RETRACTION);
  await page.getByRole("button", { name: "Refresh" }).click();
  await page.locator(".badge").first().waitFor();

  // A live citation: spliced where the list puts it (this citing paper sorts first), no query sent.
  await page.waitForTimeout(1000);  // subscribed after the refresh
  const before = queries.length;
  const shown = await items(page).count();  // the refresh went back to the first page: pages reset
  cli("sample-citation", PAPER, "--citing", "0001.00011");
  await page.locator("li[data-arxiv='0001.00011']").waitFor();
  assert.equal(await items(page).nth(0).getAttribute("data-arxiv"), "0001.00011");
  assert.equal(await total(page), all + 1);
  assert.equal((await inOrder(page)).length, shown + 1);
  await page.waitForTimeout(1000);
  assert.deepEqual(queries.slice(before), [], "a query was sent after the event");

  // The API restarts (close 1012); a citation is made while it is down; the page resumes and shows it.
  api.kill("SIGTERM");
  await api.exited;
  cli("sample-citation", PAPER, "--citing", "0001.00012");
  api = serveApi();
  await healthy();
  await page.locator("li[data-arxiv='0001.00012']").waitFor({ timeout: 30000 });
  assert.equal(await items(page).nth(1).getAttribute("data-arxiv"), "0001.00012");
  assert.equal((await inOrder(page)).length, shown + 2);
  await page.waitForFunction((n) => parseInt(document.querySelector("[data-testid=total]")?.textContent) === n, all + 2);
  assert.deepEqual(queries.slice(before), []);
  assert.deepEqual(problems.filter((p) => !/WebSocket|ERR_CONNECTION_REFUSED/.test(p)), []);
  await page.close();
});

test("urql: a live citation spliced into the list, no query sent", async () => {
  const { page, queries } = await open(browser, "urql.html");
  await items(page).first().waitFor();
  const all = await total(page);
  await page.waitForTimeout(1000);
  const before = queries.length;
  cli("sample-citation", PAPER, "--citing", "0001.00013");
  await page.locator("li[data-arxiv='0001.00013']").waitFor();
  assert.equal(await total(page), all + 1);
  assert.ok((await inOrder(page)).includes("0001.00013"));
  await page.waitForTimeout(1000);
  assert.deepEqual(queries.slice(before), []);
  await page.close();
});
