// The `journey` and `journey-trace` commands as a user meets them when something is off: the real
// binaries, stdout and stderr captured apart. Expected messages and numbers come from outside the
// code under test: the words a user typed, the published parameter counts of Llama 2 7B / 70B
// (6,738,415,616 and 68,976,648,192, Meta's model cards and the Hugging Face checkpoints).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct Run {
  int status = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const fs::path kWork = fs::path(JOURNEY_BINARY_DIR) / "tests" / "cli";

Run run(const std::string& binary, const std::string& args) {
  fs::create_directories(kWork);
  const std::string command = "'" + binary + "' " + args + " < /dev/null > '" + (kWork / "out.txt").string() + "' 2> '" +
                              (kWork / "err.txt").string() + "'";
  const int raw = std::system(command.c_str());
  Run r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  r.out = slurp(kWork / "out.txt");
  r.err = slurp(kWork / "err.txt");
  return r;
}
Run journey(const std::string& args) { return run(JOURNEY_CLI, args); }
// journey with one environment variable set (the kernel choices JOURNEY_CPU_ISA, JOURNEY_DECODE_PREFETCH)
Run journey_with(const std::string& variable, const std::string& value, const std::string& args) {
  return run("/usr/bin/env", variable + "=" + value + " '" + std::string(JOURNEY_CLI) + "' " + args);
}
Run tracer(const std::string& args) { return run(JOURNEY_TRACE_TOOL, args); }

bool has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

void write_file(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

}  // namespace

TEST_CASE("a mistyped command or option names the nearest valid one and exits with 2") {
  Run cmd = journey("genrate \"Once upon a time\"");
  INFO(cmd.err);
  CHECK(cmd.status == 2);
  CHECK(has(cmd.err, "journey: error: unknown command 'genrate'; did you mean 'generate'?"));
  CHECK(has(cmd.err, "(run 'journey --help' for the list)"));
  CHECK(cmd.out.empty());

  Run opt = journey("generate --temprature 0 \"Once\"");
  INFO(opt.err);
  CHECK(opt.status == 2);
  CHECK(has(opt.err, "unknown option '--temprature' for 'journey generate'; did you mean '--temperature'?"));
  CHECK(has(opt.err, "(run 'journey generate --help' for the list)"));

  Run prefix = journey("trace \"Once\" --out /tmp/x --max-tok 3");
  CHECK(prefix.status == 2);
  CHECK(has(prefix.err, "did you mean '--max-tokens'?"));

  // Nested commands: the option is judged against the command it belongs to.
  Run nested = journey("convert llama2c model.bin --tokenzier tok.model --out /tmp/x");
  INFO(nested.err);
  CHECK(nested.status == 2);
  CHECK(has(nested.err, "unknown option '--tokenzier' for 'journey convert llama2c'; did you mean '--tokenizer'?"));

  // Nothing close: no guess, but the list of commands.
  Run far = journey("xyzzy");
  CHECK(far.status == 2);
  CHECK(has(far.err, "unknown command 'xyzzy' (commands: inspect, convert, tokenize"));
  CHECK_FALSE(has(far.err, "did you mean"));

  // A missing required argument is a usage error too (not CLI11's 106).
  Run missing = journey("trace \"Once upon a time\"");
  CHECK(missing.status == 2);
  CHECK(has(missing.err, "--out"));

  // A negative number is a value, not an unknown option.
  Run negative = journey("generate --max-tokens 2 --temperature 0 --presence-penalty -0.5 \"Once\"");
  INFO(negative.err);
  CHECK(negative.status == 0);
}

TEST_CASE("exit statuses: 0 for help, 1 for a bad value or file, and they are documented in --help") {
  Run help = journey("--help");
  CHECK(help.status == 0);
  CHECK(has(help.out, "exit status: 0 success; 1 an error"));
  CHECK(has(help.out, "2 a usage error"));
  Run version = journey("--version");
  CHECK(version.status == 0);
  Run bad_value = journey("generate --top-p 0 \"Once\"");
  CHECK(bad_value.status == 1);
  CHECK(has(bad_value.err, "top_p"));
  Run trace_help = tracer("--help");
  CHECK(trace_help.status == 0);
  CHECK(has(trace_help.out, "exit status: 0 done"));
  Run trace_typo = tracer("rendr some/dir");
  CHECK(trace_typo.status == 2);
  CHECK(has(trace_typo.err, "journey-trace: error: unknown command 'rendr'; did you mean 'render'?"));
}

