"""A person in a real browser, with the network limited to 127.0.0.1: search, ledger, links, GraphiQL."""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import ROOT

ARTIFACTS = ROOT / "tests" / "artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver (.ci/run installs them)",
)


@contextmanager
def open_browser():
    """Headless Chromium that can reach 127.0.0.1 and nothing else."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,1000",
                 # Only 127.0.0.1 resolves: any attempt to reach another host fails.
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                 "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=127.0.0.1"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def browser():
    with open_browser() as driver:
        yield driver


def shot(driver, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def resources_outside(driver, base: str) -> list[str]:
    urls = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    return [u for u in urls if not u.startswith(base)]


def test_a_person_reads_records_and_explores_the_api(live, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 30)
    base = live.base

    browser.get(base + "/")
    shot(browser, "1-home")
    box = browser.find_element(By.CSS_SELECTOR, "input[type=search]")
    box.send_keys("MegaScale training")
    box.submit()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "ul.results a")))
    shot(browser, "2-search")
    browser.find_element(By.CSS_SELECTOR, 'ul.results a[href="/paper/2402.15627"]').click()

    wait.until(ec.title_contains("MegaScale"))
    shot(browser, "3-paper")
    browser.find_element(By.PARTIAL_LINK_TEXT, "Ledger").click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "article.ledger")))
    shot(browser, "4-ledger")
    text = browser.execute_script("return document.body.textContent")
    assert "Paper Citation Record · LEDGER" in text and "Pith citing papers" in text
    assert resources_outside(browser, base) == []

    citing = browser.find_element(By.CSS_SELECTOR, 'li.observation p.papers a[href="/paper/2409.19256"]')
    citing.click()
    wait.until(ec.title_contains("HybridFlow"))
    shot(browser, "5-citing-paper")
    assert browser.current_url == base + "/paper/2409.19256"

    browser.get(base + "/graphql")
    run = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, ".graphiql-execute-button")))
    shot(browser, "6-graphiql")
    run.click()
    wait.until(lambda d: "totalCount" in d.find_element(By.CSS_SELECTOR, ".graphiql-response").text)
    response = browser.find_element(By.CSS_SELECTOR, ".graphiql-response").text
    assert "MegaScale" in response and '"errors"' not in response
    shot(browser, "7-graphiql-result")
    assert resources_outside(browser, base) == []


# Layout checks a reader would trip over, measured in the page at each width.
LAYOUT = """
const issues = [];
const width = document.documentElement.clientWidth;
if (document.documentElement.scrollWidth > width + 1) issues.push('page wider than the window');
for (const t of document.querySelectorAll('main time')) {
  if (t.getClientRects().length > 1) issues.push('timestamp wraps: ' + t.textContent);
}
for (const p of document.querySelectorAll('p.papers')) {
  const links = p.querySelectorAll('a');
  if (links.length === 2) {
    const a = links[0].getBoundingClientRect(), b = links[1].getBoundingClientRect();
    if (b.top < a.bottom - 1) issues.push('citing and cited links share a line: ' + p.textContent.slice(0, 60));
  }
}
for (const d of document.querySelectorAll('dl.counts > div')) {
  const dt = d.querySelector('dt').getBoundingClientRect(), dd = d.querySelector('dd').getBoundingClientRect();
  const sameLine = dd.top < dt.bottom - 1;
  if (sameLine && dd.left - dt.right < 8) issues.push('label runs into its value: ' + d.textContent);
}
return issues;
"""


@pytest.mark.parametrize("width,height", [(390, 844), (1280, 1000)], ids=["phone", "desktop"])
def test_pages_read_cleanly_at_phone_and_desktop_widths(live, browser, width, height):
    browser.set_window_size(width, height)
    try:
        for name, path in [("ledger", "/paper/2402.15627/citation-record?as_of=2026-08-09T12:00:00Z"),
                           ("paper", "/paper/2402.15627"), ("integrity", "/paper/2402.15627/integrity"),
                           ("evidence", "/evidence"), ("home", "/?q=training")]:
            browser.get(live.base + path)
            browser.execute_script("document.documentElement.style.scrollBehavior = 'auto'")
            shot(browser, f"layout-{name}-{width}")
            if browser.execute_script("return !!document.querySelector('li.observation')"):
                browser.execute_script("document.querySelector('li.observation').scrollIntoView()")
                shot(browser, f"layout-{name}-{width}-observation")
            assert browser.execute_script(LAYOUT) == [], f"{name} at {width}px"
    finally:
        browser.set_window_size(1280, 1000)
