#!/usr/bin/env python3
"""journey and llama.cpp on the same GGUF files, alternating, one table. Run by scripts/bench-peers.sh,
which builds llama-cpp-python and puts it (and llama.cpp's converter) on the path; see there.

llama.cpp is timed the way `journey bench` times itself (src/cpu/bench.cpp): an untimed warm-up
(a prefill of the same length and one decode step), then per run a prefill of --prompt-tokens random ids in one batch, then --gen-tokens greedy
decode steps of one token each, the rate of each phase measured around it; the median over runs.
The engines alternate run by run (journey run 1, llama.cpp run 1, journey run 2, ...), so that a
change in the machine's load hits both. Threads: --threads for both (llama.cpp: n_threads and
n_threads_batch). Memory: each engine's peak resident set in its own process (journey's
`resident_engine_peak_bytes`, measured by itself after the warm-up, before its bandwidth probe's
2 GiB and the GEMM ceilings; llama.cpp runs in a forked child whose ru_maxrss is read,
so the Python interpreter's ~0.03-0.1 GB are in its figure). Both engines compute on the stored blocks (journey's fast CPU backend since issue #11:
docs/performance.md, "Weights as stored").

The memory's speed of the moment: on the VMs of docs/performance.md the read bandwidth swings
between ~30 and ~65 GB/s for seconds to minutes, so a decode rate near the memory's limit says as
much about the state the memory was in as about the engine. Each run of either engine is therefore
followed at once by journey's bandwidth probe (journey bench's own after its run; `journey bench
--bandwidth-only` after llama.cpp's), and the second table sets each run's decode against it:
decode tok/s x the file's weight bytes per token (journey's count) / the probe, the median over runs.

The SmolLM2 comparison (greedy tokens and logits, --compare-steps steps): journey's greedy run is
`journey trace --chat` with its logits dumped at every step; llama.cpp evaluates the same prompt
followed by journey's tokens (teacher forcing) with logits for every position, so step s of both
has seen the same tokens. Reported: max |Δlogit| over all steps and the vocabulary, top-1
agreement per step, and llama.cpp's own greedy tokens (free-running) against journey's.
"""
import argparse
import ctypes
import multiprocessing
import resource
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = os.path.join(REPO, "build-peers")
SMOLLM2 = os.path.join(REPO, "models", "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf")
TINYLLAMA_ROWS = ["f32", "bf16", "f16", "q8_0", "q4_0", "q4_k_m"]
QUESTION = "What is the capital of France?"
STORY = "Write a long story about a small dragon who is afraid of flying."


