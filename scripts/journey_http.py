"""Helpers shared by scripts/soak.py and tests/reliability/hostile_clients.py: start a real
`journey serve` on a free loopback port, talk to it over plain sockets / http.client (Python's
standard library only), read its /metrics and its resident memory. Loopback only, by design."""
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

LOOPBACK = "127.0.0.1"


def free_port():
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


class Server:
    """A `journey serve` child process on LOOPBACK; its log goes to a temporary file."""

    def __init__(self, journey, model, key, extra_args=(), name="stories"):
        self.port = free_port()
        self.key = key
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix="journey-serve-", suffix=".log", delete=False)
        args = [journey, "serve", "--model", model, "--host", LOOPBACK, "--port", str(self.port), "--api-key", key,
                "--served-model-name", name, "--threads", "1", *extra_args]
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"journey serve exited with {self.process.returncode}:\n{self.log_text()}")
            try:
                if request(self.port, "GET", "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"journey serve not ready after {timeout} s:\n{self.log_text()}")

    def alive(self):
        return self.process.poll() is None

    def rss_mb(self):
        """Resident memory of the server process (VmRSS), in MiB."""
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def log_text(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()[-4000:]

    def stop(self):
        if self.alive():
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        os.unlink(self.log.name)


def request(port, method, path, body=None, key=None, headers=None, timeout=60, source=None):
    """One request on a fresh connection: (status, headers dict, body bytes). body: dict (sent as
    JSON), bytes or None. source: the local address to connect from (another loopback address
    makes another client for per-address limits)."""
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout,
                                            source_address=(source, 0) if source else None)
    try:
        all_headers = dict(headers or {})
        if key is not None:
            all_headers["Authorization"] = f"Bearer {key}"
        data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        if data is not None:
            all_headers.setdefault("Content-Type", "application/json")
        connection.request(method, path, body=data, headers=all_headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def metrics(port):
    """/metrics as {name (with labels): float}."""
    status, _, body = request(port, "GET", "/metrics", timeout=10)
    values = {}
    if status != 200:
        return values
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                values[without_server_labels(name)] = float(value)
            except ValueError:
                pass
    return values


SERVER_LABELS = re.compile(r'(?:model_name|replica)="(?:[^"\\]|\\.)*",?')


def without_server_labels(series):
    """'journey:x{model_name="m",replica="r",le="1"}' -> 'journey:x{le="1"}', 'journey:y{model_name="m"}' ->
    'journey:y': the labels every series of one server carries, dropped so that callers name a series
    the same way whatever the model or replica."""
    series = SERVER_LABELS.sub("", series).replace(",}", "}")
    return series[:-2] if series.endswith("{}") else series


def wait_blocks_free(port, timeout=15):
    """Polls /metrics until journey:kv_blocks_used is 0 (aborts free their blocks within about a
    second); returns the last value seen."""
    deadline = time.time() + timeout
    used = None
    while time.time() < deadline:
        used = metrics(port).get("journey:kv_blocks_used")
        if used == 0:
            return 0
        time.sleep(0.25)
    return used


def model_with_template(model_dir, template, into):
    """A copy of a Hugging Face model directory whose tokenizer_config.json carries `template`."""
    target = os.path.join(into, "model")
    shutil.copytree(model_dir, target)
    config_path = os.path.join(target, "tokenizer_config.json")
    config = json.load(open(config_path)) if os.path.exists(config_path) else {}
    config["chat_template"] = template
    json.dump(config, open(config_path, "w"))
    return target
