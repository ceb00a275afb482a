"""A real ASGI app served by uvicorn in a thread on 127.0.0.1, for tests that talk to it over HTTP."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving(app: Any, *, start_timeout_s: float = 10.0) -> Iterator[str]:
    """Serve `app` until the block ends; yields its base URL, http://127.0.0.1:PORT."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    started = threading.Event()
    for _ in range(int(start_timeout_s / 0.02)):
        if server.started:
            started.set()
            break
        threading.Event().wait(0.02)
    if not started.is_set():
        server.should_exit = True
        raise RuntimeError(f"uvicorn did not start within {start_timeout_s} s")
    try:
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
