"""Debian's headless Chromium driven over the DevTools protocol (a websocket on 127.0.0.1), with every
request that leaves the page refused and recorded, and every console error, uncaught exception and
browser log error kept: what a page did when it was opened is what the tests assert on."""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import websocket

CHROMIUM = os.environ.get("LLMDIAG_CHROMIUM", "/usr/bin/chromium")
AXE = Path(os.environ.get("LLMDIAG_AXE", "/opt/llmdiag-axe/node_modules/axe-core/axe.min.js"))
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
    # nothing reaches a network even if the page asked: no proxy answers, no name resolves
    "--proxy-server=http://127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
]
# A page may load itself (file://) and its own inline data: nothing else.
_OWN = ("file://", "data:", "about:")


class BrowserMissing(Exception):
    pass


@dataclass
class Visit:
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, log errors
    requests: list[str] = field(default_factory=list)  # every URL the page asked for beyond its own


class Chromium:
    def __init__(self) -> None:
        if not shutil.which(CHROMIUM):
            raise BrowserMissing(f"{CHROMIUM} not found (apt-get install chromium)")
        self.profile = tempfile.mkdtemp(prefix="llmdiag-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise BrowserMissing("chromium did not open its DevTools port")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        page = next(
            t for t in requests.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json() if t["type"] == "page"
        )
        self.ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60, suppress_origin=True)
        self.ids = itertools.count(1)
        self.visit = Visit()
        for method in ("Runtime.enable", "Log.enable", "Network.enable", "Page.enable"):
            self.call(method)
        self.call("Network.setBlockedURLs", urls=["http://*", "https://*", "ws://*", "wss://*", "ftp://*"])

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method: str, **params: Any) -> dict:
        ident = next(self.ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def _event(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.visit.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            self.visit.errors.append(json.dumps(params["exceptionDetails"])[:500])
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            self.visit.errors.append(params["entry"]["text"])
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not url.startswith(_OWN):
                self.visit.requests.append(url)

    def open(self, path: Path) -> Visit:
        """Load a file and wait for its load event; what it did is the Visit."""
        self.visit = Visit()
        self.call("Emulation.clearDeviceMetricsOverride")
        self.call("Page.navigate", url=path.resolve().as_uri())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.evaluate("document.readyState") == "complete":
                break
            time.sleep(0.02)
        self.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))", wait=True)
        return self.visit

    def evaluate(self, expression: str, wait: bool = False) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=wait)
        if "exceptionDetails" in result:
            raise RuntimeError(json.dumps(result["exceptionDetails"])[:500])
        return result["result"].get("value")

    def screenshot(self, width: int = 1200) -> bytes:
        height = self.evaluate("document.documentElement.scrollHeight")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        self.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))", wait=True)
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        return base64.b64decode(data)

    def axe(self) -> list[dict]:
        """axe-core's violations of the page, each {id, impact, nodes: [html...]}."""
        if not AXE.is_file():
            raise BrowserMissing(f"{AXE} not found (npm install --prefix /opt/llmdiag-axe axe-core)")
        self.evaluate(AXE.read_text())
        return self.evaluate(
            "axe.run(document, {resultTypes: ['violations']}).then(r => r.violations.map("
            "v => ({id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map(n => n.html)})))",
            wait=True,
        )
