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


def login(page, server) -> None:
    page.goto(f"{server.url}/login")
    page.fill("#key", KEYS["acme"])
    page.click("#login")
    page.wait_for_selector("#runs")


def status_after_reloads(page, wanted: set[str]) -> str:
    """The run page's status, reloading (the pages have no script) until it is one of ``wanted``."""
    import time

    deadline = time.monotonic() + 30
    while True:
        status = page.inner_text(".badge.status")
        if status in wanted or time.monotonic() > deadline:
            return status
        time.sleep(0.1)
        page.reload()


def test_open_interrupts_are_shown_and_answered_in_the_browser(platform, browser):
    run = httpx.post(
        f"{platform.url}/api/v1/agents/payer/invoke",
        json={"input": "pay the bill", "session_id": "browser-pay"},
        headers=auth(),
        timeout=30,
    ).json()
    page = browser.new_page()
    login(page, platform)
    page.goto(f"{platform.url}/runs/{run['run_id']}")
    questions = page.locator("#interrupts li.interrupt")
    assert questions.count() == 1
    assert "approval" in questions.inner_text()
    assert "approve_payment" in questions.inner_text()  # the tool that asked
    assert '"amount": 5' in questions.inner_text()
    page.fill("#answer-0", "yes")
    page.click("#answer-button-0")
    page.wait_for_url(lambda url: "/runs/" in url and run["run_id"] not in url)
    assert status_after_reloads(page, {"completed", "failed"}) == "completed"
    page.click("#tab-conversation")
    assert "Payment handled." in page.inner_text("#conversation")
    assert "paid 5" in page.inner_text("#conversation")
    # The run that asked is closed (issue 35 item 5): no Answer form any more, and a link to the answer.
    answering = page.url.split("?")[0].rsplit("/", 1)[-1]
    page.goto(f"{platform.url}/runs/{run['run_id']}")
    assert page.inner_text(".badge.status") == "answered"
    assert page.locator("#interrupts").count() == 0
    assert page.locator(f"#controls a[href='/runs/{answering}']").count() == 1


def test_a_run_is_cancelled_and_resumed_in_the_browser(platform, browser, monkeypatch):
    monkeypatch.setenv("ORCHESTRA_TEST_DELAY", "1")  # five nodes: time to open the page and cancel
    run = httpx.post(
        f"{platform.url}/api/v1/agents/steps/runs",
        json={"input": "long job", "session_id": "browser-cancel"},
        headers=auth(),
        timeout=30,
    ).json()
    page = browser.new_page()
    login(page, platform)
    page.goto(f"{platform.url}/runs/{run['run_id']}")
    assert status_after_reloads(page, {"executing"}) == "executing"
    page.click("#cancel")
    assert status_after_reloads(page, {"interrupted"}) == "interrupted"
    assert "Stopped (cancel)" in page.inner_text("#controls")
    page.click("#resume")
    page.wait_for_url(lambda url: run["run_id"] not in url)
    assert status_after_reloads(page, {"completed", "failed"}) == "completed"


def test_a_session_page_shows_every_turn_and_where_the_model_window_starts(platform, browser):
    for turn in range(4):
        httpx.post(
            f"{platform.url}/api/v1/agents/window/invoke",
            json={"input": f"question {turn}", "session_id": "browser-long"},
            headers=auth(),
            timeout=30,
        )
    page = browser.new_page()
    login(page, platform)
    page.goto(f"{platform.url}/sessions/window/browser-long")
    text = page.inner_text("#conversation")
    assert all(f"question {turn}" in text for turn in range(4))  # the first turns too
    assert "from here on (4 of 8)" in page.inner_text("#window-start")
    before = page.locator("#conversation .message").nth(3)
    assert "question 1" in before.inner_text()  # dropped from the model's window, still shown


def test_a_form_from_another_site_cannot_cancel_a_run(platform, browser):
    run = httpx.post(
        f"{platform.url}/api/v1/agents/chat/invoke", json={"input": "x"}, headers=auth(), timeout=30
    ).json()
    page = browser.new_page()
    login(page, platform)
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    forged = httpx.post(
        f"{platform.url}/runs/{run['run_id']}/cancel",
        data={"csrf": "guessed"},
        cookies=cookies,
        headers={"Origin": platform.url},
        timeout=30,
    )
    assert forged.status_code == 403


def test_runs_and_sessions_are_searched_and_paged_in_the_browser(server, browser):
    # Runs of two customers (metadata given at start) and a pipeline that stops interrupted: the runs list
    # filters by metadata and status, pages with its Next link, and the sessions list does the same.
    with httpx.Client(base_url=server.url, headers=auth(), timeout=30) as http:
        for index in range(4):
            body = {
                "input": f"hi {index}",
                "session_id": f"c{index}",
                "metadata": {"customer": "ab"[index % 2]},
            }
            assert http.post("/api/v1/agents/chat/invoke", json=body).status_code == 200
        http.post("/api/v1/agents/approval/invoke", json={"input": "ship", "session_id": "rel"})
    page = browser.new_page()
    page.goto(f"{server.url}/login")
    page.fill("#key", KEYS["acme"])
    page.click("#login")
    page.wait_for_selector("#runs")
    page.fill("#search input[name=metadata]", "customer:b")
    page.click("#search button[type=submit]")
    page.wait_for_selector("#runs")
    rows = page.locator("#runs tr.run")
    assert sorted(rows.nth(i).inner_text().split("\t")[2] for i in range(rows.count())) == ["c1", "c3"]
    page.select_option("#search select[name=status]", "interrupted")
    page.fill("#search input[name=metadata]", "")
    page.click("#search button[type=submit]")
    page.wait_for_selector("#runs")
    assert page.locator("#runs tr.run").count() == 1
    assert "approval" in page.inner_text("#runs")
    # The sessions list: 5 sessions, newest saved first; the status filter finds the pipeline's.
    page.click("#sessions-link")
    page.wait_for_selector("#sessions")
    assert page.locator("#sessions tr.session").count() == 5
    page.select_option("#search select[name=status]", "interrupted")
    page.click("#search button[type=submit]")
    page.wait_for_selector("#sessions")
    assert page.locator("#sessions tr.session").inner_text().split("\t")[:2] == ["rel", "approval"]
    # Pages of two runs: the Next links go through all five, each once.
    page.goto(f"{server.url}/?limit=2")
    seen = []
    while True:
        rows = page.locator("#runs tr.run")
        seen += [rows.nth(i).inner_text().split("\t")[2] for i in range(rows.count())]
        if page.locator("#next-page").count() == 0:
            break
        page.click("#next-page")
        page.wait_for_selector("#runs")
    assert seen == ["rel", "c3", "c2", "c1", "c0"]
    page.goto(f"{server.url}/?status=running")
    assert "status 'running' is not one of" in page.inner_text("body")
