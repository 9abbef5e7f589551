"""Graceful shutdown of a real `journey serve` (data/stories260K) on loopback: SIGTERM drains.

    python3 tests/server/test_graceful_shutdown.py --journey build/src/cli/journey --model data/stories260K

Run by ctest as server_graceful_shutdown (Python's standard library only: http.client is the
client). What a replica behind a load balancer must do (src/server/drain.h):

  - drain: requests are in flight (streams and a non-streamed one; with --max-num-seqs 1 most of
    them wait in the engine's queue, so the drain lasts a while); SIGTERM; at once /health is
    503 {"status":"draining"} (as soon as the signal thread runs: polled) and then a new
    completion or /tokenize gets 503 with an OpenAI error body and Retry-After; every admitted request still gets all its tokens and [DONE]; the process
    exits 0 and its last line says how many requests drained and that no KV block is in use.
  - timeout: --drain-timeout 0.2 under the same load: the streams still running get finish_reason
    "abort" and [DONE] (an answer they can see), the exit status is 1 and the log says how many.
  - second signal: SIGTERM twice aborts at once, whatever --drain-timeout says.
  - idle: SIGTERM with nothing in flight exits 0 at once ("drained 0 requests").
Every loop and wait is bounded.
"""
import argparse
import http.client
import json
import os
import re
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from journey_server import JourneyServer  # noqa: E402

MODEL = "stories"
STREAMS = 10          # streamed requests in flight at the signal
PLAIN = 2             # non-streamed ones
MAX_TOKENS = 400      # each (stories260K's context is 512); ignore_eos so that every one runs to length


class Call:
    """One completion on its own connection and thread: what came back, and when it ended."""

    def __init__(self, server, index, stream):
        self.server, self.index, self.stream = server, index, stream
        self.status = None
        self.headers = {}
        self.tokens = 0           # chunks with a choice (streamed) / usage.completion_tokens (not)
        self.usage = None
        self.finish_reason = None
        self.done = False         # [DONE] seen (streamed)
        self.body = None          # non-streamed JSON
        self.error = None
        self.ended_at = None
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=120)
            body = {"model": MODEL, "prompt": f"Once upon a time {self.index}", "max_tokens": MAX_TOKENS,
                    "temperature": 0, "ignore_eos": True, "stream": self.stream}
            if self.stream:
                body["stream_options"] = {"include_usage": True}
            conn.request("POST", "/v1/completions", body=json.dumps(body),
                         headers={"Authorization": f"Bearer {self.server.key}", "Content-Type": "application/json"})
            response = conn.getresponse()
            self.status = response.status
            self.headers = dict(response.getheaders())
            if not self.stream or self.status != 200:
                self.body = json.loads(response.read().decode())
                if self.status == 200:
                    choice = self.body["choices"][0]
                    self.finish_reason, self.usage = choice["finish_reason"], self.body["usage"]
                    self.tokens = self.usage["completion_tokens"]
            else:
                while True:
                    line = response.readline()
                    if not line:
                        break
                    line = line.decode().rstrip("\n")
                    if not line.startswith("data: "):
                        continue
                    data = line[len("data: "):]
                    if data == "[DONE]":
                        self.done = True
                        continue
                    chunk = json.loads(data)
                    if "error" in chunk:
                        self.error = chunk["error"]
                    if chunk.get("usage"):
                        self.usage = chunk["usage"]
                    for choice in chunk.get("choices", []):
                        self.tokens += 1
                        self.finish_reason = choice.get("finish_reason") or self.finish_reason
            conn.close()
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = repr(e)
        finally:
            self.ended_at = time.monotonic()

    def describe(self):
        return (f"request {self.index} ({'stream' if self.stream else 'plain'}): HTTP {self.status}, "
                f"{self.tokens} tokens, finish_reason {self.finish_reason}, [DONE] {self.done}, error {self.error}")


def start_load(server):
    calls = [Call(server, i, stream=i < STREAMS) for i in range(STREAMS + PLAIN)]
    for c in calls:
        c.thread.start()
    # Every request must have reached the engine (running, waiting, or already answered) before
    # the signal: else one that had not arrived yet would (rightly) get 503 and the test would
    # not show what it claims.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        in_engine = server.metric("journey:num_requests_running") + server.metric("journey:num_requests_waiting")
        if in_engine + sum(1 for c in calls if c.ended_at is not None) >= len(calls):
            return calls
        time.sleep(0.005)
    raise AssertionError(f"the {len(calls)} requests did not all reach the engine within 30 s")


