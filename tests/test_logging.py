import logging

from orchestra import Agent
from orchestra.testing import ScriptedModel


def test_silent_by_default(capsys):
    Agent(model=ScriptedModel(["hi"]))("hello")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ""


def test_logs_are_bound_with_agent_name_and_invocation_id(caplog):
    with caplog.at_level(logging.DEBUG, logger="orchestra"):
        Agent(model=ScriptedModel(["hi"]), name="logged")("hello")
    starts = [r for r in caplog.records if r.getMessage() == "invocation.start"]
    assert len(starts) == 1
    assert starts[0].agent == "logged"
    assert len(starts[0].invocation_id) == 8
