#!/usr/bin/env python3
"""The second independent reference: transformers' own modeling code, watched through hooks.

tools/trace/reference.py re-implements the forward pass from the Hugging Face definitions; this
script runs the definitions themselves (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM from
the pinned transformers, eager attention, float64) and records journey's stages from forward hooks
on the real modules, in the same dump format, so that the two references can be compared with
each other and the engine with both (tests/golden/check_hf_goldens.py, tests/golden/test_golden.cpp).

    tools/python/venv-python tools/trace/hf_reference.py --model tests/golden/models/tiny-qwen3 \\
        --tokens 1,403,407,261,378 --decode-steps 3 --out tests/golden/transformers/tiny-qwen3

    # a GGUF file, loaded by transformers' own GGUF support (gguf-py dequantizes, transformers
    # renames and un-permutes q/k), e.g. SmolLM2-135M-Instruct in Q4_1:
    tools/python/venv-python tools/trace/hf_reference.py --gguf models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf \\
        --tokens 1,9690,198 --decode-steps 2 --out out/smollm2-hf

Where each stage comes from (module names of modeling_llama.py / modeling_qwen2.py / modeling_qwen3.py):

    embeddings    model.embed_tokens output          q, k, v      self_attn.{q,k,v}_proj outputs
    attn_norm     input_layernorm output             q_norm/k_norm self_attn.{q,k}_norm outputs (Qwen3)
    q_rope/k_rope what apply_rotary_pos_emb returns  attn_scores  the input of the attention softmax
    attn_weights  the output of that softmax         attn_context self_attn.o_proj input
    attn_out      self_attn.o_proj output            resid_attn   post_attention_layernorm input
    ffn_norm      post_attention_layernorm output    gate, up     mlp.{gate,up}_proj outputs
    act           mlp.down_proj input                ffn_out      mlp.down_proj output
    layer_out     the decoder layer's output         final_norm   model.norm output
    logits        lm_head output

Two stages have no module of their own: RoPE is a function (apply_rotary_pos_emb, wrapped in the
model's module while the forward runs, the original still does the work) and so is the softmax
(torch.nn.functional.softmax, wrapped the same way). Masked scores are finfo.min added by
transformers' causal mask; they are written as -inf, which is what journey's stage holds.
Precision: even in a float64 model transformers computes three things in float32 on purpose
(LlamaRMSNorm upcasts to float32 - a no-op for the half-precision models it was written for -,
the rotary cos/sin are made in float32, the eager softmax takes dtype=torch.float32), so its
stages carry ~1e-7 relative rounding against reference.py's ~1e-16: ten to a hundred times below
what separates an f32 engine from either.
"""
import argparse
import contextlib
import json
import os
import shlex
import sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM, DynamicCache

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import REPO_ROOT, Dump, manifest_stages, model_fingerprint, read_stages  # noqa: E402


