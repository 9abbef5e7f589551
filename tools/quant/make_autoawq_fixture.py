#!/usr/bin/env python3
"""Writes tests/data/quantized/autoawq-tiny/ with AutoAWQ's OWN package (casper-hansen/AutoAWQ 0.2.9, MIT):
a tiny llama quantized by AutoAWQ's search (activation-aware scales and clipping on calibration
tokens) and saved by its save_quantized, plus the values AutoAWQ itself gives for that checkpoint —
the independent check of journey's loader that make_awq_fixture.py (a NumPy port) could only stand in for.

AutoAWQ's PyPI package is pure Python; without its CUDA kernels (autoawq-kernels) or triton it runs
its "naive" path on the CPU: WQLinear_GEMM.forward = x.half() @ packing_utils.dequantize_gemm(...).
Its module imports `datasets` (used only for calibration sets named by hub id; here the calibration
is a list of token ids), so both packages are installed beside the project's venv, pinned:

    bash tools/quant/make_autoawq_fixture.sh      # installs autoawq==0.2.9 + its import-time deps, runs this

Written:
  autoawq-tiny/config.json, model.safetensors      AutoAWQ's save_quantized: llama, hidden 128, FFN 256, 2 layers,
                                                   4 heads, 2 KV heads, vocab 512 (stories260K's tokenizer), f16,
                                                   quantization_config {awq, 4 bits, group 128, zero point, gemm}
  autoawq-tiny/tokenizer.model, tokenizer_config.json   copied from data/stories260K
  autoawq-tiny-expected/<module>.weight.npy        every AWQ layer as AutoAWQ's packing_utils.dequantize_gemm gives it
                                                   from the module's buffers (scales widened to f32 first, so the
                                                   values are exact), f32 [out, in] like nn.Linear.weight
  autoawq-tiny-expected/logits.npy                 AutoAWQ's quantized model (its WQLinear_GEMM modules, naive f16 path)
                                                   run on the token ids in tokens.json: logits [T, 512], computed in f16
  autoawq-tiny-expected/tokens.json                those token ids (the prompt of the logits check)

The base model's weights are random (torch.manual_seed), its norms 1 + N(0, 0.1); the calibration tokens
are journey's tokenization of data/texts/tinystories-original.txt when a journey binary is given
(--journey), else seeded random ids (the packing check does not depend on them).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch

OUT = "tests/data/quantized/autoawq-tiny"
OUT_EXPECTED = "tests/data/quantized/autoawq-tiny-expected"
GROUP, BITS = 128, 4
PROMPT_TOKENS = [1, 403, 407, 261, 378, 426, 13, 376, 349, 261, 269, 304, 289, 405, 266, 259]  # fixed ids < 512


def make_base(directory, seed):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=512, max_position_embeddings=256, rms_norm_eps=1e-5,
                         rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                         initializer_range=0.02)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
    model = model.to(torch.float16)
    model.save_pretrained(directory, safe_serialization=True)
    for name in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copyfile(os.path.join("data/stories260K", name), os.path.join(directory, name))


def calibration_tokens(journey, seed):
    if journey:
        text = open("data/texts/tinystories-original.txt", encoding="utf-8").read()
        out = subprocess.run([journey, "tokenize", "--model", "data/stories260K", "--ids-only", text[:20000]],
                             check=True, capture_output=True, text=True).stdout
        ids = [int(t) for t in out.split()]
        return [ids[i:i + 64] for i in range(0, len(ids) - 64, 64)][:32], "journey tokenize of data/texts/tinystories-original.txt"
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 512, 64).tolist() for _ in range(32)], f"numpy default_rng({seed}) ids in [3, 512)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--journey", help="a journey binary, to tokenize the calibration text")
    ap.add_argument("--seed", type=int, default=17)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import awq
    from awq import AutoAWQForCausalLM
    from awq.utils.packing_utils import dequantize_gemm

    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base")
        make_base(base, args.seed)
        calib, calib_source = calibration_tokens(args.journey, args.seed)
        model = AutoAWQForCausalLM.from_pretrained(base, torch_dtype=torch.float16)
        quant_config = {"zero_point": True, "q_group_size": GROUP, "w_bit": BITS, "version": "GEMM"}
        model.quantize(None, quant_config=quant_config, calib_data=calib, max_calib_seq_len=64,
                       max_calib_samples=len(calib))
        if os.path.exists(OUT):
            shutil.rmtree(OUT)
        model.save_quantized(OUT, safetensors=True)
    for name in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copyfile(os.path.join("data/stories260K", name), os.path.join(OUT, name))
    generation_config = os.path.join(OUT, "generation_config.json")  # save_quantized writes it; journey does not need it
    if os.path.exists(generation_config):
        os.remove(generation_config)

    # AutoAWQ's own modules: quantize() replaced every linear layer by a WQLinear_GEMM (from_linear, its
    # packing), and save_quantized wrote their buffers. (from_quantized cannot read the checkpoint back on
    # a CPU: it insists on intel_extension_for_pytorch there; so the saved tensors are checked equal to
    # the modules' buffers instead, byte for byte, and the modules give the expected values.)
    from safetensors.torch import load_file
    from awq.modules.linear.gemm import WQLinear_GEMM
    saved = {}
    for name in sorted(os.listdir(OUT)):
        if name.endswith(".safetensors"):
            saved.update(load_file(os.path.join(OUT, name)))
    if os.path.exists(OUT_EXPECTED):
        shutil.rmtree(OUT_EXPECTED)
    os.makedirs(OUT_EXPECTED)
    layers = 0
    for name, module in model.model.named_modules():
        if isinstance(module, WQLinear_GEMM):
            for part in ("qweight", "qzeros", "scales"):
                assert torch.equal(saved[f"{name}.{part}"], getattr(module, part)), f"{name}.{part} differs from the saved tensor"
            # dequantize_gemm in f32 (scales widened first): the integers times the scales, exactly;
            # AutoAWQ's f16 forward rounds each product to f16 on top (the logits below)
            w_t = dequantize_gemm(module.qweight, module.qzeros, module.scales.float(), module.w_bit, module.group_size)
            np.save(os.path.join(OUT_EXPECTED, name + ".weight.npy"), np.ascontiguousarray(w_t.numpy().T))  # [out, in]
            layers += 1
    assert layers == 14, f"expected 14 AWQ layers, found {layers}"
    with torch.no_grad():
        logits = model.model(torch.tensor([PROMPT_TOKENS])).logits[0].float().numpy()
    np.save(os.path.join(OUT_EXPECTED, "logits.npy"), logits)
    with open(os.path.join(OUT_EXPECTED, "tokens.json"), "w") as f:
        json.dump({"tokens": PROMPT_TOKENS, "autoawq": awq.__version__, "torch": torch.__version__,
                   "calibration": calib_source, "calibration_sequences": len(calib), "seed": args.seed}, f, indent=1)
    print(f"wrote {OUT} and {OUT_EXPECTED}: {layers} layers, logits {logits.shape}, AutoAWQ {awq.__version__}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
