#!/usr/bin/python3
"""tools/trace/journey_trace read as an activation cache, on a real `journey trace` of stories260K:

- cache["L3.attn_weights", step] is the listed file's array, with the manifest's axes;
- names, steps, stack() and the errors for unknown names / missing steps say what exists;
- the logit-lens stages agree with an independent NumPy logit lens computed from the dumped
  layer_out and the weights read straight from data/stories260K/model.safetensors (json + numpy),
  and at the last layer with the model's own logits (softmax of the dumped logits).

usage: check_python_loader.py JOURNEY WORK_DIR       (exit 77 = skipped: numpy missing)
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

sys.path.insert(0, os.path.join(os.getcwd(), "tools", "trace"))
import journey_trace  # noqa: E402

journey, work = sys.argv[1], sys.argv[2]
out = os.path.join(work, "dump")
subprocess.run([journey, "trace", "--model", "data/stories260K", "Once upon a time", "--out", out,
                "--max-tokens", "4", "--temperature", "0"], check=True, stdout=subprocess.DEVNULL)
failures = []


def expect(condition, message):
    if not condition:
        failures.append(message)


cache = journey_trace.load(out)
print(repr(cache))
expect(cache.num_layers == 5 and cache.steps == [0, 1, 2, 3], f"layers {cache.num_layers}, steps {cache.steps}")

# 1. A tensor is its file, with the manifest's axes; names and files spell layers the same way.
with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
    manifest = json.load(f)
for t in manifest["tensors"]:
    expect(t["file"] == f's{t["step"]:03d}.{t["name"]}.npy', f'{t["name"]} step {t["step"]} is stored as {t["file"]}')
w = cache["L3.attn_weights", 0]
expect(np.array_equal(w, np.load(os.path.join(out, "s000.L3.attn_weights.npy"))), "L3.attn_weights differs from its file")
expect(cache.axes("L3.attn_weights") == ("H", "T", "P") and w.shape == (8, 5, 5), f"attn_weights {w.shape}")
for name, step in cache.keys():
    a = cache[name, step]
    expect(len(cache.axes(name)) == a.ndim, f"{name}: {a.ndim} dimensions but axes {cache.axes(name)}")
expect("made in src/cpu/cpu_backend.cpp forward(): rms_norm" in cache.describe("L0.attn_norm"), cache.describe("L0.attn_norm"))
expect(cache.stack("attn_weights", 2).shape == (5, 8, 1, 7), f'stack {cache.stack("attn_weights", 2).shape}')
expect(cache.pieces()[:2] == ["<s>", "▁Once"] and len(cache.pieces()) == 5 + 4, f"pieces {cache.pieces()}")

# 2. Errors that say what exists.
for key, needle in [(("L3.atn_weights", 0), "did you mean 'L3.attn_weights'"),
                    ("logits", "recorded in 4 steps (0-3)"),
                    (("logits", 9), "not recorded in step 9 (it is in steps 0-3)")]:
    try:
        cache[key]
        failures.append(f"cache[{key!r}] did not fail")
    except KeyError as e:
        expect(needle in str(e), f"cache[{key!r}] fails with {e}, expected to mention {needle!r}")


# 3. The logit lens against an independent NumPy one, from the weights file itself.
def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", t["dtype"]
        begin, end = t["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(t["shape"])
    return out


weights = read_safetensors("data/stories260K/model.safetensors")
norm, head = weights["model.norm.weight"].astype(np.float64), weights["model.embed_tokens.weight"].astype(np.float64)
eps = 1e-5
for step in cache.steps:
    for layer in range(cache.num_layers):
        x = cache[f"L{layer}.layer_out", step].astype(np.float64)            # [T, E]
        normed = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * norm
        logits = normed @ head.T                                              # [T, V] (tied head)
        probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        ids, lens_probs = cache[f"L{layer}.logit_lens", step], cache[f"L{layer}.logit_lens_probs", step]
        expect(ids.shape == (x.shape[0], 5), f"L{layer}.logit_lens step {step}: shape {ids.shape}")
        want_probs = np.take_along_axis(probs, ids.astype(np.int64), axis=-1)
        expect(np.allclose(lens_probs, want_probs, atol=1e-5),
               f"L{layer} step {step}: lens probabilities {lens_probs[-1]} vs numpy {want_probs[-1]}")
        best = np.sort(probs, axis=-1)[:, ::-1][:, :5]
        expect(np.allclose(lens_probs, best, atol=1e-5), f"L{layer} step {step}: the lens is not the top 5 ({lens_probs[-1]} vs {best[-1]})")
    # After the last layer the lens is the model's own prediction.
    logits = cache["logits", step].astype(np.float64)
    model_probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    model_probs /= model_probs.sum(axis=-1, keepdims=True)
    last = cache[f"L{cache.num_layers - 1}.logit_lens", step]
    expect(np.array_equal(last[:, 0], model_probs.argmax(axis=-1)),
           f"step {step}: the last layer's lens top-1 {last[:, 0]} is not the logits' argmax {model_probs.argmax(axis=-1)}")
lens0 = cache.logit_lens(0)
print("logit lens, prefill, last position:")
for layer, top in enumerate(lens0):
    print(f"  L{layer}: " + "  ".join(f"{p!r} {q:.3f}" for p, q in top))

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("journey_trace reads the dump as a cache; the logit lens matches numpy")
