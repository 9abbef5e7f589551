#!/usr/bin/python3
"""The independent reference: a Llama / Qwen2 / Qwen3 forward pass in PyTorch that writes goldens.

The C++ engine is checked stage by stage against this script. To be a real check it must share as
little with the engine as possible: it is written from the Hugging Face modeling code
(LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM in transformers/models/*/modeling_*.py), reads
the model directory itself (config.json + safetensors parsed with numpy), tokenizes with the
SentencePiece Python package, and computes in float64 by default. The only things it takes from
the engine's source tree are the NAMES of the stages, read from src/trace/stages.def, so that both
sides hook the same points; and the dump format (docs/dump-format.md), so that both write the same
files.

    /usr/bin/python3 tools/trace/reference.py --model data/stories260K --prompt "Once upon a time" \\
        --decode-steps 3 --out tests/golden/stories260K

    /usr/bin/python3 tools/trace/reference.py --model tests/golden/models/tiny-qwen3 \\
        --tokens 1,403,407,261,378 --decode-steps 3 --out tests/golden/tiny-qwen3

Why float64: the engine computes in f32; a float64 reference from the same f32 weights is (to
~1e-16) the exact answer, so the difference measured by the golden tests is the engine's own
rounding and nothing of the reference's. --dtype float32 mirrors the engine's precision instead
(useful to see how much of a difference is just f32 noise). Tensors are stored as f32 either way.

Requires Debian's python3 with numpy, torch (1.13 is enough) and, for --prompt, sentencepiece.
No transformers library is used.
"""
import argparse
import hashlib
import json
import math
import os
import re
import shlex
import struct
import sys

import numpy as np
import torch

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STAGES_DEF = os.path.join(REPO_ROOT, "src", "trace", "stages.def")


# ---------------------------------------------------------------------------------------------
# The stage list: parsed from stages.def, never kept by hand here.

def read_stages(path=STAGES_DEF):
    """[(name, scope)] in journey order, from the JOURNEY_STAGE(...) lines of stages.def."""
    return [(s["name"], s["scope"]) for s in read_stage_descriptions(path)]


def read_stage_descriptions(path=STAGES_DEF):
    """Every JOURNEY_STAGE(id, "name", scope, "axes", "made by", "what it holds") line as a dict."""
    pattern = re.compile(r'^\s*JOURNEY_STAGE\(\s*(\w+)\s*,\s*"([^"]+)"\s*,\s*(Global|Layer)\s*,'
                         r'\s*"([^"]*)"\s*,\s*"([^"]*)"\s*,\s*"([^"]*)"\s*\)')
    stages = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = pattern.match(line)
            if m:
                stages.append({"name": m.group(2), "scope": m.group(3), "axes": m.group(4).split(",") if m.group(4) else [],
                               "made_by": m.group(5), "doc": m.group(6)})
    if not stages:
        sys.exit(f"reference.py: no JOURNEY_STAGE lines found in {path}")
    return stages


def manifest_stages(tensors, sampled, made_in="tools/trace/reference.py (PyTorch, from the Hugging Face definitions)"):
    """The manifest's "stages" list (docs/dump-format.md): the stages used, in journey order, each
    made in `made_in` by what stages.def names."""
    used = {t["stage"] for t in tensors} | ({"sampled"} if sampled else set())
    out = []
    for s in read_stage_descriptions():
        if s["name"] in used:
            out.append({"name": s["name"], "scope": s["scope"].lower(), "axes": s["axes"],
                        "made_in": made_in + ": " + s["made_by"].removeprefix("forward: "),
                        "description": s["doc"]})
    return out


# ---------------------------------------------------------------------------------------------
# Reading the model directory: config.json and safetensors, by hand.

ST_DTYPES = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "F64": ("<f8", 8)}


