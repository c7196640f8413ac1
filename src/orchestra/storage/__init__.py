"""Storage: pluggable bytes-level key-value backends with conditional writes.

``InMemoryStorage``, ``LocalFileStorage`` (the default, ``./.orchestra/``), ``S3Storage``, ``SQLiteStorage``
and ``PostgresStorage`` implement the ``Storage`` protocol; ``storage_from_uri`` builds one from
``file:./dir``, ``s3://bucket/prefix``, ``sqlite:./file.db``, ``postgresql://host/db`` or ``memory``.
``EncryptedStorage`` wraps any of them to encrypt every value at rest. A storage may also offer appends
(``AppendStorage``; local files do), which session journals use for their records.
"""

import typing as _typing

from orchestra.storage._append import AppendStorage, appendable
from orchestra.storage._base import (
    ABSENT,
    Absent,
    Expect,
    ForwardingStorage,
    Storage,
    delete_many,
    list_versions,
    read_many,
    scrub,
    validate_key,
    write_many,
)
from orchestra.storage._uri import (
    DEFAULT_STORAGE_URI,
    check_storage_uri,
    parse_storage_uri,
    storage_from_uri,
    storage_uri_under,
)
from orchestra.storage.encrypted import EncryptedStorage, EnvKeyProvider, KeyProvider, KMSKeyProvider
from orchestra.storage.local import LocalFileStorage
from orchestra.storage.memory import InMemoryStorage
from orchestra.storage.prefixed import PrefixedStorage

if _typing.TYPE_CHECKING:
    from orchestra.storage.postgres import PostgresStorage
    from orchestra.storage.s3 import S3Storage
    from orchestra.storage.sqlite import SQLiteStorage


def __getattr__(name: str) -> _typing.Any:
    # S3Storage is imported on first use: boto3 costs every process about 20 MB and a third of a second
    # at import, and most never touch S3. The database storages likewise (sqlite3; psycopg, an extra).
    if name == "S3Storage":
        from orchestra.storage.s3 import S3Storage

        return S3Storage
    if name == "SQLiteStorage":
        from orchestra.storage.sqlite import SQLiteStorage

        return SQLiteStorage
    if name == "PostgresStorage":
        from orchestra.storage.postgres import PostgresStorage

        return PostgresStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ABSENT",
    "DEFAULT_STORAGE_URI",
    "Absent",
    "AppendStorage",
    "EncryptedStorage",
    "EnvKeyProvider",
    "Expect",
    "ForwardingStorage",
    "InMemoryStorage",
    "KMSKeyProvider",
    "KeyProvider",
    "LocalFileStorage",
    "PostgresStorage",
    "PrefixedStorage",
    "S3Storage",
    "SQLiteStorage",
    "Storage",
    "appendable",
    "check_storage_uri",
    "delete_many",
    "list_versions",
    "parse_storage_uri",
    "read_many",
    "scrub",
    "storage_from_uri",
    "storage_uri_under",
    "validate_key",
    "write_many",
]
