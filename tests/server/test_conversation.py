"""The whole conversation, kept: a hosted agent's conversation manager decides what the model is given,
never what the session keeps (docs/server.md, "What is stored and what the model sees")."""

from __future__ import annotations

import httpx

from orchestra.client import Client
from tests.server.conftest import KEYS, auth


def test_every_turn_stays_readable_while_the_model_is_given_the_window(platform):
    answers = []
    for turn in range(6):
        answer = httpx.post(
            f"{platform.url}/api/v1/agents/window/invoke",
            json={"input": f"q{turn}", "session_id": "long"},
            headers=auth(),
            timeout=30,
        )
        answers.append(answer.json()["output"])
    # The model counts the user turns it is given: the window holds two turns, then the new one.
    assert answers == [f"echo: q{t} (turn {min(t + 1, 3)})" for t in range(6)]
    with Client(platform.url, KEYS["acme"]) as client:
        session = client.session("window", "long")
    texts = [m["content"][0]["text"] for m in session["messages"]]
    assert texts == [text for t in range(6) for text in (f"q{t}", answers[t])]
    assert session["context_start"] == 8  # messages[8:] is what the model is given next
