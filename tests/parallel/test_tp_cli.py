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
    all-reduced ffn_out is the whole on both ranks; journey-trace report shows the split;
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
        for d in dirs:
            out = os.path.join(d, "report.html")
            report = run([trace_tool, "report", d, "--out", out])
            text = open(out).read() if report.returncode == 0 else ""
            check(report.returncode == 0 and '"tensor_parallel"' in text and "rank1/" in text if d == dirs[0] else
                  report.returncode == 0 and '"tensor_parallel"' in text,
                  f"journey-trace report {os.path.relpath(d, work)}: shows the split", report.stderr[-1500:])
    finally:
        shutil.rmtree(work, ignore_errors=True)


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
