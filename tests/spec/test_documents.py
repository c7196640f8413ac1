"""``orchestra.spec.load_document``: any YAML file checked as specs are (the server config is one)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field

from orchestra.errors import OrchestraSpecError
from orchestra.spec import load_document


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")

    retries: int = 3


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    inner: Inner = Field(default_factory=Inner)
    secret: str = Field(default="", exclude=True)


def test_problems_are_placed_and_unknown_keys_get_the_nearest_known(tmp_path):
    path = tmp_path / "settings.yaml"
    path.write_text("name: x\ninner: {retires: 2}\nsecrte: y\n")
    with pytest.raises(OrchestraSpecError) as raised:
        load_document(path, Settings)
    assert sorted(raised.value.errors) == [
        f"{path}:2:18: inner.retires: unknown key 'retires' (did you mean 'retries'?)",
        f"{path}:3:9: secrte: unknown key 'secrte'",  # an excluded field is never suggested
    ]


def test_the_data_and_its_positions_come_back(tmp_path, monkeypatch):
    monkeypatch.setenv("SETTINGS_NAME", "from-env")
    path = tmp_path / "settings.yaml"
    path.write_text("name: ${SETTINGS_NAME}\ninner:\n  retries: 5\n")
    settings, located = load_document(path, Settings, extra={"secret": "s"})
    assert (settings.name, settings.inner.retries, settings.secret) == ("from-env", 5, "s")
    assert located.error(("inner", "retries"), "too many") == f"{path}:3:12: inner.retries: too many"
