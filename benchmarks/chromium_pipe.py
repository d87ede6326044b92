"""Drive headless Chromium over its own remote-debugging pipe: no driver, no package.

Chromium started with ``--remote-debugging-pipe`` reads DevTools protocol
commands from its file descriptor 3 and writes answers and events to 4, each a
JSON document ended by a NUL byte. This is the little of that protocol the
report's browser test (tests/test_report_browser.py) and the screenshot script
(benchmarks/report_page.py) need: open a page, evaluate script, click
with the mouse, type, take a screenshot.

``find_chromium()`` says where a browser is, or None: ``$DAGEXEC_CHROMIUM``, else
``chromium``, ``chromium-browser``, ``google-chrome`` on PATH.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["Chromium", "find_chromium"]

_TRAMPOLINE = (
    "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); "
    "os.execv(sys.argv[3], sys.argv[3:])"
)


def find_chromium() -> str | None:
    given = os.environ.get("DAGEXEC_CHROMIUM")
    if given:
        return given if Path(given).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Chromium:
    """One headless browser with one page; use as a context manager."""

    def __init__(self, binary: str, width: int = 1280, height: int = 900) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="dagexec-chromium-")
        self._log = tempfile.TemporaryFile()  # noqa: SIM115  # closed by close()
        to_chrome, self._write = os.pipe()
        self._read, from_chrome = os.pipe()
        # A Python trampoline puts our pipe ends on descriptors 3 and 4, where
        # Chromium looks (a shell's "3<&12" fails in dash for descriptors above 9).
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _TRAMPOLINE,
                str(to_chrome),
                str(from_chrome),
                binary,
                "--headless=new",
                "--remote-debugging-pipe",
                "--no-sandbox",  # as root in a container, Chromium refuses its sandbox
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                f"--user-data-dir={self._profile.name}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            pass_fds=(to_chrome, from_chrome),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        os.close(to_chrome)
        os.close(from_chrome)
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []
        try:
            self._attach(width, height)
        except BaseException as exc:
            exc.add_note(f"Chromium said: {self.said()[-2000:]}")
            self.close()
            raise

    def said(self) -> str:
        """What Chromium wrote on its stderr so far."""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def _attach(self, width: int, height: int) -> None:
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.page("Page.enable")
        self.page("Runtime.enable")
        self.page(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):  # gone already: made sure of below
            self.send("Browser.close", timeout=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._profile.cleanup()
        self._log.close()

    # ---- the protocol
    def send(
        self, method: str, session: str | None = None, timeout: float = 30, **params: Any
    ) -> dict[str, Any]:
        """Send one command and wait for its answer; events meanwhile go to ``events``."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._read], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its pipe (it exited)")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def page(self, method: str, **params: Any) -> dict[str, Any]:
        return self.send(method, self.session, **params)

    # ---- what a test does with a page
    def open(self, path: Path, ready: str = "document.body && document.body.dataset.ready") -> None:
        """Load a file and wait until ``ready`` (a script expression) is true."""
        self.page("Page.navigate", url=path.resolve().as_uri())
        self.wait_for(ready)

    def wait_for(self, expression: str, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(f"Boolean({expression})")
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"never true on the page: {expression}")
            time.sleep(0.05)  # polling the page, not synchronising threads

    def eval(self, expression: str) -> Any:
        """The value of a script expression on the page (JSON-able values only)."""
        reply = self.page(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in reply:
            raise RuntimeError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def click(self, selector: str) -> None:
        """Scroll ``selector``'s first match into view and click its middle with the mouse."""
        where = self.eval(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            " if (!e) return null; e.scrollIntoView({block: 'center'});"
            " const r = e.getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        if where is None:
            raise LookupError(f"nothing on the page matches {selector!r}")
        self.click_at(*where)

    def click_at(self, x: float, y: float) -> None:
        """Press and release the left mouse button at (x, y) of the window."""
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.page("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def type(self, selector: str, text: str) -> None:
        self.click(selector)
        self.page("Input.insertText", text=text)

    def screenshot(self, path: Path) -> None:
        data = self.page("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
