"""`journey generate | bench | serve --tensor-parallel N` under mpirun, as a user runs them.

  - quantized files (Q8_0 at 2 and 4 ranks, Q4_K_M at 2) of a model made to split on block
    boundaries: greedy text equals the single-process fast backend's;
  - chat: the greedy answer to one line on stdin equals the single-process answer;
  - generate: greedy text at --tensor-parallel 2 and 4 equals the single-process --device reference
    run, on the shipped model and the three golden models (they ship no tokenizer: stories260K's);
  - start-up errors: heads not divisible by the group size names the numbers; a split that cuts a
    stored quantized block names the tensor and the block size; --tensor-parallel 2
    without mpirun says how to start it; mpirun with --tensor-parallel 1 refuses to run N copies;
  - bench: the all-reduce count and bytes the group reports equal what the model implies (2 per
    layer per forward step, 2 x layers x hidden x 4 bytes per token);
  - trace: each rank's dump names its part; a rank's q is its heads of the single-process q, the
    all-reduced ffn_out is the whole on both ranks; each rank's attn_out_partial / ffn_out_partial
    (recorded before the all-reduce) sum over the ranks to the all-reduced stage, differ from it, and
    equal the share NumPy computes from the single-process run and the stored weights (2 and 4
    ranks); the logits_partial slices side by side are the gathered logits; journey-trace report
    shows the split and every layer's partials with the NumPy norms;
  - serve: an OpenAI completion from a 2-rank server equals the single-process server's, and the
    group stops cleanly on SIGTERM.

Run from the repository root:
  python3 tests/parallel/test_tp_cli.py --journey build/src/cli/journey --trace-tool build/tools/trace/journey-trace
Exit 77 (skipped) when mpirun is missing.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from journey_server import JourneyServer  # noqa: E402

RUN_MPI = os.path.join(HERE, "run_mpi.sh")
MODELS = ["data/stories260K", "tests/golden/models/tiny-llama", "tests/golden/models/tiny-qwen2",
          "tests/golden/models/tiny-qwen3"]
PROMPT = "Once upon a time"
failures = []


def run(command, timeout=180):
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def check(condition, what, detail=""):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)
        if detail:
            print("     " + detail.replace("\n", "\n     "))


def generate_args(model, extra):
    return ["generate", "--model", model, "--tokenizer", "data/stories260K", "--temperature", "0",
            "--max-tokens", "40", "--threads", "1", PROMPT] + extra


def test_generate(journey):
    for model in MODELS:
        reference = run([journey] + generate_args(model, ["--device", "reference"]))
        assert reference.returncode == 0, reference.stderr
        for ranks in (2, 4):
            tp = run([RUN_MPI, str(ranks), journey] + generate_args(model, ["--tensor-parallel", str(ranks)]))
            check(tp.returncode == 0 and tp.stdout == reference.stdout,
                  f"generate {model} --tensor-parallel {ranks}: greedy text equals the single-process reference run",
                  f"exit {tp.returncode}\nreference: {reference.stdout!r}\ntensor parallel: {tp.stdout!r}\n{tp.stderr}")


def test_chat(journey):
    # mpirun passes its stdin to rank 0, which owns the chat loop
    args = ["chat", "--temperature", "0", "--max-tokens", "20", "--threads", "1"]
    single = subprocess.run([journey] + args, input="Hello there\n", capture_output=True, text=True, timeout=120)
    tp = subprocess.run([RUN_MPI, "2", journey] + args + ["--tensor-parallel", "2"], input="Hello there\n",
                        capture_output=True, text=True, timeout=120)
    check(single.returncode == 0 and tp.returncode == 0 and tp.stdout == single.stdout and tp.stdout.strip(),
          "chat --tensor-parallel 2: the greedy answer equals the single-process one",
          f"single: {single.stdout!r}\ntensor parallel: {tp.stdout!r}\n{tp.stderr[-2000:]}")


def test_quantized(journey):
    """A random model whose splits fall on block boundaries (tools/make_random_model.py --preset
    tp-blocks), quantized by journey quantize: Q8_0 at 2 and 4 ranks, Q4_K_M (blocks of 256) at 2.
    Compared with the single-process fast backend, which multiplies the same stored blocks with the
    same activations quantized per block (a whole block per rank: the same scales); the reference
    multiplies dequantized weights by f32 activations, so its greedy tokens may part from both."""
    work = tempfile.mkdtemp(prefix="journey-tp-quant-")
    try:
        model = os.path.join(work, "f32")
        made = run(["/usr/bin/python3", "tools/make_random_model.py", "--preset", "tp-blocks", "--out", model])
        assert made.returncode == 0, made.stderr
        for file_type, ranks in (("q8_0", (2, 4)), ("q4_k_m", (2,))):
            path = os.path.join(work, file_type + ".gguf")
            quantized = run([journey, "quantize", model, "--type", file_type, "--out", path])
            assert quantized.returncode == 0, quantized.stderr
            single = run([journey] + generate_args(path, []))
            assert single.returncode == 0, single.stderr
            for n in ranks:
                tp = run([RUN_MPI, str(n), journey] + generate_args(path, ["--tensor-parallel", str(n)]))
                check(tp.returncode == 0 and tp.stdout == single.stdout,
                      f"generate {file_type} --tensor-parallel {n}: greedy text equals the single-process cpu run",
                      f"exit {tp.returncode}\nsingle: {single.stdout!r}\ntensor parallel: {tp.stdout!r}\n{tp.stderr[-1500:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_errors(journey):
    three = run([RUN_MPI, "3", journey] + generate_args("data/stories260K", ["--tensor-parallel", "3"]))
    check(three.returncode != 0 and "num_attention_heads (8) is not divisible by --tensor-parallel 3" in three.stderr,
          "8 heads over 3 ranks: a start-up error naming the numbers", three.stderr[-2000:])
    # kq-q4_k_m.gguf stores o_proj [256, 256] in Q4_K blocks of 256 along its input: half a block per rank
    blocks = run([RUN_MPI, "2", journey] + generate_args("tests/data/quantized/kq-q4_k_m.gguf", ["--tensor-parallel", "2"]))
    check(blocks.returncode != 0 and "splits its 256 input columns into 128 per rank, which is not a multiple of the q4_K "
          "block size 256" in blocks.stderr, "a split through a stored Q4_K block: a start-up error naming the tensor",
          blocks.stderr[-2000:])
    alone = run([journey] + generate_args("data/stories260K", ["--tensor-parallel", "2"]))
    check(alone.returncode == 1 and "the MPI world has 1 process; start it as: mpirun -np 2" in alone.stderr,
          "--tensor-parallel 2 without mpirun: says how to start it", alone.stderr[-2000:])
    device = run([journey] + generate_args("data/stories260K", ["--tensor-parallel", "2", "--device", "reference"]))
    check(device.returncode == 1 and "--device reference has no tensor-parallel path" in device.stderr,
          "--tensor-parallel 2 --device reference: refused, naming the device", device.stderr[-2000:])
    transport = run([journey] + generate_args("data/stories260K", ["--tensor-parallel", "2", "--tp-transport", "nccl"]))
    check(transport.returncode == 1 and "only --device cuda chooses how its collectives travel" in transport.stderr,
          "--tp-transport nccl on --device cpu: refused, naming the device", transport.stderr[-2000:])
    copies = run([RUN_MPI, "2", journey] + generate_args("data/stories260K", []))
    check(copies.returncode != 0 and "--tensor-parallel is 1" in copies.stderr,
          "mpirun -np 2 without --tensor-parallel: refuses to run two copies", copies.stderr[-2000:])


def test_bench(journey):
    config = json.load(open("data/stories260K/config.json"))
    layers, hidden = config["num_hidden_layers"], config["hidden_size"]
    out = run([RUN_MPI, "2", journey, "bench", "--tensor-parallel", "2", "--json", "--runs", "1",
               "--prompt-tokens", "16", "--gen-tokens", "8", "--threads", "1"])
    if out.returncode != 0:
        check(False, "bench --tensor-parallel 2 runs", out.stderr[-2000:])
        return
    tp = json.loads(out.stdout).get("tensor_parallel")
    check(tp is not None, "bench --tensor-parallel 2 reports the group's communication", out.stdout[-2000:])
    if tp:
        check(str(tp.get("transport", "")).startswith("MPI"),
              f"bench: the collectives' transport is reported (--device cpu: the MPI communicator): {tp.get('transport')!r}")
        check(tp["all_reduces_per_step"] == 2 * layers,
              f"bench: {tp['all_reduces_per_step']} all-reduces per forward step = 2 x {layers} layers")
        check(tp["all_reduce_bytes_per_token"] == 2 * layers * hidden * 4,
              f"bench: {tp['all_reduce_bytes_per_token']:.0f} bytes all-reduced per token = 2 x {layers} layers x "
              f"{hidden} hidden x 4 bytes")
        print(f"     tokens/s under --tensor-parallel 2: prefill {json.loads(out.stdout)['prefill_tok_s']}, "
              f"decode {json.loads(out.stdout)['decode_tok_s']}")


def test_trace(journey, trace_tool):
    """journey trace on 2 ranks: each rank's dump says which part it holds, its partial stages are
    that part of the single-process run's, its all-reduced stages are the whole, and the report
    shows the split."""
    import numpy as np
    work = tempfile.mkdtemp(prefix="journey-tp-trace-")
    try:
        args = ["trace", "--temperature", "0", "--max-tokens", "3", "--threads", "1", PROMPT]
        one = run([journey] + args + ["--out", os.path.join(work, "one")])
        two = run([RUN_MPI, "2", journey] + args + ["--out", os.path.join(work, "two"), "--tensor-parallel", "2"])
        if one.returncode != 0 or two.returncode != 0:
            check(False, "trace --tensor-parallel 2 runs", one.stderr[-1500:] + two.stderr[-1500:])
            return
        dirs = [os.path.join(work, "two"), os.path.join(work, "two", "rank1")]
        manifests = [json.load(open(os.path.join(d, "manifest.json"))) for d in dirs]
        transports = [m.get("tensor_parallel", {}).get("transport", "") for m in manifests]
        check(all(t.startswith("MPI") for t in transports),
              f"trace: every rank's manifest names the collectives' transport: {transports}")
        heads = [m.get("tensor_parallel", {}).get("shard", {}).get("heads") for m in manifests]
        check([m.get("tensor_parallel", {}).get("rank") for m in manifests] == [0, 1] and heads == [[0, 4], [4, 8]],
              "trace --tensor-parallel 2: rank 0 dumps to DIR, rank 1 to DIR/rank1, each manifest naming its rank and heads",
              str([m.get("tensor_parallel") for m in manifests]))

        def stage(directory, name, step=0):
            return np.load(os.path.join(directory, f"s{step:03d}.{name}.npy"))

        single = os.path.join(work, "one")
        for layer in (0, 4):
            q = stage(single, f"L{layer}.q")
            for rank, d in enumerate(dirs):
                part = stage(d, f"L{layer}.q")
                begin, end = heads[rank]
                check(part.shape == q[:, begin:end, :].shape and np.allclose(part, q[:, begin:end, :], rtol=1e-5, atol=1e-6),
                      f"trace: rank {rank}'s L{layer}.q {list(part.shape)} is heads {begin}-{end - 1} of the single-process "
                      f"L{layer}.q {list(q.shape)}")
            whole = stage(single, f"L{layer}.ffn_out")
            sums = [stage(d, f"L{layer}.ffn_out") for d in dirs]
            check(all(x.shape == whole.shape for x in sums) and np.array_equal(sums[0], sums[1]) and
                  np.allclose(sums[0], whole, rtol=1e-4, atol=1e-5),
                  f"trace: L{layer}.ffn_out is the all-reduced whole {list(whole.shape)}, the same on both ranks")
        check_partials(dirs, manifests, single, stage, "trace --tensor-parallel 2")
        # 4 ranks: 2 heads and 43 FFN columns each; the all-reduce now adds 4 shares (another sum order)
        four = run([RUN_MPI, "4", journey] + args + ["--out", os.path.join(work, "four"), "--tensor-parallel", "4"])
        if four.returncode != 0:
            check(False, "trace --tensor-parallel 4 runs", four.stderr[-1500:])
        else:
            dirs4 = [os.path.join(work, "four")] + [os.path.join(work, "four", f"rank{r}") for r in (1, 2, 3)]
            check_partials(dirs4, [json.load(open(os.path.join(d, "manifest.json"))) for d in dirs4], single, stage,
                           "trace --tensor-parallel 4")
        for d in dirs:
            out = os.path.join(d, "report.html")
            report = run([trace_tool, "report", d, "--out", out])
            text = open(out).read() if report.returncode == 0 else ""
            check(report.returncode == 0 and '"tensor_parallel"' in text and "rank1/" in text if d == dirs[0] else
                  report.returncode == 0 and '"tensor_parallel"' in text,
                  f"journey-trace report {os.path.relpath(d, work)}: shows the split", report.stderr[-1500:])
            if d == dirs[0] and text:
                check_report_partials(text, dirs, manifests, stage)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# The partials are sums of f32 products in another order than the all-reduced whole and the
# single-process run: compared relative to the largest |value| of the whole.
SUM_TOLERANCE = 1e-5        # sum over ranks of the partials vs the all-reduced stage (f32 sum order only)
SHARE_TOLERANCE = 1e-4      # a rank's partial vs its share recomputed from the single-process run
DIFFERS_AT_LEAST = 1e-2     # a partial recorded after the all-reduce would equal the whole


def max_relative(a, b, whole=None):
    """max |a - b| over max |whole| (default: b), in float64."""
    import numpy as np
    whole = b if whole is None else whole
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(whole))), 1e-30))


def load_o_proj_and_down(model="data/stories260K"):
    """(o_proj [E, H*D], down_proj [E, F]) as stored in the model's safetensors, per layer, in float64."""
    import numpy as np
    from safetensors.numpy import load_file
    weights = load_file(os.path.join(model, "model.safetensors"))
    layers = json.load(open(os.path.join(model, "config.json")))["num_hidden_layers"]
    return [(weights[f"model.layers.{l}.self_attn.o_proj.weight"].astype(np.float64),   # [E, H*D]
             weights[f"model.layers.{l}.mlp.down_proj.weight"].astype(np.float64))       # [E, F]
            for l in range(layers)]


