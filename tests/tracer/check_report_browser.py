#!/usr/bin/python3
"""Open the HTML report in headless Chromium (no network, fresh profile) and check that its script
drew everything: the page writes "rendered: diagram nodes=N heatmaps=N inked=N ..." into #status
after drawing, which --dump-dom returns. Also takes a screenshot into WORK_DIR/report.png.

usage: check_report_browser.py JOURNEY JOURNEY_TRACE WORK_DIR    (exit 77 = skipped: no chromium)
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    print(f"SKIP: {CHROMIUM} is not installed (apt install chromium) - the report was not checked in a browser")
    sys.exit(77)

journey, tracer, work = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(work, exist_ok=True)
dump = os.path.join(work, "dump")
subprocess.run([journey, "trace", "--model", "data/stories260K", "Once upon a time", "--out", dump,
                "--max-tokens", "6", "--temperature", "0.8", "--seed", "1", "--kv-block-size", "4"],
               check=True, stdout=subprocess.DEVNULL)
report = os.path.join(work, "report.html")
subprocess.run([tracer, "report", dump, "--out", report], check=True)

profile = tempfile.mkdtemp(prefix="journey-chromium-")
flags = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}"]
url = "file://" + os.path.abspath(report)
try:
    dom = subprocess.run(flags + ["--dump-dom", url], check=True, capture_output=True, text=True, timeout=90).stdout
    shot = os.path.join(work, "report.png")
    if os.path.exists(shot):
        os.remove(shot)
    subprocess.run(flags + ["--window-size=1400,2400", f"--screenshot={shot}", url], check=True,
                   capture_output=True, timeout=90)
finally:
    shutil.rmtree(profile, ignore_errors=True)

m = re.search(r'<p id="status" data-state="(\w+)"[^>]*>([^<]*)</p>', dom)
if not m:
    print("the report's #status element is missing from the DOM")
    sys.exit(1)
state, status = m.group(1), m.group(2)
print("status:", state, status)
numbers = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", status))
problems = []
if state != "ready":
    problems.append(f"the page's script did not finish (state {state})")
# stories260K: 5 layers, 8 heads; the selected layer's big map + 8 small ones are drawn.
if numbers.get("heatmaps", 0) < 9:
    problems.append(f"expected at least 9 heatmaps drawn, got {numbers.get('heatmaps')}")
if numbers.get("inked", 0) != numbers.get("heatmaps", -1):
    problems.append("a heatmap canvas stayed blank")
if numbers.get("nodes", 0) < 20:
    problems.append(f"the diagram has {numbers.get('nodes')} nodes, expected the whole journey (>= 20)")
if numbers.get("distributions", 0) != 6:
    problems.append(f"expected 6 next-token distributions (one per step), got {numbers.get('distributions')}")
if numbers.get("kv_steps", 0) != 6:
    problems.append(f"expected the KV blocks of 6 steps, got {numbers.get('kv_steps')}")
with open(shot, "rb") as f:
    head = f.read(24)
if head[:8] != b"\x89PNG\r\n\x1a\n":
    problems.append(f"{shot} is not a PNG")
else:
    width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    print(f"screenshot {shot}: {width}x{height}")
if problems:
    print("\n".join(problems))
    sys.exit(1)
