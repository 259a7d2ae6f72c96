"""The few W3C WebDriver commands the page test needs, spoken to chromedriver over HTTP (selenium would bring
trio, whose hypothesis plugin warns at start-up and fails this suite's warnings-as-errors)."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from asr_server.child_process import stop_process

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"  # the W3C key of an element reference


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Chromium:
    def __init__(self, chromium: str, driver: str, args: list[str]):
        for attempt in range(3):  # the port picked here can be taken before chromedriver binds it
            self.port = free_port()
            self.proc = subprocess.Popen([driver, f"--port={self.port}"], stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            self.base = f"http://127.0.0.1:{self.port}"
            if self._wait_ready() or attempt == 2:
                break
            stop_process(self.proc, 10)
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome",
                                                 "goog:chromeOptions": {"binary": chromium, "args": args}}}}
        try:
            self.session = self._call("POST", "/session", caps)["sessionId"]
        except BaseException:
            stop_process(self.proc, 10)  # no chromedriver left running when the browser cannot start
            raise

    def _wait_ready(self) -> bool:
        """True once chromedriver answers; False when it exited (its port was taken) or never answered."""
        for _ in range(100):
            if self.proc.poll() is not None:
                return False
            try:
                self._call("GET", "/status")
                return True
            except OSError:
                time.sleep(0.1)
        return False

    def _call(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            return json.loads(reply.read())["value"]

    def _session(self, method: str, path: str, body: dict | None = None):
        return self._call(method, f"/session/{self.session}{path}", body)

    def get(self, url: str) -> None:
        self._session("POST", "/url", {"url": url})

    def click(self, css: str) -> None:
        element = self._session("POST", "/element", {"using": "css selector", "value": css})[ELEMENT]
        self._session("POST", f"/element/{element}/click", {})

    def script(self, source: str):
        return self._session("POST", "/execute/sync", {"script": source, "args": []})

    def screenshot(self, path: Path) -> None:
        Path(path).write_bytes(base64.b64decode(self._session("GET", "/screenshot")))

    def quit(self) -> None:
        try:
            self._session("DELETE", "")
        finally:
            stop_process(self.proc, 10)
