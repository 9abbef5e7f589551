#!/usr/bin/env python3
"""Writes tests/data/quantized/awq-tiny/: a tiny Hugging Face llama checkpoint in AutoAWQ's GEMM format,
and the weights it holds, dequantized by a NumPy port of AutoAWQ's own unpacking code.

The two pieces of AutoAWQ (casper-hansen/AutoAWQ, MIT) that define the format are re-implemented below,
line for line from its source (AutoAWQ's own package writes and reads the other fixture, autoawq-tiny:
make_autoawq_fixture.py; this port stays because it needs numpy only and also reads journey's own
checkpoints):
  - packing, from awq/modules/linear/gemm.py (WQLinear_GEMM.from_linear): the int4 weights of input
    feature i and output features 8c..8c+7 go into the int32 qweight[i, c], output feature
    8c + order_map[s] in bits 4s..4s+3, order_map = [0, 2, 4, 6, 1, 3, 5, 7]; zeros likewise into
    qzeros[group, c]; scales are f16 [in / group_size, out];
  - unpacking, from awq/utils/packing_utils.py (unpack_awq, reverse_awq_order, dequantize_gemm):
    shift every int32 by 0, 4, ..., 28, undo the order with AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7],
    mask to 4 bits, and W^T = (iweight - izeros) * scales, group rows repeated group_size times.
The integer weights, zeros and scales come from AutoAWQ's pseudo_quantize_tensor (asymmetric, zero point)
on random weights. The script checks unpack(pack(ints)) == ints before writing (the round trip).

Written (numpy only, safetensors by hand):
  awq-tiny/config.json            llama, hidden 128, FFN 256, 2 layers, 4 heads, 2 KV heads, vocab 512,
                                  quantization_config {quant_method awq, bits 4, group_size 128, zero_point, version gemm}
  awq-tiny/model.safetensors      qweight / qzeros / scales for every projection; embeddings, norms, lm_head in F16
  awq-tiny/tokenizer.model, tokenizer_config.json   copied from data/stories260K (vocab 512)
  awq-tiny-expected/<tensor>.npy  AutoAWQ's dequantization (in f32) of layer 0's q_proj and layer 1's
                                  down_proj, [out, in] like nn.Linear.weight

Run from the repository root:  /usr/bin/python3 tools/quant/make_awq_fixture.py

The same port also reads checkpoints journey writes (`journey quantize --type awq`), as the independent
check of journey's packing (tests/quant/test_awq_search.cpp):
    /usr/bin/python3 tools/quant/make_awq_fixture.py --read AWQ_DIR --out EXPECTED_DIR
checks config.json's quantization_config and the three tensors' dtypes and shapes of every layer, and
writes every layer's weight as AutoAWQ's dequantize_gemm gives it, EXPECTED_DIR/<module>.weight.npy [out, in].
"""
import argparse
import json
import os
import shutil
import struct

import numpy as np

OUT = "tests/data/quantized/awq-tiny"
OUT_EXPECTED = "tests/data/quantized/awq-tiny-expected"
CONFIG = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=128, intermediate_size=256,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
              max_position_embeddings=256, hidden_act="silu", rms_norm_eps=1e-5, rope_theta=10000.0,
              tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, torch_dtype="float16",
              quantization_config=dict(quant_method="awq", bits=4, group_size=128, zero_point=True, version="gemm",
                                       modules_to_not_convert=None))
BITS, GROUP = 4, 128
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]
EXPECTED = ["model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"]


def pseudo_quantize(w):
    """awq/quantize/quantizer.py pseudo_quantize_tensor, zero_point=True: per output row and group of inputs."""
    out_features, in_features = w.shape
    g = w.reshape(-1, GROUP)
    max_val, min_val = g.max(axis=1, keepdims=True), g.min(axis=1, keepdims=True)
    max_int, min_int = 2 ** BITS - 1, 0
    scales = np.maximum(max_val - min_val, 1e-5) / max_int
    zeros = np.clip(-np.round(min_val / scales), min_int, max_int)
    ints = np.clip(np.round(g / scales) + zeros, min_int, max_int)
    scales16 = scales.astype(np.float16)
    # [out, in] ints, [out, in/G] zeros and scales
    return (ints.reshape(out_features, in_features).astype(np.int32),
            zeros.reshape(out_features, -1).astype(np.int32), scales16.reshape(out_features, -1))