class StageHooks:
    """Forward hooks on the modules of a *ForCausalLM that emit journey's stages into a Dump."""

    def __init__(self, model, dump):
        self.model, self.dump = model, dump
        config = model.config
        self.H = config.num_attention_heads
        self.KVH = config.num_key_value_heads
        self.D = getattr(config, "head_dim", None) or config.hidden_size // self.H
        self.layer = -1          # the decoder layer running now (set by its pre-hook)
        self.handles = []
        inner = model.model
        self.on(inner.embed_tokens, lambda i, o: self.emit("embeddings", -1, o[0]))
        for l, layer in enumerate(inner.layers):
            attn, mlp = layer.self_attn, layer.mlp
            self.handles.append(layer.register_forward_pre_hook(lambda m, i, l=l: setattr(self, "layer", l)))
            self.on(layer.input_layernorm, lambda i, o, l=l: self.emit("attn_norm", l, o[0]))
            self.on(attn.q_proj, lambda i, o, l=l: self.emit("q", l, o[0].reshape(-1, self.H, self.D)))
            self.on(attn.k_proj, lambda i, o, l=l: self.emit("k", l, o[0].reshape(-1, self.KVH, self.D)))
            self.on(attn.v_proj, lambda i, o, l=l: self.emit("v", l, o[0].reshape(-1, self.KVH, self.D)))
            if hasattr(attn, "q_norm"):  # Qwen3: per-head RMSNorm of q and k before RoPE
                self.on(attn.q_norm, lambda i, o, l=l: self.emit("q_norm", l, o[0].reshape(-1, self.H, self.D)))
                self.on(attn.k_norm, lambda i, o, l=l: self.emit("k_norm", l, o[0].reshape(-1, self.KVH, self.D)))
            self.on(attn.o_proj, lambda i, o, l=l: self.emit("attn_context", l, i[0][0]), pre=True)
            self.on(attn.o_proj, lambda i, o, l=l: self.emit("attn_out", l, o[0]))
            self.on(layer.post_attention_layernorm, lambda i, o, l=l: self.emit("resid_attn", l, i[0][0]), pre=True)
            self.on(layer.post_attention_layernorm, lambda i, o, l=l: self.emit("ffn_norm", l, o[0]))
            self.on(mlp.gate_proj, lambda i, o, l=l: self.emit("gate", l, o[0]))
            self.on(mlp.up_proj, lambda i, o, l=l: self.emit("up", l, o[0]))
            self.on(mlp.down_proj, lambda i, o, l=l: self.emit("act", l, i[0][0]), pre=True)
            self.on(mlp.down_proj, lambda i, o, l=l: self.emit("ffn_out", l, o[0]))
            self.on(layer, lambda i, o, l=l: self.emit("layer_out", l, (o[0] if isinstance(o, tuple) else o)[0]))
        self.on(inner.norm, lambda i, o: self.emit("final_norm", -1, o[0]))
        self.on(model.lm_head, lambda i, o: self.emit("logits", -1, o[0]))

    def on(self, module, fn, pre=False):
        if pre:
            self.handles.append(module.register_forward_pre_hook(lambda m, i: fn(i, None)))
        else:
            self.handles.append(module.register_forward_hook(lambda m, i, o: fn(i, o)))

    def emit(self, stage, layer, tensor):
        self.dump.emit(stage, layer, tensor.detach())  # the batch dimension (of one) already dropped

    @contextlib.contextmanager
    def functions(self):
        """Wraps apply_rotary_pos_emb (in the model's own module) and torch's softmax while a forward runs."""
        modeling = sys.modules[type(self.model.model.layers[0].self_attn).__module__]
        original_rope = modeling.apply_rotary_pos_emb
        original_softmax = torch.nn.functional.softmax

        def rope(q, k, *args, **kwargs):  # q [1, H, T, D], k [1, KVH, T, D]
            q_out, k_out = original_rope(q, k, *args, **kwargs)
            self.emit("q_rope", self.layer, q_out[0].transpose(0, 1))  # [T, H, D]
            self.emit("k_rope", self.layer, k_out[0].transpose(0, 1))  # [T, KVH, D]
            return q_out, k_out

        def softmax(scores, *args, **kwargs):  # scores [1, H, T, P], the causal mask added
            weights = original_softmax(scores, *args, **kwargs)
            masked = scores[0] <= torch.finfo(scores.dtype).min / 2
            self.emit("attn_scores", self.layer, scores[0].masked_fill(masked, float("-inf")))
            self.emit("attn_weights", self.layer, weights[0])
            return weights

        modeling.apply_rotary_pos_emb, torch.nn.functional.softmax = rope, softmax
        try:
            yield
        finally:
            modeling.apply_rotary_pos_emb, torch.nn.functional.softmax = original_rope, original_softmax


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="Hugging Face model directory (config.json + *.safetensors)")
    source.add_argument("--gguf", help="a GGUF model file")
    ap.add_argument("--out", required=True, help="dump directory to write")
    ap.add_argument("--tokens", required=True, help="comma-separated token ids fed as the prefill")
    ap.add_argument("--decode-steps", type=int, default=3, help="greedy decode steps after the prefill")
    ap.add_argument("--top", type=int, default=5, help="alternatives listed per sampled token")
    args = ap.parse_args()

    torch.set_grad_enabled(False)
    transformers.utils.logging.disable_progress_bar()
    if args.gguf:
        model = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(args.gguf)),
                                                     gguf_file=os.path.basename(args.gguf), torch_dtype=torch.float64,
                                                     attn_implementation="eager")
    else:
        model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float64, attn_implementation="eager")
    model.eval()
    ids = [int(t) for t in args.tokens.split(",")]
    V = model.config.vocab_size
    for t in ids:
        if not 0 <= t < V:
            sys.exit(f"token id {t} is outside the vocabulary [0, {V})")

    dump = Dump(args.out, read_stages())
    hooks = StageHooks(model, dump)
    cache = DynamicCache()
    steps = []
    feed, start = ids, 0
    for step in range(args.decode_steps + 1):
        dump.step = step
        dump.emit("token_ids", -1, np.array(feed, dtype=np.int32), ints=True)
        with hooks.functions():
            out = model(input_ids=torch.tensor([feed]), past_key_values=cache, use_cache=True,
                        cache_position=torch.arange(start, start + len(feed)))
        cache = out.past_key_values
        last = out.logits[0, -1].to(torch.float64)
        probs = torch.softmax(last, dim=-1)
        top = torch.argsort(probs, descending=True)[: args.top].tolist()
        chosen = int(torch.argmax(last))
        steps.append({"step": step, "kind": "prefill" if step == 0 else "decode",
                      "positions": list(range(start, start + len(feed))),
                      "sampled": {"id": chosen, "piece": "", "prob": float(probs[chosen]),
                                  "top": [{"id": t, "piece": "", "prob": float(probs[t])} for t in top]}})
        start += len(feed)
        feed = [chosen]

    if args.gguf:
        config = json.loads(model.config.to_json_string())
    else:
        with open(os.path.join(args.model, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    model_path = args.gguf or args.model
    command = "tools/python/venv-python tools/trace/hf_reference.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    manifest = {
        "format": "journey-trace",
        "version": 1,
        "generated_by": {"tool": "tools/trace/hf_reference.py", "command": command},
        "model": {"path": os.path.relpath(os.path.abspath(model_path), REPO_ROOT), "architecture": config["model_type"],
                  "config": config, "hash": model_fingerprint(model_path)},
        "settings": {"reference_dtype": "float64", "attn_implementation": "eager", "decode_steps": args.decode_steps,
                     "sampling": "greedy", "modeling": type(model).__name__, "transformers": transformers.__version__,
                     "torch": torch.__version__, "numpy": np.__version__},
        "prompt": "",
        "template_text": "",
        "tokens": [{"id": i, "piece": ""} for i in ids],
        "steps": steps,
        "stages": manifest_stages(dump.tensors, sampled=True,
                                  made_in=f"tools/trace/hf_reference.py (transformers' {type(model).__name__}, forward hooks)"),
        "tensors": dump.tensors,
    }
    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"hf_reference.py: {args.out}: {type(model).__name__}, prompt ids {ids}, "
          f"greedy {[s['sampled']['id'] for s in steps]}, {len(dump.tensors)} tensors", file=sys.stderr)


if __name__ == "__main__":
    main()