def wait_exit(server, timeout_s=60):
    try:
        return server.process.wait(timeout=timeout_s)
    except Exception:  # noqa: BLE001
        raise AssertionError(f"journey serve did not exit within {timeout_s} s of the drain:\n{server.log_text()}")


def wait_for_the_end(server, calls):
    """Every client call ended and the server exited: (exit status, server log, time of the exit)."""
    for c in calls:
        c.thread.join(120)
    code = wait_exit(server)
    return code, server.log_text(), time.monotonic()


class GracefulShutdown(unittest.TestCase):
    def serve(self, *extra):
        return JourneyServer(ARGS.journey, ARGS.model, MODEL, extra_args=["--max-num-seqs", "1", *extra])

    def test_drain_finishes_every_request_then_exits_0(self):
        with self.serve() as server:
            calls = start_load(server)
            signalled = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            # The signal thread closes the gate as soon as it runs (on a busy machine, a few ms
            # after the kill): poll /health until it says so, then new requests must be refused,
            # all while the admitted requests still run (checked below).
            health = server.get("/health")
            while health[0] == 200 and time.monotonic() - signalled < 5:
                time.sleep(0.002)
                health = server.get("/health")
            turned = time.monotonic()
            completion = server.post("/v1/completions", json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": 4}))
            tokenize_status, _ = server.post("/tokenize", json.dumps({"prompt": "Hi"}))
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request("POST", "/v1/completions", body=json.dumps({"model": MODEL, "prompt": "Hi", "max_tokens": 4}),
                         headers={"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"})
            refused = conn.getresponse()
            retry_after, refused_body = refused.getheader("Retry-After"), json.loads(refused.read().decode())
            conn.close()
            checked = time.monotonic()
            kv_used_during = server.metric("journey:kv_blocks_used")
            code, log, exited = wait_for_the_end(server, calls)

        print(f"\n  drain: {sum(1 for c in calls if c.ended_at > signalled)} of {len(calls)} requests in flight at SIGTERM; /health {health[0]} {health[1]}; "
              f"{1000 * (turned - signalled):.0f} ms after the signal; new completion {completion[0]}, "
              f"/tokenize {tokenize_status}, Retry-After {retry_after}; "
              f"checks done {1000 * (checked - signalled):.0f} ms after the signal; the last request ended "
              f"{1000 * (max(c.ended_at for c in calls) - signalled):.0f} ms after it; exit {code} "
              f"{1000 * (exited - signalled):.0f} ms after it")
        self.assertEqual(health[0], 503)
        self.assertEqual(json.loads(health[1]), {"status": "draining"})
        self.assertEqual(completion[0], 503, completion[1])
        self.assertEqual(json.loads(completion[1])["error"]["code"], "server_draining")
        self.assertEqual(json.loads(completion[1])["error"]["type"], "service_unavailable")
        self.assertEqual(tokenize_status, 503)
        self.assertEqual(refused.status, 503)
        self.assertIsNotNone(retry_after, "a draining 503 carries Retry-After")
        self.assertIn("message", refused_body["error"])
        # The checks ran while the drain had work left, else they showed nothing.
        self.assertGreater(max(c.ended_at for c in calls), checked,
                           "every request had ended before the checks: the load is too short to test a drain")
        self.assertGreater(kv_used_during, 0, "no KV block in use during the drain: nothing was running")
        for c in calls:
            self.assertEqual(c.status, 200, c.describe())
            self.assertIsNone(c.error, c.describe())
            self.assertEqual(c.tokens, MAX_TOKENS, c.describe())
            self.assertEqual(c.finish_reason, "length", c.describe())
            if c.stream:
                self.assertTrue(c.done, c.describe())
                self.assertEqual(c.usage["completion_tokens"], MAX_TOKENS, c.describe())
        self.assertEqual(code, 0, log)
        # The server counts the responses open when its signal thread ran (a request that came
        # first may have ended just before), and every one of them drained.
        in_flight = re.search(r"SIGTERM: draining (\d+) requests? in flight", log)
        self.assertIsNotNone(in_flight, log)
        self.assertGreaterEqual(int(in_flight.group(1)), 1, log)
        self.assertLessEqual(int(in_flight.group(1)), len(calls), log)
        summary = re.search(r"drained (\d+) requests? in ([0-9.]+) s, none aborted; KV blocks in use at exit: (\d+) of (\d+)", log)
        self.assertIsNotNone(summary, log)
        self.assertEqual(int(summary.group(1)), int(in_flight.group(1)), log)
        self.assertEqual(int(summary.group(3)), 0, log)
        self.assertGreater(int(summary.group(4)), 0, log)

    def test_drain_timeout_aborts_what_is_left_and_says_so(self):
        with self.serve("--drain-timeout", "0.2") as server:
            calls = start_load(server)
            signalled = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            code, log, exited = wait_for_the_end(server, calls)
        aborted = [c for c in calls if c.finish_reason == "abort"]
        print(f"\n  timeout: {len(aborted)} of {len(calls)} requests aborted, exit {code} "
              f"{1000 * (exited - signalled):.0f} ms after SIGTERM")
        self.assertEqual(code, 1, log)
        self.assertGreater(len(aborted), 0, "\n".join(c.describe() for c in calls))
        for c in calls:
            self.assertEqual(c.status, 200, c.describe())
            self.assertIn(c.finish_reason, ("length", "abort"), c.describe())
            if c.finish_reason == "length":
                self.assertEqual(c.tokens, MAX_TOKENS, c.describe())
            if c.stream:
                self.assertTrue(c.done, c.describe())
        summary = re.search(r"drain ended by the drain timeout \(0.2 s\) after [0-9.]+ s: (\d+) requests? finished, "
                            r"(\d+) aborted \(finish_reason \"abort\"\); KV blocks in use at exit: 0 of", log)
        self.assertIsNotNone(summary, log)
        in_flight = re.search(r"SIGTERM: draining (\d+) requests? in flight", log)
        self.assertIsNotNone(in_flight, log)
        # What the server aborted is what the clients saw aborted; the requests it finished during
        # the drain are among those that ended with "length" (others ended before the signal).
        self.assertEqual(int(summary.group(2)), len(aborted), log)
        self.assertLessEqual(int(summary.group(1)), len(calls) - len(aborted), log)
        self.assertEqual(int(summary.group(1)) + int(summary.group(2)), int(in_flight.group(1)), log)
        self.assertLess(exited - signalled, 10, "the drain timeout did not bound the exit")

    def test_second_signal_aborts_at_once(self):
        with self.serve("--drain-timeout", "120") as server:
            calls = start_load(server)
            signalled = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            time.sleep(0.2)
            self.assertTrue(server.alive(), "the first SIGTERM did not drain: the server is gone")
            server.process.send_signal(signal.SIGINT)
            code, log, exited = wait_for_the_end(server, calls)
        print(f"\n  second signal: exit {code} {1000 * (exited - signalled):.0f} ms after the first SIGTERM")
        self.assertEqual(code, 1, log)
        self.assertIn("drain ended by a second signal (SIGINT)", log)
        self.assertRegex(log, r"KV blocks in use at exit: 0 of \d+")
        self.assertTrue(any(c.finish_reason == "abort" for c in calls), "\n".join(c.describe() for c in calls))
        self.assertTrue(all(c.done for c in calls if c.stream), "\n".join(c.describe() for c in calls))
        self.assertLess(exited - signalled, 10)

    def test_idle_server_exits_at_once(self):
        with self.serve() as server:
            self.assertEqual(server.post_json("/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 3})
                             ["usage"]["completion_tokens"], 3)
            # The client holds the whole answer a moment before the server's handler has ended
            # (its request log line, then its drain ticket): wait for the line, so the signal
            # finds the server idle rather than in that moment (seen once under CI load).
            deadline = time.monotonic() + 10
            while "POST /v1/completions 200" not in server.log_text() and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.2)
            signalled = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            code = wait_exit(server, 10)
            log = server.log_text()
            exited = time.monotonic()
        print(f"\n  idle: exit {code} {1000 * (exited - signalled):.0f} ms after SIGTERM")
        self.assertEqual(code, 0, log)
        self.assertRegex(log, r"drained 0 requests in [0-9.]+ s, none aborted; KV blocks in use at exit: 0 of \d+")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--journey", required=True, help="the journey binary")
    parser.add_argument("--model", required=True, help="the model directory to serve")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
