"""Storage URIs, as the CLI, YAML specs and the server name storage.

- ``file:./dir`` (or ``file:///abs/dir``, or a bare path that looks like one: ``./dir``, ``/abs/dir``,
  ``dir/sub``): ``LocalFileStorage``. A bare word (``memroy``) or an unknown scheme (``sqllite:x.db``) is
  refused, with the nearest known form: a typo must not quietly become a folder.
- ``s3://bucket/prefix`` with optional ``?region=...&endpoint_url=...``: ``S3Storage``
- ``sqlite:PATH`` (``sqlite:./app.db``, ``sqlite:///abs/app.db``), with optional ``?synchronous=NORMAL``
  and ``?timeout=SECONDS``: ``SQLiteStorage``
- ``postgresql://...`` (or ``postgres://...``), a libpq connection URI: ``PostgresStorage``
- a database URI's ``prefix=a/b`` option: only the keys under ``a/b/`` (``PrefixedStorage``), as a
  folder's subfolder or an S3 prefix's longer one; ``storage_uri_under`` writes such URIs (a hosted
  pipeline's sessions, for the Temporal workers that run it)
- ``memory``: a new ``InMemoryStorage``; ``memory://name``: one shared per process under that name

A database storage is shared per URI within a process (one connection pool, one group commit for every
caller: the more writers share it, the more share each commit).
"""

from __future__ import annotations

import difflib
import re
import threading
from pathlib import Path
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

from orchestra.errors import ConfigurationError
from orchestra.storage._base import Storage, validate_key
from orchestra.storage.local import LocalFileStorage
from orchestra.storage.memory import InMemoryStorage
from orchestra.storage.prefixed import PrefixedStorage

__all__ = [
    "DEFAULT_STORAGE_URI",
    "check_storage_uri",
    "parse_storage_uri",
    "storage_from_uri",
    "storage_uri_under",
]

DEFAULT_STORAGE_URI = "file:./.orchestra"

_named_memory: dict[str, InMemoryStorage] = {}
_databases: dict[tuple[str, ...], Storage] = {}
_named_lock = threading.Lock()


def parse_storage_uri(uri: str) -> tuple[str, dict[str, str]]:
    """``(kind, parts)`` of a storage URI: kind is memory, s3, sqlite, postgresql or file (see the module
    docstring)."""
    uri = uri.strip()
    if uri.startswith(("postgresql://", "postgres://")):
        return "postgresql", _postgres_parts(uri)
    if uri.startswith("sqlite:"):
        return "sqlite", _sqlite_parts(uri)
    if uri in ("memory", "memory:"):
        return "memory", {}
    if uri.startswith("memory://"):
        return "memory", {"name": uri[len("memory://") :]}
    if uri.startswith("s3://"):
        parts = urlsplit(uri)
        if not parts.netloc:
            raise ConfigurationError(f"storage URI {uri!r} names no bucket; write s3://bucket/prefix")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = set(query) - {"region", "endpoint_url"}
        if unknown:
            raise ConfigurationError(f"storage URI {uri!r}: unknown option(s) {', '.join(sorted(unknown))}")
        return "s3", {"bucket": parts.netloc, "prefix": parts.path.lstrip("/"), **query}
    for scheme in ("file://", "file:"):
        if uri.startswith(scheme):
            return "file", {"root": uri[len(scheme) :] or "."}
    # A bare word ("memroy") is a typo more often than a folder; a path has a separator (Windows' too).
    if "://" in uri or not uri or _SCHEME.match(uri) or not ("/" in uri or "\\" in uri):
        raise ConfigurationError(f"unknown storage URI {uri!r}: {_nearest(uri)}use {_FORMS}")
    return "file", {"root": uri}


_FORMS = "file:./dir, s3://bucket/prefix, sqlite:./file.db, postgresql://host/db or memory"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")  # two letters at least: "C:" is not a scheme
_KNOWN = ("memory", "file", "s3", "sqlite", "postgresql")


