"""The load test (scripts/bench-serve.js, Node's built-ins only) at a small size, so that it keeps working.

Starts a real `journey serve` on loopback, runs both phases of bench-serve.js with a few short
requests, and checks the report it prints: every request got all its tokens (the script itself
fails otherwise), every KV block is free afterwards, and the figures are there. Skips (exit 77)
without Node. Run by ctest as server_bench_serve_smoke.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from journey_server import JourneyServer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--journey", required=True)
    parser.add_argument("--model", required=True)
    args = parser.parse_args()
    node = shutil.which("node")
    if node is None:
        print("SKIP: node is not installed (scripts/install-deps.sh installs Debian's nodejs)")
        return 77
    with JourneyServer(args.journey, args.model, "m") as server:
        command = [node, os.path.join(REPO, "scripts", "bench-serve.js"), "--url", server.url, "--key", server.key,
                   "--model", "m", "--single-requests", "2", "--requests", "8", "--concurrency", "4",
                   "--min-out", "4", "--max-out", "12"]
        run = subprocess.run(command, capture_output=True, text=True, timeout=240)
        print(run.stdout, run.stderr, sep="\n")
        if run.returncode != 0:
            print(f"FAIL: bench-serve.js exited with {run.returncode}")
            return 1
        report = json.loads(run.stdout)
        problems = []
        # The same prompts again (the same default --seed): the prefix cache serves their whole
        # blocks, and the report counts them and says so, since the rates then include those hits.
        again = subprocess.run(command, capture_output=True, text=True, timeout=240)
        print(again.stdout, again.stderr, sep="\n")
        if again.returncode != 0:
            problems.append(f"bench-serve.js exited with {again.returncode} the second time")
        else:
            cached = json.loads(again.stdout)["batched"]
            first = report["batched"]["prompt_tokens_from_prefix_cache"]
            if not cached["prompt_tokens_from_prefix_cache"] > first:
                problems.append(f"the second run's prompts took {cached['prompt_tokens_from_prefix_cache']} tokens "
                                f"from the prefix cache, the first run's {first}: expected more")
            if not 0 < cached["prompt_tokens_from_prefix_cache"] <= cached["prompt_tokens_looked_up"]:
                problems.append(f"prefix cache: {cached['prompt_tokens_from_prefix_cache']} of "
                                f"{cached['prompt_tokens_looked_up']} prompt tokens")
            if "came from the prefix cache" not in again.stderr:
                problems.append("the second run did not say that its prompts came from the prefix cache")
        for phase, count in (("single", 2), ("batched", 8)):
            p = report[phase]
            if p["requests"] != count:
                problems.append(f"{phase}: {p['requests']} requests, expected {count}")
            if p["kv_blocks_used_after"] != 0:
                problems.append(f"{phase}: {p['kv_blocks_used_after']} KV blocks still used afterwards")
            if not p["output_tokens_per_s"] > 0:
                problems.append(f"{phase}: output_tokens_per_s {p['output_tokens_per_s']}")
        if report["single"]["output_tokens"] != 2 * 12:
            problems.append(f"single: {report['single']['output_tokens']} output tokens, expected 24 (2 x --max-out)")
        if not server.alive():
            problems.append("the server died")
    for p in problems:
        print("FAIL:", p)
    print("bench-serve.js smoke: " + ("1 passed, 0 failed" if not problems else "0 passed, 1 failed"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
