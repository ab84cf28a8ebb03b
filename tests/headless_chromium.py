"""One headless chromium for many pages: the DevTools protocol over ``--remote-debugging-pipe``
(file descriptors 3 and 4, NUL-terminated JSON), so the dashboard's browser checks pay one launch
(about 1.3 CPU-s each) rather than one per page. A page's DOM is read at its load event, as
``--dump-dom`` reads it; its uncaught exceptions, console errors and failed loads are the
protocol's events for that page, and chromium's own log (``--enable-logging=stderr``) is kept
for the caller to search too."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import subprocess
import tempfile
import time


class Page:
    def __init__(self, dom: str, errors: list[str]):
        self.dom, self.errors = dom, errors


class Browser:
    def __init__(self, executable: str, *, width: int = 1280, height: int = 800, timeout: float = 60):
        self.timeout, self.next_id, self.events, self.buffer = timeout, 0, [], b""
        # chromium reads commands on descriptor 3 and writes replies on 4: bash puts the pipes there
        # (a preexec_fn could deadlock in a threaded process, such as an xdist worker), from numbers
        # of 10 or more, which neither 3 nor 4 can be.
        to_chrome, self.to_chrome = _high(os.pipe())
        self.from_chrome, from_chrome_w = _high(os.pipe())
        self.log = tempfile.TemporaryFile()
        command = [executable, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                   f"--window-size={width},{height}", "--remote-debugging-pipe", "about:blank"]  # fmt: skip
        redirect = f'exec "$@" 3<&{to_chrome} 4>&{from_chrome_w} {to_chrome}<&- {from_chrome_w}>&-'
        self.proc = subprocess.Popen(
            ["bash", "-c", redirect, "bash", *command], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=self.log, pass_fds=(to_chrome, from_chrome_w),
        )  # fmt: skip
        os.close(to_chrome)
        os.close(from_chrome_w)
        try:
            self._attach(timeout)
        except BaseException:
            self.close()
            raise

    def _attach(self, timeout: float) -> None:
        # The window the command line opened (--window-size applies to it): one session on it.
        deadline = time.monotonic() + timeout
        while not (pages := [t for t in self._targets() if t["type"] == "page"]):
            if time.monotonic() > deadline:  # a slow start: the window may come after the pipe opens
                raise AssertionError(f"chromium opened no page in {timeout} s:\n{self.stderr()[-2000:]}")
            time.sleep(0.1)
        target = pages[0]
        attached = self.send("Target.attachToTarget", targetId=target["targetId"], flatten=True)
        self.session = attached["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=True)

    def _targets(self) -> list[dict]:
        return self.send("Target.getTargets")["targetInfos"]

    def send(self, method: str, *, session: bool = False, **params) -> dict:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self.to_chrome, json.dumps(message).encode() + b"\0")
        reply = self._until(lambda m: m.get("id") == message["id"])
        if "error" in reply:
            raise AssertionError(f"chromium: {method}: {reply['error']}")
        return reply["result"]

    def _until(self, wanted) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                message = json.loads(raw)
                if wanted(message):
                    return message
                self.events.append(message)
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_chrome], [], [], left)[0]:
                raise AssertionError(f"chromium: no reply in {self.timeout} s:\n{self.stderr()[-2000:]}")
            chunk = os.read(self.from_chrome, 1 << 16)
            if not chunk:
                raise AssertionError(f"chromium closed its pipe:\n{self.stderr()[-2000:]}")
            self.buffer += chunk

    def open(self, url: str) -> Page:
        """Load ``url``; its DOM at the load event and the errors its events reported."""
        self.events = []
        navigated = self.send("Page.navigate", session=True, url=url)
        if navigated.get("errorText"):
            raise AssertionError(f"{url}: {navigated['errorText']}")
        loaded = [m for m in self.events if m.get("method") == "Page.loadEventFired"]
        if not loaded:
            self._until(lambda m: m.get("method") == "Page.loadEventFired")
        expression = "document.documentElement.outerHTML"
        dom = self.send("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        return Page(dom["result"]["value"], [_error(m) for m in self.events if _error(m)])

    def screenshot(self) -> bytes:
        """The viewport of the page last opened, as PNG."""
        return base64.b64decode(self.send("Page.captureScreenshot", session=True, format="png")["data"])

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (AssertionError, OSError):
            pass  # already gone: its log says why
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_chrome)
        os.close(self.from_chrome)


def _high(descriptors: tuple[int, int]) -> tuple[int, int]:
    """The pipe's two ends moved to descriptors numbered 10 or more."""
    moved = tuple(fcntl.fcntl(d, fcntl.F_DUPFD_CLOEXEC, 10) for d in descriptors)
    for d in descriptors:
        os.close(d)
    return moved


def _error(message: dict) -> str | None:
    """The line an error event says (an exception no handler caught, a console.error, a failed load:
    Log.entryAdded's error entries include "Failed to load resource"), or None for any other."""
    method, params = message.get("method"), message.get("params", {})
    if method == "Runtime.exceptionThrown":
        details = params["exceptionDetails"]
        return "uncaught: " + (details.get("exception", {}).get("description") or details.get("text", ""))
    if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
        return "console.error: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"])
    if method == "Log.entryAdded" and params["entry"]["level"] == "error":
        return f"log: {params['entry']['text']} {params['entry'].get('url', '')}"
    return None
