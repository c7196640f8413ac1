"""``EncryptedStorage``: any storage, with every value encrypted at rest (AES-256-GCM).

Each stored value is ``ORCHENC1 | len(key ref) | key ref | nonce | ciphertext+tag``. The key ref names the
key that encrypted it, so keys rotate: new values use the provider's current key, older values are read
with the key they name. The storage key (the path) is the AES-GCM associated data, so a value copied or
moved to another path does not decrypt. Paths, versions and sizes stay visible to whoever can list the
storage; values do not.

Two key providers come with orchestra:

- ``EnvKeyProvider``: keys from an environment variable, ``ORCHESTRA_ENCRYPTION_KEYS="k2=<base64>,k1=<base64>"``
  (32-byte keys; the first is current, the others still decrypt).
- ``KMSKeyProvider``: envelope encryption with AWS KMS. It asks KMS for one data key per provider, keeps
  the plaintext key in memory only, and stores the KMS-encrypted data key in each value's key ref; reading
  a value decrypts its data key with KMS once (then cached). Rotating the KMS key, or starting a new
  process, simply produces new data keys.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import struct
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import anyio

from orchestra._dist import install_hint
from orchestra.errors import ConfigurationError, StorageError
from orchestra.storage._base import Expect, ForwardingStorage, Storage, list_versions

__all__ = ["EncryptedStorage", "EnvKeyProvider", "KMSKeyProvider", "KeyProvider"]

_MAGIC = b"ORCHENC1"
_NONCE = 12


@runtime_checkable
class KeyProvider(Protocol):
    """Where ``EncryptedStorage`` gets its 32-byte keys."""

    async def current_key(self) -> tuple[bytes, bytes]:
        """(key ref to store with the value, key) for new values."""
        ...

    async def key_for(self, ref: bytes) -> bytes:
        """The key a stored key ref names.

        Raises:
            StorageError: the provider does not have that key.
        """
        ...


def _aesgcm(key: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:  # pragma: no cover - depends on the installed extras
        raise ConfigurationError(
            "EncryptedStorage needs the cryptography package: " + install_hint("encryption")
        ) from None
    return AESGCM(key)


class EnvKeyProvider:
    """Keys from an environment variable: ``id=<base64 of 32 bytes>`` pairs, comma separated, current first.

    Raises:
        ConfigurationError: the variable is missing or malformed (the message names it, never a key).
    """

    def __init__(self, variable: str = "ORCHESTRA_ENCRYPTION_KEYS") -> None:
        value = os.environ.get(variable, "").strip()
        if not value:
            raise ConfigurationError(
                f"{variable} is not set: give it 'id=<base64 key>' (a 32-byte key: "
                "python -c 'import os,base64;print(base64.b64encode(os.urandom(32)).decode())')"
            )
        self._keys: dict[str, bytes] = {}
        for position, pair in enumerate(value.split(",")):
            key_id, sep, encoded = pair.strip().partition("=")
            try:
                key = base64.b64decode(encoded, validate=True) if sep and key_id else b""
            except binascii.Error:
                key = b""
            if len(key) != 32:
                raise ConfigurationError(
                    f"{variable}: entry {position + 1} is not 'id=<base64 of 32 bytes>' (AES-256 needs 32 bytes)"
                )
            if key_id in self._keys:  # the later one would silently replace the earlier (or the current)
                raise ConfigurationError(
                    f"{variable}: key id {key_id!r} is given twice (entries {list(self._keys).index(key_id) + 1} "
                    f"and {position + 1}); each key needs an id of its own"
                )
            self._keys[key_id] = key
        self._current = next(iter(self._keys))

    async def current_key(self) -> tuple[bytes, bytes]:
        return f"env:{self._current}".encode(), self._keys[self._current]

    async def key_for(self, ref: bytes) -> bytes:
        key_id = ref.decode(errors="replace").removeprefix("env:")
        if not ref.startswith(b"env:") or key_id not in self._keys:
            raise StorageError(
                f"encrypted with key {key_id!r}, which is not among this provider's keys; add it to the "
                "variable (after the current key) to read values written before a rotation"
            )
        return self._keys[key_id]


class KMSKeyProvider:
    """Envelope encryption with AWS KMS: one data key per provider, encrypted under ``key_id``.

    Args:
        key_id: a KMS key id, ARN or alias (``alias/orchestra-sessions``).
        client: a boto3 KMS client; by default one is made from ``region_name`` and ``endpoint_url``.
    """

    def __init__(
        self,
        key_id: str,
        *,
        client: Any = None,
        region_name: str | None = None,
        endpoint_url: str | None = None,
    ) -> None:
        if client is None:
            import boto3

            client = boto3.client("kms", region_name=region_name, endpoint_url=endpoint_url)
        self.key_id = key_id
        self._client = client
        self._current: tuple[bytes, bytes] | None = None
        self._decrypted: dict[bytes, bytes] = {}
        self._lock = anyio.Lock()

    async def current_key(self) -> tuple[bytes, bytes]:
        async with self._lock:
            if self._current is None:
                answer = await anyio.to_thread.run_sync(
                    lambda: self._client.generate_data_key(KeyId=self.key_id, KeySpec="AES_256")
                )
                ref = b"kms:" + answer["CiphertextBlob"]
                self._current = (ref, answer["Plaintext"])
                self._decrypted[hashlib.sha256(ref).digest()] = answer["Plaintext"]
            return self._current

    async def key_for(self, ref: bytes) -> bytes:
        if not ref.startswith(b"kms:"):
            raise StorageError(
                "encrypted with a key that is not a KMS data key; use the provider that wrote it"
            )
        digest = hashlib.sha256(ref).digest()
        if digest not in self._decrypted:
            try:
                answer = await anyio.to_thread.run_sync(lambda: self._client.decrypt(CiphertextBlob=ref[4:]))
            except Exception as exc:  # botocore's ClientError, or no credentials: one clear line
                raise StorageError(f"KMS could not decrypt the value's data key: {exc}") from exc
            self._decrypted[digest] = answer["Plaintext"]
        return self._decrypted[digest]


def _key_name(ref: bytes) -> str:
    """The key a stored key ref names, for messages (never the key itself)."""
    if ref.startswith(b"env:"):
        return f"key {ref[4:].decode(errors='replace')!r}"
    if ref.startswith(b"kms:"):
        return "its KMS data key"
    return f"key ref {ref[:32]!r}"


class EncryptedStorage(ForwardingStorage):
    """Wraps ``inner`` so that every value is encrypted before it is stored and checked when read.

    Conditional writes, versions, listing and deletion are the inner storage's own: a second writer is
    refused exactly as without encryption.

    Args:
        inner: where the encrypted values go (local files, S3, ...).
        keys: the key provider (``EnvKeyProvider()``, ``KMSKeyProvider(...)`` or your own).
    """

    def __init__(self, inner: Storage, keys: KeyProvider) -> None:
        super().__init__(inner)
        self.keys = keys

    async def read(self, key: str) -> tuple[bytes, str] | None:
        found = await self.inner.read(key)
        if found is None:
            return None
        blob, version = found
        if not blob.startswith(_MAGIC) or len(blob) < len(_MAGIC) + 2:
            raise StorageError(f"{key}: not an encrypted value (written without EncryptedStorage?)")
        (ref_length,) = struct.unpack_from(">H", blob, len(_MAGIC))
        start = len(_MAGIC) + 2
        ref, nonce = blob[start : start + ref_length], blob[start + ref_length : start + ref_length + _NONCE]
        ciphertext = blob[start + ref_length + _NONCE :]
        aesgcm = _aesgcm(await self.keys.key_for(ref))
        try:
            return aesgcm.decrypt(nonce, ciphertext, key.encode()), version
        except Exception:  # cryptography's InvalidTag: a wrong key, a tampered or moved value
            raise StorageError(
                f"{key}: the encrypted value does not decrypt with {_key_name(ref)} (a different key under "
                "that id, or a value tampered with, truncated, or copied from another key); nothing was loaded"
            ) from None

    async def list_versions(self, prefix: str) -> Sequence[tuple[str, str]] | None:
        """The inner storage's (versions are its own: encryption does not change them)."""
        return await list_versions(self.inner, prefix)

    async def write(self, key: str, data: bytes, *, expect: Expect = None) -> str:
        ref, secret = await self.keys.current_key()
        nonce = os.urandom(_NONCE)
        sealed = _aesgcm(secret).encrypt(nonce, data, key.encode())
        blob = b"".join((_MAGIC, struct.pack(">H", len(ref)), ref, nonce, sealed))
        return await self.inner.write(key, blob, expect=expect)