TEST_CASE("journey template refuses a file that is not a chat template, naming it") {
  const fs::path messages = kWork / "messages.json";
  write_file(messages, R"([{"role": "user", "content": "北京今天下雨吗？"}])");
  const fs::path text = kWork / "notes.txt";
  write_file(text, "just some notes\n");
  Run r = journey("template --model '" + text.string() + "' --messages '" + messages.string() + "'");
  INFO(r.err);
  CHECK(r.status == 1);
  CHECK(has(r.err, text.string() + " is not a chat template"));
  CHECK(r.out.empty());

  // A JSON file without a chat_template (here the model's config.json) says what it lacks.
  Run config = journey("template --model data/stories260K/config.json --messages '" + messages.string() + "'");
  INFO(config.err);
  CHECK(config.status == 1);
  CHECK(has(config.err, "config.json is not a chat template: it has no \"chat_template\" field"));

  // A model directory without a template renders with the plain format and says so on stderr.
  Run plain = journey("template --model data/stories260K --messages '" + messages.string() + "'");
  CHECK(plain.status == 0);
  CHECK(plain.out == "北京今天下雨吗？");
  CHECK(has(plain.err, "has no chat template"));

  // The real Qwen2.5 template renders the seed's message.
  Run qwen = journey("template --model tests/data/chat-templates/qwen2.5-instruct.tokenizer_config.json --messages '" +
                     messages.string() + "' --add-generation-prompt");
  INFO(qwen.err);
  CHECK(qwen.status == 0);
  CHECK(has(qwen.out, "<|im_start|>user\n北京今天下雨吗？<|im_end|>\n<|im_start|>assistant\n"));
}

TEST_CASE("journey inspect plans memory from a config.json alone: the 7B = 14 GB and 70B = 140 GB arithmetic") {
  // Llama 2's published configurations (meta-llama/Llama-2-7b-hf, Llama-2-70b-hf config.json).
  const fs::path seven = kWork / "llama-2-7b";
  fs::remove_all(seven);
  write_file(seven / "config.json", R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
    "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "tie_word_embeddings": false, "torch_dtype": "float16", "bos_token_id": 1, "eos_token_id": 2})");
  Run r = journey("inspect '" + seven.string() + "' --memory 24GB --memory 80GB --seq-len 4096");
  INFO(r.out, r.err);
  REQUIRE(r.status == 0);
  CHECK(has(r.out, "Parameters  6,738,415,616"));
  CHECK(has(r.out, "13.48 GB = 6,738,415,616 x 2 bytes"));                 // the seeds' "7B needs about 14 GB"
  CHECK(has(r.out, "524,288 bytes = 2 (K, V) x 32 layers x 32 KV heads x 128 head dim x 2 bytes"));
  CHECK(has(r.out, "one sequence of 4096 tokens"));
  CHECK(has(r.out, "2.15 GB"));                                            // 4096 x 524,288 bytes
  // (24e9 - 13.48e9) / 2.147e9 = 4.9 -> 4 sequences; (80e9 - 13.48e9) / 2.147e9 = 30.98 -> 30.
  CHECK(has(r.out, "in 24GB                        4 sequences of 4096 tokens"));
  CHECK(has(r.out, "in 80GB                        30 sequences of 4096 tokens"));
  CHECK(has(r.out, "config.json only: no weights read"));

  const fs::path seventy = kWork / "llama-2-70b";
  fs::remove_all(seventy);
  write_file(seventy / "config.json", R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
    "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
    "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "tie_word_embeddings": false, "torch_dtype": "float16"})");
  Run big = journey("inspect '" + seventy.string() + "' --memory 80GB --memory 160GB --seq-len 4096");
  INFO(big.out, big.err);
  REQUIRE(big.status == 0);
  CHECK(has(big.out, "Parameters  68,976,648,192"));
  CHECK(has(big.out, "137.95 GB = 68,976,648,192 x 2 bytes"));  // the seeds' "70B needs about 140 GB"
  // GQA: 8 KV heads, so 2 x 80 x 8 x 128 x 2 = 327,680 bytes per token.
  CHECK(has(big.out, "327,680 bytes = 2 (K, V) x 80 layers x 8 KV heads"));
  CHECK(has(big.out, "in 80GB                        the weights alone need 137.95 GB: they do not fit"));
  // (160e9 - 137.95e9) / (4096 x 327,680) = 16.4 -> 16.
  CHECK(has(big.out, "in 160GB                       16 sequences of 4096 tokens"));

  Run json = journey("inspect '" + seven.string() + "' --json --memory 24GB --seq-len 4096");
  REQUIRE(json.status == 0);
  CHECK(has(json.out, "\"config_only\": true"));
  CHECK(has(json.out, "\"sequences\": 4"));

  Run bad = journey("inspect '" + seven.string() + "' --memory lots");
  CHECK(bad.status == 1);
  CHECK(has(bad.err, "memory size \"lots\" is not understood"));
}

