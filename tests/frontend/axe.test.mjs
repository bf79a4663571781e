// axe-core (pinned, tests/frontend/package.json) over every HTML page the server serves, GraphiQL
// included, at a desktop width and a phone's (390 px), in headless Chromium: no violation.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

const require = createRequire(import.meta.url);
const AXE = require.resolve("axe-core/axe.min.js");
const { PITH_BASE: BASE, PITH_CHROMIUM: CHROMIUM } = process.env;
const PAGES = ["/", "/?q=megascale", "/paper/2402.15627", "/paper/2402.15627/citation-record",
               "/paper/2402.15627/integrity", "/evidence", "/paper/0704.99999", "/graphql"];
const WIDTHS = [1280, 390];

let browser;
test.before(async () => {
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"] });
});
test.after(async () => { await browser?.close(); });

for (const width of WIDTHS) {
  for (const path of PAGES) {
    test(`${path} at ${width} px`, async () => {
      const page = await browser.newPage({ viewport: { width, height: 844 } });
      const failed = [];
      page.on("response", (r) => { if (r.status() >= 400 && !r.url().includes("/paper/0704.99999")) failed.push(`${r.status()} ${r.url()}`); });
      await page.goto(BASE + path, { waitUntil: "networkidle" });
      if (path === "/graphql") await page.locator(".graphiql-container").waitFor();
      await page.addScriptTag({ path: AXE });
      const result = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
      const violations = result.violations.map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.slice(0, 3).map((n) => n.target.join(" ") + " " + (n.failureSummary ?? "").slice(0, 160)).join(", ")}`);
      if (path === "/graphql") {  // the editor and the result both on screen, whatever the width
        for (const pane of [".graphiql-query-editor", ".graphiql-response"]) {
          const box = await page.locator(pane).boundingBox();
          assert.ok(box && box.x >= 0 && box.x + box.width <= width + 1 && box.width >= Math.min(300, width - 60),
                    `${pane} at ${JSON.stringify(box)}`);
        }
      }
      // Nothing is cut without a way to reach it: no page wider than the viewport.
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
      await page.close();
      assert.deepEqual(violations, []);
      assert.ok(overflow <= 0, `the page is ${overflow} px wider than the viewport`);
      assert.deepEqual(failed, []);
    });
  }
}

test("every page's icon is served", async () => {
  const icon = await fetch(BASE + "/favicon.ico");
  assert.equal(icon.status, 200);
  assert.equal(icon.headers.get("content-type"), "image/svg+xml");
  assert.match(await icon.text(), /^<svg /);
});
