#!/usr/bin/env python3
"""Soak test for `journey serve` (docs/reliability.md): for --duration seconds, --clients threads
send a mix of streaming and non-streaming chat and completion requests; 10 % of them hang up
mid-stream, 5 % send hostile bodies (the fuzz corpus of the request parser, its past crash
inputs, deeply nested and oversized bodies); a pool of --slow-clients sockets sends its headers a
byte at a time. At the end it checks that every well-formed request completed, every KV block is
free (/metrics), the resident memory grew by at most --max-rss-growth-mb over its level after
warm-up, the server is alive and /health is 200. Loopback only; Python standard library only.
Bounded: it stops at --duration or --max-requests, whichever comes first.

  python3 scripts/soak.py --journey build/src/cli/journey --model data/stories260K --duration 600

Prints a table of requests sent / completed / failed by category and the memory figures; exits 1
when a check failed. --json FILE writes the same figures as JSON."""
import argparse
import glob
import http.client
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import journey_http as jh  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = "sk-soak"
PROMPTS = ["Once upon a time", "The little dog", "Lily and Tom went to the park", "One day, a bird", "The sun was",
           "There was a big red ball", "Tim wanted to play", "Mom said"]


def hostile_bodies():
    """(path, body bytes): the request parser's fuzz corpus and crash inputs (first byte = endpoint),
    plus the shapes of issue #12."""
    paths = ["/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"]
    bodies = []
    for name in sorted(glob.glob(os.path.join(ROOT, "fuzz", "corpus", "openai_request", "*")) +
                       glob.glob(os.path.join(ROOT, "fuzz", "crashes", "openai_request", "*"))):
        data = open(name, "rb").read()
        if data:
            bodies.append((paths[data[0] % 4], data[1:]))
    deep = b"[" * 100000 + b"]" * 100000
    bodies += [
        ("/v1/completions", b'{"prompt": ' + deep + b"}"),
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x", "name": ' + deep + b"}]}"),
        ("/detokenize", b'{"tokens": ' + deep + b"}"),
        ("/v1/completions", b'{"prompt": "' + b"a" * 200000 + b'"}'),
        ("/v1/completions", b'{"prompt": [' + b"1," * 5000 + b"1]}"),
        ("/v1/chat/completions", b'{"messages": []}'),
        ("/v1/completions", b'{"prompt": "x", "max_tokens": 99999999999999999999}'),
        ("/v1/completions", b'{"prompt": "\xc3\x28"}'),
        ("/v1/completions", b"not json at all"),
    ]
    return bodies


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.rows = {}
        self.problems = []

    def add(self, category, outcome, problem=None):
        with self.lock:
            row = self.rows.setdefault(category, {"sent": 0, "completed": 0, "failed": 0})
            row["sent"] += 1
            row[outcome] += 1
            if problem and len(self.problems) < 50:
                self.problems.append(f"{category}: {problem}")


