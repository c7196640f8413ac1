"""The dashboard's approval card (issue 37 item 3) in a real headless Chromium (Debian's chromium, driven
by Playwright, as ``test_dashboard.py``): a tool's approval question shows the tool and its arguments,
and is answered with an edit, a rejection with a reason, and "always"; an edit that does not fit is
refused and the question stays open."""

from __future__ import annotations

import httpx
import pytest

from tests.server import test_dashboard
from tests.server.approval_agents import SENT, bank_config
from tests.server.conftest import Server, auth
from tests.server.test_dashboard import browser, login, status_after_reloads  # noqa: F401

# The same skip as test_dashboard.py's (none where .ci/run requires the browser).
pytestmark = getattr(test_dashboard, "pytestmark", [])


@pytest.fixture
def bank(tmp_path):
    SENT.clear()
    with Server(bank_config(tmp_path)) as running:
        yield running


def asking_run(server, text: str) -> str:
    answer = httpx.post(
        f"{server.url}/api/v1/agents/bank/invoke",
        json={"input": text, "session_id": "browser"},
        headers=auth(),
        timeout=60,
    ).json()
    assert answer["status"] == "interrupted", answer
    return answer["run_id"]


def answered(page, server, clicked: str) -> str:
    """Click a card's button; the output of the run that answers (its conversation's last line)."""
    page.click(clicked)
    page.wait_for_url(lambda url: "/runs/" in url)
    status = status_after_reloads(page, {"completed", "failed"})
    assert status == "completed", page.content()
    page.click("#tab-conversation")
    return page.inner_text("#conversation")


def test_an_edit_a_rejection_and_always_in_the_browser(bank, browser):  # noqa: F811
    page = browser.new_page()
    login(page, bank)
    run = asking_run(bank, "send 500 to ann")
    page.goto(f"{bank.url}/runs/{run}")
    card = page.locator("#interrupts li.approval")
    assert card.count() == 1
    assert card.locator(".tool").inner_text() == "send_money"
    assert '"amount": 500' in card.locator(".arguments").inner_text()
    # Arguments that are not JSON are refused at once; ones that do not fit the tool's schema by the
    # run that answers, which stores nothing: the question is still open on the run that asked.
    page.fill("#edit-input-0", "{not json")
    page.click("#edit-0")
    assert "not JSON" in page.inner_text("#refused")
    page.goto(f"{bank.url}/runs/{run}")
    page.fill("#edit-input-0", '{"to": "ann", "amount": "lots"}')
    page.click("#edit-0")
    page.wait_for_url(lambda url: "/runs/" in url and run not in url)
    assert status_after_reloads(page, {"completed", "failed"}) == "failed"
    page.goto(page.url.split("?")[0] + "?tab=overview")
    assert "do not fit its input schema" in page.inner_text(".error")
    page.goto(f"{bank.url}/runs/{run}")
    page.fill("#edit-input-0", '{"to": "ann", "amount": 50}')
    assert "success: sent 50 to ann" in answered(page, bank, "#edit-0")

    page.goto(f"{bank.url}/runs/{asking_run(bank, 'send 5 to bob')}")
    page.fill("#reject-reason-0", "bob has left")
    conversation = answered(page, bank, "#reject-0")
    assert "a human rejected this call of 'send_money': bob has left" in conversation

    page.goto(f"{bank.url}/runs/{asking_run(bank, 'send 7 to cy')}")
    assert "success: sent 7 to cy" in answered(page, bank, "#always-0")
    later = httpx.post(
        f"{bank.url}/api/v1/agents/bank/invoke",
        json={"input": "send 8 to dee", "session_id": "browser"},
        headers=auth(),
        timeout=60,
    ).json()
    assert (later["status"], later["output"]) == ("completed", "success: sent 8 to dee")
    assert SENT == [("ann", 50), ("cy", 7), ("dee", 8)]
