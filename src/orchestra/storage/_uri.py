"""Storage URIs, as the CLI, YAML specs and the server name storage.

- ``file:./dir`` (or ``file:///abs/dir``, or a bare path): ``LocalFileStorage``
- ``s3://bucket/prefix`` with optional ``?region=...&endpoint_url=...``: ``S3Storage``
- ``memory``: a new ``InMemoryStorage``; ``memory://name``: one shared per process under that name
"""

from __future__ import annotations

import threading
from urllib.parse import parse_qs, urlsplit

from orchestra.errors import ConfigurationError
from orchestra.storage._base import Storage
from orchestra.storage.local import LocalFileStorage
from orchestra.storage.memory import InMemoryStorage

__all__ = ["DEFAULT_STORAGE_URI", "storage_from_uri"]

DEFAULT_STORAGE_URI = "file:./.orchestra"

_named_memory: dict[str, InMemoryStorage] = {}
_named_lock = threading.Lock()


def storage_from_uri(uri: str) -> Storage:
    """The storage a URI names.

    Raises:
        ConfigurationError: the URI's scheme is unknown or a required part is missing.
    """
    uri = uri.strip()
    if uri in ("memory", "memory:"):
        return InMemoryStorage()
    if uri.startswith("memory://"):
        name = uri[len("memory://") :]
        with _named_lock:
            return _named_memory.setdefault(name, InMemoryStorage())
    if uri.startswith("s3://"):
        from orchestra.storage.s3 import S3Storage

        parts = urlsplit(uri)
        if not parts.netloc:
            raise ConfigurationError(f"storage URI {uri!r} names no bucket; write s3://bucket/prefix")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = set(query) - {"region", "endpoint_url"}
        if unknown:
            raise ConfigurationError(f"storage URI {uri!r}: unknown option(s) {', '.join(sorted(unknown))}")
        return S3Storage(
            parts.netloc,
            prefix=parts.path.lstrip("/"),
            region_name=query.get("region"),
            endpoint_url=query.get("endpoint_url"),
        )
    if uri.startswith("file://"):
        return LocalFileStorage(uri[len("file://") :] or ".")
    if uri.startswith("file:"):
        return LocalFileStorage(uri[len("file:") :] or ".")
    if "://" in uri or not uri:
        raise ConfigurationError(f"unknown storage URI {uri!r}: use file:./dir, s3://bucket/prefix or memory")
    return LocalFileStorage(uri)
