"""Sessions encrypted at rest: every stored value is AES-256-GCM under a key from the environment
(``pip install -e '.[encryption]'``, the ``cryptography`` package). Make a key once and keep it like a
password:

    export ORCHESTRA_ENCRYPTION_KEYS="k1=$(python -c 'import os,base64;print(base64.b64encode(os.urandom(32)).decode())')"

To rotate, put the new key first (``k2=...,k1=...``): new values use k2, older ones still read with k1.
This example makes a throwaway key when the variable is not set. Run: python examples/python/encrypted_sessions.py
"""

from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path

from orchestra import Agent, ScriptedModel
from orchestra.session import SnapshotSessionManager
from orchestra.storage import EncryptedStorage, EnvKeyProvider, LocalFileStorage

SECRET = "my passport number is X1234567"


def chat(root: str, replies: list[str]) -> Agent:
    storage = EncryptedStorage(LocalFileStorage(root), EnvKeyProvider())  # reads ORCHESTRA_ENCRYPTION_KEYS
    return Agent(
        model=ScriptedModel(replies), session_manager=SnapshotSessionManager("user-1", storage=storage)
    )


if __name__ == "__main__":
    os.environ.setdefault("ORCHESTRA_ENCRYPTION_KEYS", "k1=" + base64.b64encode(os.urandom(32)).decode())
    with tempfile.TemporaryDirectory() as root:
        chat(root, ["Noted."])(SECRET)
        on_disk = b"".join(p.read_bytes() for p in Path(root).rglob("*") if p.is_file())
        print("secret on disk:", SECRET.encode() in on_disk)  # False: only ciphertext is stored
        again = chat(root, [])  # a new process would do the same: the session loads, decrypted
        print("messages restored:", len(again.messages), "-", again.messages[0]["content"][0]["text"])
