#!/usr/bin/python3
"""Write a Hugging Face-format model directory with random weights, for tests and benchmarks.

Real checkpoints are large and not shipped; the engine's speed and correctness at a given shape
depend only on the shape, so this script makes models of the shapes that matter (tiny ones for
golden tests, real-size ones for `journey bench`) with a fixed seed, using numpy only.

The safetensors file is written by hand (8-byte little-endian header length, JSON header, raw data)
one tensor at a time, so a 4.4 GB model never needs twice its size in memory.

    /usr/bin/python3 tools/make_random_model.py --preset tiny-llama --out /tmp/tiny-llama
    /usr/bin/python3 tools/make_random_model.py --preset tinyllama-1.1b --dtype f32 --out build-ref/models/tinyllama-1.1b

Weights ~ N(0, 0.02); RMSNorm weights ~ 1 + N(0, 0.1) so that norms matter but activations stay sane.
Preset names are stable: the golden generator (tools/trace/) depends on them.
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

# name -> config.json fields (Hugging Face spelling)
PRESETS = {
    "tiny-llama": dict(model_type="llama", hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=512, max_position_embeddings=256,
                       rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False),
    "tiny-qwen2": dict(model_type="qwen2", hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, vocab_size=512, max_position_embeddings=256,
                       rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
    # tiny-qwen2 with Qwen2.5's real vocabulary (151,936 rows, pair it with --tokenizer-from a Qwen2.5
    # tokenizer): structured-output tests draw from the full byte-level BPE vocabulary (40 MB in f32).
    "tiny-qwen2-151k": dict(model_type="qwen2", hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, vocab_size=151936, max_position_embeddings=1024,
                            rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
    # head_dim 32 != hidden_size / heads (16): Qwen3 sets it explicitly.
    "tiny-qwen3": dict(model_type="qwen3", hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=512,
                       max_position_embeddings=256, rope_theta=1000000.0, rms_norm_eps=1e-6,
                       tie_word_embeddings=True),
    # Splits on quantized block boundaries at --tensor-parallel 2 (o_proj and down_proj inputs of
    # 256 and 512 per rank: whole Q8_0 and Q4_K blocks) and 4 (128, 256: whole Q8_0 blocks): tests/parallel.
    "tp-blocks": dict(model_type="llama", hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=4, vocab_size=512, max_position_embeddings=256,
                      rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False),
    "tinyllama-1.1b": dict(model_type="llama", hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                           num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                           max_position_embeddings=2048, rope_theta=10000.0, rms_norm_eps=1e-5,
                           tie_word_embeddings=False),
    "qwen2.5-0.5b": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
                         tie_word_embeddings=True),
    # SmolLM2-135M-Instruct's shape (its real weights ship as a 98 MB GGUF: models/, scripts/install-deps.sh)
    "smollm2-135m": dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                         max_position_embeddings=8192, rope_theta=100000.0, rms_norm_eps=1e-5,
                         tie_word_embeddings=True),
    "llama-7b": dict(model_type="llama", hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                     num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                     max_position_embeddings=4096, rope_theta=10000.0, rms_norm_eps=1e-5,
                     tie_word_embeddings=False),
}

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
TORCH_DTYPE = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
ST_DTYPE = {"f32": "F32", "f16": "F16", "bf16": "BF16"}
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
                   "chat_template.jinja"]


def tensor_list(cfg):
    """[(name, shape, kind)] in Hugging Face naming; kind is 'weight', 'bias' or 'norm'."""
    E, F = cfg["hidden_size"], cfg["intermediate_size"]
    H, KVH, V = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]
    D = cfg.get("head_dim", E // H)
    biases = cfg["model_type"] == "qwen2"
    qk_norm = cfg["model_type"] == "qwen3"
    out = [("model.embed_tokens.weight", [V, E], "weight")]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out.append((p + "input_layernorm.weight", [E], "norm"))
        out.append((p + "self_attn.q_proj.weight", [H * D, E], "weight"))
        out.append((p + "self_attn.k_proj.weight", [KVH * D, E], "weight"))
        out.append((p + "self_attn.v_proj.weight", [KVH * D, E], "weight"))
        if biases:
            out.append((p + "self_attn.q_proj.bias", [H * D], "bias"))
            out.append((p + "self_attn.k_proj.bias", [KVH * D], "bias"))
            out.append((p + "self_attn.v_proj.bias", [KVH * D], "bias"))
        if qk_norm:
            out.append((p + "self_attn.q_norm.weight", [D], "norm"))
            out.append((p + "self_attn.k_norm.weight", [D], "norm"))
        out.append((p + "self_attn.o_proj.weight", [E, H * D], "weight"))
        out.append((p + "post_attention_layernorm.weight", [E], "norm"))
        out.append((p + "mlp.gate_proj.weight", [F, E], "weight"))
        out.append((p + "mlp.up_proj.weight", [F, E], "weight"))
        out.append((p + "mlp.down_proj.weight", [E, F], "weight"))
    out.append(("model.norm.weight", [E], "norm"))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", [V, E], "weight"))
    return out


def to_storage(values_f32, dtype):
    """f32 array -> bytes of the requested on-disk type (bf16 rounds to nearest even)."""
    if dtype == "f32":
        return values_f32.astype("<f4").tobytes()
    if dtype == "f16":
        return values_f32.astype("<f2").tobytes()
    bits = values_f32.astype("<f4").view("<u4").astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--out", required=True, help="model directory to create")
    ap.add_argument("--dtype", default="f32", choices=sorted(ST_DTYPE))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, help="override num_hidden_layers (smaller benchmark models)")
    ap.add_argument("--tokenizer-from", help="copy tokenizer files from this directory")
    args = ap.parse_args()

    cfg = dict(PRESETS[args.preset])
    if args.layers is not None:
        cfg["num_hidden_layers"] = args.layers
    cfg["architectures"] = [ARCHITECTURES[cfg["model_type"]]]
    cfg["hidden_act"] = "silu"
    cfg["torch_dtype"] = TORCH_DTYPE[args.dtype]
    cfg["bos_token_id"] = 1
    cfg["eos_token_id"] = 2
    cfg["attention_bias"] = cfg["model_type"] == "qwen2"
    if "head_dim" not in cfg and cfg["model_type"] != "qwen2":
        cfg["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, f, indent=2)
        f.write("\n")

    # Header first: offsets follow from shapes alone.
    tensors = tensor_list(cfg)
    elem = {"f32": 4, "f16": 2, "bf16": 2}[args.dtype]
    header, offset = {}, 0
    for name, shape, _ in tensors:
        nbytes = int(np.prod(shape)) * elem
        header[name] = {"dtype": ST_DTYPE[args.dtype], "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header["__metadata__"] = {"format": "pt", "generator": "journey tools/make_random_model.py",
                              "preset": args.preset, "seed": str(args.seed)}
    header_bytes = json.dumps(header, separators=(",", ":")).encode()
    header_bytes += b" " * ((8 - len(header_bytes) % 8) % 8)  # data starts 8-byte aligned

    rng = np.random.default_rng(args.seed)
    path = os.path.join(args.out, "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for name, shape, kind in tensors:
            n = int(np.prod(shape))
            values = rng.standard_normal(n, dtype=np.float32)
            if kind == "norm":
                values = 1.0 + 0.1 * values
            else:
                values *= 0.02
            f.write(to_storage(values, args.dtype))
            del values

    if args.tokenizer_from:
        for name in TOKENIZER_FILES:
            src = os.path.join(args.tokenizer_from, name)
            if os.path.exists(src):
                shutil.copy(src, os.path.join(args.out, name))
    print(f"wrote {args.out}: {args.preset}, {args.dtype}, {offset / 1e9:.3f} GB of weights", file=sys.stderr)


if __name__ == "__main__":
    main()
