#!/usr/bin/env python3
"""Writes the seed corpora in fuzz/corpus/<target>/ from the real files in tests/data and data/
(small excerpts of them where the originals are large). Run from anywhere; rerunning rewrites
the same files. Provenance: fuzz/corpus/PROVENANCE.md."""
import json
import lzma
import os
import pathlib
import shutil
import struct

import gguf_mini

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def out(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))


def copy(target, src, name=None):
    out(target, name or pathlib.Path(src).name, (ROOT / src).read_bytes())


# ---- config.json, generation_config.json ----
for model in ["data/stories260K", "tests/golden/models/tiny-llama", "tests/golden/models/tiny-qwen2",
              "tests/golden/models/tiny-qwen3"]:
    tag = pathlib.Path(model).name
    copy("hf_config", f"{model}/config.json", f"{tag}.json")
    copy("generation_config", f"{model}/generation_config.json", f"{tag}.json")

# ---- tokenizer_config.json ----
copy("tokenizer_config", "data/stories260K/tokenizer_config.json", "stories260K.json")
copy("tokenizer_config", "tests/data/chat-templates/qwen2.5-instruct.tokenizer_config.json", "qwen2.5.json")
copy("tokenizer_config", "tests/data/tokenizers/hf/qwen3/tokenizer_config.json", "qwen3.json")

