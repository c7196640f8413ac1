import base64
import json

import pytest
from pydantic import ValidationError

from orchestra.messages import (
    Message,
    Usage,
    messages_from_json,
    messages_to_json,
    text_of,
    tool_uses_of,
    validate_message,
    validate_messages,
)
from orchestra.models import UsageEvent
from orchestra.testing import ScriptedModel


def test_plain_form_is_accepted_and_kept_plain():
    plain = {"role": "user", "content": [{"text": "Hello"}]}
    assert validate_message(plain) == plain


def test_pydantic_models_are_accepted_and_turned_plain():
    model = Message.model_validate({"role": "assistant", "content": [{"text": "hi"}]})
    assert validate_message(model) == {"role": "assistant", "content": [{"text": "hi"}]}


def test_tool_use_and_result_blocks_round_trip():
    messages = [
        {
            "role": "assistant",
            "content": [{"toolUse": {"toolUseId": "t1", "name": "add", "input": {"a": 1}}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "t1",
                        "status": "success",
                        "content": [{"text": "2"}, {"json": {"x": 1}}],
                    }
                }
            ],
        },
    ]
    assert validate_messages(messages) == messages
    assert messages_from_json(messages_to_json(messages)) == messages
    assert tool_uses_of(messages[0]) == [{"toolUseId": "t1", "name": "add", "input": {"a": 1}}]


def test_binary_content_is_bytes_in_python_and_base64_in_json():
    png = b"\x89PNG\r\n\x1a\n\x00binary"
    message = {"role": "user", "content": [{"image": {"format": "png", "source": {"bytes": png}}}]}
    assert validate_message(message) == message
    encoded = json.loads(messages_to_json([message]))
    assert encoded[0]["content"][0]["image"]["source"]["bytes"] == base64.b64encode(png).decode()
    assert messages_from_json(messages_to_json([message])) == [message]


def test_document_block():
    message = {
        "role": "user",
        "content": [{"document": {"format": "txt", "name": "notes", "source": {"bytes": b"hello"}}}],
    }
    assert messages_from_json(messages_to_json([message])) == [message]


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        ({"role": "system", "content": [{"text": "x"}]}, "role"),
        ({"role": "user", "content": [{}]}, "exactly one of"),
        (
            {"role": "user", "content": [{"text": "a", "toolUse": {"toolUseId": "t", "name": "n"}}]},
            "exactly one",
        ),
        ({"role": "user", "content": [{"txt": "a"}]}, "exactly one of"),
        ({"role": "user"}, "content"),
        (
            {
                "role": "user",
                "content": [{"toolResult": {"toolUseId": "t", "status": "maybe", "content": []}}],
            },
            "status",
        ),
    ],
)
def test_invalid_messages_name_the_problem(message, fragment):
    with pytest.raises(ValueError, match="invalid message") as info:
        validate_message(message)
    assert fragment in str(info.value)


def test_validate_messages_names_the_index():
    with pytest.raises(ValueError, match=r"messages\[1\]"):
        validate_messages([{"role": "user", "content": [{"text": "ok"}]}, {"role": "bad", "content": []}])


def test_text_of_joins_text_blocks_only():
    message = {
        "role": "assistant",
        "content": [{"text": "a"}, {"toolUse": {"toolUseId": "t", "name": "n", "input": {}}}, {"text": "b"}],
    }
    assert text_of(message) == "a\nb"
    assert text_of(None) == ""


async def test_usage_is_a_value_a_scripted_model_may_share_between_replies():
    model = ScriptedModel(["same", "same"])
    usages = []
    for _ in range(2):
        async for event in model.stream([{"role": "user", "content": [{"text": "hi"}]}]):
            if isinstance(event, UsageEvent):
                usages.append(event.usage)
    assert usages[0] == usages[1] == Usage(input_tokens=1, output_tokens=1, total_tokens=2)
    with pytest.raises(ValidationError, match="frozen"):
        usages[0].input_tokens = 5  # nobody can change what another reply's usage says