def pack_columns(intweight):
    """WQLinear_GEMM.from_linear's packing loop: intweight [rows, out] -> int32 [rows, out / 8]."""
    rows, cols = intweight.shape
    packed = np.zeros((rows, cols // 8), dtype=np.uint32)
    for col in range(cols // 8):
        for i in range(8):
            packed[:, col] |= intweight[:, col * 8 + AWQ_ORDER[i]].astype(np.uint32) << np.uint32(i * BITS)
    return packed.view(np.int32)


def unpack_awq(qweight, qzeros):
    """packing_utils.unpack_awq + reverse_awq_order + the 4-bit masks."""
    shifts = np.arange(0, 32, BITS, dtype=np.uint32)
    iweights = (qweight.view(np.uint32)[:, :, None] >> shifts[None, None, :]).reshape(qweight.shape[0], -1)
    izeros = (qzeros.view(np.uint32)[:, :, None] >> shifts[None, None, :]).reshape(qzeros.shape[0], -1)
    order = np.arange(izeros.shape[-1]).reshape(-1, 32 // BITS)[:, AWQ_REVERSE_ORDER].reshape(-1)
    return (iweights[:, order] & (2 ** BITS - 1)).astype(np.int32), (izeros[:, order] & (2 ** BITS - 1)).astype(np.int32)


def dequantize_gemm(qweight, qzeros, scales):
    """packing_utils.dequantize_gemm, in f32 (AutoAWQ's torch version multiplies in f16): W^T [in, out]."""
    iweight, izeros = unpack_awq(qweight, qzeros)
    return (iweight - np.repeat(izeros, GROUP, axis=0)).astype(np.float32) * np.repeat(scales.astype(np.float32), GROUP, axis=0)


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    dtypes = {np.dtype(np.float16): "F16", np.dtype(np.int32): "I32", np.dtype(np.float32): "F32"}
    for name, array in tensors:
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtypes[array.dtype], "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    header["__metadata__"] = {"format": "pt", "quant_method": "awq"}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    """{name: numpy array} from a .safetensors file (I32, F16, BF16 and F32 tensors)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    dtypes = {"I32": np.int32, "F16": np.float16, "F32": np.float32, "BF16": np.uint16}
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=dtypes[entry["dtype"]]).reshape(entry["shape"])
        out[name] = array
    return out


def read_checkpoint(directory, out_dir):
    with open(os.path.join(directory, "config.json")) as f:
        q = json.load(f)["quantization_config"]
    assert q["quant_method"] == "awq" and q["bits"] == BITS and q["zero_point"] and q["version"] == "gemm", q
    group = q["group_size"]
    tensors = read_safetensors(os.path.join(directory, "model.safetensors"))
    os.makedirs(out_dir, exist_ok=True)
    layers = sorted(name[:-len(".qweight")] for name in tensors if name.endswith(".qweight"))
    for layer in layers:
        qweight, qzeros, scales = (tensors[layer + part] for part in (".qweight", ".qzeros", ".scales"))
        in_features, out_features = qweight.shape[0], qweight.shape[1] * 8
        assert qweight.dtype == np.int32 and qzeros.dtype == np.int32 and scales.dtype == np.float16, layer
        assert qzeros.shape == (in_features // group, out_features // 8), (layer, qzeros.shape)
        assert scales.shape == (in_features // group, out_features), (layer, scales.shape)
        iweight, izeros = unpack_awq(qweight, qzeros)
        w_t = (iweight - np.repeat(izeros, group, axis=0)).astype(np.float32) * np.repeat(scales.astype(np.float32), group, axis=0)
        np.save(os.path.join(out_dir, layer + ".weight.npy"), np.ascontiguousarray(w_t.T))
    not_converted = q.get("modules_to_not_convert") or []
    for module in not_converted:
        assert module + ".weight" in tensors and module + ".qweight" not in tensors, module
    print(f"{directory}: {len(layers)} AWQ layers (group {group}) unpacked, {len(not_converted)} kept as weights")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--read", help="an AWQ checkpoint directory to unpack (instead of writing the fixture)")
    ap.add_argument("--out", help="with --read: where the dequantized weights go")
    args = ap.parse_args()
    if args.read:
        return read_checkpoint(args.read, args.out)
    rng = np.random.default_rng(11)
    c = CONFIG
    E, F, V, L = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    D = E // c["num_attention_heads"]
    KV = D * c["num_key_value_heads"]
    tensors, expected = [], {}
    tensors.append(("model.embed_tokens.weight", rng.normal(0, 0.02, (V, E)).astype(np.float16)))
    for layer in range(L):
        p = f"model.layers.{layer}."
        tensors.append((p + "input_layernorm.weight", (1 + rng.normal(0, 0.1, E)).astype(np.float16)))
        tensors.append((p + "post_attention_layernorm.weight", (1 + rng.normal(0, 0.1, E)).astype(np.float16)))
        for name, (out_f, in_f) in [("self_attn.q_proj", (E, E)), ("self_attn.k_proj", (KV, E)), ("self_attn.v_proj", (KV, E)),
                                    ("self_attn.o_proj", (E, E)), ("mlp.gate_proj", (F, E)), ("mlp.up_proj", (F, E)),
                                    ("mlp.down_proj", (E, F))]:
            w = rng.normal(0, 0.02, (out_f, in_f)).astype(np.float32)
            ints, zeros, scales = pseudo_quantize(w)
            # from_linear works on the transposed layout: [in, out] weights, [in / G, out] zeros and scales
            qweight, qzeros = pack_columns(ints.T.copy()), pack_columns(zeros.T.copy())
            scales_t = scales.T.copy()
            back_w, back_z = unpack_awq(qweight, qzeros)
            assert (back_w == ints.T).all() and (back_z == zeros.T).all(), "round trip failed"
            tensors += [(p + name + ".qweight", qweight), (p + name + ".qzeros", qzeros), (p + name + ".scales", scales_t)]
            if p + name in EXPECTED:
                expected[p + name] = dequantize_gemm(qweight, qzeros, scales_t).T.copy()  # [out, in]
    tensors.append(("model.norm.weight", (1 + rng.normal(0, 0.1, E)).astype(np.float16)))
    tensors.append(("lm_head.weight", rng.normal(0, 0.02, (V, E)).astype(np.float16)))

    os.makedirs(OUT, exist_ok=True)
    os.makedirs(OUT_EXPECTED, exist_ok=True)
    write_safetensors(os.path.join(OUT, "model.safetensors"), tensors)
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    for name in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copyfile(os.path.join("data/stories260K", name), os.path.join(OUT, name))
    for name, values in expected.items():
        np.save(os.path.join(OUT_EXPECTED, name + ".weight.npy"), values.astype(np.float32))


if __name__ == "__main__":
    main()