def well_formed(port, rng, tally):
    chat = rng.random() < 0.5
    stream = rng.random() < 0.5
    category = ("chat" if chat else "completion") + (" stream" if stream else "")
    prompt = rng.choice(PROMPTS)
    body = {"max_tokens": rng.randint(4, 48), "temperature": rng.choice([0, 0.8]), "seed": rng.randint(0, 1000),
            "stream": stream}
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    path = "/v1/chat/completions" if chat else "/v1/completions"
    try:
        connection = http.client.HTTPConnection(jh.LOOPBACK, port, timeout=120)
        connection.request("POST", path, json.dumps(body), {"Authorization": f"Bearer {KEY}",
                                                            "Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
        connection.close()
        if response.status != 200:
            return tally.add(category, "failed", f"status {response.status}: {data[:200]!r}")
        if stream:
            events = [line[6:] for line in data.decode().split("\n") if line.startswith("data: ")]
            finished = any(json.loads(e)["choices"] and json.loads(e)["choices"][0].get("finish_reason")
                           for e in events[:-1] if e != "[DONE]")
            ok = events and events[-1] == "[DONE]" and finished
        else:
            answer = json.loads(data)
            ok = "choices" in answer and answer["choices"][0]["finish_reason"] in ("stop", "length")
        tally.add(category, "completed" if ok else "failed", None if ok else f"malformed answer {data[:200]!r}")
    except (OSError, ValueError, KeyError, IndexError) as e:
        tally.add(category, "failed", repr(e))


def disconnect_mid_stream(port, rng, tally):
    """Starts a long streaming request, reads a couple of events, hangs up."""
    body = {"prompt": rng.choice(PROMPTS), "max_tokens": 200, "stream": True, "ignore_eos": True}
    try:
        s = socket.create_connection((jh.LOOPBACK, port), timeout=60)
        data = json.dumps(body).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: soak\r\nAuthorization: Bearer " + KEY.encode() +
                  b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
        received = b""
        while received.count(b"data: ") < 2:
            chunk = s.recv(4096)
            if not chunk:
                break
            received += chunk
        s.close()
        ok = received.startswith(b"HTTP/1.1 200")
        tally.add("stream, client hangs up", "completed" if ok else "failed", None if ok else repr(received[:200]))
    except OSError as e:
        tally.add("stream, client hangs up", "failed", repr(e))


def hostile(port, rng, tally, bodies):
    path, body = rng.choice(bodies)
    try:
        status, _, data = jh.request(port, "POST", path, body, key=KEY, timeout=60)
        # Any answer but a 5xx is what a hostile body should get (some corpus entries are valid).
        ok = status < 500
        tally.add("hostile body", "completed" if ok else "failed", None if ok else f"{path} -> {status} {data[:200]!r}")
    except OSError as e:
        tally.add("hostile body", "failed", f"{path}: {e!r}")


def slow_header_pool(port, count, stop, tally):
    """`count` sockets that send header bytes one per second; reopened when the server closes them."""
    sockets = []
    while not stop.is_set():
        while len(sockets) < count and not stop.is_set():
            try:
                s = socket.create_connection((jh.LOOPBACK, port), timeout=5)
                s.setblocking(False)
                s.send(b"POST /v1/completions HTTP/1.1\r\nHost: slow\r\n")
                sockets.append(s)
            except OSError:
                time.sleep(0.5)
                break
        alive = []
        for s in sockets:
            try:
                try:
                    answer = s.recv(4096)
                    # The server answered (408) or closed: this slow client is done.
                    tally.add("slow headers", "completed" if answer.startswith(b"HTTP/1.1 408") or answer == b"" else "failed")
                    s.close()
                    continue
                except BlockingIOError:
                    pass
                s.send(b"X")
                alive.append(s)
            except OSError:
                tally.add("slow headers", "completed")
                s.close()
        sockets = alive
        stop.wait(1.0)
    for s in sockets:
        s.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--journey", required=True, help="the journey binary")
    parser.add_argument("--model", default=os.path.join(ROOT, "data", "stories260K"))
    parser.add_argument("--duration", type=float, default=600, help="seconds of load (default 600)")
    parser.add_argument("--max-requests", type=int, default=1_000_000, help="stop after this many requests")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--slow-clients", type=int, default=32, help="slow-header sockets kept open")
    parser.add_argument("--warmup", type=float, default=10, help="seconds before the memory baseline is taken")
    parser.add_argument("--max-rss-growth-mb", type=float, default=64,
                        help="allowed growth of resident memory from the baseline to the end (MiB)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()

    server = jh.Server(args.journey, args.model, KEY, ["--max-num-seqs", "32"])
    tally = Tally()
    bodies = hostile_bodies()
    stop = threading.Event()
    sent = [0]
    count_lock = threading.Lock()
    rss = {"start": 0.0, "baseline": None, "peak": 0.0, "final": 0.0}
    try:
        server.wait_ready()
        rss["start"] = server.rss_mb()
        start = time.time()
        deadline = start + args.duration

        def client(index):
            rng = random.Random(args.seed * 1000 + index)
            while not stop.is_set() and time.time() < deadline:
                with count_lock:
                    if sent[0] >= args.max_requests:
                        return
                    sent[0] += 1
                roll = rng.random()
                if roll < 0.05:
                    hostile(server.port, rng, tally, bodies)
                elif roll < 0.15:
                    disconnect_mid_stream(server.port, rng, tally)
                else:
                    well_formed(server.port, rng, tally)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        slow = threading.Thread(target=slow_header_pool, args=(server.port, args.slow_clients, stop, tally))
        for t in threads + [slow]:
            t.start()
        while any(t.is_alive() for t in threads):
            now = time.time()
            current = server.rss_mb() if server.alive() else 0
            rss["peak"] = max(rss["peak"], current)
            if rss["baseline"] is None and now - start >= min(args.warmup, args.duration / 2):
                rss["baseline"] = current
            if not server.alive():
                stop.set()
            time.sleep(0.5)
        stop.set()
        slow.join()
        elapsed = time.time() - start
        blocks_used = jh.wait_blocks_free(server.port) if server.alive() else None
        health = jh.request(server.port, "GET", "/health", timeout=10)[0] if server.alive() else None
        rss["final"] = server.rss_mb() if server.alive() else 0
        final_metrics = jh.metrics(server.port) if server.alive() else {}
    finally:
        alive = server.alive()
        log = server.log_text()
        server.stop()

    baseline = rss["baseline"] or rss["start"]
    growth = rss["final"] - baseline
    well_formed_rows = [r for c, r in tally.rows.items() if c.startswith(("chat", "completion"))]
    checks = {
        "server alive": alive,
        "/health 200": health == 200,
        "every well-formed request completed": all(r["failed"] == 0 for r in well_formed_rows) and well_formed_rows,
        "no hostile body got a 5xx or a dropped connection": tally.rows.get("hostile body", {}).get("failed", 0) == 0,
        "every KV block free": blocks_used == 0,
        f"RSS growth after warm-up <= {args.max_rss_growth_mb:g} MiB": growth <= args.max_rss_growth_mb,
    }
    print(f"soak: {elapsed:.0f} s, {args.clients} clients, {args.slow_clients} slow-header sockets, seed {args.seed}")
    print(f"{'category':<26}{'sent':>8}{'completed':>11}{'failed':>8}")
    for category in sorted(tally.rows):
        r = tally.rows[category]
        print(f"{category:<26}{r['sent']:>8}{r['completed']:>11}{r['failed']:>8}")
    print(f"RSS MiB: start {rss['start']:.1f}, after warm-up {baseline:.1f}, peak {rss['peak']:.1f}, "
          f"final {rss['final']:.1f} (growth {growth:+.1f})")
    aborted = final_metrics.get('journey:request_success_total{finished_reason="abort"}')
    print(f"KV blocks used at the end: {blocks_used}; aborted sequences: {aborted}; "
          f"generated tokens: {final_metrics.get('journey:generation_tokens_total')}; "
          f"header timeouts (408): {final_metrics.get('journey:http_header_timeouts_total')}")
    for problem in tally.problems[:20]:
        print("  problem:", problem)
    for name, ok in checks.items():
        print(("ok: " if ok else "FAILED: ") + name)
    if not alive:
        print(log)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seconds": elapsed, "clients": args.clients, "slow_clients": args.slow_clients,
                       "rows": tally.rows, "rss_mb": rss, "rss_growth_mb": growth, "kv_blocks_used": blocks_used,
                       "checks": {k: bool(v) for k, v in checks.items()}}, f, indent=1)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
