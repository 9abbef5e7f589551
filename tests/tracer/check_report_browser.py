#!/usr/bin/python3
"""The HTML report in a real browser: Debian's Chromium, headless, driven through its own DevTools
protocol (a WebSocket, spoken here with the standard library alone: no puppeteer, no npm).

1. `journey trace` a sampled run of stories260K (6 tokens, KV blocks of 4 slots), write the report,
   open it from a file:// URL, and wait for its script (window.journeyReport.ready).
2. Click a token with real mouse events: the selection moves there and the next-token panel, the
   logit lens, the attention rows and the KV view change.
3. Press the arrow key on the step scrubber: the step changes and the diagram's node text, the KV
   blocks and the sampling pipeline change.
4. Pick another layer: another diagram is shown and the attention map changes.
5. No script error, no request beyond the file itself, no test text shown to users.
6. Screenshots (PNG) before and after are not blank (decoded here: their pixels vary).
7. `report A --compare B`: against the reference backend the verdict is SAME; against the
   planted RoPE bug it is DIVERGED at L0.q_rope and that node is drawn red.
8. A request traced by `journey serve --trace-dir`: the second of two requests with the same
   prompt finds its first blocks in the prefix cache, and the KV panel draws those slots as cached.
9. Structured output: the grammar mask panel.
10. `journey trace --tensor-parallel 2` (when mpirun is installed): rank 0's report draws each
   rank's partial share of every layer's two all-reduced sums, and follows the step scrubber.

usage: check_report_browser.py JOURNEY JOURNEY_TRACE WORK_DIR [TRACE_PLANTED_BUG]
       (exit 77 = skipped: no /usr/bin/chromium)
"""
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib

CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    print(f"SKIP: {CHROMIUM} is not installed (apt install chromium) - the report was not checked in a browser")
    sys.exit(77)

journey, tracer, work = sys.argv[1], sys.argv[2], sys.argv[3]
planted_bug = sys.argv[4] if len(sys.argv) > 4 else None
os.makedirs(work, exist_ok=True)
failures = []


def expect(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)


def run(args):
    return subprocess.run(args, check=True, capture_output=True, text=True)


# ---- a WebSocket client (RFC 6455), enough for the DevTools protocol ----------------------------
class WebSocket:
    def __init__(self, url):
        assert url.startswith("ws://"), url
        host_port, path = url[5:].split("/", 1)
        host, port = host_port.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise RuntimeError("the DevTools socket closed during the handshake")
            response += chunk
        header, self.buffer = response.split(b"\r\n\r\n", 1)
        if b" 101 " not in header.split(b"\r\n")[0]:
            raise RuntimeError(f"WebSocket handshake refused: {header[:200]!r}")

    def send(self, text):
        payload = text.encode()
        mask = os.urandom(4)
        n = len(payload)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else
                                bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536 else
                                bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise RuntimeError("the DevTools socket closed")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def receive(self):
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise RuntimeError("the browser closed the DevTools connection")
            if opcode in (0x9, 0xA):  # ping / pong: not used by Chromium here
                continue
            message += payload
            if b0 & 0x80:
                return message.decode()


