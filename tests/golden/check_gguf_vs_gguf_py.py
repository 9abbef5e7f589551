"""journey's GGUF reader against llama.cpp's own (the `gguf` package, gguf-py), on whole real files.

For each file, tests/golden/gguf_dump (journey's GgufFile + quant::dequantize) writes what journey
read; gguf.GGUFReader reads the same file. They must agree on: the version, every metadata key in
file order with its type number and value (arrays item by item: the 49152 tokens and 48900 merges
of SmolLM2 included), every tensor's name, shape (journey outermost first = gguf-py's reversed),
type, data offset and byte size, and every tensor's values: journey's dequantization against
gguf.quants.dequantize, exactly (both compute d * q (+ m) in f32; 0 differences allowed).

    tools/python/venv-python tests/golden/check_gguf_vs_gguf_py.py --gguf-dump build/tests/golden/gguf_dump \
        --work /tmp/gguf-check FILE.gguf [FILE.gguf ...]
Files that do not exist are reported and skipped (models/ is fetched, not shipped); if none exists
the test skips (exit 77). Run by ctest as golden.gguf_vs_gguf_py.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.quants import dequantize


def field_value(field):
    """gguf-py's field as the same JSON-like value gguf_dump writes."""
    kind = field.types[0]
    if kind == GGUFValueType.ARRAY:
        elem = field.types[-1] if len(field.types) > 1 else None
        items = [field.parts[i] for i in field.data]
        if elem == GGUFValueType.STRING:
            values = [bytes(p).decode("utf-8", "surrogateescape") for p in items]
        else:
            values = [p.tolist()[0] for p in items]
        return {"elem_type": int(elem) if elem is not None else None, "items": values}
    part = field.parts[field.data[0]]
    if kind == GGUFValueType.STRING:
        return bytes(part).decode("utf-8", "surrogateescape")
    value = part.tolist()[0]
    return bool(value) if kind == GGUFValueType.BOOL else value


def check_file(path, gguf_dump, work):
    problems = []
    out = os.path.join(work, os.path.basename(path) + ".journey")
    shutil.rmtree(out, ignore_errors=True)
    run = subprocess.run([gguf_dump, path, out], capture_output=True, text=True)
    if run.returncode != 0:
        return [f"journey cannot read it: {run.stderr.strip()}"], 0
    with open(os.path.join(out, "metadata.json"), encoding="utf-8") as f:
        ours = json.load(f)
    with open(os.path.join(out, "tensors.json"), encoding="utf-8") as f:
        our_tensors = json.load(f)
    reader = GGUFReader(path)
    version = int(reader.fields["GGUF.version"].parts[-1][0])
    if ours["version"] != version:
        problems.append(f"version: journey {ours['version']}, gguf-py {version}")
    theirs = [(k, f) for k, f in reader.fields.items() if not k.startswith("GGUF.")]
    if [k["key"] for k in ours["keys"]] != [k for k, _ in theirs]:
        problems.append(f"keys differ: journey {[k['key'] for k in ours['keys']][:8]}..., gguf-py {[k for k, _ in theirs][:8]}...")
    for entry, (key, field) in zip(ours["keys"], theirs):
        if entry["type"] != int(field.types[0]):
            problems.append(f"{key}: type {entry['type']} vs gguf-py {int(field.types[0])}")
            continue
        if entry["value"] != field_value(field):
            problems.append(f"{key}: value differs: journey {str(entry['value'])[:120]}, gguf-py {str(field_value(field))[:120]}")
    if ours["data_start"] != reader.data_offset:
        problems.append(f"data section starts at {ours['data_start']} (journey) vs {reader.data_offset} (gguf-py)")
    if len(our_tensors) != len(reader.tensors):
        problems.append(f"{len(our_tensors)} tensors (journey) vs {len(reader.tensors)} (gguf-py)")
    values = 0
    for mine, t in zip(our_tensors, reader.tensors):
        where = f"tensor {t.name}"
        shape = [int(d) for d in reversed(t.shape.tolist())]
        if mine["name"] != t.name or mine["shape"] != shape or mine["dtype"] != t.tensor_type.name.lower():
            problems.append(f"{where}: journey {mine['name']} {mine['dtype']}{mine['shape']}, "
                            f"gguf-py {t.name} {t.tensor_type.name.lower()}{shape}")
            continue
        if mine["offset"] != t.data_offset - reader.data_offset or mine["nbytes"] != t.n_bytes:
            problems.append(f"{where}: offset/bytes {mine['offset']}/{mine['nbytes']} vs "
                            f"{t.data_offset - reader.data_offset}/{t.n_bytes}")
        a = np.load(os.path.join(out, mine["file"]))
        b = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        values += b.size
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        if not same.all():
            i = int(np.argmin(same.ravel()))
            problems.append(f"{where} ({t.tensor_type.name}): {int((~same).sum())} of {b.size} values differ, first at "
                            f"{i}: journey {a.ravel()[i]!r}, gguf-py {b.ravel()[i]!r}")
    shutil.rmtree(out, ignore_errors=True)
    return problems, values


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf-dump", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    present = [f for f in args.files if os.path.exists(f)]
    for f in args.files:
        if f not in present:
            print(f"skip {f}: absent")
    if not present:
        print("SKIP: none of the GGUF files exists")
        return 77
    failed = 0
    for path in present:
        problems, values = check_file(path, args.gguf_dump, args.work)
        if problems:
            failed += 1
            print(f"FAIL {path}: {len(problems)} problems")
            for p in problems[:15]:
                print("    ", p)
        else:
            print(f"ok   {path}: metadata, tensor index and {values} dequantized values identical to gguf-py")
    print(f"{len(present) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
