"""The dashboard in a real headless Chromium (Debian's chromium, driven by Playwright; no browser download)."""

import os
import shutil

import httpx
import pytest

from tests.server.conftest import KEYS, auth

CHROMIUM = "/usr/bin/chromium"
REQUIRED = bool(
    os.environ.get("ORCHESTRA_REQUIRE_BROWSER")
)  # .ci/run sets it: there, a missing browser fails

if REQUIRED:
    from playwright import sync_api as playwright_api
else:
    playwright_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (in .[dev])")
    pytestmark = pytest.mark.skipif(
        not shutil.which("chromium"),
        reason="Debian's chromium is not installed (.ci/run installs it with apt-get)",
    )


@pytest.fixture
def browser():
    with playwright_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield browser
        browser.close()


def test_log_in_open_a_run_and_see_its_conversation(server, browser):
    run = httpx.post(
        f"{server.url}/api/v1/agents/helper/invoke",
        json={"input": "remember milk", "session_id": "dash"},
        headers=auth(),
        timeout=30,
    ).json()
    page = browser.new_page()
    page.goto(f"{server.url}/")
    assert page.url.endswith("/login")  # the dashboard needs a key too

    page.fill("#key", "wrong key")
    page.click("#login")
    assert "That key is not valid." in page.content()

    page.fill("#key", KEYS["acme"])
    page.click("#login")
    page.wait_for_selector("#runs")
    assert "helper" in page.inner_text("#runs")

    page.click(f"a[href='/runs/{run['run_id']}']")
    page.click("#tab-conversation")
    conversation = page.inner_text("#conversation")
    assert "remember milk" in conversation
    assert "Tool call notebook" in conversation
    assert "Tool result (success)" in conversation
    assert "Noted in your todo list." in conversation


def test_runs_filter_and_a_pipeline_node_graph(server, browser):
    httpx.post(
        f"{server.url}/api/v1/agents/chat/invoke",
        json={"input": "hi", "session_id": "one"},
        headers=auth(),
        timeout=30,
    )
    pipeline = httpx.post(
        f"{server.url}/api/v1/agents/approval/invoke",
        json={"input": "ship", "session_id": "rel"},
        headers=auth(),
        timeout=30,
    ).json()
    page = browser.new_page()
    page.goto(f"{server.url}/login")
    page.fill("#key", KEYS["acme"])
    page.click("#login")
    page.wait_for_selector("#runs")
    page.select_option("select[name=agent_id]", "chat")
    page.click("button[type=submit]")
    page.wait_for_selector("#runs")
    rows = page.inner_text("#runs")
    assert "chat" in rows
    assert "approval" not in rows

    page.goto(f"{server.url}/runs/{pipeline['run_id']}?tab=nodes")
    nodes = page.locator("#node-graph g.node")
    assert nodes.count() == 2
    statuses = {
        nodes.nth(i).get_attribute("data-node"): nodes.nth(i).get_attribute("data-status") for i in range(2)
    }
    assert statuses == {"draft": "completed", "approve": "interrupted"}


def test_another_workspace_cannot_open_the_run(server, browser):
    run = httpx.post(
        f"{server.url}/api/v1/agents/chat/invoke", json={"input": "mine"}, headers=auth(), timeout=30
    ).json()
    page = browser.new_page()
    page.goto(f"{server.url}/login")
    page.fill("#key", KEYS["globex"])
    page.click("#login")
    page.goto(f"{server.url}/runs/{run['run_id']}")
    assert "No run" in page.content()
    assert "mine" not in page.content()