TEST_CASE("journey-trace render and report name the valid range of --layer and --step") {
  const fs::path dump = kWork / "dump";
  Run t = journey("trace --model data/stories260K \"Once upon a time\" --out '" + dump.string() + "' --max-tokens 3 --temperature 0");
  REQUIRE(t.status == 0);
  Run layer = tracer("render '" + dump.string() + "' --layer 99");
  CHECK(layer.status == 2);
  CHECK(has(layer.err, "--layer 99 is outside the model's layers: " + dump.string() + " has layers 0-4"));
  Run step = tracer("render '" + dump.string() + "' --step 999");
  CHECK(step.status == 2);
  CHECK(has(step.err, "--step 999 is not in " + dump.string() + ": its steps are 0-2"));
  Run report = tracer("report '" + dump.string() + "' --layer 5");
  CHECK(report.status == 2);
  CHECK(has(report.err, "has layers 0-4"));
}

TEST_CASE("JOURNEY_CPU_ISA caps the kernels: the fallback a CPU without AVX-512 runs gives the same greedy text; a bad name is an error") {
  auto capped = [](const std::string& level, const std::string& args) { return journey_with("JOURNEY_CPU_ISA", level, args); };
  const std::string prompt = "generate --model data/stories260K --device cpu --max-tokens 24 --temperature 0 \"Once upon a time\"";
  Run best = journey(prompt);
  REQUIRE(best.status == 0);
  for (const char* level : {"generic", "avx2"}) {
    CAPTURE(level);
    Run low = capped(level, prompt);
    INFO(low.err);
    REQUIRE(low.status == 0);
    CHECK(low.out == best.out);  // f32 kernels of another width: the sums' order differs, the argmax does not
  }
  Run bench = capped("generic", "bench --model data/stories260K --runs 1 --prompt-tokens 4 --gen-tokens 2 --json");
  INFO(bench.err);
  REQUIRE(bench.status == 0);
  CHECK(has(bench.out, "\"cpu_kernels\": \"generic (JOURNEY_CPU_ISA=generic)"));  // (", decode prefetch ..." follows)

  Run bad = capped("sse9", prompt);
  CHECK(bad.status != 0);
  CHECK(has(bad.err, "JOURNEY_CPU_ISA='sse9' is not a kernel level; expected one of generic, avx2, avx512-vnni, avx512-bf16, amx"));
}

TEST_CASE("JOURNEY_DECODE_PREFETCH chooses how decode fetches its rows ahead: the same greedy text, the choice in bench's kernels; a bad value is an error") {
  // a prefetch moves no number: every mode gives the same greedy text, on F32 and F16 rows, Q8_0's
  // stored rows and Q4_0's row groups (AVX512-VNNI)
  std::vector<std::string> models = {"data/stories260K"};
  for (const std::string type : {"q8_0", "q4_0"}) {
    const fs::path quantized = kWork / ("stories260K-decode-prefetch-" + type + ".gguf");
    const Run made = journey("quantize data/stories260K --type " + type + " --out '" + quantized.string() + "'");
    INFO(made.err);
    REQUIRE(made.status == 0);
    models.push_back("'" + quantized.string() + "'");
  }
  for (const std::string& model : models) {
    const std::string prompt = "generate --model " + model + " --device cpu --max-tokens 24 --temperature 0 \"Once upon a time\"";
    const std::string plain = journey(prompt).out;
    REQUIRE(has(plain, "Once upon a time"));
    for (const std::string value : {"off", "near", "two-level"}) {
      Run chosen = journey_with("JOURNEY_DECODE_PREFETCH", value, prompt);
      Run bench = journey_with("JOURNEY_DECODE_PREFETCH", value,
                               "bench --model " + model + " --runs 1 --prompt-tokens 4 --gen-tokens 2 --json");
      CAPTURE(model); CAPTURE(value); INFO(chosen.err); INFO(bench.err);
      CHECK((chosen.status == 0 && bench.status == 0));
      CHECK(chosen.out == plain);
      CHECK(has(bench.out, ", decode prefetch " + value));  // (", Q8_0 block sums ..." may follow)
    }
  }
  // unset: this CPU's choice, two-level on AMD, near elsewhere (decode_prefetch.h)
  std::ifstream cpuinfo("/proc/cpuinfo");
  const std::string info((std::istreambuf_iterator<char>(cpuinfo)), std::istreambuf_iterator<char>());
  const Run chosen = journey("bench --model data/stories260K --runs 1 --prompt-tokens 4 --gen-tokens 2 --json");
  REQUIRE(chosen.status == 0);
  CHECK(has(chosen.out, has(info, "AuthenticAMD") ? ", decode prefetch two-level" : ", decode prefetch near"));
  Run bad = journey_with("JOURNEY_DECODE_PREFETCH", "sometimes", "generate --model data/stories260K --device cpu --max-tokens 4 hi");
  CHECK(bad.status != 0);
  CHECK(has(bad.err, "JOURNEY_DECODE_PREFETCH='sometimes' is not a choice; expected off, near or two-level"));
}

