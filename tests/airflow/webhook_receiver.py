"""A loopback HTTP receiver that records the JSON bodies POSTed to it: the other end of
the failure notifier's webhook (a chat tool or an alert router in production)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    url: str = ""
    bodies: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def webhook_receiver() -> Iterator[Received]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            received.bodies.append(json.loads(self.rfile.read(length) or b"{}"))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the tests assert on `received.bodies`

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    host, port = server.server_address[:2]
    received.url = f"http://{host!s}:{port}/hooks/outbox-relay"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