def _nearest(uri: str) -> str:
    """ "did you mean ...?" for a typo'd scheme or word, and how to name a folder of that name."""
    word = re.split(r"[:/]", uri, maxsplit=1)[0].lower()
    close = difflib.get_close_matches(word, _KNOWN, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    if uri and not ("/" in uri or "\\" in uri) and ":" not in uri:
        hint += f"for a folder named {uri!r} write file:{uri}; "
    return hint


def _sqlite_parts(uri: str) -> dict[str, str]:
    path, _, query = uri[len("sqlite:") :].partition("?")
    if path.startswith("//"):  # sqlite:///abs/path, as SQLAlchemy writes it
        path = path[2:]
    if not path:
        raise ConfigurationError(f"storage URI {uri!r} names no file; write sqlite:./sessions.db")
    options = {k: v[-1] for k, v in parse_qs(query).items()}
    unknown = set(options) - {"synchronous", "timeout", "prefix"}
    if unknown:
        raise ConfigurationError(f"storage URI {uri!r}: unknown option(s) {', '.join(sorted(unknown))}")
    if options.get("synchronous", "FULL").upper() not in ("FULL", "NORMAL"):
        raise ConfigurationError(f"storage URI {uri!r}: synchronous is FULL (the default) or NORMAL")
    try:
        float(options.get("timeout", "30"))
    except ValueError:
        raise ConfigurationError(f"storage URI {uri!r}: timeout is a number of seconds") from None
    return {"path": path, **options}


def _postgres_parts(uri: str) -> dict[str, str]:
    """The libpq URI without orchestra's own ``prefix`` option (libpq refuses options it does not know)."""
    parts = urlsplit(uri)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    prefix = [value for key, value in pairs if key == "prefix"]
    if not prefix:
        return {"conninfo": uri}
    query = urlencode([(key, value) for key, value in pairs if key != "prefix"])
    return {"conninfo": urlunsplit(parts._replace(query=query)), "prefix": prefix[-1]}


def storage_uri_under(uri: str, prefix: str) -> str:
    """The URI of the keys under ``prefix`` of the storage ``uri`` names, for another process: a file
    root made absolute, an S3 prefix made longer, a database's ``prefix`` option.

    Raises:
        ConfigurationError: ``uri`` is ``memory`` (one process's own), or not a storage URI.
    """
    kind, parts = parse_storage_uri(uri)
    prefix = validate_key(prefix.strip("/"))
    if kind == "memory":
        raise ConfigurationError("memory storage is one process's own: no other process can open it")
    if kind == "file":
        return "file:" + str(Path(parts["root"]).absolute() / prefix)
    if kind == "s3":
        split = urlsplit(uri.strip())
        path = "/".join(p for p in (split.path.strip("/"), prefix) if p)
        return urlunsplit(split._replace(path="/" + path))
    inner = "/".join(p for p in (parts.get("prefix", "").strip("/"), prefix) if p)
    if kind == "sqlite":
        options = {k: v for k, v in parts.items() if k not in ("path", "prefix")}
        query = urlencode({**options, "prefix": inner}, safe="/")
        return f"sqlite:{Path(parts['path']).absolute()}?{query}"
    split = urlsplit(parts["conninfo"])
    query = "&".join(q for q in (split.query, urlencode({"prefix": inner}, safe="/")) if q)
    return urlunsplit(split._replace(query=query))


def check_storage_uri(uri: str) -> None:
    """Check a storage URI without creating anything.

    Raises:
        ConfigurationError: the URI's scheme is unknown or a required part is missing.
    """
    parse_storage_uri(uri)


def storage_from_uri(uri: str) -> Storage:
    """The storage a URI names.

    Raises:
        ConfigurationError: the URI's scheme is unknown or a required part is missing.
    """
    kind, parts = parse_storage_uri(uri)
    if kind == "memory":
        if "name" not in parts:
            return InMemoryStorage()
        with _named_lock:
            return _named_memory.setdefault(parts["name"], InMemoryStorage())
    if kind in ("sqlite", "postgresql"):
        database = _database(kind, parts)
        return PrefixedStorage(database, parts["prefix"]) if parts.get("prefix") else database
    if kind == "s3":
        from orchestra.storage.s3 import S3Storage

        return S3Storage(
            parts["bucket"],
            prefix=parts["prefix"],
            region_name=parts.get("region"),
            endpoint_url=parts.get("endpoint_url"),
        )
    return LocalFileStorage(parts["root"])


def _database(kind: str, parts: dict[str, str]) -> Storage:
    """The process's one storage for a database URI (made on first use)."""
    if kind == "sqlite":
        from orchestra.storage.sqlite import SQLiteStorage

        path = str(Path(parts["path"]).absolute())
        synchronous = parts.get("synchronous", "FULL").upper()
        timeout = float(parts.get("timeout", "30"))
        ident: tuple[str, ...] = (kind, path, synchronous, str(timeout))
        with _named_lock:
            if ident not in _databases:
                _databases[ident] = SQLiteStorage(
                    path, synchronous="NORMAL" if synchronous == "NORMAL" else "FULL", timeout=timeout
                )
            return _databases[ident]
    from orchestra.storage.postgres import PostgresStorage

    ident = (kind, parts["conninfo"])
    with _named_lock:
        if ident not in _databases:
            _databases[ident] = PostgresStorage(parts["conninfo"])
        return _databases[ident]