def check_partials(dirs, manifests, single, stage, label):
    """Every rank's attn_out_partial / ffn_out_partial (before the all-reduce) against NumPy:
    their sum over ranks is rank 0's all-reduced attn_out / ffn_out; each differs from that sum (so
    it was recorded before the all-reduce); each is the share its heads / FFN columns make, computed
    from the single-process run's attn_context / act and the stored o_proj / down_proj. The
    logits_partial slices, side by side, are rank 0's gathered logits."""
    import numpy as np
    expected_partials = {"attn_out_partial": "heads", "ffn_out_partial": "ffn_columns", "logits_partial": "vocabulary"}
    found = [m.get("tensor_parallel", {}).get("partials") for m in manifests]
    check(all(p == expected_partials for p in found),
          f"{label}: each rank's manifest names the shard range every partial stage covers", str(found))
    one = json.load(open(os.path.join(single, "manifest.json")))
    check(not any(t["stage"].endswith("_partial") for t in one["tensors"]),
          "trace without --tensor-parallel records no partial stages")
    follower_logits = [t["name"] for m in manifests[1:] for t in m["tensors"] if t["stage"] == "logits"]
    check(not follower_logits, f"{label}: ranks 1.. record no whole logits (each holds only logits_partial, its slice)",
          str(follower_logits))
    weights = load_o_proj_and_down()
    head_dim = weights[0][0].shape[1] // one["model"]["config"]["num_attention_heads"]
    steps = [s["step"] for s in manifests[0]["steps"]]
    shards = [m["tensor_parallel"]["shard"] for m in manifests]
    worst = {"sum": 0.0, "share": 0.0, "differs": float("inf")}
    where = {}
    for step in steps:
        for layer, (o_proj, down) in enumerate(weights):
            for partial, whole_name, source, weight, covers in (
                    ("attn_out_partial", "attn_out", "attn_context", o_proj, "heads"),
                    ("ffn_out_partial", "ffn_out", "act", down, "ffn_columns")):
                parts = [stage(d, f"L{layer}.{partial}", step) for d in dirs]
                whole = stage(dirs[0], f"L{layer}.{whole_name}", step)
                name = f"step {step} L{layer}.{partial}"
                if any(p.shape != whole.shape for p in parts):
                    check(False, f"{label}: {name} has the shape of {whole_name} {list(whole.shape)}",
                          str([list(p.shape) for p in parts]))
                    continue
                error = max_relative(np.sum(np.stack(parts).astype(np.float64), axis=0), whole)
                if error > worst["sum"]: worst["sum"], where["sum"] = error, name
                for rank, part in enumerate(parts):
                    differs = max_relative(part, whole)
                    if differs < worst["differs"]: worst["differs"], where["differs"] = differs, f"{name} rank {rank}"
                    # the share rank `rank` makes: its columns of the input times the same columns of the weight
                    begin, end = shards[rank][covers]
                    if covers == "heads":  # head h owns columns [h * D, (h + 1) * D) of attn_context and o_proj
                        begin, end = begin * head_dim, end * head_dim
                    inputs = stage(single, f"L{layer}.{source}", step).astype(np.float64)  # [T, H*D] or [T, F]
                    share = inputs[:, begin:end] @ weight[:, begin:end].T                   # [T, E]
                    error = max_relative(part, share, whole)
                    if error > worst["share"]: worst["share"], where["share"] = error, f"{name} rank {rank}"
        logits = stage(dirs[0], "logits", step)
        slices = [stage(d, "logits_partial", step) for d in dirs]
        check(np.array_equal(np.concatenate(slices, axis=1), logits),
              f"{label} step {step}: the logits_partial slices side by side are rank 0's gathered logits {list(logits.shape)}",
              str([list(x.shape) for x in slices]))
    check(worst["sum"] <= SUM_TOLERANCE,
          f"{label}: sum over ranks of attn_out_partial / ffn_out_partial = the all-reduced attn_out / ffn_out, every "
          f"layer and step (max |diff| / max |whole| = {worst['sum']:.2e} at {where.get('sum')}; tolerance {SUM_TOLERANCE})")
    check(worst["differs"] >= DIFFERS_AT_LEAST,
          f"{label}: every partial differs from the all-reduced whole (min max|partial - whole| / max|whole| = "
          f"{worst['differs']:.3f} at {where.get('differs')}; at least {DIFFERS_AT_LEAST}): recorded before the all-reduce")
    check(worst["share"] <= SHARE_TOLERANCE,
          f"{label}: each rank's partial is its heads' / FFN columns' share recomputed in NumPy from the single-process "
          f"attn_context / act and the stored o_proj / down_proj (max |diff| / max |whole| = {worst['share']:.2e} at "
          f"{where.get('share')}; tolerance {SHARE_TOLERANCE})")


