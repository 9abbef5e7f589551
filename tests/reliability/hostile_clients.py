#!/usr/bin/env python3
"""Hostile clients against a real `journey serve` on loopback (issue #12): every request that once
crashed, exhausted or stalled the server, sent again; each must get its error status while the
server keeps serving everyone else. Python standard library only.

usage: hostile_clients.py JOURNEY MODEL_DIR
Exit 0 when every check passed; the failed checks are printed."""
import json
import os
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import journey_http as jh  # noqa: E402

KEY = "sk-hostile-test"
failures = []


def check(name, ok, detail=""):
    print(("ok: " if ok else "FAILED: ") + name + ("" if ok else f" ({detail})"), flush=True)
    if not ok:
        failures.append(name)


def error_message(body):
    try:
        return json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return body[:200].decode(errors="replace")


def still_serving(server, what):
    status, _, body = jh.request(server.port, "POST", "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4},
                                 key=KEY, timeout=30)
    check(f"still serving after {what}", status == 200 and server.alive(), f"{status} {body[:200]!r}")


# The model's own chat template turns hostile on request: message content "overflow" renders
# INT64_MIN // -1 (once SIGFPE), "loop" runs two nested range(100000) loops (once a hang).
HOSTILE_TEMPLATE = (
    "{% if messages[-1]['content'] == 'overflow' %}{{ (-9223372036854775807 - 1) // -1 }}{% endif %}"
    "{% if messages[-1]['content'] == 'loop' %}{% for i in range(100000) %}{% for j in range(100000) %}"
    "{% endfor %}{% endfor %}{% endif %}"
    "{% for m in messages %}{{ m['content'] }}\n{% endfor %}")


def deep_bodies(server):
    deep = "[" * 100000 + "]" * 100000
    cases = [
        ("/v1/completions", '{"prompt": ' + "[" * 100000 + "1" + "]" * 100000 + "}"),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi", "name": ' + "{\"a\":" * 100000 + "1"
         + "}" * 100000 + "}]}"),
        ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi", "extra": ' + deep + "}]}"),
        ("/detokenize", '{"tokens": ' + deep + "}"),
        ("/tokenize", '{"prompt": ' + deep + "}"),
    ]
    for path, body in cases:
        status, _, answer = jh.request(server.port, "POST", path, body.encode(), key=KEY)
        message = error_message(answer)
        check(f"{path} nested 100k deep -> 400", status == 400 and "nested deeper than 64" in message, f"{status} {message}")
    still_serving(server, "deeply nested bodies")


def template_errors(server):
    for content, expected in [("overflow", "integer overflow"), ("loop", "budget")]:
        start = time.time()
        status, _, answer = jh.request(server.port, "POST", "/v1/chat/completions",
                                       {"messages": [{"role": "user", "content": content}], "max_tokens": 4}, key=KEY)
        message = error_message(answer)
        check(f"template '{content}' -> 400 naming the problem", status == 400 and expected in message,
              f"{status} {message}")
        print(f"   answered in {time.time() - start:.2f} s")
    status, _, _ = jh.request(server.port, "POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}, key=KEY)
    check("the same template serves a normal chat", status == 200, str(status))
    still_serving(server, "template errors")


def chunked_flood(server):
    """A 400 MB chunked body: once read without bound (0.4 -> 18.5 GB)."""
    before = server.rss_mb()
    peak = [before]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], server.rss_mb())
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    s = socket.create_connection((jh.LOOPBACK, server.port), timeout=30)
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
               "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode())
    chunk = b"10000\r\n" + b'{"prompt": "' + b"a" * (0x10000 - 12) + b'\r\n'
    sent = 0
    start = time.time()
    try:
        while sent < 400 * 1024 * 1024:
            s.sendall(chunk)
            sent += 0x10000
    except OSError:
        pass  # the server answered and closed: the rest is refused, as it should be
    response = b""
    try:
        s.settimeout(10)
        while b"\r\n\r\n" not in response:
            data = s.recv(65536)
            if not data:
                break
            response += data
    except OSError:
        pass
    s.close()
    stop.set()
    sampler.join()
    status_line = response.split(b"\r\n", 1)[0].decode(errors="replace")
    print(f"   sent {sent / 2**20:.1f} MiB in {time.time() - start:.2f} s before the server stopped reading; "
          f"RSS {before:.0f} -> peak {peak[0]:.0f} MiB")
    check("400 MB chunked body -> 413", " 413 " in status_line + " ", status_line)
    check("chunked body refused within a few MiB", sent < 64 * 1024 * 1024, f"{sent} bytes accepted")
    check("memory stayed bounded during the chunked body", peak[0] - before < 64, f"{before:.0f} -> {peak[0]:.0f} MiB")
    status, _, _ = jh.request(server.port, "POST", "/v1/completions", b'{"prompt": "' + b"a" * (2 << 20) + b'"}', key=KEY)
    check("2 MiB Content-Length body -> 413", status == 413, str(status))
    still_serving(server, "oversized bodies")


