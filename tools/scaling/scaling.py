#!/usr/bin/env python3
"""Communication per token of tensor vs pipeline parallelism, and when replicas beat a bigger
tensor-parallel group: computed from config.json files (docs/scaling.md holds the output).

    python3 tools/scaling/scaling.py                       # print the tables (markdown)
    python3 tools/scaling/scaling.py --write docs/scaling.md   # refresh the tables in the doc
    python3 tools/scaling/scaling.py --check docs/scaling.md   # exit 1 if the doc's tables differ

Python's standard library only. Every figure comes from the model shapes (tools/scaling/*.json,
PROVENANCE.md there) and the hardware assumptions in HARDWARE below; nothing is measured here
(this machine has one CPU socket and at most one GPU: docs/scaling.md says what is measured where).

The model (docs/scaling.md derives it):
  tensor parallel over N ranks (Megatron: attention by heads, FFN by columns then rows):
    2 all-reduces per layer per step (after the attention output projection, after the FFN down
    projection), each of tokens x hidden x bytes; a ring all-reduce sends 2(N-1)/N of it per rank
    in 2(N-1) messages; the LM head split by vocabulary gathers (N-1)/N of the f32 logits to rank 0.
  pipeline parallel over S stages: S-1 activation sends of tokens x hidden x bytes per step, plus the
    sampled token id back to the first stage.
  time of a message of m bytes on a link: latency + m / bandwidth.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = [("TinyLlama 1.1B", "tinyllama-1.1b.json"), ("Llama 3 70B", "llama-3-70b.json")]
ACT_BYTES = 2       # activations exchanged in bf16 (journey's CPU backend keeps f32: twice these bytes)
WEIGHT_BYTES = 2    # weights stored in bf16
LOGIT_BYTES = 4     # logits gathered in f32
SIZES = [2, 4, 8]   # ranks / stages
PREFILL = 2048      # tokens of a prefill chunk, for the bandwidth-bound case
BATCHES = [1, 64]   # decoding sequences per step
CONTEXT = 1024      # tokens in each decoding sequence's KV cache
LINKS = {           # bandwidth per direction (bytes/s), latency per message (s)
    "25 GB/s": (25e9, 10e-6),    # PCIe 4.0 x16, or a 200 Gb/s network between hosts
    "900 GB/s": (900e9, 2e-6),   # NVLink 4 (H100 SXM), inside one node
}
HARDWARE = {"gpus": 8, "memory_bytes": 80e9, "hbm_bytes_per_s": 3.35e12, "flops_per_s": 989e12,
            "weights_share": 0.8}  # H100 SXM 80 GB; weights may take 80% of memory (the rest: KV, activations)


def load_shape(path):
    with open(path, encoding="utf-8") as f:
        c = json.load(f)
    heads = c["num_attention_heads"]
    shape = {
        "hidden": c["hidden_size"], "layers": c["num_hidden_layers"], "heads": heads,
        "kv_heads": c.get("num_key_value_heads", heads), "intermediate": c["intermediate_size"],
        "vocab": c["vocab_size"], "tied": bool(c.get("tie_word_embeddings", False)),
    }
    shape["head_dim"] = c.get("head_dim") or shape["hidden"] // heads
    return shape


def parameters(s):
    h, d, L = s["hidden"], s["head_dim"], s["layers"]
    attention = h * s["heads"] * d * 2 + h * s["kv_heads"] * d * 2  # q, o; k, v
    ffn = 3 * h * s["intermediate"]
    per_layer = attention + ffn + 2 * h  # two norms
    embeddings = s["vocab"] * h * (1 if s["tied"] else 2)
    return L * per_layer + embeddings + h


def tp_split_ok(s, n):
    return s["heads"] % n == 0 and s["kv_heads"] % n == 0


def allreduce_time(payload, n, link):
    bandwidth, latency = LINKS[link]
    steps = 2 * (n - 1)  # reduce-scatter then all-gather, each N-1 steps of payload/N
    return steps * (latency + payload / n / bandwidth)


def tp_comm(s, n, tokens, link):
    """Seconds of communication of one step over `tokens` tokens (one per sequence when decoding)."""
    payload = tokens * s["hidden"] * ACT_BYTES
    bandwidth, latency = LINKS[link]
    gather = (n - 1) * (latency + tokens * s["vocab"] / n * LOGIT_BYTES / bandwidth)
    return 2 * s["layers"] * allreduce_time(payload, n, link) + gather


def pp_comm(s, stages, tokens, link):
    bandwidth, latency = LINKS[link]
    return (stages - 1) * (latency + tokens * s["hidden"] * ACT_BYTES / bandwidth) + latency + tokens * 4 / bandwidth


def size(b):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def ms(t):
    return f"{t * 1e3:.3g} ms" if t >= 1e-3 else f"{t * 1e6:.3g} µs"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def shapes_table(models):
    rows = []
    for name, s in models:
        rows.append([name, s["hidden"], s["layers"], f"{s['heads']} / {s['kv_heads']}", s["head_dim"], s["intermediate"],
                     s["vocab"], f"{parameters(s) / 1e9:.2f} B", size(parameters(s) * WEIGHT_BYTES)])
    return table(["model", "hidden", "layers", "heads / KV heads", "head dim", "intermediate", "vocab", "parameters",
                  "weights in bf16"], rows)


def volume_table(models):
    rows = []
    for name, s in models:
        payload = s["hidden"] * ACT_BYTES
        for n in SIZES:
            split = "" if tp_split_ok(s, n) else " (heads not divisible)"
            ring = 2 * s["layers"] * 2 * (n - 1) / n * payload
            gather = (n - 1) / n * s["vocab"] * LOGIT_BYTES
            rows.append([name, n + 0, f"{2 * s['layers']}{split}", size(payload), size(ring), 2 * s["layers"] * 2 * (n - 1),
                         size(gather), n - 1, size((n - 1) * payload)])
    return table(["model", "N", "TP all-reduces per token", "payload each", "ring traffic sent per rank per token",
                  "TP messages per rank", "logits gathered to rank 0", "PP activation sends (N stages)", "PP bytes"], rows)


def journey_table():
    """What `journey ... --tensor-parallel N` exchanges per token on the shipped model: the CPU
    backend keeps activations and logits in f32."""
    s = load_shape(os.path.join(HERE, "..", "..", "data", "stories260K", "config.json"))
    payload = s["hidden"] * 4
    rows = []
    for n in (2, 4):
        split = "" if tp_split_ok(s, n) else " (KV heads not divisible: refused)"
        rows.append(["stories260K (f32)", n, f"{2 * s['layers']}{split}", f"{payload} B",
                     f"{2 * s['layers'] * 2 * (n - 1) * payload // n} B", f"{(n - 1) * s['vocab'] * 4 // n} B"])
    return table(["model", "N", "all-reduces per token", "payload each", "ring traffic sent per rank per token",
                  "logits gathered to rank 0 per token"], rows)


def time_table(models):
    rows = []
    for name, s in models:
        for n in SIZES:
            row = [name, n]
            for link in LINKS:
                row.append(ms(tp_comm(s, n, 1, link)))
            for link in LINKS:
                row.append(ms(pp_comm(s, n, 1, link)))
            for link in LINKS:
                row.append(ms(tp_comm(s, n, PREFILL, link) / PREFILL))
            rows.append(row)
    links = list(LINKS)
    return table(["model", "N"] + [f"TP decode, {l}" for l in links] + [f"PP decode, {l}" for l in links] +
                 [f"TP prefill per token ({PREFILL}-token chunk), {l}" for l in links], rows)


def kv_bytes_per_token(s):
    return 2 * s["layers"] * s["kv_heads"] * s["head_dim"] * WEIGHT_BYTES  # K and V, every layer, bf16


def step_time(s, n, batch, link):
    """One decode step on a TP group of n GPUs: the bytes read from HBM (weights, and the KV cache
    of `batch` sequences at CONTEXT tokens; each rank holds 1/n of both) or the compute, whichever
    takes longer, plus the communication, which nothing overlaps here."""
    hw = HARDWARE
    read = (parameters(s) * WEIGHT_BYTES + batch * CONTEXT * kv_bytes_per_token(s)) / n
    compute = 2 * parameters(s) * batch / n / hw["flops_per_s"]
    comm = tp_comm(s, n, batch, link) if n > 1 else 0.0
    return max(read / hw["hbm_bytes_per_s"], compute) + comm, comm


def replicas_table(models):
    hw = HARDWARE
    rows = []
    for name, s in models:
        for n in [1] + SIZES:
            weights = parameters(s) * WEIGHT_BYTES / n
            budget = hw["weights_share"] * hw["memory_bytes"]
            why_not = (f"no: {s['kv_heads']} KV heads on {n} ranks" if not tp_split_ok(s, n) else
                       f"no: over {size(budget)}" if weights > budget else "")
            if why_not:
                rows.append([name, n, hw["gpus"] // n, size(weights), why_not] + ["—"] * (2 * len(BATCHES) + 1))
                continue
            row = [name, n, hw["gpus"] // n, size(weights), "yes"]
            for batch in BATCHES:
                t, comm = step_time(s, n, batch, "900 GB/s")
                row.append(f"{ms(t)} ({100 * comm / t:.0f}% comm)")
                row.append(f"{hw['gpus'] // n * batch / t:,.0f}")
            t25, comm25 = step_time(s, n, 1, "25 GB/s")
            row.append(f"{ms(t25)} ({100 * comm25 / t25:.0f}% comm)" if n > 1 else ms(t25))
            rows.append(row)
    header = ["model", "TP size", "replicas in 8 GPUs", "weights per GPU", "possible"]
    for batch in BATCHES:
        header += [f"decode step, batch {batch}, NVLink", f"tokens/s of the 8 GPUs, batch {batch} per replica"]
    header.append("decode step, batch 1, 25 GB/s")
    return table(header, rows)


def feasible(s, n):
    return (n == 1 or tp_split_ok(s, n)) and parameters(s) * WEIGHT_BYTES / n <= HARDWARE["weights_share"] * HARDWARE["memory_bytes"]


def claims():
    """The statements docs/scaling.md makes in words about the tables, each re-derived here, so
    that a change of assumptions that breaks one fails --check instead of leaving the prose wrong."""
    models = dict((name, load_shape(os.path.join(HERE, f))) for name, f in MODELS)
    tiny, big = models["TinyLlama 1.1B"], models["Llama 3 70B"]
    out = []

    def step(s, n, batch=1, link="900 GB/s"):
        return step_time(s, n, batch, link)[0]

    def throughput(s, n, batch):
        return HARDWARE["gpus"] // n * batch / step(s, n, batch)

    for name, s in models.items():
        sizes = [n for n in [1] + SIZES if feasible(s, n)]
        for batch in BATCHES:
            t = [throughput(s, n, batch) for n in sizes]
            out.append((f"{name}, batch {batch}: the 8 GPUs serve more tokens/s with smaller TP groups (more replicas)",
                        all(a > b for a, b in zip(t, t[1:]))))
        t25 = [step(s, n, 1, "25 GB/s") for n in sizes]
        out.append((f"{name}: at 25 GB/s every bigger TP group has a slower decode step",
                    all(a < b for a, b in zip(t25, t25[1:]))))
        for n in SIZES:
            _, latency = LINKS["900 GB/s"]
            latency_part = 2 * s["layers"] * 2 * (n - 1) * latency
            out.append((f"{name}, TP {n}: decode all-reduces are latency-bound at 900 GB/s (latency > half their time)",
                        latency_part > 0.5 * tp_comm(s, n, 1, "900 GB/s")))
            out.append((f"{name}, TP {n}: per token, a {PREFILL}-token prefill chunk communicates less than a decode",
                        tp_comm(s, n, PREFILL, "900 GB/s") / PREFILL < tp_comm(s, n, 1, "900 GB/s")))
    out.append(("TinyLlama: TP 2 decodes faster than TP 1 on NVLink", step(tiny, 2) < step(tiny, 1)))
    t4, comm4 = step_time(tiny, 4, 1, "900 GB/s")
    out.append(("TinyLlama: TP 4 decodes slower than TP 2 on NVLink, all-reduces about three quarters of its step",
                t4 > step(tiny, 2) and 0.7 <= comm4 / t4 <= 0.8))
    out.append(("Llama 3 70B fits neither 1 nor 2 GPUs; TP 4 is its smallest group",
                [n for n in [1] + SIZES if feasible(big, n)][0] == 4))
    out.append(("Llama 3 70B: TP 8 decodes faster than TP 4 on NVLink", step(big, 8) < step(big, 4)))
    out.append(("Llama 3 70B: TP 8's decode all-reduces at 25 GB/s take longer than the whole TP-4 step on NVLink",
                tp_comm(big, 8, 1, "25 GB/s") > step(big, 4)))
    return out


def assumptions():
    hw = HARDWARE
    links = "; ".join(f"{l}: {lat * 1e6:g} µs latency per message" for l, (_, lat) in LINKS.items())
    return (f"Activations exchanged in bf16 ({ACT_BYTES} bytes), logits gathered in f32, weights in bf16. Links: {links}. "
            f"GPU: {hw['memory_bytes'] / 1e9:g} GB at {hw['hbm_bytes_per_s'] / 1e12:g} TB/s, "
            f"{hw['flops_per_s'] / 1e12:g} TFLOP/s bf16 (H100 SXM), {hw['gpus']} per node, weights at most "
            f"{100 * hw['weights_share']:g}% of memory; a decoding sequence holds {CONTEXT} tokens of KV cache.")


def sections():
    models = [(name, load_shape(os.path.join(HERE, f))) for name, f in MODELS]
    return {"assumptions": assumptions(), "shapes": shapes_table(models), "volume": volume_table(models),
            "journey": journey_table(), "time": time_table(models), "replicas": replicas_table(models)}


def fill(doc, generated):
    """The doc with every <!-- scaling.py: NAME --> ... <!-- /scaling.py --> block replaced."""
    out, pos = [], 0
    for name, text in generated.items():
        begin = f"<!-- scaling.py: {name} -->"
        start = doc.find(begin, pos)
        if start < 0:
            raise SystemExit(f"scaling.py: the doc has no '{begin}' block (expected after offset {pos})")
        end = doc.find("<!-- /scaling.py -->", start)
        if end < 0:
            raise SystemExit(f"scaling.py: the block '{begin}' is not closed by '<!-- /scaling.py -->'")
        out.append(doc[pos:start] + begin + "\n" + text + "\n")
        pos = end
    out.append(doc[pos:])
    return "".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="DOC", help="replace the generated blocks of DOC")
    group.add_argument("--check", metavar="DOC", help="exit 1 when DOC's generated blocks differ from this output")
    args = parser.parse_args()
    generated = sections()
    checked = claims()
    if not args.write and not args.check:
        for name, text in generated.items():
            print(f"## {name}\n\n{text}\n")
        print("## claims the doc makes in words\n")
        for statement, holds in checked:
            print(f"- [{'holds' if holds else 'FALSE'}] {statement}")
        return 0
    path = args.write or args.check
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    updated = fill(doc, generated)
    if args.write:
        with open(path, "w", encoding="utf-8") as f:
            f.write(updated)
        print(f"wrote {len(generated)} tables into {path}")
        return 0
    wrong = [statement for statement, holds in checked if not holds]
    for statement in wrong:
        print(f"FAIL: docs/scaling.md says in words what no longer holds: {statement}")
    if updated != doc:
        old, new = doc.splitlines(), updated.splitlines()
        first = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
        print(f"FAIL: {path} differs from tools/scaling/scaling.py's output from line {first + 1}:\n"
              f"  doc:  {old[first] if first < len(old) else '(end)'}\n  tool: {new[first] if first < len(new) else '(end)'}\n"
              f"refresh it with: python3 tools/scaling/scaling.py --write {path}")
        return 1
    if wrong:
        return 1
    print(f"{path}: its {len(generated)} generated blocks match tools/scaling/scaling.py, "
          f"and the {len(checked)} claims its prose makes hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