def check_report_partials(text, dirs, manifests, stage):
    """Rank 0's report carries the partial panel: per step and layer each rank's share's norm, the
    combined stage's norm and the check, the numbers equal to NumPy's on the dumps."""
    import re
    import numpy as np
    found = re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)
    partials = json.loads(found.group(1)).get("tensor_parallel", {}).get("partials") if found else None
    check(partials is not None and "tp-partials" in text and partials["ranks"] == [0, 1],
          "journey-trace report: rank 0's page has the partials panel with both ranks' shares")
    if partials is None:
        return
    names = [s["partial"] for s in partials["stages"]]
    mismatches, rows = [], 0
    for si, step in enumerate(s["step"] for s in manifests[0]["steps"]):
        for kind, layer, norms, whole_norm, error in partials["steps"][si]:
            partial = names[kind]
            name = partial if layer < 0 else f"L{layer}.{partial}"
            whole = stage(dirs[0], name.replace("_partial", ""), step)
            expected = [float(np.linalg.norm(stage(d, name, step).astype(np.float64))) for d in dirs]
            expected_whole = float(np.linalg.norm(whole.astype(np.float64)))
            rows += 1
            if not (np.allclose(norms, expected, rtol=1e-3) and np.isclose(whole_norm, expected_whole, rtol=1e-3) and
                    isinstance(error, (int, float)) and
                    error <= SUM_TOLERANCE * max(float(np.max(np.abs(whole))), 1e-30)):
                mismatches.append(f"step {step} {name}: report {norms} {whole_norm} check {error}; "
                                  f"NumPy {expected} {expected_whole}")
    layers = len(load_o_proj_and_down())
    check(not mismatches and rows == len(manifests[0]["steps"]) * (2 * layers + 1),
          f"journey-trace report: {rows} partial rows (2 per layer + logits per step), norms equal NumPy's within "
          f"1e-3 and every check within {SUM_TOLERANCE} of max |whole|", "\n".join(mismatches[:5]))


