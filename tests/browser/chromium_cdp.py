"""A minimal Chrome DevTools Protocol client: launch headless Chromium, drive one page, collect downloads.

Only the standard library, ``websockets`` (a Prefect dependency) and a Chromium binary are needed; no
selenium/playwright. Install the browser on Debian/Ubuntu with ``apt-get install -y chromium``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

from websockets.sync.client import connect

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--remote-debugging-port=0",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium process with a fresh profile and one page attached through a flat CDP session."""

    def __init__(self, binary: str, profile: Path, timeout: float = 30.0):
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while not port_file.exists() or len(port_file.read_text().split()) < 2:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.poll() is not None else "timeout"
                self.close()
                raise RuntimeError(f"chromium did not start: {err[-2000:]}")
            time.sleep(0.05)
        port, path = port_file.read_text().split()[:2]
        self.ws = connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=timeout)
        self._id = 0
        self.events: list[dict] = []
        self.session: str | None = None

    def send(self, method: str, params: dict | None = None, *, browser: bool = False) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if self.session and not browser:
            msg["sessionId"] = self.session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv(timeout=self.timeout))
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def open(self, url: str, download_dir: Path) -> None:
        self.send(
            "Browser.setDownloadBehavior",
            {"behavior": "allow", "downloadPath": str(download_dir), "eventsEnabled": True},
            browser=True,
        )
        target = self.send("Target.createTarget", {"url": "about:blank"}, browser=True)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, browser=True)[
            "sessionId"
        ]
        self.send("Page.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1200, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        )
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete'")

    def eval(self, expression: str):
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in res:
            raise RuntimeError(f"JS error in {expression!r}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait_for(self, expression: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not self.eval(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(expression)
            time.sleep(0.05)

    def click(self, selector: str) -> None:
        """A real mouse click (press + release) at the centre of the element, after scrolling it into view."""
        box = self.eval(
            f"(() => {{const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            "e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            "return {x: r.left + r.width / 2, y: r.top + r.height / 2};})()"
        )
        if box is None:
            raise LookupError(f"no element {selector}")
        for kind in ("mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": box["x"], "y": box["y"], "button": "left", "clickCount": 1},
            )

    def type_text(self, selector: str, text: str) -> None:
        self.click(selector)
        self.send("Input.insertText", {"text": text})

    def screenshot(self, path: Path) -> None:
        import base64

        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