def slow_headers(server, count=200):
    """Sockets that send their headers a byte at a time: once ~64 of them stopped the server."""
    sockets = []
    for _ in range(count):
        s = socket.create_connection((jh.LOOPBACK, server.port), timeout=30)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: slow\r\n")
        sockets.append(s)
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            for s in sockets:
                try:
                    s.send(b"X")
                except OSError:
                    pass
            time.sleep(1)

    trickler = threading.Thread(target=trickle)
    trickler.start()
    worst = 0.0
    for _ in range(5):
        start = time.time()
        status, _, _ = jh.request(server.port, "POST", "/v1/completions", {"prompt": "Once", "max_tokens": 4}, key=KEY,
                                  timeout=30)
        worst = max(worst, time.time() - start)
        check(f"a request completes while {count} slow-header sockets are open", status == 200, str(status))
    print(f"   slowest of 5 requests: {worst:.2f} s")
    check("requests stay fast beside the slow clients", worst < 5, f"{worst:.2f} s")
    time.sleep(12)  # past the 10 s header deadline, with a margin for a busy machine
    stop.set()
    trickler.join()
    timed_out = 0
    for s in sockets:
        try:
            s.settimeout(2)
            data = s.recv(4096)
            if data.startswith(b"HTTP/1.1 408") or data == b"":
                timed_out += 1
        except OSError:
            timed_out += 1
        s.close()
    check("slow-header sockets got 408 and were closed after the header deadline", timed_out == count,
          f"{timed_out} of {count}")
    huge = socket.create_connection((jh.LOOPBACK, server.port), timeout=10)
    huge.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-Filler: " + b"y" * 100000 + b"\r\n\r\n")
    answer = b""
    try:
        answer = huge.recv(4096)
    except OSError:
        pass
    huge.close()
    check("100 KB of headers -> 431", answer.startswith(b"HTTP/1.1 431"), answer[:40])


def authentication(server):
    for value, expected in [(f"Bearer {KEY}\0", 401), (f"Bearer {KEY}\0extra", 401), (f"Bearer {KEY[:-1]}", 401),
                            (f"Bearer {KEY}", 200)]:
        status, _, _ = jh.request(server.port, "GET", "/v1/models", headers={"Authorization": value})
        check(f"Authorization {value!r} -> {expected}", status == expected, str(status))
    # 300 guesses from one address (127.0.0.2): after 10 failures a minute, 429 for that address only.
    statuses = [jh.request(server.port, "GET", "/v1/models", key=f"guess-{i}", source="127.0.0.2")[0] for i in range(300)]
    check("the first 10 wrong keys -> 401", statuses[:10] == [401] * 10, str(statuses[:12]))
    check("the next 290 -> 429 (throttled)", statuses[10:] == [429] * 290, str(sorted(set(statuses[10:]))))
    status, headers, _ = jh.request(server.port, "GET", "/v1/models", key=KEY, source="127.0.0.2")
    check("even the right key from the throttled address -> 429 with Retry-After", status == 429 and "Retry-After" in headers,
          str(status))
    status, _, _ = jh.request(server.port, "GET", "/v1/models", key=KEY)
    check("other addresses are not throttled", status == 200, str(status))
    status, _, _ = jh.request(server.port, "GET", "/health", source="127.0.0.2")
    check("/health needs no key", status == 200, str(status))


def main():
    journey, model = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="journey-hostile-") as scratch:
        hostile_model = jh.model_with_template(model, HOSTILE_TEMPLATE, scratch)
        server = jh.Server(journey, hostile_model, KEY)
        try:
            server.wait_ready()
            start_rss = server.rss_mb()
            for test in (deep_bodies, template_errors, chunked_flood, authentication, slow_headers):
                print(f"-- {test.__name__}", flush=True)
                try:
                    test(server)
                except (OSError, ValueError) as e:  # e.g. the server died mid-request
                    check(f"{test.__name__} ran to its end", False, repr(e))
                if not server.alive():
                    check(f"server alive after {test.__name__}", False, f"exit code {server.process.returncode}")
                    break
            check("server alive at the end", server.alive(), server.log_text())
            used = jh.wait_blocks_free(server.port)
            check("every KV block free at the end", used == 0, f"journey:kv_blocks_used {used}")
            print(f"   RSS {start_rss:.0f} MiB at start, {server.rss_mb():.0f} MiB at the end")
        finally:
            if not server.alive():
                print(server.log_text())
            server.stop()
    print(f"{len(failures)} check(s) failed" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
