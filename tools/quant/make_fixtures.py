#!/usr/bin/env python3
"""Writes tests/data/quantized/ from the llama.cpp files in ../shared/data/models/quantized/.

What the tests need, kept small (see tests/data/quantized/PROVENANCE.md):
  - crops/kq-crops.gguf, crops/t105-crops.gguf: for blk.0.ffn_gate.weight, the first rows of
      source              the f32 weights (from kq-f32.gguf / t105-f32.gguf)
      <TYPE>.blocks       llama.cpp's quantized blocks of those rows, byte for byte (from kq-TYPE.gguf ...)
      <TYPE>.gguf_py      gguf-py's dequantization of those rows (the PROVENANCE .npy files, cropped)
    Quantization and dequantization both work row by row, so a crop loses nothing but size.
  - whole files copied as they are: t105-f32.gguf, t105-q4_1.gguf (llama.cpp's), kq-q2_k.gguf,
    kq-q3_k_m.gguf and kq-q4_k_m.gguf (llama.cpp's K files and mixes);
  - kq-tensor-types.txt: the type llama.cpp gave every tensor of every kq-* and t105-* file (to check
    journey's type rules without storing the files);
  - sha256.txt: the sha256 of every llama.cpp file, so tests can compare journey's own output with
    files they do not store;
  - kq-f32.logits.npy + kq-f32.logits.json: the logits journey's reference forward gives for PROMPT on
    kq-f32.gguf (7 MB, not stored), so the K-type files can be compared with the f32 model they came
    from. Made with `journey trace` (pass the journey binary as the second argument).

Run from the repository root:
  /usr/bin/python3 tools/quant/make_fixtures.py SHARED_QUANTIZED_DIR [build/src/cli/journey]
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_lite  # noqa: E402

SOURCE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../../../shared/data/models/quantized")
OUT = "tests/data/quantized"
TENSOR = "blk.0.ffn_gate.weight"
MODELS = {
    # model: (rows to keep, types)
    "kq": (32, ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k",
                "q3_k_m", "q4_k_m", "q5_k_m"]),
    "t105": (64, ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"]),
}
PROMPT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
WHOLE_FILES = ["t105-f32.gguf", "t105-q4_1.gguf", "kq-q2_k.gguf", "kq-q3_k_m.gguf", "kq-q4_k_m.gguf"]


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def main():
    os.makedirs(os.path.join(OUT, "crops"), exist_ok=True)
    for model, (rows, types) in MODELS.items():
        writer = gguf_lite.Writer()
        writer.add_string("journey.fixture", f"first {rows} rows of {TENSOR} of {model}-*.gguf (tools/quant/make_fixtures.py)")
        src = gguf_lite.Reader(os.path.join(SOURCE, f"{model}-f32.gguf"))
        raw, ggml_type, ne = src.raw(TENSOR, rows)
        assert ggml_type == 0
        writer.add_tensor("source", raw, 0, [ne[0], rows])
        for t in types:
            path = os.path.join(SOURCE, f"{model}-{t}.gguf")
            blocks, block_type, _ = gguf_lite.Reader(path).raw(TENSOR, rows)
            name = gguf_lite.GGML_TYPES[block_type][0]
            writer.add_string(f"journey.fixture.{t}", f"{os.path.basename(path)} sha256 {sha256(path)}; "
                                                      f"{TENSOR} is {name}")
            writer.add_tensor(f"{t}.blocks", blocks, block_type, [ne[0], rows])
            reference = np.load(os.path.join(SOURCE, f"{model}-{t}.{TENSOR}.npy"))
            assert reference.dtype == np.float32 and reference.shape[1] == ne[0]
            writer.add_tensor(f"{t}.gguf_py", reference[:rows].tobytes(), 0, [ne[0], rows])
        writer.write(os.path.join(OUT, "crops", f"{model}-crops.gguf"))

    for name in WHOLE_FILES:
        shutil.copyfile(os.path.join(SOURCE, name), os.path.join(OUT, name))

    with open(os.path.join(OUT, "tensor-types.txt"), "w") as out:
        out.write("# file tensor ggml_type ne0 ne1  (llama.cpp's choice for every tensor; tools/quant/make_fixtures.py)\n")
        for name in sorted(os.listdir(SOURCE)):
            if not name.endswith(".gguf") or name.endswith("-f32.gguf"):
                continue
            reader = gguf_lite.Reader(os.path.join(SOURCE, name))
            for tensor, info in reader.tensors.items():
                ne = info["ne"] + [1]
                out.write(f"{name} {tensor} {gguf_lite.GGML_TYPES[info['type']][0]} {ne[0]} {ne[1]}\n")

    with open(os.path.join(OUT, "sha256.txt"), "w") as out:
        out.write("# sha256 of llama.cpp's files in shared/data/models/quantized (tools/quant/make_fixtures.py)\n")
        for name in sorted(os.listdir(SOURCE)):
            if name.endswith(".gguf"):
                out.write(f"{name} {sha256(os.path.join(SOURCE, name))}\n")

    if len(sys.argv) > 2:
        with tempfile.TemporaryDirectory() as trace:
            subprocess.run([sys.argv[2], "trace", PROMPT, "--model", os.path.join(SOURCE, "kq-f32.gguf"), "--out", trace,
                            "--max-tokens", "1", "--temperature", "0", "--stages", "logits"], check=True,
                           stdout=subprocess.DEVNULL)
            manifest = json.load(open(os.path.join(trace, "manifest.json")))
            shutil.copyfile(os.path.join(trace, "s000.logits.npy"), os.path.join(OUT, "kq-f32.logits.npy"))
            json.dump({"prompt": PROMPT, "model": "kq-f32.gguf", "sha256": sha256(os.path.join(SOURCE, "kq-f32.gguf")),
                       "made_by": "journey trace PROMPT --model kq-f32.gguf --max-tokens 1 --temperature 0 --stages logits",
                       "manifest_tokens": manifest.get("tokens", manifest.get("prompt_tokens"))},
                      open(os.path.join(OUT, "kq-f32.logits.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