class Browser:
    """One headless Chromium with a fresh profile; one page; commands answered in order."""

    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="journey-chromium-")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--remote-debugging-port=0",
             "--window-size=1400,1000", f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        for _ in range(300):
            if os.path.exists(port_file) and open(port_file).read().count("\n") >= 1:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("Chromium did not open its DevTools port within 30 s")
        port = int(open(port_file).read().split()[0])
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30))
        page = next(t for t in targets if t["type"] == "page")
        self.ws = WebSocket(page["webSocketDebuggerUrl"])
        self.next_id = 0
        self.events = []

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.receive())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            if self.evaluate(expression):
                return True
            time.sleep(0.1)
        return False

    def click(self, selector):
        box = self.evaluate(f"""(() => {{ const e = document.querySelector({json.dumps(selector)});
            if (!e) return null; e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect();
            return [r.left + r.width / 2, r.top + r.height / 2]; }})()""")
        if box is None:
            raise RuntimeError(f"nothing matches {selector}")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def key(self, key, code, keycode):
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", type=kind, key=key, code=code, windowsVirtualKeyCode=keycode)

    def screenshot(self, path):
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        with open(path, "wb") as f:
            f.write(data)
        return data

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def png_pixels_vary(data):
    """Decodes a PNG's image data (zlib of its IDAT chunks) and counts distinct byte values: a blank
    page of one colour gives a handful, a drawn page hundreds."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return 0, (0, 0)
    pos, idat, size = 8, b"", (0, 0)
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    return len(set(zlib.decompress(idat))), size


# What the panels show, compactly, so that two moments can be compared.
SNAPSHOT = """(() => { const R = window.journeyReport, q = s => document.querySelector(s);
  const hash = s => { let h = 0; for (let i = 0; i < s.length; ++i) h = (h * 31 + s.charCodeAt(i)) | 0; return h; };
  const visible = [...document.querySelectorAll('.diagram')].find(d => !d.hidden);
  return {selected: R.selected, step: R.step, layer: R.layer, head: R.head, drawn: Object.assign({}, R.drawn),
    card: q('#card').innerText, next: q('#nexttok').innerText, lens: q('#lens').innerText,
    pipeline: q('#pipeline').innerText + q('#pipeline-note').innerText, kv: q('#kv').innerHTML,
    diagram: visible ? visible.dataset.layer + ':' + visible.textContent : '',
    looks: hash(q('#looks').toDataURL()), map: hash(q('#map').toDataURL()),
    tokens: document.querySelectorAll('.tok').length, selectedTokens: document.querySelectorAll('.tok.sel').length,
    text: document.body.innerText}; })()"""


def open_report(browser, report):
    browser.call("Page.enable")
    browser.call("Runtime.enable")
    browser.call("Network.enable")
    browser.call("Page.navigate", url="file://" + os.path.abspath(report))
    if not browser.wait_for("window.journeyReport !== undefined && window.journeyReport.ready === true"):
        raise RuntimeError(f"{report}: the page's script never finished")


# ---- 1-6: one sampled run --------------------------------------------------------------------------
dump = os.path.join(work, "dump")
run([journey, "trace", "--model", "data/stories260K", "Once upon a time", "--out", dump, "--max-tokens", "6",
     "--temperature", "0.8", "--seed", "1", "--kv-block-size", "4"])
report = os.path.join(work, "report.html")
print(run([tracer, "report", dump, "--out", report]).stdout.strip())

browser = Browser()
try:
    open_report(browser, report)
    before = browser.evaluate(SNAPSHOT)
    print("opened:", {k: before[k] for k in ("selected", "step", "layer", "head", "drawn", "tokens")})
    expect(before["tokens"] == 5 + 6, f"the token strip shows {before['tokens']} tokens, expected 5 prompt + 6 generated")
    expect(before["step"] == 0 and before["selected"] == 4, f"opens on step {before['step']}, token {before['selected']}")
    expect(before["drawn"].get("diagramNodes", 0) >= 25, f"diagram nodes relabelled: {before['drawn'].get('diagramNodes')}")
    expect(before["drawn"].get("lensRows") == 5, f"logit lens rows: {before['drawn'].get('lensRows')}, expected 5 layers")
    expect(before["drawn"].get("heatmaps") == 9, f"heatmaps drawn: {before['drawn'].get('heatmaps')}, expected 1 + 8 heads")
    expect(before["drawn"].get("pipelineStages", 0) >= 5, f"sampling stages drawn: {before['drawn'].get('pipelineStages')}")
    expect(before["drawn"].get("kvBlocks") == 2, f"KV blocks at the prefill: {before['drawn'].get('kvBlocks')}, expected 2 (5 slots of 4)")
    for word in ("rendered:", "heatmaps=", "status"):
        expect(word not in before["text"], f"the page shows test text {word!r} to users")
    shot_before = browser.screenshot(os.path.join(work, "report-opened.png"))

    # 2. Click the second prompt token.
    browser.click('.tok[data-pos="1"]')
    clicked = browser.evaluate(SNAPSHOT)
    expect(clicked["selected"] == 1 and clicked["selectedTokens"] == 1, f"after the click the selection is {clicked['selected']}")
    for panel in ("card", "next", "lens", "looks", "pipeline"):
        expect(clicked[panel] != before[panel], f"the {panel} panel did not change when another token was selected")
    expect("inside the prompt" in clicked["pipeline"], "a prompt token's pipeline panel should say nothing is sampled there")

    # 3. The step scrubber, by keyboard: focus it and press the right arrow twice.
    browser.click("#step")
    start = browser.evaluate("window.journeyReport.step")
    browser.key("ArrowRight", "ArrowRight", 39)
    browser.key("ArrowRight", "ArrowRight", 39)
    moved = browser.evaluate(SNAPSHOT)
    expect(moved["step"] != start and moved["step"] > 0, f"the scrubber did not move the step (still {moved['step']})")
    for panel in ("diagram", "kv", "pipeline", "next", "lens"):
        expect(moved[panel] != clicked[panel], f"the {panel} panel did not change when the step moved")
    expect(moved["drawn"].get("kvBlocks", 0) >= 2, f"KV blocks after moving: {moved['drawn'].get('kvBlocks')}")

    # 4. Another layer from the selector (keyboard on the focused <select>).
    browser.evaluate("document.getElementById('layer').focus()")
    browser.key("ArrowDown", "ArrowDown", 40)
    layered = browser.evaluate(SNAPSHOT)
    if layered["layer"] == moved["layer"]:  # some builds open a popup instead: choose as a script would
        browser.evaluate("(() => { const s = document.getElementById('layer'); s.value = '3'; s.dispatchEvent(new Event('change')); })()")
        layered = browser.evaluate(SNAPSHOT)
    expect(layered["layer"] != moved["layer"], "the layer selector did not change the layer")
    expect(layered["diagram"].split(":")[0] == str(layered["layer"]), "the diagram shown is not the selected layer's")
    expect(layered["map"] != moved["map"], "the attention map did not change with the layer")
    shot_after = browser.screenshot(os.path.join(work, "report-moved.png"))

    # 5. Errors and requests.
    errors = [e for e in browser.events if e.get("method") in ("Runtime.exceptionThrown",) or
              (e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") == "error")]
    expect(not errors, f"script errors: {errors[:2]}")
    requests = [e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    outside = [u for u in requests if not u.startswith("file://") and not u.startswith("data:")]
    expect(not outside, f"the page fetched {outside}")

    # 6. Screenshots with content.
    for name, data in (("opened", shot_before), ("moved", shot_after)):
        distinct, size = png_pixels_vary(data)
        print(f"screenshot {name}: {size[0]}x{size[1]}, {distinct} distinct byte values")
        expect(distinct > 50, f"the {name} screenshot looks blank ({distinct} distinct byte values)")

    # 7. The comparison view.
    ref = os.path.join(work, "reference")
    run([journey, "trace", "--model", "data/stories260K", "Once upon a time", "--out", ref, "--max-tokens", "6",
         "--temperature", "0.8", "--seed", "1", "--kv-block-size", "4", "--device", "reference"])
    same = os.path.join(work, "compare-same.html")
    out = run([tracer, "report", dump, "--compare", ref, "--out", same]).stdout
    expect("SAME" in out, f"report --compare against the reference: {out}")
    open_report(browser, same)
    verdict = browser.evaluate("document.getElementById('verdict').innerText")
    expect("SAME" in verdict and "reference, f32 weights" in verdict, f"the verdict reads {verdict!r}")
    if planted_bug:
        bug = os.path.join(work, "bug")
        run([planted_bug, "data/stories260K", bug])
        greedy = os.path.join(work, "greedy")
        run([journey, "trace", "--model", "data/stories260K", "Once upon a time", "--out", greedy, "--max-tokens", "4",
             "--temperature", "0", "--device", "reference"])
        diverged = os.path.join(work, "compare-bug.html")
        out = run([tracer, "report", bug, "--compare", greedy, "--out", diverged]).stdout
        expect("DIVERGED: first at L0.q_rope (step 0)" in out, f"report --compare against the planted bug: {out}")
        open_report(browser, diverged)
        verdict = browser.evaluate("document.getElementById('verdict').innerText")
        expect("first at L0.q_rope" in verdict, f"the verdict reads {verdict!r}")
        fill = browser.evaluate("""(() => { const g = [...document.querySelectorAll('.diagram:not([hidden]) g.node')]
            .find(g => g.dataset.node === 'n_L0.q_rope'); if (!g) return null;
            const e = [...g.querySelectorAll('path,polygon')].find(e => { const f = e.getAttribute('fill'); return f && f !== 'none' && f !== 'transparent'; });
            return e ? e.getAttribute('fill') : null; })()""")
        expect(fill == "#ff6b6b", f"L0.q_rope is drawn with fill {fill}, expected the first divergence's red")
        browser.screenshot(os.path.join(work, "report-compare-bug.png"))

    # 8. A served request's trace: prefix-cache hits drawn in the KV blocks.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    traces = os.path.join(work, "served")
    shutil.rmtree(traces, ignore_errors=True)
    server = subprocess.Popen([journey, "serve", "--model", "data/stories260K", "--port", str(port), "--block-size", "4",
                               "--trace-dir", traces, "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                time.sleep(0.1)
        dumps = []
        for _ in range(2):
            body = json.dumps({"model": "stories260K", "prompt": "Once upon a time, there was a little girl named Lily.",
                               "max_tokens": 8, "temperature": 0, "journey_trace": True}).encode()
            request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            dumps.append(json.load(urllib.request.urlopen(request, timeout=60))["journey_trace"])
    finally:
        server.terminate()
        server.wait(timeout=30)
    served = os.path.join(work, "served.html")
    run([tracer, "report", dumps[1], "--out", served])
    open_report(browser, served)
    kv = browser.evaluate("""({blocks: window.journeyReport.drawn.kvBlocks, cached: document.querySelectorAll('.cellkv.cached').length,
                               note: document.getElementById('kv-note').innerText})""")
    print("served request, step 0:", kv)
    expect(kv["blocks"] >= 3 and kv["cached"] >= 4, f"the served request's prefix-cache hits are not drawn: {kv}")
    expect("prefix cache" in kv["note"], f"the KV note does not mention the prefix cache: {kv['note']!r}")

    # 9. Structured output: the grammar_mask stage in the "Grammar mask" panel.
    constrained = os.path.join(work, "json")
    run([journey, "trace", "--model", "data/stories260K", "Once upon a time", "--out", constrained, "--max-tokens", "40",
         "--temperature", "0", "--json-schema", "chapters/ch15_structured_output/person.json"])
    grammar_report = os.path.join(work, "json.html")
    run([tracer, "report", constrained, "--out", grammar_report])
    open_report(browser, grammar_report)
    browser.evaluate("window.journeyReport.setStep(1)")
    g = browser.evaluate("""({hidden: document.getElementById('grammar-panel').hidden, steps: window.journeyReport.drawn.grammarSteps,
                              total: window.journeyReport.steps, note: document.getElementById('grammar-note').innerText,
                              lists: document.getElementById('grammar').innerText,
                              struck: document.querySelectorAll('#grammar .row.cut').length})""")
    print("grammar panel, step 1:", {k: g[k] for k in ("hidden", "steps", "total", "struck")})
    expect(not g["hidden"] and g["steps"] == g["total"], f"the grammar panel is not drawn for every step: {g}")
    expect("ids allowed" in g["note"] and "what the model wanted" in g["lists"], f"the grammar panel reads {g}")
    expect(g["struck"] >= 1, "no forbidden token is struck out at step 1 (stories260K wants prose, the grammar JSON)")
    browser.evaluate("document.getElementById('grammar-panel').scrollIntoView()")
    browser.screenshot(os.path.join(work, "report-grammar.png"))

    # 10. Tensor parallel: rank 0's report draws every rank's partial share per layer, and follows the step.
    run_mpi = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parallel", "run_mpi.sh")
    if shutil.which("mpirun") is None:
        print("tensor-parallel panel: not checked (mpirun not found)")
    else:
        split = os.path.join(work, "tp2")
        shutil.rmtree(split, ignore_errors=True)
        run([run_mpi, "2", journey, "trace", "--model", "data/stories260K", "Once upon a time", "--out", split,
             "--max-tokens", "3", "--temperature", "0", "--threads", "1", "--tensor-parallel", "2"])
        split_report = os.path.join(work, "tp2.html")
        run([tracer, "report", split, "--out", split_report])
        open_report(browser, split_report)
        layers = json.load(open("data/stories260K/config.json"))["num_hidden_layers"]
        panel = "({rows: window.journeyReport.drawn.partialRows, hidden: document.getElementById('tp-partials-box').hidden, " \
                "text: document.getElementById('tp-partials').innerText, step: window.journeyReport.step})"
        first = browser.evaluate(panel)
        browser.evaluate("window.journeyReport.setStep(1)")
        second = browser.evaluate(panel)
        print("tensor-parallel panel:", {k: first[k] for k in ("rows", "hidden", "step")}, "then step", second["step"])
        expect(not first["hidden"] and first["rows"] == 2 * layers + 1,
               f"the partial panel shows {first['rows']} rows at step 0, expected {2 * layers + 1} (2 per layer + logits)")
        expect("rank 1 share" in first["text"] and "attn_out = sum of attn_out_partial" in first["text"] and
               "logits = gather of logits_partial" in first["text"], f"the partial panel reads {first['text'][:300]!r}")
        expect(second["step"] == 1 and "Step 1" in second["text"] and second["text"] != first["text"],
               "the partial panel did not follow the step")
        errors = [e for e in browser.events if e.get("method") in ("Runtime.exceptionThrown",) or
                  (e.get("method") == "Runtime.consoleAPICalled" and e["params"].get("type") == "error")]
        expect(not errors, f"script errors: {errors[:2]}")
        browser.evaluate("document.getElementById('tp-partials-box').scrollIntoView()")
        browser.screenshot(os.path.join(work, "report-tensor-parallel.png"))
finally:
    browser.close()

size = os.path.getsize(report)
print(f"report size: {size} bytes")
if failures:
    print(f"{len(failures)} problem(s)")
    sys.exit(1)
print("the report works in Chromium: token click, step scrubber, layer selector, comparison, grammar mask, "
      "tensor-parallel partials")