# ---- tokenizer.json: the real files cut to their first ids (byte symbols included), with the
# merges among those pieces and the added tokens renumbered right after them.
def cut_tokenizer(src, keep):
    t = json.loads(lzma.open(ROOT / src).read())
    vocab = {p: i for p, i in t["model"]["vocab"].items() if i < keep}
    merges = []
    for m in t["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    t["model"]["vocab"] = vocab
    t["model"]["merges"] = merges[:400]
    for k, tok in enumerate(t.get("added_tokens", [])[:8]):
        tok["id"] = keep + k
    t["added_tokens"] = t.get("added_tokens", [])[:8]
    return json.dumps(t, ensure_ascii=False)

out("hf_tokenizer", "qwen2.5-cut.json", cut_tokenizer("tests/data/tokenizers/hf/qwen2.5-instruct/tokenizer.json.xz", 600))
out("hf_tokenizer", "llama3-cut.json", cut_tokenizer("tests/data/tokenizers/hf/llama3-instruct/tokenizer.json.xz", 600))

# ---- SentencePiece, llama2.c tokenizer ----
copy("sentencepiece", "tests/data/models/stories260K/tok512.model")
copy("llama2c_tokenizer", "tests/data/models/stories260K/tok512.bin")

# ---- llama2.c checkpoints: the real header's layout with tiny dimensions (dim 8, 1 layer),
# versions 0 (shared and separate classifier), 1 and 2.
def llama2c(version, dim=8, hidden=16, layers=1, heads=2, kv=2, vocab=16, seq=4, shared=True, group=8):
    E, F, L, KV, V, D = dim, hidden, layers, dim // heads * kv, vocab, dim // heads
    matrices = [V * E] + [E * E] * L + [KV * E] * L + [KV * E] * L + [E * E] * L + [F * E] * L + [E * F] * L + [F * E] * L
    if version == 0:
        head = struct.pack("<7i", E, F, L, heads, kv, V if shared else -V, seq)
        floats = V * E + L * (E + E * E + 2 * KV * E + E * E + E + 3 * F * E) + E + seq * D + (0 if shared else V * E)
        return head + struct.pack(f"<{floats}f", *[0.01 * (i % 7) for i in range(floats)])
    head = struct.pack("<Ii7iB", 0x616B3432, version, E, F, L, heads, kv, V, seq, int(shared))
    if version == 2:
        head += struct.pack("<i", group)
    head += b"\0" * (256 - len(head))
    norms = struct.pack(f"<{2 * L * E + E}f", *([1.0] * (2 * L * E + E)))
    if not shared:
        matrices.append(V * E)
    body = b""
    for n in matrices:
        if version == 1:
            body += struct.pack(f"<{n}f", *[0.01] * n)
        else:
            body += bytes(i % 251 for i in range(n)) + struct.pack(f"<{n // group}f", *[0.01] * (n // group))
    return head + norms + body

out("llama2c", "v0-shared.bin", llama2c(0))
out("llama2c", "v0-separate.bin", llama2c(0, shared=False))
out("llama2c", "v1.bin", llama2c(1))
out("llama2c", "v2.bin", llama2c(2))
# The first 28 bytes of the real stories260K.bin (the header journey checks first).
out("llama2c", "stories260K-header.bin", (ROOT / "tests/data/models/stories260K/stories260K.bin").read_bytes()[:28])

# ---- GGUF: the tiny random llama with its vocabulary cut to 300 tokens (and the tensors that
# depend on it), plus a chat template; and the GPT-2 vocabulary GGUF cut the same way.
def cut_gguf(data, n_tokens, extra_kv=()):
    kv, tensors = gguf_mini.read(data)
    cut_kv = [(k, t, (v[0], v[1][:n_tokens]) if t == 9 else v) for k, t, v in kv] + list(extra_kv)
    cut_tensors = []
    for name, ne, gt, _ in tensors:
        ne = [n_tokens if d == len(kv_dict(kv)["tokenizer.ggml.tokens"][1]) else d for d in ne]
        count = 1
        for d in ne:
            count *= d
        cut_tensors.append((name, ne, gt, bytes(count * {0: 4, 1: 2}[gt])))
    return cut_kv, cut_tensors


def kv_dict(kv):
    return {k: v for k, t, v in kv}


(CORPUS / "gguf").mkdir(parents=True, exist_ok=True)
template = (ROOT / "tests/data/chat-templates/templates/hf-llama3-instruct.jinja").read_text()
kv, tensors = cut_gguf((ROOT / "tests/data/models/gguf-tiny-random/llama-2-tiny-random.gguf").read_bytes(), 300,
                       [("tokenizer.chat_template", 8, template)])
gguf_mini.write(CORPUS / "gguf" / "llama-tiny-cut.gguf", kv, tensors)
kv, tensors = cut_gguf(lzma.open(ROOT / "tests/data/tokenizers/llamacpp-vocab/ggml-vocab-gpt-2.gguf.xz").read(), 300)
gguf_mini.write(CORPUS / "gguf" / "gpt2-vocab-cut.gguf", kv, tensors)

# ---- safetensors: the real header of stories260K's model.safetensors with its tensors cut to
# one value each (offsets rewritten), and a header-only file.
def cut_safetensors(data):
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    offset = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        size = {"F32": 4, "F16": 2, "BF16": 2}[entry["dtype"]]
        entry["shape"] = [1] * len(entry["shape"])
        entry["data_offsets"] = [offset, offset + size]
        offset += size
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + bytes(offset)

out("safetensors", "stories260K-cut.safetensors", cut_safetensors((ROOT / "data/stories260K/model.safetensors").read_bytes()))
out("safetensors", "tiny-qwen2-cut.safetensors", cut_safetensors((ROOT / "tests/golden/models/tiny-qwen2/model.safetensors").read_bytes()))

# ---- Jinja: each real template with a conversation (template, "\n--\n", variables).
conversation = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 你好"},
                             {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Again"}],
                "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>",
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}
for jinja in sorted((ROOT / "tests/data/chat-templates/templates").glob("*.jinja")):
    out("jinja", jinja.stem + ".txt", jinja.read_text() + "\n--\n" + json.dumps(conversation, ensure_ascii=False))

# ---- trace: a manifest from the tiny-llama golden dump cut to its first two steps, and a tensor.
manifest = json.loads((ROOT / "tests/golden/tiny-llama/manifest.json").read_text())
if isinstance(manifest.get("steps"), list):
    manifest["steps"] = manifest["steps"][:2]
npy = (ROOT / "tests/golden/tiny-llama/s000.L00.attn_scores.npy").read_bytes()
out("trace", "tiny-llama.txt", json.dumps(manifest).encode() + b"\n--\n" + npy)

# ---- OpenAI request bodies: first byte = endpoint (0 completions, 1 chat, 2 tokenize, 3 detokenize).
requests = [
    (0, {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.7, "stop": ["."], "logprobs": 2, "echo": True}),
    (0, {"prompt": [[1, 403, 407]], "max_tokens": 4, "n": 2, "seed": 3, "stream": True,
         "stream_options": {"include_usage": True}}),
    (1, {"messages": [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
         "max_completion_tokens": 8, "top_p": 0.9, "top_k": 5, "logprobs": True, "top_logprobs": 2}),
    (2, {"prompt": "Hello world"}),
    (2, {"messages": [{"role": "user", "content": "Hi"}]}),
    (3, {"tokens": [1, 403, 407, 261]}),
]
for k, (endpoint, body) in enumerate(requests):
    out("openai_request", f"request{k}.bin", bytes([endpoint]) + json.dumps(body).encode())
