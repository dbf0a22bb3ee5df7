"""Minimal Chrome DevTools Protocol client for the status-page tests.

Runs with Debian's /usr/bin/python3 and Debian's python3-websocket package
(module ``websocket``, websocket-client 1.2.3); no other third-party deps.

    with Browser("http://127.0.0.1:8080/#token=abc") as b:
        b.wait_for("document.querySelectorAll('#nodes tbody tr').length === 3", 10, "three rows")
        b.screenshot("/tmp/page.png")

Every socket read is bounded by a timeout, replies are matched by message id,
and events are skipped, so no call can hang forever.
"""

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

import websocket

CHROMIUM = "/usr/bin/chromium"


class CDPError(RuntimeError):
    pass


class Browser:
    def __init__(self, url, *, width=1280, height=900, timeout=30.0, artifacts_dir=None):
        self.timeout = float(timeout)
        self._proc = None
        self._ws = None
        self._next_id = 0
        self._closed = False
        self._profile = tempfile.mkdtemp(prefix="drover-cdp-")
        log_dir = artifacts_dir or self._profile
        os.makedirs(log_dir, exist_ok=True)
        self.log_path = os.path.join(log_dir, "chromium.log")
        try:
            self._start(url, width, height)
        except BaseException:
            self.close()
            raise

    # ---- startup -----------------------------------------------------------
    def _start(self, url, width, height):
        args = [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run", "--disable-quic",
            "--remote-debugging-port=0", "--user-data-dir=" + self._profile,
            "--window-size=%d,%d" % (width, height), url,
        ]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True)
        port = self._wait_port()
        ws_url = self._find_page(port)
        self._ws = websocket.create_connection(ws_url, timeout=self.timeout,
                                               suppress_origin=True)
        # --window-size includes window chrome in new headless mode; pin the
        # viewport so screenshots are exactly width x height.
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def _log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError as e:
            return "(no chromium log: %s)" % e

    def _wait_port(self):
        path = os.path.join(self._profile, "DevToolsActivePort")
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise CDPError("chromium exited with %s before opening its debugging port; log tail:\n%s"
                               % (self._proc.returncode, self._log_tail()))
            try:
                with open(path) as f:
                    first = f.readline().strip()
                if first.isdigit():
                    return int(first)
            except OSError:
                pass
            time.sleep(0.05)
        raise CDPError("chromium wrote no %s within %.0fs; log tail:\n%s"
                       % (path, self.timeout, self._log_tail()))

    def _find_page(self, port):
        deadline = time.monotonic() + self.timeout
        last = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=5) as r:
                    targets = json.loads(r.read().decode())
                for t in targets:
                    if t.get("type") == "page" and t.get("webSocketDebuggerUrl"):
                        return t["webSocketDebuggerUrl"]
                last = "no page target in %r" % targets
            except (OSError, ValueError) as e:
                last = repr(e)
            time.sleep(0.1)
        raise CDPError("no page target on port %d within %.0fs (%s); log tail:\n%s"
                       % (port, self.timeout, last, self._log_tail()))

    # ---- protocol ----------------------------------------------------------
    def call(self, method, params=None, timeout=None):
        """Sends one command and returns its result; raises CDPError on an error reply."""
        if self._ws is None:
            raise CDPError("browser is closed")
        timeout = self.timeout if timeout is None else float(timeout)
        self._next_id += 1
        msg_id = self._next_id
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError("no reply to %s within %.1fs" % (method, timeout))
            self._ws.settimeout(left)
            try:
                raw = self._ws.recv()
            except websocket.WebSocketTimeoutException:
                raise CDPError("no reply to %s within %.1fs" % (method, timeout)) from None
            except (websocket.WebSocketException, OSError) as e:
                raise CDPError("devtools connection failed during %s: %r; chromium log tail:\n%s"
                               % (method, e, self._log_tail())) from None
            if not raw:
                continue
            msg = json.loads(raw)
            if msg.get("id") != msg_id:
                continue                      # an event, or a stale reply
            if "error" in msg:
                raise CDPError("%s failed: %s" % (method, msg["error"]))
            return msg.get("result", {})

    def evaluate(self, expression):
        """Evaluates a JS expression in the page; returns its value (promises awaited)."""
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True})
        if "exceptionDetails" in res:
            d = res["exceptionDetails"]
            exc = d.get("exception") or {}
            text = exc.get("description") or d.get("text") or repr(d)
            raise CDPError("evaluating %r threw: %s" % (expression, text))
        return res.get("result", {}).get("value")

    def wait_for(self, expression, timeout, what):
        """Polls `expression` every 0.2 s until it is truthy; returns that value."""
        deadline = time.monotonic() + float(timeout)
        last = None
        while True:
            try:
                last = self.evaluate(expression)
                if last:
                    return last
            except CDPError as e:
                last = "error: %s" % e
            if time.monotonic() >= deadline:
                shown = repr(last)
                if len(shown) > 500:
                    shown = shown[:500] + "..."
                raise AssertionError("timed out after %ss waiting for %s; last value: %s"
                                     % (timeout, what, shown))
            time.sleep(0.2)

    def screenshot(self, path):
        res = self.call("Page.captureScreenshot", {"format": "png"})
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(res["data"]))
        return path

    # ---- teardown ----------------------------------------------------------
    def close(self):
        if self._closed:
            return
        self._closed = True
        if self._ws is not None:
            try:
                self._ws.close(timeout=1)
            except Exception:
                pass
            self._ws = None
        p = self._proc
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(timeout=5)
        if p is not None:
            # Helpers (renderer, zygote) may outlive the browser process briefly.
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