TEST_CASE("bench --bandwidth-only: the read-bandwidth probe alone, no model; it excludes --model") {
  // what scripts/bench-peers.sh runs right after each llama.cpp run: a real read of 2 GiB, on the threads asked for
  Run json = journey("bench --bandwidth-only --threads 1 --json");
  INFO(json.err);
  REQUIRE(json.status == 0);
  CHECK(has(json.out, "\"threads\": 1"));
  CHECK(has(json.out, "\"probe_bytes\": 2147483648"));
  const size_t at = json.out.find("\"read_bandwidth_gb_s\": ");
  REQUIRE(at != std::string::npos);
  const double gb_s = std::strtod(json.out.c_str() + at + 23, nullptr);
  CHECK(gb_s > 0.1);  // a read of 2 GiB at under 0.1 GB/s (20 s) is no read of memory
  CHECK(gb_s < 10000);
  Run plain = journey("bench --bandwidth-only --threads 2");
  CHECK(plain.status == 0);
  CHECK(has(plain.out, "read bandwidth "));
  CHECK(has(plain.out, " GB/s (the best of 4 reads of 2.0 GiB on 2 threads)"));
  Run with_model = journey("bench --bandwidth-only --model data/stories260K");
  CHECK(with_model.status == 2);
  CHECK(has(with_model.err, "--model excludes --bandwidth-only"));
}

