"""A fault-injecting TCP proxy for PostgreSQL's wire protocol, between psycopg and a real server.

It reads the messages each way (a type byte and a length; the client's first message has no type) and
can, once each:

- ``lose_commit_answer()``: forward a COMMIT, let the server commit it, then cut both connections instead
  of passing on the server's ``CommandComplete`` for it: a commit whose answer was lost;
- ``lose_commit()``: cut the connection when the client sends COMMIT, before it reaches the server: the
  server rolls the transaction back when the connection goes;
- ``refuse()``/``accept()``: refuse new connections (a server that is down, or failing over).

Clients must not ask for TLS or GSS encryption (``sslmode=disable&gssencmode=disable``), so that the
messages are readable.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading


def _read_exact(sock: socket.socket, count: int) -> bytes:
    chunks = []
    while count:
        chunk = sock.recv(count)
        if not chunk:
            raise ConnectionError("closed")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _message(sock: socket.socket, typed: bool = True) -> tuple[bytes, bytes]:
    kind = _read_exact(sock, 1) if typed else b""
    (length,) = struct.unpack("!I", _read_exact(sock, 4))
    return kind, _read_exact(sock, length - 4)


class PostgresProxy:
    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._lose_answer = 0
        self._lose_commit = 0
        self._refusing = False
        self.commits_seen = 0
        self.faults = 0
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> PostgresProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()
        self.cut_all()

    def url(self, base: str) -> str:
        """``base`` (a test server URI) pointed at this proxy, unencrypted."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(base)
        netloc = parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        netloc_new = f"{netloc[0]}@{host}" if len(netloc) == 2 else host
        query = "&".join(
            q for q in parts.query.split("&") if q and not q.startswith(("sslmode=", "gssencmode="))
        )
        query = f"{query}&sslmode=disable&gssencmode=disable".lstrip("&")
        return urlunsplit((parts.scheme, netloc_new, parts.path, query, ""))

    def lose_commit_answer(self, times: int = 1) -> None:
        with self._lock:
            self._lose_answer += times

    def lose_commit(self, times: int = 1) -> None:
        with self._lock:
            self._lose_commit += times

    def refuse(self) -> None:
        with self._lock:
            self._refusing = True
        self.cut_all()

    def accept(self) -> None:
        with self._lock:
            self._refusing = False

    def cut_all(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refusing = self._refusing
            if refusing:
                client.close()
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._client_to_server, args=(client, server), daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(server, client), daemon=True).start()

    def _cut(self, *sockets: socket.socket) -> None:
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _client_to_server(self, client: socket.socket, server: socket.socket) -> None:
        try:
            kind, body = _message(client, typed=False)  # the startup message
            server.sendall(struct.pack("!I", len(body) + 4) + body)
            while True:
                kind, body = _message(client)
                if kind in (b"P", b"Q") and b"COMMIT" in body.upper():
                    with self._lock:
                        cut = self._lose_commit > 0
                        self._lose_commit -= cut
                        self.commits_seen += 1
                        self.faults += cut
                    if cut:
                        self._cut(client, server)
                        return
                server.sendall(kind + struct.pack("!I", len(body) + 4) + body)
        except (OSError, ConnectionError):
            self._cut(client, server)

    def _server_to_client(self, server: socket.socket, client: socket.socket) -> None:
        try:
            while True:
                kind, body = _message(server)
                if kind == b"C" and body.startswith(b"COMMIT"):
                    with self._lock:
                        cut = self._lose_answer > 0
                        self._lose_answer -= cut
                        self.faults += cut
                    if cut:
                        self._cut(client, server)
                        return
                client.sendall(kind + struct.pack("!I", len(body) + 4) + body)
        except (OSError, ConnectionError):
            self._cut(client, server)
