"""A real `journey serve` on a free loopback port, for the client tests in this folder.

    with JourneyServer(journey, model, name="stories") as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key=server.key, max_retries=0)

The server is started with an API key (so that auth is always exercised), waits for GET /health
to answer 200 (the model is loaded), and is stopped at the end; if it dies, the error carries its
log. Small raw-HTTP helpers read what the client library hides: status codes, /metrics.
"""
import http.client
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import journey_http as jh  # noqa: E402  (without_server_labels)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JourneyServer:
    def __init__(self, journey, model, name, extra_args=(), start_timeout_s=120, port=None, key=None):
        """port, key: given to start a replica again where it was, with the key its clients use."""
        self.journey, self.model, self.name = journey, model, name
        self.extra_args = list(extra_args)
        self.start_timeout_s = start_timeout_s
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.key = key or "sk-journey-test-" + secrets.token_hex(8)
        self.process = None
        self.log = None

    def __enter__(self):
        self.log = tempfile.NamedTemporaryFile(prefix="journey-serve-", suffix=".log", delete=False)
        command = [self.journey, "serve", "--model", self.model, "--port", str(self.port),
                   "--api-key", self.key, "--served-model-name", self.name,
                   "--threads", "1", "--rate-limit", "100000"] + self.extra_args
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"journey serve exited with {self.process.returncode} while loading:\n{self.log_text()}")
            try:
                if self.get("/health")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"journey serve did not answer /health with 200 within {self.start_timeout_s} s:\n{self.log_text()}")

    def __exit__(self, *exc):
        self.stop()
        return False

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log:
            self.log.close()
            os.unlink(self.log.name)
            self.log = None

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def stop_checked(self):
        """Stops the server; raises with its log if it had died before (a test suite's teardown:
        a server that crashed under the tests fails the suite even when every test passed)."""
        alive = self.alive()
        log = self.log_text() if not alive else ""
        self.stop()
        if not alive:
            raise RuntimeError(f"the server died during the tests:\n{log}")

    def openai_client(self):
        """The official client pointed at this server (no retries: a failure shows as it is)."""
        import openai  # only the client suites need it; the others run without the package
        return openai.OpenAI(base_url=self.url + "/v1", api_key=self.key, max_retries=0)

    def log_text(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    # Raw HTTP, for what the client library does not show.

    def get(self, path, key=None):
        """(status, body text)."""
        request = urllib.request.Request(self.url + path)
        if key:
            request.add_header("Authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def post(self, path, body, key=None):
        """(status, body text); `body` is bytes or str, sent as is (it may be malformed on purpose)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("POST", path, body=body.encode() if isinstance(body, str) else body,
                         headers={"Authorization": f"Bearer {key or self.key}", "Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    def post_json(self, path, obj):
        status, text = self.post(path, json.dumps(obj))
        if status != 200:
            raise AssertionError(f"POST {path} {obj}: HTTP {status}: {text}")
        return json.loads(text)

    def metric(self, series):
        """The value of one /metrics series, named without the model_name/replica labels every
        series carries: 'journey:kv_blocks_used', 'journey:request_success_total{finished_reason="abort"}'."""
        status, text = self.get("/metrics")
        assert status == 200, f"/metrics answered {status}"
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            if not line.startswith("#") and jh.without_server_labels(name) == series:
                return float(value)
        raise AssertionError(f"/metrics has no series {series!r}")

    def wait_for_metric(self, name, done, timeout_s=10.0, poll_s=0.05):
        """Polls a metric until done(value) or the timeout; returns the last value read."""
        deadline = time.monotonic() + timeout_s
        value = self.metric(name)
        while not done(value) and time.monotonic() < deadline:
            time.sleep(poll_s)
            value = self.metric(name)
        return value
