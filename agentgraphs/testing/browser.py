"""A headless Chromium driven over the Chrome DevTools Protocol (CDP), for tests of the HTML viewer.

Uses the system's Chromium (Debian package `chromium`; no browser download) and the `websockets` client.
Only 127.0.0.1 is contacted: the browser's own debugging port.

    with HeadlessChromium() as browser:
        browser.open(Path("report.html"))
        browser.evaluate("document.title")
        browser.screenshot(Path("shot.png"))
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The Chromium binary: $AGENTGRAPHS_CHROMIUM, else the first of chromium / chromium-browser / chrome on PATH."""
    explicit = os.environ.get("AGENTGRAPHS_CHROMIUM")
    if explicit:
        return explicit if os.path.exists(explicit) else None
    for name in _CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(RuntimeError):
    """The browser did not start, or a CDP command failed (the message carries the browser's answer)."""


class HeadlessChromium:
    """One headless Chromium with one page, driven synchronously over CDP.

    `timeout_s` bounds every wait (start, navigation, each command), so a hung browser fails the test
    instead of stalling it.
    """

    def __init__(self, binary: str | None = None, *, width: int = 1280, height: int = 900,
                 timeout_s: float = 60.0) -> None:
        self.binary = binary or find_chromium()
        if self.binary is None:
            raise BrowserError("no chromium binary on PATH (install the Debian package `chromium`)")
        self.width, self.height, self.timeout_s = width, height, timeout_s
        self._ids = itertools.count(1)
        self._proc: subprocess.Popen[bytes] | None = None
        self._ws: Any = None
        self._profile = ""

    def __enter__(self) -> "HeadlessChromium":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        from websockets.sync.client import connect

        self._profile = tempfile.mkdtemp(prefix="agentgraphs-chromium-")
        args = [self.binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                f"--user-data-dir={self._profile}", f"--window-size={self.width},{self.height}", "about:blank"]
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port = self._wait_for_port()
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as resp:
                    pages = [t for t in json.loads(resp.read()) if t.get("type") == "page"]
                if pages:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise BrowserError("chromium started but showed no page target")
            time.sleep(0.1)
        self._ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=self.timeout_s)
        self._ws.__enter__()  # the documented way is a `with` block; this object outlives one
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                  deviceScaleFactor=1, mobile=False)

    def _wait_for_port(self) -> int:
        assert self._proc is not None and self._proc.stderr is not None
        deadline = time.monotonic() + self.timeout_s
        seen: list[str] = []
        while time.monotonic() < deadline:
            line = self._proc.stderr.readline().decode("utf-8", "replace")
            if not line and self._proc.poll() is not None:
                break
            seen.append(line)
            m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
            if m:
                # keep draining stderr so the browser never blocks on a full pipe
                import threading

                threading.Thread(target=self._drain, daemon=True).start()
                return int(m.group(1))
        self.close()
        raise BrowserError("chromium did not open its debugging port: " + "".join(seen[-10:]).strip())

    def _drain(self) -> None:
        stream = self._proc.stderr if self._proc is not None else None
        while stream is not None and stream.read(65536):
            pass

    def close(self) -> None:
        if self._ws is not None:
            try:
                self._ws.__exit__(None, None, None)
            except Exception:  # a browser that already went away
                pass
            self._ws = None
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)
            self._proc = None
        if self._profile:
            shutil.rmtree(self._profile, ignore_errors=True)
            self._profile = ""

    # ------------------------------------------------------------------------------------------ CDP
    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one CDP command and return its result (events arriving meanwhile are dropped)."""
        if self._ws is None:
            raise BrowserError("browser not started")
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"CDP {method}: no answer within {self.timeout_s} s")
            msg = json.loads(self._ws.recv(timeout=left))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise BrowserError(f"CDP {method}: {msg['error']}")
                return msg.get("result", {})

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaits promises; JSON-serialisable results)."""
        res = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            detail = res["exceptionDetails"]
            text = detail.get("exception", {}).get("description") or detail.get("text")
            raise BrowserError(f"JavaScript error in {expression[:80]!r}: {text}")
        return res.get("result", {}).get("value")

    def open(self, path: Path, *, ready: str = "document.readyState === 'complete'") -> None:
        """Navigate to a local file and wait until the `ready` expression is true."""
        self.send("Page.navigate", url=Path(path).resolve().as_uri())
        self.wait_for(ready)

    def wait_for(self, expression: str, timeout_s: float | None = None) -> None:
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while not self.evaluate(f"Boolean({expression})"):
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out waiting for {expression!r}")
            time.sleep(0.05)

    def screenshot(self, path: Path, *, full_page: bool = False) -> Path:
        """Save a PNG of the page (the viewport, or the whole page with full_page)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", **params)["data"]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