TEST_CASE("JOURNEY_BF16_PREFILL: the AVX512-BF16 panels on, off or where vdpbf16ps measures faster than f32 FMA (said in bench's kernels); a bad value is an error") {
  // stories260K as BF16 (journey quantize), a prompt of more than 16 tokens: its products are a prefill
  const fs::path bf16 = kWork / "stories260K-bf16.gguf";
  Run made = journey("quantize data/stories260K --type bf16 --out '" + bf16.string() + "'");
  INFO(made.err);
  REQUIRE(made.status == 0);
  const std::string prompt = "generate --model '" + bf16.string() + "' --device cpu --max-tokens 24 --temperature 0 "
                             "\"Once upon a time there was a little girl named Lily. She loved to play outside in the park with her dog\"";
  const std::string bench = "bench --model '" + bf16.string() + "' --runs 1 --prompt-tokens 24 --gen-tokens 2 --json";
  std::map<std::string, std::string> kernels;  // setting ("" unset) -> bench's cpu_kernels
  for (const std::string value : {"", "on", "off"}) {
    CAPTURE(value);
    Run text = journey_with("JOURNEY_BF16_PREFILL", value, prompt), bench_run = journey_with("JOURNEY_BF16_PREFILL", value, bench);
    INFO(text.err); INFO(bench_run.err);
    REQUIRE((text.status == 0 && bench_run.status == 0));
    CHECK(has(text.out, "Once upon a time"));
    const size_t at = bench_run.out.find("\"cpu_kernels\": \"");
    REQUIRE(at != std::string::npos);
    kernels[value] = bench_run.out.substr(at, bench_run.out.find('"', at + 16) - at);
  }
  INFO(kernels[""]); INFO(kernels["on"]); INFO(kernels["off"]);
  const bool amx = has(kernels[""], "+ amx-bf16 prefill");
  const bool bf16_dot = amx || has(kernels["on"], "+ avx512-bf16 prefill");  // the CPU has vdpbf16ps
  CHECK(!has(kernels["off"], "+ avx512-bf16 prefill"));
  if (bf16_dot && !amx) {
    CHECK(has(kernels["on"], "+ avx512-bf16 prefill (JOURNEY_BF16_PREFILL=on)"));
    CHECK(has(kernels["off"], "(avx512-bf16 not used: JOURNEY_BF16_PREFILL=off;"));
    // unset: the panels exactly where the measurement named beside the choice has vdpbf16ps at
    // least as fast as f32 FMA
    const std::string measured = "vdpbf16ps ";
    const size_t at = kernels[""].find(measured);
    REQUIRE(at != std::string::npos);
    int bf16_rate = 0, fma_rate = 0;
    REQUIRE(std::sscanf(kernels[""].c_str() + at + measured.size(), "%d against f32 FMA %d", &bf16_rate, &fma_rate) == 2);
    CHECK(bf16_rate > 0);
    CHECK(fma_rate > 0);
    CHECK(has(kernels[""], "+ avx512-bf16 prefill (vdpbf16ps") == (bf16_rate >= fma_rate));
    CHECK(has(kernels[""], "(avx512-bf16 not used: vdpbf16ps") == (bf16_rate < fma_rate));
  }
  if (!bf16_dot) MESSAGE("this CPU has no AVX512-BF16: the setting changes nothing, the runs compared all the same");
  Run bad = journey_with("JOURNEY_BF16_PREFILL", "maybe", prompt);
  CHECK(bad.status != 0);
  CHECK(has(bad.err, "JOURNEY_BF16_PREFILL='maybe' is not a choice; expected on or off"));
}

TEST_CASE("JOURNEY_ROW_GROUPS: rows regrouped by 8 at load (said in bench's kernels) give the same greedy text as the rows as stored; a bad value is an error") {
  // stories260K as Q4_0, Q8_0 and Q4_K (journey quantize): its matrices of 64 rows are regrouped
  // where the type is chosen: Q4_0 (and on AMD Q4_K) by default ("on"), Q8_0 when named (the model's rows
  // of 64 cannot be Q4_K: its q4_k file holds Q5_0 and Q8_0 matrices, regrouped only by the list)
  std::string prompt;
  for (const std::string type : {"q4_0", "q8_0", "q4_k"}) {
    CAPTURE(type);
    const fs::path quantized = kWork / ("stories260K-" + type + ".gguf");
    Run made = journey("quantize data/stories260K --type " + type + " --out '" + quantized.string() + "'");
    INFO(made.err);
    REQUIRE(made.status == 0);
    prompt = "generate --model '" + quantized.string() + "' --device cpu --max-tokens 40 --temperature 0 \"Once upon a time\"";
    const std::string bench = "bench --model '" + quantized.string() + "' --runs 1 --prompt-tokens 4 --gen-tokens 2 --json";
    Run off = journey_with("JOURNEY_ROW_GROUPS", "off", prompt + " --no-mmap");
    INFO(off.err);
    REQUIRE(off.status == 0);
    CHECK(has(off.out, "Once upon a time"));
    CHECK(!has(journey_with("JOURNEY_ROW_GROUPS", "off", bench).out, "regrouped"));
    bool grouped_somewhere = false;
    for (const std::string choice : {"on", "q4_0,q8_0,q4_k"})
      for (const std::string placement : {"--no-mmap", "--mmap"}) {
        CAPTURE(choice); CAPTURE(placement);
        Run on = journey_with("JOURNEY_ROW_GROUPS", choice, prompt + " " + placement);
        Run bench_on = journey_with("JOURNEY_ROW_GROUPS", choice, bench + " " + placement);
        INFO(on.err); INFO(bench_on.err);
        REQUIRE((on.status == 0 && bench_on.status == 0));
        CHECK(on.out == off.out);  // each row's dot product has the same bits either way
        // the CPUs with dot_row_groups: AVX512-VNNI for the three types, AVX2 for Q4_0 and Q4_K (the
        // q4_k file holds none of those: its Q5_0 and Q8_0 matrices are grouped on AVX512-VNNI only)
        const bool vnni = has(bench_on.out, "\"cpu_kernels\": \"avx512-vnni");
        const bool avx2 = has(bench_on.out, "\"cpu_kernels\": \"avx2");
        const bool has_kernel = vnni || (avx2 && type == "q4_0");
        // regrouped where the weights are copied (not the file's bytes in place), the CPU has the
        // kernel and the type is chosen
        const bool chosen = choice != "on" || type == "q4_0";
        const bool grouped = has(bench_on.out, ", rows regrouped by 8 (");
        CHECK(grouped == (has_kernel && chosen && placement == "--no-mmap"));
        grouped_somewhere = grouped_somewhere || grouped;
      }
    if (!grouped_somewhere)
      MESSAGE("this CPU has no dot_row_groups for ", type,
              " (AVX512-VNNI; Q4_0 and Q4_K also AVX2): nothing was regrouped, the text compared all the same");
  }
  for (const std::string bad_value : {"maybe", "q4_0,q5_0"}) {
    Run bad = journey_with("JOURNEY_ROW_GROUPS", bad_value, prompt);
    CHECK(bad.status != 0);
    CHECK(has(bad.err, "JOURNEY_ROW_GROUPS='" + bad_value +
                           "' is not a choice; expected on, off or a list of q4_0, q8_0, q4_k"));
  }
}

