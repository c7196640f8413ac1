"""Storage: pluggable bytes-level key-value backends with conditional writes.

``InMemoryStorage``, ``LocalFileStorage`` (the default, ``./.orchestra/``) and ``S3Storage`` implement the
``Storage`` protocol; ``storage_from_uri`` builds one from ``file:./dir``, ``s3://bucket/prefix`` or ``memory``.
``EncryptedStorage`` wraps any of them to encrypt every value at rest.
"""

from orchestra.storage._base import ABSENT, Absent, Expect, Storage, validate_key
from orchestra.storage._uri import DEFAULT_STORAGE_URI, storage_from_uri
from orchestra.storage.encrypted import EncryptedStorage, EnvKeyProvider, KeyProvider, KMSKeyProvider
from orchestra.storage.local import LocalFileStorage
from orchestra.storage.memory import InMemoryStorage
from orchestra.storage.prefixed import PrefixedStorage
from orchestra.storage.s3 import S3Storage

__all__ = [
    "ABSENT",
    "DEFAULT_STORAGE_URI",
    "Absent",
    "EncryptedStorage",
    "EnvKeyProvider",
    "Expect",
    "InMemoryStorage",
    "KMSKeyProvider",
    "KeyProvider",
    "LocalFileStorage",
    "PrefixedStorage",
    "S3Storage",
    "Storage",
    "storage_from_uri",
    "validate_key",
]
