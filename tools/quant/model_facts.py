#!/usr/bin/python3
"""What a model file holds, read without journey: for the size and bits-per-weight columns of the
quality table (tools/quant/quality_table.sh).

    /usr/bin/python3 tools/quant/model_facts.py MODEL     # a .gguf file or a Hugging Face directory (AWQ too)

prints one JSON object: file_bytes (the weight file: the .gguf, or model.safetensors), tensor_bytes (the
tensor data in it), weights (the parameters of the model, an AWQ layer counting in x out), bits_per_weight
= 8 * tensor_bytes / weights, and holds (how many tensors of each stored type).
"""
import json
import os
import struct
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_lite  # noqa: E402


def gguf_facts(path):
    g = gguf_lite.Reader(path)
    tensor_bytes, weights, holds = 0, 0, Counter()
    for t in g.tensors.values():
        name, block, block_bytes = gguf_lite.GGML_TYPES[t["type"]]
        n = 1
        for d in t["ne"]:
            n *= d
        weights += n
        tensor_bytes += n // block * block_bytes
        holds[name] += 1
    return os.path.getsize(path), tensor_bytes, weights, holds


def safetensors_facts(directory):
    path = os.path.join(directory, "model.safetensors")
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    config = json.load(open(os.path.join(directory, "config.json")))
    q = config.get("quantization_config") or {}
    tensor_bytes, weights, holds = 0, 0, Counter()
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        tensor_bytes += end - begin
        count = 1
        for d in entry["shape"]:
            count *= d
        if name.endswith(".qweight"):
            weights += count * 8  # [in, out / 8] int32 = in * out int4 weights
            holds[f"INT4 g{q.get('group_size')}"] += 1
        elif name.endswith(".qzeros") or name.endswith(".scales"):
            continue
        else:
            weights += count
            holds[entry["dtype"]] += 1
    return os.path.getsize(path), tensor_bytes, weights, holds


def main():
    model = sys.argv[1]
    file_bytes, tensor_bytes, weights, holds = (safetensors_facts(model) if os.path.isdir(model) else gguf_facts(model))
    print(json.dumps({"file_bytes": file_bytes, "tensor_bytes": tensor_bytes, "weights": weights,
                      "bits_per_weight": 8.0 * tensor_bytes / weights,
                      "holds": ", ".join(f"{k} x{v}" for k, v in sorted(holds.items(), key=lambda kv: -kv[1]))}))


if __name__ == "__main__":
    main()
