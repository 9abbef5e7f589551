#!/usr/bin/python3
"""The two independent references must agree: tools/trace/reference.py (hand-written PyTorch) and
tools/trace/hf_reference.py (transformers' own modeling code, through hooks).

For each tiny model, every tensor of tests/golden/<model>/ (reference.py) is compared with the
same tensor (name, step) of tests/golden/transformers/<model>/: same shape, the same -inf entries
(the causal mask), the same integers (token ids), the same greedy tokens, and finite values within

    max |a - b| <= 1e-6 * max(1, max |b|)

Why 1e-6: both are float64 computations stored as f32 (half an f32 ulp: 6e-8 relative), and
transformers computes RMSNorm, the rotary cos/sin and the attention softmax in float32 (~1e-7
relative; measured worst 2.4e-7), which the stages after them inherit. An engine computing in f32 is ~1e-5 off (the engine's tolerances in
src/trace/compare.cpp are 10-100x wider). Needs only NumPy: run by ctest as
golden.transformers_vs_reference with Debian's python3.

    /usr/bin/python3 tests/golden/check_hf_goldens.py [--golden-dir DIR]   # DIR: another hf_reference.py run

With --regenerate DIR (in the project's Python environment: tools/python/venv-python) it first
runs hf_reference.py for each model into DIR and compares those: the pinned transformers still
writes goldens that agree (ctest golden.transformers_live).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ["tiny-llama", "tiny-qwen2", "tiny-qwen3"]
PROMPT_IDS = "1,403,407,261,378"  # as tools/trace/regenerate_goldens.sh
TOLERANCE = 1e-6


def load(directory):
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    if manifest.get("format") != "journey-trace" or manifest.get("version") != 1:
        sys.exit(f"{directory}/manifest.json: not a version-1 journey-trace dump")
    return manifest, {(t["name"], t["step"]): t for t in manifest["tensors"]}


def compare(model, hf_dir):
    """Returns (failures, per-stage worst relative error, tensors compared)."""
    ref_dir = os.path.join(REPO, "tests", "golden", model)
    ref, ref_tensors = load(ref_dir)
    hf, hf_tensors = load(hf_dir)
    failures = []
    if hf["generated_by"]["tool"] != "tools/trace/hf_reference.py":
        failures.append(f"{hf_dir}: written by {hf['generated_by']['tool']}, not tools/trace/hf_reference.py")
    if ref["model"]["hash"] != hf["model"]["hash"]:
        failures.append(f"the two goldens were made from different models ({ref['model']['hash']} vs {hf['model']['hash']})")
    ref_greedy = [s["sampled"]["id"] for s in ref["steps"]]
    hf_greedy = [s["sampled"]["id"] for s in hf["steps"]]
    if ref_greedy != hf_greedy:
        failures.append(f"greedy tokens differ: reference.py {ref_greedy}, transformers {hf_greedy}")
    missing = sorted(set(ref_tensors) - set(hf_tensors))
    extra = sorted(set(hf_tensors) - set(ref_tensors))
    if missing:
        failures.append(f"transformers' golden lacks {len(missing)} tensors, first {missing[:3]}")
    if extra:
        failures.append(f"transformers' golden has {len(extra)} tensors reference.py's lacks, first {extra[:3]}")
    worst = {}
    compared = 0
    for key in sorted(set(ref_tensors) & set(hf_tensors), key=lambda k: (k[1], ref["tensors"].index(ref_tensors[k]))):
        name, step = key
        a = np.load(os.path.join(ref_dir, ref_tensors[key]["file"]))
        b = np.load(os.path.join(hf_dir, hf_tensors[key]["file"]))
        compared += 1
        where = f"{model} {name} step {step}"
        if a.shape != b.shape or a.dtype != b.dtype:
            failures.append(f"{where}: reference.py {a.dtype}{list(a.shape)}, transformers {b.dtype}{list(b.shape)}")
            continue
        if a.dtype.kind == "i":
            if not np.array_equal(a, b):
                failures.append(f"{where}: integers differ: {a.ravel()[:8]} vs {b.ravel()[:8]}")
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        inf_a, inf_b = np.isinf(a64), np.isinf(b64)
        if not np.array_equal(inf_a, inf_b) or not np.array_equal(a64[inf_a], b64[inf_b]):
            failures.append(f"{where}: the -inf entries (causal mask) differ: {int(inf_a.sum())} vs {int(inf_b.sum())}")
            continue
        if np.isnan(a64).any() or np.isnan(b64).any():
            failures.append(f"{where}: NaN")
            continue
        finite = ~inf_a
        diff = np.abs(a64[finite] - b64[finite])
        scale = max(1.0, float(np.abs(b64[finite]).max(initial=0.0)))
        rel = float(diff.max(initial=0.0)) / scale
        stage = ref_tensors[key]["stage"]
        worst[stage] = max(worst.get(stage, 0.0), rel)
        if rel > TOLERANCE:
            i = int(np.argmax(diff))
            failures.append(f"{where}: max |diff| {diff.max():.3e} (x{scale:.3g}) > {TOLERANCE:g}; at flat index {i}: "
                            f"reference.py {a64[finite][i]:.9g}, transformers {b64[finite][i]:.9g}")
    return failures, worst, compared


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--golden-dir", help="where the transformers goldens are (default tests/golden/transformers)")
    ap.add_argument("--regenerate", metavar="DIR", help="write fresh transformers goldens into DIR and compare those")
    args = ap.parse_args()
    base = args.golden_dir or os.path.join(REPO, "tests", "golden", "transformers")
    if args.regenerate:
        base = args.regenerate
        for model in MODELS:
            subprocess.run([sys.executable, os.path.join(REPO, "tools", "trace", "hf_reference.py"),
                            "--model", os.path.join(REPO, "tests", "golden", "models", model), "--tokens", PROMPT_IDS,
                            "--decode-steps", "3", "--out", os.path.join(base, model)], check=True)
    passed = failed = 0
    for model in MODELS:
        failures, worst, compared = compare(model, os.path.join(base, model))
        stages = ", ".join(f"{s} {e:.1e}" for s, e in sorted(worst.items(), key=lambda x: -x[1])[:4])
        if failures:
            failed += 1
            print(f"FAIL {model}: {len(failures)} problems over {compared} tensors")
            for f in failures[:20]:
                print("   ", f)
        else:
            passed += 1
            print(f"ok   {model}: {compared} tensors agree; worst relative error by stage: {stages}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
