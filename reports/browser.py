"""Open a report in headless Chromium: did every image load, did the page log an error?
And a full-page screenshot.

Chromium is driven through the DevTools protocol over a pipe (`--remote-debugging-pipe`:
JSON messages ending in NUL on file descriptors 3 and 4), so nothing but the browser
itself is needed. Debian's `chromium` package provides it (`apt-get install chromium`).

    python -m reports.browser report/report.html --screenshot report.png
"""

from __future__ import annotations

import argparse
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
TIMEOUT_S = 60.0
VIEWPORT_WIDTH_PX = 1400
IMAGES_CHECK = """JSON.stringify(Array.from(document.images).map(img => ({
    alt: img.alt, complete: img.complete, width: img.naturalWidth, height: img.naturalHeight
})))"""


class BrowserError(RuntimeError):
    """Chromium could not be started or did not answer."""


@dataclass
class PageCheck:
    images: list[dict[str, Any]]  # alt, complete, width, height (natural size in pixels)
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, load errors

    @property
    def broken_images(self) -> list[str]:
        return [img["alt"] for img in self.images if not img["complete"] or img["width"] == 0]


def find_browser() -> str | None:
    """The first Chromium-family browser on PATH, or None."""
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


def check_page(
    html: Path, screenshot: Path | None = None, max_height_px: int | None = None
) -> PageCheck:
    """Load `html` in headless Chromium; report its images and errors, optionally saving
    a PNG screenshot of the page (its top `max_height_px` pixels when given)."""
    browser = find_browser()
    if browser is None:
        raise BrowserError(f"no Chromium-family browser found (tried {', '.join(BROWSERS)})")
    with (
        tempfile.TemporaryDirectory(prefix="wb-chromium-") as profile,
        _Chromium(browser, Path(profile)) as chromium,
    ):
        return chromium.check(Path(html).resolve(), screenshot, max_height_px)


class _Chromium:
    """One headless browser process and its DevTools pipe."""

    def __init__(self, browser: str, profile: Path) -> None:
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()
        command = [
            browser, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
            "--hide-scrollbars", "--remote-debugging-pipe", f"--user-data-dir={profile}",
            f"--window-size={VIEWPORT_WIDTH_PX},900", "about:blank",
        ]  # fmt: skip
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(3, 4),
            preexec_fn=_pipe_fds(to_browser_read, from_browser_write),
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def __enter__(self) -> _Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(BrowserError, OSError):  # it may be gone already
            self._send("Browser.close")
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def check(self, html: Path, screenshot: Path | None, max_height_px: int | None) -> PageCheck:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        sid = session["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable", session=sid)
        self.call("Page.navigate", {"url": html.as_uri()}, session=sid)
        self._wait_for_event("Page.loadEventFired", sid)
        result = self.call(
            "Runtime.evaluate", {"expression": IMAGES_CHECK, "returnByValue": True}, session=sid
        )
        images = json.loads(result["result"]["value"])
        if screenshot is not None:
            self._screenshot(sid, screenshot, max_height_px)
        return PageCheck(images, _errors(self.events))

    def _screenshot(self, sid: str, out: Path, max_height_px: int | None) -> None:
        size = self.call("Page.getLayoutMetrics", session=sid)["cssContentSize"]
        height = int(size["height"]) + 1
        if max_height_px is not None:
            height = min(height, max_height_px)
        metrics = {"width": VIEWPORT_WIDTH_PX, "height": height, "deviceScaleFactor": 1}
        self.call("Emulation.setDeviceMetricsOverride", {**metrics, "mobile": False}, session=sid)
        clip = {"x": 0, "y": 0, "width": VIEWPORT_WIDTH_PX, "height": height, "scale": 1}
        shot = self.call(
            "Page.captureScreenshot",
            {"format": "png", "clip": clip, "captureBeyondViewport": True},
            session=sid,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(shot["data"]))

    # ------------------------------------------------------------ protocol

    def call(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None
    ) -> dict[str, Any]:
        message_id = self._send(method, params, session)
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            message = self._receive(deadline)
            if message.get("id") == message_id:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def _send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _wait_for_event(self, method: str, session: str) -> None:
        def is_it(message: dict[str, Any]) -> bool:
            return message.get("method") == method and message.get("sessionId") == session

        deadline = time.monotonic() + TIMEOUT_S
        while not any(is_it(message) for message in self.events):
            self.events.append(self._receive(deadline))

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_browser], [], [], max(left, 0.0))
            if not ready:
                raise BrowserError(f"no answer from Chromium within {TIMEOUT_S:.0f} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise BrowserError("Chromium closed its DevTools pipe (did it crash?)")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)


def _pipe_fds(read_fd: int, write_fd: int):  # type: ignore[no-untyped-def]
    """In the child: the DevTools pipe on descriptors 3 (commands) and 4 (answers)."""

    def place() -> None:
        os.dup2(read_fd, 3)
        os.dup2(write_fd, 4)

    return place


def _errors(events: list[dict[str, Any]]) -> list[str]:
    """Console errors, uncaught exceptions and failed loads among the protocol's events."""
    errors = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            texts = [str(arg.get("value", arg.get("description", ""))) for arg in params["args"]]
            errors.append("console: " + " ".join(texts))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            errors.append(
                "exception: "
                + str(details.get("exception", {}).get("description", details.get("text")))
            )
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            errors.append(
                f"log ({entry.get('source')}): {entry.get('text')} {entry.get('url', '')}"
            )
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("html", type=Path)
    parser.add_argument("--screenshot", type=Path, help="write a PNG of the page here")
    parser.add_argument("--max-height", type=int, help="only the page's top this many pixels")
    args = parser.parse_args(argv)
    check = check_page(args.html, args.screenshot, args.max_height)
    print(
        f"{len(check.images)} images, {len(check.broken_images)} broken, {len(check.errors)} errors"
    )
    for line in [*check.broken_images, *check.errors]:
        print(f"  {line}")
    return 1 if check.broken_images or check.errors else 0


if __name__ == "__main__":
    sys.exit(main())
