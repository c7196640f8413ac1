"""``storage_uri_under``: the URI another process opens to see the keys under a prefix of a storage (a
hosted pipeline's sessions, for the Temporal workers that run it), and a database URI's ``prefix=``."""

from __future__ import annotations

import pytest

from orchestra.storage import PrefixedStorage, parse_storage_uri, storage_from_uri, storage_uri_under


@pytest.mark.parametrize("kind", ["file", "sqlite"])
async def test_the_uri_under_a_prefix_opens_the_same_keys(tmp_path, kind):
    uri = f"file:{tmp_path}/store" if kind == "file" else f"sqlite:{tmp_path}/server.db?synchronous=NORMAL"
    whole = storage_from_uri(uri)
    await PrefixedStorage(whole, "ws/acme/agents/pipe").write("sessions/s1/doc", b"written by the server")
    under = storage_from_uri(storage_uri_under(uri, "ws/acme/agents/pipe"))
    found = await under.read("sessions/s1/doc")
    assert found is not None
    assert found[0] == b"written by the server"
    await under.write("sessions/s1/blob", b"written by a worker")
    back = await whole.read("ws/acme/agents/pipe/sessions/s1/blob")
    assert back is not None
    assert back[0] == b"written by a worker"
    assert await under.list("") == ["sessions/s1/blob", "sessions/s1/doc"]


def test_each_kind_of_uri_says_its_prefix_its_own_way(tmp_path):
    assert (
        storage_uri_under("s3://bucket/runs?region=eu-west-1", "ws/a")
        == "s3://bucket/runs/ws/a?region=eu-west-1"
    )
    postgres = storage_uri_under("postgresql://u@db/orchestra?sslmode=disable", "ws/a")
    # libpq refuses options it does not know: prefix is taken off the connection URI.
    assert parse_storage_uri(postgres) == (
        "postgresql",
        {"conninfo": "postgresql://u@db/orchestra?sslmode=disable", "prefix": "ws/a"},
    )
    nested = storage_uri_under(f"sqlite:{tmp_path}/x.db?prefix=tenant", "ws/a")
    assert parse_storage_uri(nested)[1]["prefix"] == "tenant/ws/a"
    with pytest.raises(ValueError, match="memory storage is one process's own"):
        storage_uri_under("memory", "ws/a")