TEST_CASE("JOURNEY_Q8_0_BLOCK_SUMS: Q8_0's block sums (said in bench's kernels) are made unless off; the same greedy text; a bad value is an error") {
  const fs::path quantized = kWork / "stories260K-q8_0-sums.gguf";
  Run made = journey("quantize data/stories260K --type q8_0 --out '" + quantized.string() + "'");
  INFO(made.err);
  REQUIRE(made.status == 0);
  const std::string prompt = "generate --model '" + quantized.string() + "' --device cpu --max-tokens 40 --temperature 0 \"Once upon a time\"";
  const std::string bench = "bench --model '" + quantized.string() + "' --runs 1 --prompt-tokens 4 --gen-tokens 2 --json";
  Run text_on = journey_with("JOURNEY_Q8_0_BLOCK_SUMS", "on", prompt), text_off = journey_with("JOURNEY_Q8_0_BLOCK_SUMS", "off", prompt);
  Run bench_on = journey_with("JOURNEY_Q8_0_BLOCK_SUMS", "on", bench), bench_off = journey_with("JOURNEY_Q8_0_BLOCK_SUMS", "off", bench);
  INFO(text_on.err); INFO(bench_on.err);
  REQUIRE((text_on.status == 0 && text_off.status == 0 && bench_on.status == 0 && bench_off.status == 0));
  CHECK(has(text_on.out, "Once upon a time"));
  CHECK(text_on.out == text_off.out);
  // made where the CPU has the kernel (AVX512-VNNI): the Q8_0 matrices as stored, 1/17 of their bytes
  const bool vnni = has(bench_on.out, "\"cpu_kernels\": \"avx512-vnni");
  CHECK(has(bench_on.out, ", Q8_0 block sums (") == vnni);
  CHECK(!has(bench_off.out, "block sums"));
  if (!vnni) MESSAGE("this CPU has no AVX512-VNNI: no block sums are made, the text compared all the same");
  Run bad = journey_with("JOURNEY_Q8_0_BLOCK_SUMS", "sometimes", prompt);
  CHECK(bad.status != 0);
  CHECK(has(bad.err, "JOURNEY_Q8_0_BLOCK_SUMS='sometimes' is not a choice; expected on or off"));
}

TEST_CASE("--mmap and --no-mmap place the weights; both give the same greedy text, and together they are a usage error") {
  const std::string prompt = "generate --model data/stories260K --device cpu --max-tokens 24 --temperature 0 \"Once upon a time\"";
  Run placed = journey(prompt);  // the default: copied into 2 MiB pages where Linux has them, else in place
  REQUIRE(placed.status == 0);
  for (const char* flag : {"--mmap", "--no-mmap"}) {
    CAPTURE(flag);
    Run run = journey(prompt + " " + flag);
    INFO(run.err);
    REQUIRE(run.status == 0);
    CHECK(run.out == placed.out);  // the same bytes multiplied by the same kernels, wherever they lie
  }
  Run both = journey(prompt + " --mmap --no-mmap");
  CHECK(both.status == 2);
  CHECK(has(both.err, "--mmap excludes --no-mmap"));
}
