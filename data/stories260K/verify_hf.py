#!/usr/bin/python3
"""Independent check of the converted directory: a from-scratch PyTorch Llama written from the
Hugging Face definitions (rotate_half RoPE, GQA, SwiGLU, RMSNorm, tied head) reads config.json and
model.safetensors (parsed here with json + numpy, no journey code) and decodes greedily from BOS.
The ids must equal llama2.c's published greedy output for stories260K (greedy_256_ids.txt), which
only happens if the q/k rows were permuted exactly as HF's convert_llama_weights_to_hf.py does.
Usage: /usr/bin/python3 verify_hf.py DIR EXPECTED_IDS_FILE [N]"""
import json, struct, sys
import numpy as np
import torch

d, expected_file = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 64
cfg = json.load(open(f"{d}/config.json"))
raw = open(f"{d}/model.safetensors", "rb").read()
hlen = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + hlen])
np_dtypes = {"F32": np.float32, "F16": np.float16}
W = {}
for name, e in header.items():
    if name == "__metadata__":
        continue
    b, end = e["data_offsets"]
    buf = raw[8 + hlen + b: 8 + hlen + end]
    if e["dtype"] == "BF16":
        a = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        a = np.frombuffer(buf, np_dtypes[e["dtype"]]).astype(np.float32)
    W[name] = torch.from_numpy(a.reshape(e["shape"]).copy())

E, H, KVH = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
D, L, eps, theta = E // H, cfg["num_hidden_layers"], cfg["rms_norm_eps"], cfg["rope_theta"]

def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

def rotate_half(x):
    return torch.cat((-x[..., D // 2:], x[..., :D // 2]), dim=-1)

def forward(ids):
    T = len(ids)
    x = W["model.embed_tokens.weight"][ids]                              # [T, E]
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2).float() / D))       # [D/2]
    freqs = torch.outer(torch.arange(T).float(), inv_freq)                # [T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)                               # [T, D]
    cos, sin = emb.cos(), emb.sin()
    mask = torch.full((T, T), float("-inf")).triu(1)
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms(x, W[p + "input_layernorm.weight"])
        q = (h @ W[p + "self_attn.q_proj.weight"].T).view(T, H, D).transpose(0, 1)    # [H, T, D]
        k = (h @ W[p + "self_attn.k_proj.weight"].T).view(T, KVH, D).transpose(0, 1)  # [KVH, T, D]
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(T, KVH, D).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(H // KVH, 0)
        v = v.repeat_interleave(H // KVH, 0)
        att = torch.softmax(q @ k.transpose(1, 2) / D ** 0.5 + mask, dim=-1)          # [H, T, T]
        o = (att @ v).transpose(0, 1).reshape(T, E)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        h = rms(x, W[p + "post_attention_layernorm.weight"])
        g = torch.nn.functional.silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)
        x = x + g @ W[p + "mlp.down_proj.weight"].T
    x = rms(x, W["model.norm.weight"])
    head = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    return x @ head.T                                                     # [T, V]

expected = [int(t) for t in open(expected_file).read().split()][:n]
ids = [cfg["bos_token_id"]]
for _ in range(n):
    ids.append(int(forward(ids)[-1].argmax()))
got = ids[1:]
same = sum(a == b for a, b in zip(got, expected))
print(f"{same}/{n} greedy ids match llama2.c's published output")
sys.exit(0 if got == expected else 1)