def rank_zero_pid(mpirun_pid):
    """The process of rank 0 among mpirun's children (Open MPI sets OMPI_COMM_WORLD_RANK)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            if parent != mpirun_pid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if b"OMPI_COMM_WORLD_RANK=0" in f.read().split(b"\0"):
                    return int(entry)
        except OSError:
            continue
    raise AssertionError(f"no rank 0 among the children of mpirun (pid {mpirun_pid})")


def test_serve(journey):
    work = tempfile.mkdtemp(prefix="journey-tp-")
    try:
        # JourneyServer starts `PROGRAM serve ...`: a program that is mpirun over 2 ranks of journey
        launcher = os.path.join(work, "journey-tp2")
        with open(launcher, "w") as f:
            f.write(f'#!/bin/sh\nexec "{RUN_MPI}" 2 "{journey}" "$@" --tensor-parallel 2\n')
        os.chmod(launcher, os.stat(launcher).st_mode | stat.S_IEXEC)
        request = {"model": "stories", "prompt": PROMPT, "max_tokens": 40, "temperature": 0}
        with JourneyServer(journey, "data/stories260K", name="stories") as single:
            expected = single.post_json("/v1/completions", request)["choices"][0]["text"]
        # rank 0 fails before its backend exists (the port is taken) while rank 1 already follows:
        # the group must still end, with rank 0's error, instead of waiting for rank 0 forever
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            try:
                busy = run([launcher, "serve", "--model", "data/stories260K", "--port", str(port), "--threads", "1"],
                           timeout=60)
                check(busy.returncode != 0 and "cannot listen on" in busy.stderr,
                      "serve --tensor-parallel 2 on a taken port: the group ends with rank 0's error", busy.stderr[-2000:])
            except subprocess.TimeoutExpired:
                check(False, "serve --tensor-parallel 2 on a taken port: the group ends with rank 0's error",
                      "still running after 60 s")
        server = JourneyServer(launcher, "data/stories260K", name="stories")
        with server:
            answers = [server.post_json("/v1/completions", request)["choices"][0]["text"] for _ in range(2)]
            process = server.process
            check(all(a == expected for a in answers),
                  "serve --tensor-parallel 2: two greedy completions equal the single-process server's",
                  f"expected {expected!r}\nfound {answers!r}")
            # SIGTERM to rank 0, as to a server of one process (mpirun itself, on SIGTERM, ends the
            # whole job: SIGTERM to every rank, SIGKILL soon after, and exit status 1)
            os.kill(rank_zero_pid(process.pid), signal.SIGTERM)
            try:
                status = process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                status = None
            check(status == 0, "serve --tensor-parallel 2: the group exits with status 0 on SIGTERM",
                  f"exit status {status}\n{server.log_text()[-3000:]}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--journey", required=True)
    parser.add_argument("--trace-tool", required=True, help="journey-trace")
    args = parser.parse_args()
    if shutil.which("mpirun") is None:
        print("skipped: mpirun not found; install Open MPI (apt install openmpi-bin libopenmpi-dev, as "
              "scripts/install-deps.sh does)")
        return 77
    journey = os.path.abspath(args.journey)
    test_errors(journey)
    test_generate(journey)
    test_quantized(journey)
    test_chat(journey)
    test_bench(journey)
    test_trace(journey, os.path.abspath(args.trace_tool))
    test_serve(journey)
    if failures:
        print(f"{len(failures)} checks failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
