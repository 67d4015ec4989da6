"""A static HTTP server on 127.0.0.1 for the tests of fetched published files (started and stopped by the
test; it serves stand-ins the tests write themselves)."""

from __future__ import annotations

import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


class FileServer:
    """Serves one directory; `url(name)` is a file's address."""

    def __init__(self, root: Path, port: int = 0) -> None:
        handler = partial(QuietHandler, directory=str(root))
        self.server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{name}"
