"""A real browser on a real dashboard: headless Chromium over the DevTools protocol, and fits held at chosen
iterations so a page can be watched while they run (``tests/test_dashboard*.py``)."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess
import threading
import time
import urllib.request
import warnings
from pathlib import Path

import dpgm


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def wait_for(condition, timeout: float, what: str, seen=lambda: None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last seen: {seen()}")


def fits_on(base: str) -> dict[str, dict]:
    return {f["fit"]: f for f in json.loads(get(f"{base}/dpgm/data.json"))["fits"]}


class Pause:
    """A callback that holds the fit at one record until released (so the page is loaded mid-fit)."""

    def __init__(self, restart: int, iteration: int):
        self.at = (restart, iteration)
        self.reached = threading.Event()
        self.release = threading.Event()
        self.records: list[dict] = []

    def __call__(self, record: dict) -> None:
        self.records.append(dict(record))
        if (record.get("restart", 0), record["iteration"]) == self.at:
            self.reached.set()
            self.release.wait(120)


class FitThread(threading.Thread):
    def __init__(self, *args, **kwargs):
        super().__init__(daemon=True)
        self.args, self.kwargs = args, kwargs
        self.result = self.error = None

    def run(self):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", dpgm.ConvergenceWarning)
                self.result = dpgm.fit(*self.args, **self.kwargs)
        except BaseException as error:  # re-raised by the test
            self.error = error


# Counts of the points in the page's Bokeh document (what the browser received) and its rendered text
# (shadow roots included: Bokeh 3 renders its widgets there).
PAGE_STATE = """(() => {
  if (!window.Bokeh || !Bokeh.documents || !Bokeh.documents.length) return null;
  const points = {};
  for (const doc of Bokeh.documents)
    for (const model of doc.all_models)
      if (typeof model.name === "string" && model.name.startsWith("dpgm-points|"))
        points[model.name] = model.get_length();
  const texts = [];
  const walk = (node) => {
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const child of node.childNodes) {
      if (child.nodeType === Node.TEXT_NODE) texts.push(child.textContent); else walk(child);
    }
  };
  walk(document.body);
  return JSON.stringify({points, text: texts.join(" ").replace(/\\s+/g, " ")});
})()"""


class Chromium:
    """Headless chromium driven over the DevTools protocol (tornado's websocket client: no extra package)."""

    def __init__(self, profile: Path):
        self.port = free_port()
        self.process = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", f"--remote-debugging-port={self.port}",
             "--remote-debugging-address=127.0.0.1", "--window-size=1400,800", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def page_socket(self) -> str:
        def page():
            try:
                targets = json.loads(get(f"http://127.0.0.1:{self.port}/json/list", timeout=2))
            except OSError:
                return None
            return next((t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page"), None)

        return wait_for(page, 30, "chromium's DevTools endpoint")

    def close(self):
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


async def load_page(socket_url: str, url: str, expected: dict[str, int], screenshot: Path) -> dict:
    """Open ``url``, wait until the page's document holds ``expected`` points per source, screenshot it."""
    from tornado.websocket import websocket_connect

    connection = await websocket_connect(socket_url, max_message_size=64 * 2**20)
    counter = 0

    async def call(method: str, **params):
        nonlocal counter
        counter += 1
        await connection.write_message(json.dumps({"id": counter, "method": method, "params": params}))
        while True:
            message = json.loads(await asyncio.wait_for(connection.read_message(), 30))
            if message.get("id") == counter:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message["result"]

    try:
        await call("Page.enable")
        await call("Page.navigate", url=url)
        state = None
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            value = (await call("Runtime.evaluate", expression=PAGE_STATE, returnByValue=True))["result"]
            state = json.loads(value["value"]) if value.get("value") else None
            if state and state["points"] == expected and f"{sum(expected.values())} points" in state["text"]:
                break
            await asyncio.sleep(0.25)
        await asyncio.sleep(0.5)  # let the canvas draw the last points
        image = await call("Page.captureScreenshot", format="png")
        screenshot.write_bytes(base64.b64decode(image["data"]))
        value = (await call("Runtime.evaluate", expression=TABLE_ROWS, returnByValue=True))["result"]
        return (state or {}) | {"rows": json.loads(value["value"]) if value.get("value") else []}
    finally:
        connection.close()


class Steps:
    """A callback that holds the fit at each of ``stops`` (iterations of restart 0) until released."""

    def __init__(self, *stops: int):
        self.stops = list(stops)
        self.held = threading.Event()
        self.go = threading.Event()
        self.at: int | None = None
        self.records: list[dict] = []

    def __call__(self, record: dict) -> None:
        self.records.append(dict(record))
        if record.get("restart", 0) == 0 and record["iteration"] in self.stops:
            self.at = record["iteration"]
            self.go.clear()
            self.held.set()
            self.go.wait(120)

    def next(self) -> None:
        """Let the fit go on to its next stop (or its end)."""
        self.held.clear()
        self.go.set()


# the rendered rows of the page's tables (cell texts, shadow roots included: what the user sees)
TABLE_ROWS = """(() => {
  const rows = [];
  const walk = (node) => {
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const child of node.children || []) {
      if (child.classList && child.classList.contains("dpgm-row"))
        rows.push(Array.from(child.querySelectorAll("td")).map((cell) => cell.textContent.trim()));
      else walk(child);
    }
  };
  walk(document.body);
  return JSON.stringify(rows);
})()"""


class DevTools:
    """One page of a headless Chromium, kept open: navigate once, then evaluate on the same page."""

    def __init__(self, socket_url: str):
        self.socket_url = socket_url
        self.connection = None
        self.counter = 0

    async def __aenter__(self) -> DevTools:
        from tornado.websocket import websocket_connect

        self.connection = await websocket_connect(self.socket_url, max_message_size=64 * 2**20)
        await self.call("Page.enable")
        return self

    async def __aexit__(self, *exc) -> None:
        self.connection.close()

    async def call(self, method: str, **params):
        self.counter += 1
        await self.connection.write_message(json.dumps({"id": self.counter, "method": method, "params": params}))
        while True:
            message = json.loads(await asyncio.wait_for(self.connection.read_message(), 30))
            if message.get("id") == self.counter:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message["result"]

    async def evaluate(self, expression: str):
        value = (await self.call("Runtime.evaluate", expression=expression, returnByValue=True))["result"]
        return json.loads(value["value"]) if value.get("value") else None

    async def until(self, expression: str, accept, timeout: float, what: str):
        """Evaluate ``expression`` until ``accept(value)``; the value, or an AssertionError with the last one."""
        deadline, value = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            value = await self.evaluate(expression)
            if value is not None and accept(value):
                return value
            await asyncio.sleep(0.25)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; last seen: {value}")