def log(*args):
    print(*args, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The files: TinyLlama-1.1B shape with random weights, converted and quantized by llama.cpp's tools.

def llama_ftypes():
    import llama_cpp
    return {"bf16": llama_cpp.LLAMA_FTYPE_MOSTLY_BF16, "f16": llama_cpp.LLAMA_FTYPE_MOSTLY_F16, "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0,
            "q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0, "q4_k_m": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M}


def make_tinyllama_ggufs(rows, threads):
    """{row: path} under build-peers/models, made once."""
    out_dir = os.path.join(PEERS, "models")
    os.makedirs(out_dir, exist_ok=True)
    paths = {row: os.path.join(out_dir, f"tinyllama-1.1b-random.{row}.gguf") for row in rows}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    f32 = os.path.join(out_dir, "tinyllama-1.1b-random.f32.gguf")
    if not os.path.exists(f32):
        hf = os.path.join(out_dir, "tinyllama-1.1b-hf")
        if not os.path.exists(os.path.join(hf, "model.safetensors")):
            log("bench-peers: making the TinyLlama-1.1B shape with random weights (f32, 4.4 GB)")
            subprocess.run([sys.executable, os.path.join(REPO, "tools", "make_random_model.py"), "--preset",
                            "tinyllama-1.1b", "--dtype", "f32", "--seed", "0", "--out", hf], check=True)
        # TinyLlama's vocabulary is Llama 2's SentencePiece model (32000 pieces), which the
        # converter needs to write the GGUF vocabulary.
        with open(os.path.join(hf, "tokenizer.model"), "wb") as f:
            subprocess.run(["xz", "-dc", os.path.join(REPO, "tests", "data", "tokenizers", "llama2", "tokenizer.model.xz")],
                           stdout=f, check=True)
        log("bench-peers: converting to GGUF F32 with llama.cpp's convert_hf_to_gguf.py")
        subprocess.run([sys.executable, os.path.join(os.environ["LLAMA_CPP_SOURCE"], "convert_hf_to_gguf.py"), hf,
                        "--outtype", "f32", "--outfile", f32], check=True, stdout=subprocess.DEVNULL)
    import llama_cpp
    for row, path in paths.items():
        if row == "f32" or os.path.exists(path):
            continue
        log(f"bench-peers: quantizing to {row} with llama.cpp's llama_model_quantize")
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = llama_ftypes()[row]
        params.nthread = threads
        if llama_cpp.llama_model_quantize(f32.encode(), (path + ".part").encode(), ctypes.byref(params)) != 0:
            raise RuntimeError(f"llama_model_quantize failed for {row}")
        os.replace(path + ".part", path)
    return paths


# ---------------------------------------------------------------------------------------------
# One measured run of each engine.

def journey_run(journey, path, args):
    """(prefill tok/s, decode tok/s, peak resident bytes, the read bandwidth probed right after its decode in GB/s,
    weight bytes per decoded token) of one `journey bench --runs 1`, or raises with journey's message."""
    result = subprocess.run([journey, "bench", "--model", path, "--prompt-tokens", str(args.prompt_tokens),
                             "--gen-tokens", str(args.gen_tokens), "--threads", str(args.threads), "--runs", "1",
                             "--json"], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit {result.returncode}")
    report = json.loads(result.stdout)
    return (report["prefill_tok_s"]["median"], report["decode_tok_s"]["median"], report["resident_engine_peak_bytes"],
            report["read_bandwidth_runs_gb_s"]["median"], report["decode_bytes_per_token"])


def bandwidth_probe(journey, threads):
    """GB/s of journey bench's read-bandwidth probe alone (`journey bench --bandwidth-only`), on `threads` threads."""
    result = subprocess.run([journey, "bench", "--bandwidth-only", "--threads", str(threads), "--json"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"journey bench --bandwidth-only: {result.stderr.strip() or f'exit {result.returncode}'}")
    return json.loads(result.stdout)["read_bandwidth_gb_s"]


def last_logits(llm):
    """[V] the logits of the last token evaluated (llama-cpp-python keeps llm.scores only with logits_all)."""
    return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),))


def llama_run(path, args, seed):
    """(prefill tok/s, decode tok/s) of one llama.cpp run timed like journey bench."""
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=args.prompt_tokens + args.gen_tokens + 16, n_batch=args.prompt_tokens,
                n_ubatch=args.prompt_tokens, n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
    rng = np.random.default_rng(seed)
    prompt = [int(t) for t in rng.integers(0, llm.n_vocab(), args.prompt_tokens)]
    llm.eval(prompt)  # warm-up, as journey bench: a prefill of the same length and one decode step
    llm.eval([int(np.argmax(last_logits(llm)))])
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    prefill = args.prompt_tokens / (time.perf_counter() - t0)
    next_token = int(np.argmax(last_logits(llm)))
    t0 = time.perf_counter()
    for _ in range(args.gen_tokens):
        llm.eval([next_token])
        next_token = int(np.argmax(last_logits(llm)))
    decode = args.gen_tokens / (time.perf_counter() - t0)
    llm.close()
    return prefill, decode


def _llama_child(path, args, seed, pipe):
    try:
        prefill, decode = llama_run(path, args, seed)
        pipe.send((prefill, decode, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it
        pipe.send(e)


def llama_run_isolated(path, args, seed):
    """llama_run in a forked child: (prefill tok/s, decode tok/s, the child's peak resident bytes)."""
    parent, child = multiprocessing.get_context("fork").Pipe()
    process = multiprocessing.get_context("fork").Process(target=_llama_child, args=(path, args, seed, child))
    process.start()
    result = parent.recv()
    process.join()
    if isinstance(result, Exception):
        raise result
    return result


def bench_row(name, path, args):
    row = {"row": name, "file": os.path.basename(path), "bytes": os.path.getsize(path)}
    journey_rates, llama_rates, llama_probes, unsupported = [], [], [], None
    for run in range(args.runs):
        if unsupported is None:
            try:
                journey_rates.append(journey_run(args.journey, path, args))
            except RuntimeError as e:
                unsupported = str(e)
        llama_rates.append(llama_run_isolated(path, args, seed=run))
        llama_probes.append(bandwidth_probe(args.journey, args.threads))  # at once: the memory of llama.cpp's moment
        log(f"  {name} run {run + 1}: journey {journey_rates[-1] if journey_rates and unsupported is None else unsupported}, "
            f"llama.cpp {llama_rates[-1]} then probe {llama_probes[-1]:.1f} GB/s")
    row["llama_prefill"] = statistics.median(r[0] for r in llama_rates)
    row["llama_decode"] = statistics.median(r[1] for r in llama_rates)
    row["llama_peak"] = max(r[2] for r in llama_rates)
    row["llama_probes"] = llama_probes
    if unsupported is not None:
        row["unsupported"] = unsupported
    else:
        row["journey_prefill"] = statistics.median(r[0] for r in journey_rates)
        row["journey_decode"] = statistics.median(r[1] for r in journey_rates)
        row["journey_peak"] = max(r[2] for r in journey_rates)
        row["journey_probes"] = [r[3] for r in journey_rates]
        # each run's decode against the probe read right after it: weight bytes per second / probe bytes per second
        bytes_per_token = journey_rates[0][4]
        row["journey_decode_of_probe"] = [r[1] * bytes_per_token / (r[3] * 1e9) for r in journey_rates]
        row["llama_decode_of_probe"] = [r[1] * bytes_per_token / (p * 1e9) for r, p in zip(llama_rates, llama_probes)]
    return row


def table(rows, args, load_before):
    load_after = os.getloadavg()[0]
    lines = [f"prompt {args.prompt_tokens} tokens, {args.gen_tokens} generated, {args.threads} threads, median of "
             f"{args.runs} alternating runs; tok/s; load average {load_before:.1f} at the start, {load_after:.1f} at the "
             f"end; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(default)')}",
             "",
             "| row | file | MiB | prefill journey | prefill llama.cpp | journey / llama.cpp | decode journey | decode llama.cpp | "
             "journey / llama.cpp | peak GB journey | peak GB llama.cpp |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        mib = f"{r['bytes'] / 2**20:.0f}"
        if "unsupported" in r:
            lines.append(f"| {r['row']} | {r['file']} | {mib} | unsupported | {r['llama_prefill']:.1f} | — | unsupported | "
                         f"{r['llama_decode']:.2f} | — | — | {r['llama_peak'] / 1e9:.2f} |")
            lines.append(f"|  | journey: {r['unsupported']} |||||||||| ")
        else:
            lines.append(f"| {r['row']} | {r['file']} | {mib} | {r['journey_prefill']:.1f} | {r['llama_prefill']:.1f} | "
                         f"{r['journey_prefill'] / r['llama_prefill']:.2f} | {r['journey_decode']:.2f} | "
                         f"{r['llama_decode']:.2f} | {r['journey_decode'] / r['llama_decode']:.2f} | "
                         f"{r['journey_peak'] / 1e9:.2f} | {r['llama_peak'] / 1e9:.2f} |")
    lines += ["",
              "Decode against the memory's speed of the moment: each run's decode weight bytes per second over the "
              "read-bandwidth probe run right after it (journey bench's own; `journey bench --bandwidth-only` after "
              "llama.cpp's), the median and range over runs; the probes' GB/s beside.",
              "",
              "| row | journey decode / probe | probe GB/s after journey | llama.cpp decode / probe | probe GB/s after llama.cpp | "
              "journey / llama.cpp at equal bandwidth |",
              "|---|---:|---:|---:|---:|---:|"]

    def spread(values, scale=1.0, digits=1):
        low, mid, high = min(values) * scale, statistics.median(values) * scale, max(values) * scale
        return f"{mid:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"

    for r in rows:
        if "unsupported" in r:
            lines.append(f"| {r['row']} | unsupported | — | — | {spread(r['llama_probes'])} | — |")
            continue
        ours, theirs = r["journey_decode_of_probe"], r["llama_decode_of_probe"]
        lines.append(f"| {r['row']} | {spread(ours, 100)} % | {spread(r['journey_probes'])} | {spread(theirs, 100)} % | "
                     f"{spread(r['llama_probes'])} | {statistics.median(ours) / statistics.median(theirs):.2f} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Greedy tokens and logits on SmolLM2.

def compare_smollm2(args, prompt_text, system):
    from llama_cpp import Llama
    work = tempfile.mkdtemp(prefix="bench-peers-")
    command = [args.journey, "trace", prompt_text, "--chat", "--model", SMOLLM2, "--out", work, "--max-tokens",
               str(args.compare_steps), "--temperature", "0", "--stages", "logits", "--threads", str(args.threads)]
    if system:
        command += ["--system", system]
    subprocess.run(command, check=True, capture_output=True)
    with open(os.path.join(work, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    prompt_ids = [t["id"] for t in manifest["tokens"]]
    ours = [s["sampled"]["id"] for s in manifest["steps"]]
    logits = {t["step"]: np.load(os.path.join(work, t["file"])) for t in manifest["tensors"] if t["stage"] == "logits"}
    journey_rows = np.stack([logits[s][-1] for s in range(len(ours))])  # [steps, V]: what step s sampled from
    shutil.rmtree(work)

    llm = Llama(model_path=SMOLLM2, n_ctx=len(prompt_ids) + len(ours) + 8, n_batch=512, logits_all=True,
                n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
    llm.eval(prompt_ids + ours[:-1])  # teacher forcing: journey's tokens
    first = len(prompt_ids) - 1
    llama_rows = np.array(llm.scores[first:first + len(ours)], dtype=np.float64)  # [steps, V]
    V = min(journey_rows.shape[1], llama_rows.shape[1])
    delta = np.abs(journey_rows[:, :V] - llama_rows[:, :V])
    top1 = (journey_rows[:, :V].argmax(1) == llama_rows[:, :V].argmax(1))
    # llama.cpp free-running greedy from the same prompt
    llm.reset()
    llm.eval(prompt_ids)
    theirs = []
    for _ in range(len(ours)):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        theirs.append(t)
        if t in (2,):  # <|im_end|>, SmolLM2's EOS
            break
        llm.eval([t])
    llm.close()
    same_prefix = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return {"prompt": prompt_text, "steps": len(ours), "stopped_on_eos": ours[-1] == 2,
            "max_abs_dlogit": float(delta.max()), "mean_abs_dlogit": float(delta.mean()),
            "max_abs_logit": float(np.abs(llama_rows).max()), "top1_agree": int(top1.sum()),
            "greedy_same_prefix": same_prefix, "greedy_journey": len(ours), "greedy_llama": len(theirs)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--journey", default=os.path.join(REPO, "build", "src", "cli", "journey"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--gen-tokens", type=int, default=16)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rows", default=",".join(TINYLLAMA_ROWS + ["smollm2"]))
    ap.add_argument("--compare-steps", type=int, default=64)
    args = ap.parse_args()
    import llama_cpp
    rows = args.rows.split(",")
    log(f"bench-peers: llama-cpp-python {llama_cpp.__version__}, journey {args.journey}")
    load_before = os.getloadavg()[0]
    results = []
    tiny = [r for r in rows if r in TINYLLAMA_ROWS]
    paths = make_tinyllama_ggufs(tiny, args.threads) if tiny else {}
    for row in rows:
        if row == "smollm2":
            if not os.path.exists(SMOLLM2):
                log(f"bench-peers: {SMOLLM2} is absent (tools/python/fetch-models.sh); row skipped")
                continue
            results.append(bench_row("SmolLM2-135M Q4_1", SMOLLM2, args))
        else:
            results.append(bench_row(f"TinyLlama-1.1B (random) {row.upper()}", paths[row], args))
        log(f"bench-peers: row done: {results[-1]}")
    print(table(results, args, load_before), flush=True)
    if "smollm2" in rows and os.path.exists(SMOLLM2):
        print()
        print(f"SmolLM2-135M-Instruct Q4_1, greedy, --chat; journey's tokens fed to llama.cpp (teacher forcing):")
        print()
        print("| prompt | steps | stopped on <\\|im_end\\|> | max \\|Δlogit\\| | mean \\|Δlogit\\| | max \\|logit\\| | top-1 agree | "
              "llama.cpp free-running greedy = journey's for |")
        print("|---|---:|---|---:|---:|---:|---:|---|")
        for prompt, system in ((QUESTION, "You are a concise assistant. Answer in one sentence."), (STORY, None)):
            c = compare_smollm2(args, prompt, system)
            print(f"| {prompt} | {c['steps']} | {'yes' if c['stopped_on_eos'] else 'no'} | {c['max_abs_dlogit']:.4f} | "
                  f"{c['mean_abs_dlogit']:.5f} | {c['max_abs_logit']:.1f} | {c['top1_agree']}/{c['steps']} | "
                  f"{c['greedy_same_prefix']} of {c['greedy_journey']} tokens |")


if __name__ == "__main__":
    main()
