"""The dashboard's memory page in a real headless Chromium: browse namespaces, search, another workspace
sees nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestra.client import Client
from tests.server import test_dashboard as dashboard
from tests.server.conftest import KEYS, Server
from tests.server.test_memory_routes import support_config

browser = dashboard.browser  # the same Chromium, skipped (or required) the same way
pytestmark = getattr(dashboard, "pytestmark", [])


@pytest.fixture
def memory_server(tmp_path: Path):
    with Server(support_config(tmp_path, f"file:{tmp_path}/store")) as running:
        yield running


def _log_in(page, url: str, workspace: str) -> None:
    page.goto(f"{url}/login")
    page.fill("#key", KEYS[workspace])
    page.click("#login")
    page.wait_for_selector("#runs")


def test_browse_and_search_memories(memory_server: Server, browser) -> None:
    with Client(memory_server.url, KEYS["acme"]) as acme:
        acme.memory.put(["customers", "ana"], "plan", {"text": "Ana is on the gold plan"})
        acme.memory.put(["customers", "bob"], "plan", {"text": "Bob is on the <b>free</b> plan"})
    page = browser.new_page()
    _log_in(page, memory_server.url, "acme")
    page.click("#memory-link")
    page.wait_for_selector("#namespaces")
    assert page.inner_text("#namespaces").split() == ["customers/ana", "customers/bob"]
    page.click("a.namespace[href='/memory?namespace=customers%2Fbob']")
    page.wait_for_selector("#items")
    items = page.inner_text("#items")
    assert "Bob is on the <b>free</b> plan" in items  # shown as text, never as markup
    assert "Ana" not in items
    page.fill("#memory-namespace", "customers")
    page.fill("#memory-query", "gold")
    page.click("#memory-search")
    page.wait_for_selector("#items")
    assert page.locator("#items tr.item").count() == 2
    other = browser.new_page()
    _log_in(other, memory_server.url, "globex")
    other.goto(f"{memory_server.url}/memory?namespace=customers")
    assert other.inner_text("#namespaces").strip() == "None."
    assert "Nothing remembered here." in other.inner_text("#items")
    refused = other.goto(f"{memory_server.url}/memory?namespace=..")
    assert refused.status == 422
