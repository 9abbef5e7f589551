#!/usr/bin/python3
"""A trace dump must be readable by NumPy as is: np.load on every file listed in manifest.json,
with the listed shape and dtype, and the numbers must mean what the manifest says (softmax rows
of attn_weights sum to 1 over the unmasked positions; token_ids are the prompt's ids).

usage: check_dump_numpy.py JOURNEY_BINARY WORK_DIR      (exit 77 = skipped: numpy missing)
"""
import json
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not installed for", sys.executable, "(apt install python3-numpy)")
    sys.exit(77)

journey, work = sys.argv[1], sys.argv[2]
out = os.path.join(work, "dump")
subprocess.run([journey, "trace", "--model", "data/stories260K", "Once upon a time", "--out", out,
                "--max-tokens", "3", "--temperature", "0"], check=True, stdout=subprocess.DEVNULL)

with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
    manifest = json.load(f)
assert manifest["format"] == "journey-trace" and manifest["version"] == 1, manifest["format"]
failures = []
for t in manifest["tensors"]:
    a = np.load(os.path.join(out, t["file"]))
    want = np.float32 if t["dtype"] == "f32" else np.int32
    if a.dtype != want or list(a.shape) != t["shape"]:
        failures.append(f'{t["file"]}: numpy reads {a.dtype} {list(a.shape)}, manifest says {t["dtype"]} {t["shape"]}')
    if t["stage"] == "attn_weights":
        sums = a.sum(axis=-1)
        if not np.allclose(sums, 1.0, atol=1e-5):
            failures.append(f'{t["file"]}: softmax rows sum to {sums.min()}..{sums.max()}')
    if t["stage"] == "attn_scores":
        # Causal mask: in the prefill, query t sees positions <= t only.
        if t["step"] == 0 and not np.all(np.isneginf(a[:, 0, 1:])):
            failures.append(f'{t["file"]}: position 0 attends to later positions')
ids = np.load(os.path.join(out, "s000.token_ids.npy"))
if ids.tolist() != [tok["id"] for tok in manifest["tokens"]]:
    failures.append(f"s000.token_ids.npy {ids.tolist()} differs from the manifest's tokens")
print(f'{len(manifest["tensors"])} tensors read by numpy {np.__version__}')
if failures:
    print("\n".join(failures))
    sys.exit(1)