def read_safetensors(path):
    """{name: float32 numpy array}. Format: u64 LE header length, JSON header, raw tensor bytes."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        sys.exit(f"{path}: too short to be a safetensors file")
    (header_len,) = struct.unpack("<Q", data[:8])
    if 8 + header_len > len(data):
        sys.exit(f"{path}: header length {header_len} exceeds the file size {len(data)}")
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = entry["dtype"]
        if dtype not in ST_DTYPES:
            sys.exit(f"{path}: tensor {name} has dtype {dtype}; reference.py reads F32, F16, BF16, F64")
        np_dtype, size = ST_DTYPES[dtype]
        begin, end = entry["data_offsets"]
        count = int(np.prod(entry["shape"])) if entry["shape"] else 1
        if end - begin != count * size or base + end > len(data):
            sys.exit(f"{path}: tensor {name}: offsets {begin}..{end} do not hold {entry['shape']} of {dtype}")
        raw = np.frombuffer(data, dtype=np_dtype, count=count, offset=base + begin)
        if dtype == "BF16":  # bfloat16 is the top half of a float32
            values = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            values = raw.astype(np.float32)
        tensors[name] = values.reshape(entry["shape"])
    return tensors


def load_weights(model_dir):
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if not files:
        sys.exit(f"{model_dir}: no *.safetensors files (reference.py reads Hugging Face directories)")
    weights = {}
    for f in files:
        weights.update(read_safetensors(os.path.join(model_dir, f)))
    return weights


def model_fingerprint(model_dir):
    """Same definition as journey::model_fingerprint (src/trace/manifest.h)."""
    if os.path.isfile(model_dir):  # a single-file model (GGUF): its name and size
        return "sha256:" + hashlib.sha256(f"{os.path.basename(model_dir)} {os.path.getsize(model_dir)}\n".encode()).hexdigest()
    material = b""
    config = os.path.join(model_dir, "config.json")
    if os.path.exists(config):
        with open(config, "rb") as f:
            material = f.read()
    for name in sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors")):
        material += f"{name} {os.path.getsize(os.path.join(model_dir, name))}\n".encode()
    return "sha256:" + hashlib.sha256(material).hexdigest()


# ---------------------------------------------------------------------------------------------
# The dump writer: one .npy per tensor plus manifest.json (docs/dump-format.md).

class Dump:
    def __init__(self, out_dir, stages):
        self.out_dir = out_dir
        self.scope = dict(stages)
        self.order = [name for name, _ in stages]
        self.step = 0
        self.tensors = []
        os.makedirs(out_dir, exist_ok=True)
        for f in os.listdir(out_dir):  # a regenerated golden must not keep stale files
            if f.endswith(".npy") or f == "manifest.json":
                os.remove(os.path.join(out_dir, f))

    def emit(self, stage, layer, tensor, ints=False):
        if stage not in self.scope:
            sys.exit(f"reference.py: stage '{stage}' is not in {STAGES_DEF}")
        if (self.scope[stage] == "Layer") != (layer >= 0):
            sys.exit(f"reference.py: stage '{stage}' is {self.scope[stage]}-scoped but was emitted with layer {layer}")
        name = f"L{layer}.{stage}" if layer >= 0 else stage
        file = f"s{self.step:03d}.{name}.npy"  # the file is named like the tensor (docs/dump-format.md)
        if isinstance(tensor, torch.Tensor):
            tensor = tensor.detach().cpu().numpy()
        array = np.ascontiguousarray(tensor, dtype="<i4" if ints else "<f4")
        np.save(os.path.join(self.out_dir, file), array)
        self.tensors.append({"name": name, "stage": stage, "layer": layer, "step": self.step,
                             "shape": list(array.shape), "dtype": "i32" if ints else "f32", "file": file})


# ---------------------------------------------------------------------------------------------
# The model, after the Hugging Face definitions.

class Model:
    def __init__(self, model_dir, dtype):
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            self.config = json.load(f)
        c = self.config
        self.arch = c.get("model_type", "")
        if self.arch not in ("llama", "mistral", "qwen2", "qwen3"):
            sys.exit(f"{model_dir}/config.json: model_type '{self.arch}' is not llama, mistral, qwen2 or qwen3")
        if c.get("rope_scaling"):
            sys.exit(f"{model_dir}/config.json: rope_scaling {c['rope_scaling']} is not implemented here")
        if c.get("use_sliding_window"):
            sys.exit(f"{model_dir}/config.json: sliding-window attention is not implemented here")
        self.E = c["hidden_size"]
        self.H = c["num_attention_heads"]
        self.KVH = c.get("num_key_value_heads", self.H)
        self.D = c.get("head_dim") or self.E // self.H
        self.L = c["num_hidden_layers"]
        self.eps = c.get("rms_norm_eps", 1e-6)
        self.theta = c.get("rope_theta", 10000.0)
        self.qk_norm = self.arch == "qwen3"
        self.dtype = dtype
        raw = load_weights(model_dir)
        self.w = {name: torch.from_numpy(np.array(v)).to(dtype) for name, v in raw.items()}
        if "lm_head.weight" not in self.w:
            if not c.get("tie_word_embeddings", False):
                sys.exit(f"{model_dir}: lm_head.weight missing and tie_word_embeddings is false")
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]  # tied LM head
        if self.arch == "qwen2":  # Qwen2 attention always has q/k/v biases
            for proj in ("q_proj", "k_proj", "v_proj"):
                if f"model.layers.0.self_attn.{proj}.bias" not in self.w:
                    sys.exit(f"{model_dir}: qwen2 model without model.layers.0.self_attn.{proj}.bias")
        # RoPE inverse frequencies, as LlamaRotaryEmbedding: 1 / theta^(2i / D), i = 0 .. D/2-1.
        self.inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.D, 2, dtype=torch.float64) / self.D))
        self.k_cache = [None] * self.L  # [P, KVH, D] per layer, keys after RoPE
        self.v_cache = [None] * self.L  # [P, KVH, D]

    def linear(self, x, name):
        """nn.Linear: x @ W^T (+ b); W is [out, in] as stored."""
        y = x @ self.w[name + ".weight"].T
        if name + ".bias" in self.w:
            y = y + self.w[name + ".bias"]
        return y

    def rms_norm(self, x, weight):
        """LlamaRMSNorm: x / sqrt(mean(x^2) + eps) * weight, variance over the last axis."""
        variance = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * torch.rsqrt(variance + self.eps))

    @staticmethod
    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def rope(self, x, positions):
        """apply_rotary_pos_emb for x [T, heads, D] at positions [T]."""
        freqs = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]  # [T, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)                                # [T, D]
        cos = emb.cos().to(self.dtype)[:, None, :]                             # [T, 1, D]
        sin = emb.sin().to(self.dtype)[:, None, :]
        return x * cos + self.rotate_half(x) * sin

    def forward(self, ids, start, dump):
        """One step over tokens ids [T] at positions start .. start+T-1; returns logits [T, V]."""
        T = len(ids)
        positions = torch.arange(start, start + T)
        P = start + T
        ids_t = torch.tensor(ids, dtype=torch.long)
        dump.emit("token_ids", -1, np.array(ids, dtype=np.int32), ints=True)
        x = self.w["model.embed_tokens.weight"][ids_t]                          # [T, E]
        dump.emit("embeddings", -1, x)
        for l in range(self.L):
            p = f"model.layers.{l}."
            h = self.rms_norm(x, self.w[p + "input_layernorm.weight"])          # [T, E]
            dump.emit("attn_norm", l, h)
            q = self.linear(h, p + "self_attn.q_proj").view(T, self.H, self.D)     # [T, H, D]
            k = self.linear(h, p + "self_attn.k_proj").view(T, self.KVH, self.D)   # [T, KVH, D]
            v = self.linear(h, p + "self_attn.v_proj").view(T, self.KVH, self.D)   # [T, KVH, D]
            dump.emit("q", l, q)
            dump.emit("k", l, k)
            dump.emit("v", l, v)
            if self.qk_norm:  # Qwen3: RMSNorm over head_dim, per head, before RoPE
                q = self.rms_norm(q, self.w[p + "self_attn.q_norm.weight"])
                k = self.rms_norm(k, self.w[p + "self_attn.k_norm.weight"])
                dump.emit("q_norm", l, q)
                dump.emit("k_norm", l, k)
            q = self.rope(q, positions)                                         # [T, H, D]
            k = self.rope(k, positions)                                         # [T, KVH, D]
            dump.emit("q_rope", l, q)
            dump.emit("k_rope", l, k)
            # KV cache: append this step's keys/values after the cached ones.
            if self.k_cache[l] is None:
                self.k_cache[l], self.v_cache[l] = k, v
            else:
                self.k_cache[l] = torch.cat((self.k_cache[l], k), dim=0)
                self.v_cache[l] = torch.cat((self.v_cache[l], v), dim=0)
            K, V = self.k_cache[l], self.v_cache[l]                             # [P, KVH, D]
            assert K.shape[0] == P
            # repeat_kv: query head h reads key/value head h // (H / KVH).
            n_rep = self.H // self.KVH
            K = K.repeat_interleave(n_rep, dim=1)                               # [P, H, D]
            V = V.repeat_interleave(n_rep, dim=1)                               # [P, H, D]
            scores = torch.einsum("thd,phd->htp", q, K) * (self.D ** -0.5)     # [H, T, P]
            causal = positions[:, None] < torch.arange(P)[None, :]              # [T, P]: key after query
            scores = scores.masked_fill(causal[None, :, :], float("-inf"))
            dump.emit("attn_scores", l, scores)
            weights = torch.softmax(scores, dim=-1)                             # [H, T, P]
            dump.emit("attn_weights", l, weights)
            context = torch.einsum("htp,phd->thd", weights, V).reshape(T, self.H * self.D)  # [T, H*D]
            dump.emit("attn_context", l, context)
            attn_out = self.linear(context, p + "self_attn.o_proj")             # [T, E]
            dump.emit("attn_out", l, attn_out)
            x = x + attn_out
            dump.emit("resid_attn", l, x)
            h = self.rms_norm(x, self.w[p + "post_attention_layernorm.weight"])  # [T, E]
            dump.emit("ffn_norm", l, h)
            gate = self.linear(h, p + "mlp.gate_proj")                          # [T, F]
            up = self.linear(h, p + "mlp.up_proj")                              # [T, F]
            dump.emit("gate", l, gate)
            dump.emit("up", l, up)
            act = torch.nn.functional.silu(gate) * up                           # [T, F]
            dump.emit("act", l, act)
            ffn_out = self.linear(act, p + "mlp.down_proj")                     # [T, E]
            dump.emit("ffn_out", l, ffn_out)
            x = x + ffn_out
            dump.emit("layer_out", l, x)
        h = self.rms_norm(x, self.w["model.norm.weight"])                       # [T, E]
        dump.emit("final_norm", -1, h)
        logits = h @ self.w["lm_head.weight"].T                                 # [T, V]
        dump.emit("logits", -1, logits)
        return logits


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="Hugging Face model directory (config.json + *.safetensors)")
    ap.add_argument("--out", required=True, help="dump directory to write")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens", help="comma-separated token ids fed as the prefill")
    src.add_argument("--prompt", help="text, tokenized with <model>/tokenizer.model (SentencePiece) after BOS")
    ap.add_argument("--decode-steps", type=int, default=3, help="greedy decode steps after the prefill")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--top", type=int, default=5, help="alternatives listed per sampled token")
    args = ap.parse_args()

    torch.set_grad_enabled(False)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    stages = read_stages()
    model = Model(args.model, dtype)

    sp = None
    tok_path = os.path.join(args.model, "tokenizer.model")
    if args.prompt is not None or os.path.exists(tok_path):
        import sentencepiece
        if not os.path.exists(tok_path):
            sys.exit(f"--prompt needs {tok_path} (SentencePiece)")
        sp = sentencepiece.SentencePieceProcessor(model_file=tok_path)
    if args.prompt is not None:
        bos = model.config.get("bos_token_id", sp.bos_id())
        ids = [bos] + sp.encode(args.prompt)
    else:
        ids = [int(t) for t in args.tokens.split(",")]
    V = model.w["lm_head.weight"].shape[0]
    for t in ids:
        if not 0 <= t < V:
            sys.exit(f"token id {t} is outside the vocabulary [0, {V})")

    def piece(i):
        return sp.id_to_piece(i) if sp is not None and i < sp.get_piece_size() else ""

    dump = Dump(args.out, stages)
    steps = []
    feed, start = ids, 0
    for step in range(args.decode_steps + 1):
        dump.step = step
        logits = model.forward(feed, start, dump)
        last = logits[-1].to(torch.float64)
        probs = torch.softmax(last, dim=-1)
        top = torch.argsort(probs, descending=True)[: args.top].tolist()
        chosen = int(torch.argmax(last))  # greedy: the first index of the maximum
        steps.append({"step": step, "kind": "prefill" if step == 0 else "decode",
                      "positions": list(range(start, start + len(feed))),
                      "sampled": {"id": chosen, "piece": piece(chosen), "prob": float(probs[chosen]),
                                  "top": [{"id": t, "piece": piece(t), "prob": float(probs[t])} for t in top]}})
        start += len(feed)
        feed = [chosen]

    model_path = os.path.relpath(os.path.abspath(args.model), REPO_ROOT)
    command = "/usr/bin/python3 tools/trace/reference.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    manifest = {
        "format": "journey-trace",
        "version": 1,
        "generated_by": {"tool": "tools/trace/reference.py", "command": command},
        "model": {"path": model_path, "architecture": model.arch, "config": model.config,
                  "hash": model_fingerprint(args.model)},
        "settings": {"reference_dtype": args.dtype, "decode_steps": args.decode_steps, "sampling": "greedy",
                     "torch": torch.__version__, "numpy": np.__version__},
        "prompt": args.prompt or "",
        "template_text": "",
        "tokens": [{"id": i, "piece": piece(i)} for i in ids],
        "steps": steps,
        "stages": manifest_stages(dump.tensors, sampled=True),
        "tensors": dump.tensors,
    }
    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    generated = [s["sampled"]["id"] for s in steps]
    print(f"reference.py: {args.out}: {model.arch}, prompt ids {ids}, greedy {generated}, "
          f"{len(dump.tensors)} tensors", file=sys.stderr)


if __name__ == "__main__":
    main()
