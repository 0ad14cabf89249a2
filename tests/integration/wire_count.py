"""A TCP proxy in front of PostgreSQL that counts the client's round trips on the wire.

A round trip is a request after which the client waits for the server: a simple-protocol
Query message ('Q', what psycopg2 sends) or the Sync ('S') that ends an extended-protocol
exchange (what psycopg 3 sends after Parse/Bind/Execute). The proxy reads the frontend's
messages as PostgreSQL's protocol frames them, so whatever a driver does is counted,
its own BEGIN included. Use sslmode=disable: an encrypted stream has no visible frames.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit, urlunsplit

_NEGOTIATION_CODES = (80877103, 80877104)  # SSLRequest, GSSENCRequest: a startup follows


class WireCounter:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        netloc = f"{parts.username}@127.0.0.1:{port}" if parts.username else f"127.0.0.1:{port}"
        self.url = urlunsplit(parts._replace(netloc=netloc, query="sslmode=disable"))
        self._lock = threading.Lock()
        self._requests = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def requests(self) -> int:
        with self._lock:
            return self._requests

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            threading.Thread(target=self._pipe, args=(server, client), daemon=True).start()
            threading.Thread(target=self._frontend, args=(client, server), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(dst)

    def _frontend(self, src: socket.socket, dst: socket.socket) -> None:
        """Counts each complete request before forwarding it, so a count read after the
        driver got its answer already includes the request."""
        buf = bytearray()
        started = False
        try:
            while data := src.recv(65536):
                buf += data
                while True:
                    if not started:  # untyped: Int32 length, Int32 code
                        if len(buf) < 8 or len(buf) < (n := int.from_bytes(buf[:4])):
                            break
                        started = int.from_bytes(buf[4:8]) not in _NEGOTIATION_CODES
                        del buf[:n]
                        continue
                    if len(buf) < 5 or len(buf) < 1 + (n := int.from_bytes(buf[1:5])):
                        break
                    if buf[0] in b"QS":
                        with self._lock:
                            self._requests += 1
                    del buf[:1 + n]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(dst)


def _close(sock: socket.socket) -> None:
    """Closes both directions first: a bare close() while the other thread waits in recv()
    on the same socket sends no FIN, and a driver that waits for the server to hang up
    (asyncpg's close()) would wait forever."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
