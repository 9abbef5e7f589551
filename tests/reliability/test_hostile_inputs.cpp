// Regression tests for the crashes of issue #12, each with its input (built here: most are
// large but regular), and for the limits that now hold by construction (docs/reliability.md).
// Each case failed before its fix with a signal (SIGSEGV from stack overflow, SIGFPE), a hang, an
// out-of-bounds write or unbounded memory; now each is a journey::Error naming the limit.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "assets/hf_config.h"
#include "assets/llama2c.h"
#include "assets/safetensors.h"
#include "core/error.h"
#include "core/untrusted.h"
#include "server/openai_api.h"
#include "text/chat_template.h"
#include "text/jinja.h"
#include "text/loaders.h"
#include "text/special_tokens.h"
#include "text/tokenizer.h"
#include "trace/manifest.h"
#include "trace/npy.h"

namespace journey {
namespace {

namespace fs = std::filesystem;

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

// [[[…]]] (n levels) around `inner`.
std::string nested_arrays(size_t n, const std::string& inner = "1") { return repeat("[", n) + inner + repeat("]", n); }
std::string nested_objects(size_t n) { return repeat("{\"a\":", n) + "1" + repeat("}", n); }

struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& name) : path(fs::temp_directory_path() / ("journey-reliability-" + name)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
  fs::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name, std::ios::binary) << text;
    return path / name;
  }
};

template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string render(const std::string& source, const jinja::RenderLimits& limits = {}) {
  return jinja::Template::parse(source, "hostile.jinja").render(jinja::default_globals(0), limits);
}
std::string render_error(const std::string& source, const jinja::RenderLimits& limits = {}) {
  return error_of([&] { render(source, limits); });
}

// ---- core/untrusted.h ----------------------------------------------------------------------

TEST_CASE("json_nesting_depth counts brackets outside strings and stops past the limit") {
  CHECK(json_nesting_depth(R"({"a": [1, {"b": "[[[[["}]})", 100) == 3);
  CHECK(json_nesting_depth(R"("\"[[[")", 100) == 0);
  CHECK(json_nesting_depth(nested_arrays(100000), 64) == 65);  // stops at limit + 1
  CHECK(json_nesting_depth("]]]]{", 10) == 1);
}

TEST_CASE("parse_untrusted_json refuses deep nesting before parsing, and keeps the error short") {
  CHECK(parse_untrusted_json(nested_arrays(kMaxJsonDepth), "x").is_array());
  const std::string e = error_of([] { parse_untrusted_json(nested_arrays(100000), "body.json"); });
  CHECK_MESSAGE(e.find("body.json: JSON nested deeper than 64 levels") != std::string::npos, e);
  const std::string syntax = error_of([] { parse_untrusted_json("{\"a\": \"" + repeat("x", 100000) + "\" oops", "b.json"); });
  CHECK_MESSAGE(syntax.find("b.json: not valid JSON") != std::string::npos, syntax);
  CHECK(syntax.size() < 600);
}

TEST_CASE("excerpt and excerpt_json bound what an error message quotes") {
  CHECK(excerpt("short") == "short");
  const std::string cut = excerpt(repeat("é", 1000), 11);  // 2-byte characters: cut at a boundary
  CHECK(cut.rfind("ééééé… (2000 bytes in all)", 0) == 0);
  const nlohmann::json deep = nlohmann::json::parse(nested_arrays(60));
  CHECK(excerpt_json(deep) == "[[[[[...]]]]]");
  const nlohmann::json big = nlohmann::json::array({repeat("y", 5000), 1, 2});
  CHECK(excerpt_json(big).size() <= kMaxExcerptBytes + 3);
  CHECK(excerpt_json(nlohmann::json::object({{"k", {1, 2}}})) == R"({"k":[1,2]})");
}

// ---- Jinja: arithmetic -----------------------------------------------------------------------

TEST_CASE("jinja: INT64_MIN // -1 is a template error, not SIGFPE; % -1 is 0 as in Python") {
  const std::string e = render_error("{{ (-9223372036854775807 - 1) // -1 }}");
  CHECK_MESSAGE(e.find("hostile.jinja:1:") != std::string::npos, e);
  CHECK_MESSAGE(e.find("integer overflow: -9223372036854775808 // -1") != std::string::npos, e);
  CHECK(render("{{ (-9223372036854775807 - 1) % -1 }}") == "0");
  CHECK(render("{{ 7 // -2 }} {{ 7 % -2 }} {{ -7 // 2 }} {{ -7 % 2 }}") == "-4 -1 -4 1");  // Python's floor semantics
}

TEST_CASE("jinja: + - * ** and unary minus overflow into a template error instead of wrapping") {
  for (const char* source : {"{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}",
                             "{{ 4611686018427387904 * 2 }}", "{{ 2 ** 63 }}", "{{ -(-9223372036854775807 - 1) }}",
                             "{{ (-9223372036854775807 - 1)|abs }}"}) {
    const std::string e = render_error(source);
    CHECK_MESSAGE(e.find("integer overflow") != std::string::npos, source, ": ", e);
  }
  CHECK(render("{{ 2 ** 62 }} {{ 3 ** 0 }} {{ (-2) ** 63 }}") == "4611686018427387904 1 -9223372036854775808");
  CHECK_MESSAGE(render_error("{{ 1e308|int }}").find("does not fit in a 64-bit integer") != std::string::npos,
                render_error("{{ 1e308|int }}"));
  CHECK(render("{{ range(9223372036854775800, 9223372036854775807, 3)|list }}") ==
        "[9223372036854775800, 9223372036854775803, 9223372036854775806]");
}

// ---- Jinja: depth ------------------------------------------------------------------------------

TEST_CASE("jinja: 50k-long chains (a.a.a, 1+1+, not not, - -, x|f|f) are refused by the parser") {
  const size_t n = 50000;
  const std::string cases[] = {
      "{{ a" + repeat(".a", n) + " }}",
      "{{ 1" + repeat("+1", n) + " }}",
      "{{ " + repeat("not ", n) + "x }}",
      "{{ " + repeat("- ", n) + "1 }}",
      "{{ 'x'" + repeat("|trim", n) + " }}",
      "{{ x" + repeat("[0]", n) + " }}",
      "{{ f" + repeat("()", n) + " }}",
      "{{ " + repeat("(", n) + "1" + repeat(")", n) + " }}",
      "{{ " + repeat("[", n) + repeat("]", n) + " }}",
  };
  for (const std::string& source : cases) {
    const std::string e = error_of([&] { jinja::Template::parse(source, "chain.jinja"); });
    CHECK_MESSAGE(e.find("nested deeper than 200") != std::string::npos, source.substr(0, 20), ": ", e);
  }
  // 200 levels are still fine.
  CHECK(render("{{ 1" + repeat("+1", 150) + " }}") == "151");
}

TEST_CASE("jinja: runaway recursion and values nested without bound end with an error") {
  std::string e = render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  CHECK_MESSAGE(e.find("nested deeper than 100 calls") != std::string::npos, e);
  e = render_error("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}");
  CHECK_MESSAGE(e.find("a value nested deeper than 256 levels") != std::string::npos, e);
  // Through namespaces the depth is not known when values are built; walking them is guarded.
  e = render_error(
      "{% set head = namespace(next=none) %}{% set ns = namespace(tail=head) %}"
      "{% for i in range(5000) %}{% set n = namespace(next=none) %}{% set t = ns.tail %}{% set t.next = n %}"
      "{% set ns.tail = n %}{% endfor %}{{ head }}");
  CHECK_MESSAGE(e.find("nested deeper than 256 levels") != std::string::npos, e);
}

TEST_CASE("jinja: a namespace that contains itself prints like Python and is refused by tojson") {
  CHECK(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}") == "<Namespace {'me': <Namespace {...}>}>");
  std::string e = render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}");
  CHECK_MESSAGE(e.find("tojson: circular reference") != std::string::npos, e);
  e = render_error("{% set ns = namespace() %}{% set l = [ns] %}{% set ns.l = l %}{{ l|tojson }}");
  CHECK_MESSAGE(e.find("tojson: circular reference") != std::string::npos, e);
  // Two distinct self-containing namespaces compared: Python recurses until RecursionError.
  e = render_error("{% set a = namespace() %}{% set a.me = a %}{% set b = namespace() %}{% set b.me = b %}{{ a == b }}");
  CHECK_MESSAGE(e.find("comparing values: the value is nested deeper than") != std::string::npos, e);
  // The same value twice is not a cycle.
  CHECK(render("{% set x = [1] %}{{ [x, x]|tojson }}") == "[[1], [1]]");
}

// ---- Jinja: work and output budget ------------------------------------------------------------

TEST_CASE("jinja: two nested range(100000) loops end with the step budget, quickly") {
  const auto start = std::chrono::steady_clock::now();
  const std::string e =
      render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  CHECK_MESSAGE(e.find("exceeded its budget of 2000000 steps") != std::string::npos, e);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("nested loops stopped after ", seconds, " s");
  jinja::RenderLimits small;
  small.max_steps = 1000;
  CHECK(render_error("{% for i in range(10000) %}{% endfor %}", small).find("budget of 1000 steps") != std::string::npos);
  CHECK(render_error("{{ range(100000000000)|length }}").find("more items than any render may build") != std::string::npos);
}

TEST_CASE("jinja: strings and output are bounded by max_string_bytes") {
  jinja::RenderLimits limits;
  limits.max_string_bytes = 1 << 20;
  std::string e = render_error(
      "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", limits);
  CHECK_MESSAGE(e.find("would exceed the render's limit of 1048576 bytes") != std::string::npos, e);
  e = render_error("{{ 'x' * 100000000000 }}", limits);
  CHECK_MESSAGE(e.find("would exceed the render's limit") != std::string::npos, e);
  e = render_error("{% for i in range(3000) %}{{ 'abcdefghij' * 100 }}{% endfor %}", limits);
  CHECK_MESSAGE(e.find("would exceed the render's limit") != std::string::npos, e);
  e = render_error("{{ 'a\\nb'|indent(100000000000) }}", limits);
  CHECK_MESSAGE(e.find("would exceed the render's limit") != std::string::npos, e);
  e = render_error("{{ [1]|tojson(indent=100000000) }}", limits);
  CHECK_MESSAGE(e.find("would exceed the render's limit") != std::string::npos, e);
  // A DAG that doubles in size each level: printing it is bounded too.
  e = render_error(
      "{% set ns = namespace(x=[]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x }}", limits);
  CHECK_MESSAGE((e.find("would exceed") != std::string::npos || e.find("budget") != std::string::npos), e);
  // Error messages quote at most an excerpt of what the template built.
  e = render_error("{{ raise_exception('x' * 100000) }}");
  CHECK(e.size() < 1000);
}

TEST_CASE("jinja: the real templates still render within the default budget") {
  for (const auto& entry : fs::directory_iterator(JOURNEY_SOURCE_DIR "/tests/data/chat-templates/templates")) {
    std::ifstream in(entry.path());
    const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto t = make_jinja_template(source, entry.path().filename().string());
    ChatTemplateInputs inputs;
    for (int i = 0; i < 200; ++i) inputs.messages.push_back({i % 2 ? "assistant" : "user", repeat("word ", 200)});
    inputs.now_unix_seconds = 0;
    std::string text;
    try {
      text = t->render(inputs);
    } catch (const Error& e) {
      // Some templates refuse some conversations on purpose (raise_exception); never for budget.
      CHECK_MESSAGE(std::string(e.what()).find("budget") == std::string::npos, e.what());
      continue;
    }
    CHECK(text.size() > 200 * 1000);
  }
}

// ---- tokenizer.json ids ------------------------------------------------------------------------

TEST_CASE("tokenizer.json: ids >= 2^31, 1e308, negative or sparse are refused before any array is sized") {
  ScratchDir dir("tokenizer-ids");
  auto load = [&](const std::string& vocab, const std::string& added = "[]") {
    const fs::path path = dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": )" + vocab +
                                                          R"(, "merges": []}, "added_tokens": )" + added + "}");
    return error_of([&] { load_hf_tokenizer(path, TokenizerConfig{}); });
  };
  std::string e = load(R"({"a": 0, "b": 2147483648})");
  CHECK_MESSAGE(e.find("model.vocab[\"b\"]: id 2147483648 is outside [0, 2)") != std::string::npos, e);
  e = load(R"({"a": 0, "b": 1e308})");
  CHECK_MESSAGE(e.find("model.vocab[\"b\"]: the id must be an integer, found number 1e+308") != std::string::npos, e);
  e = load(R"({"a": 0, "b": -1})");
  CHECK_MESSAGE(e.find("id -1 is outside") != std::string::npos, e);
  e = load(R"({"a": 0, "b": 18446744073709551615})");
  CHECK_MESSAGE(e.find("id 18446744073709551615 is outside") != std::string::npos, e);
  e = load(R"({"a": 0})", R"([{"id": 4294967296, "content": "<x>"}])");
  CHECK_MESSAGE(e.find("added_tokens: id 4294967296 is outside [0, 2)") != std::string::npos, e);
  e = load(R"({"a": 0})", R"([{"id": 1e308, "content": "<x>"}])");
  CHECK_MESSAGE(e.find("added_tokens: the id must be an integer") != std::string::npos, e);
  // Dense ids load.
  CHECK(load(R"({"a": 0, "b": 1})", R"([{"id": 2, "content": "<x>", "special": true}])") == "(no error)");
}

// ---- model files nested deep -------------------------------------------------------------------

TEST_CASE("config.json and generation_config.json with values nested 100k deep: an error, not a crash") {
  ScratchDir dir("config-deep");
  for (const std::string& value : {nested_arrays(100000), nested_objects(100000)}) {
    const fs::path config = dir.write("config.json", R"({"model_type": "llama", "hidden_size": )" + value + "}");
    std::string e = error_of([&] { read_hf_config(config); });
    CHECK_MESSAGE(e.find("config.json: JSON nested deeper than 64 levels") != std::string::npos, e);
    const fs::path generation = dir.write("generation_config.json", R"({"eos_token_id": )" + value + "}");
    e = error_of([&] { read_generation_config(generation); });
    CHECK_MESSAGE(e.find("generation_config.json: JSON nested deeper than 64 levels") != std::string::npos, e);
  }
  // Within the depth limit but large: found() quotes an excerpt.
  const std::string wide = "[" + repeat("[1,2,3,4,5,6,7,8,9,10],", 20000) + "1]";
  const fs::path config = dir.write("config.json", R"({"model_type": "llama", "hidden_size": )" + nested_arrays(60, wide) + "}");
  std::string e = error_of([&] { read_hf_config(config); });
  CHECK_MESSAGE(e.find("field \"hidden_size\" must be an integer, found array [[[[") != std::string::npos, e);
  CHECK(e.size() < 600);
  const fs::path generation = dir.write("generation_config.json", R"({"eos_token_id": [)" + repeat("\"x\",", 100000) + "1]}");
  e = error_of([&] { read_generation_config(generation); });
  CHECK(e.size() < 600);
  const fs::path rope = dir.write("config.json", R"({"model_type": "llama", "hidden_size": 8, "intermediate_size": 8,
    "num_hidden_layers": 1, "num_attention_heads": 2, "vocab_size": 8, "max_position_embeddings": 8,
    "rope_scaling": {"x": ")" + repeat("z", 100000) + "\"}}");
  e = error_of([&] { read_hf_config(rope); });
  CHECK_MESSAGE(e.find("rope_scaling {\"x\":\"zzz") != std::string::npos, e);
  CHECK(e.size() < 600);
}

TEST_CASE("tokenizer_config.json and tokenizer.json nested deep, and long values in their errors") {
  ScratchDir dir("tokenizer-deep");
  fs::path config = dir.write("tokenizer_config.json", R"({"bos_token": )" + nested_objects(100000) + "}");
  std::string e = error_of([&] { read_tokenizer_config(config); });
  CHECK_MESSAGE(e.find("JSON nested deeper than 64 levels") != std::string::npos, e);
  e = error_of([&] { load_chat_template(config); });
  CHECK_MESSAGE(e.find("JSON nested deeper than 64 levels") != std::string::npos, e);
  config = dir.write("tokenizer_config.json", R"({"bos_token": )" + nested_arrays(50, "\"" + repeat("q", 100000) + "\"") + "}");
  e = error_of([&] { read_tokenizer_config(config); });
  CHECK_MESSAGE(e.find("expected a string or {\"content\": string}, found [[[[") != std::string::npos, e);
  CHECK(e.size() < 600);
  const fs::path tokenizer = dir.write("tokenizer.json", R"({"model": )" + nested_objects(100000) + "}");
  e = error_of([&] { load_hf_tokenizer(tokenizer, TokenizerConfig{}); });
  CHECK_MESSAGE(e.find("tokenizer.json: JSON nested deeper than 64 levels") != std::string::npos, e);
}

// ---- inputs the fuzzers found (fuzz/crashes/): read here too, through the normal entry points ----

std::string crash_input(const std::string& name) {
  std::ifstream in(fs::path(JOURNEY_SOURCE_DIR) / "fuzz" / "crashes" / name, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "missing fuzz/crashes/", name);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST_CASE("safetensors: a header whose shape is nested 60k deep is refused (it overflowed the stack printing it)") {
  ScratchDir dir("safetensors-deep");
  const fs::path file = dir.write("model.safetensors", crash_input("safetensors/deep-shape.safetensors"));
  WeightStore store;
  const std::string e = error_of([&] { read_safetensors(file, store); });
  CHECK_MESSAGE(e.find("header JSON is nested deeper than 64 levels") != std::string::npos, e);
}

TEST_CASE("jinja: recursive macros over deep expressions stop on the stack budget (they overflowed it under ASan)") {
  for (const char* name : {"jinja/macro-recursion-deep-expressions.txt", "jinja/macro-recursion-150-filters.txt"}) {
    const std::string e = render_error(crash_input(name));
    CHECK_MESSAGE((e.find("recursed") != std::string::npos || e.find("nested deeper than 100 calls") != std::string::npos),
                  name, ": ", e);
  }
  jinja::RenderLimits tight;
  tight.max_stack_bytes = 64 * 1024;
  const std::string e = render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", tight);
  CHECK_MESSAGE(e.find("recursed through more than 64 KiB of stack") != std::string::npos, e);
}

TEST_CASE("llama2.c: the size a header implies is computed without wrapping around 2^64") {
  // dim = hidden_dim = vocab = 2^24, 4096 layers: 32282928578721480960 bytes (> 2^64; a 64-bit sum
  // wrapped to 13836184505011929344, and a header whose wrapped size matched a small file would
  // have had tensors pointing far beyond it).
  ScratchDir dir("llama2c-huge");
  std::string header(256, '\0');
  const int32_t fields[] = {0x616b3432, 1, 1 << 24, 1 << 24, 4096, 1, 1, 1 << 24, 1};
  std::memcpy(header.data(), fields, sizeof fields);
  header[36] = 1;  // shared classifier
  const fs::path file = dir.write("model.bin", header);
  std::string e = error_of([&] { read_llama2c(file); });
  CHECK_MESSAGE(e.find("implies 32282928578721480960 bytes but the file has 256 bytes") != std::string::npos, e);
  // A header chosen so that the 64-bit size wrapped to exactly 256: it was read as a model whose
  // 2341 layers of 2^24-wide matrices all pointed past the end of the 256-byte file.
  const fs::path wrapped = dir.write("wrapped.bin", crash_input("llama2c/size-wraps-to-256.bin"));
  e = error_of([&] { read_llama2c(wrapped); });
  CHECK_MESSAGE(e.find("implies 18446744073709551872 bytes but the file has 256 bytes") != std::string::npos, e);
}

TEST_CASE("sentencepiece: a model with a zero-length piece is refused (libsentencepiece's trie threw past the loader)") {
  ScratchDir dir("sentencepiece-zero-length");
  const fs::path file = dir.write("tokenizer.model", crash_input("sentencepiece/zero-length-piece.model"));
  const std::string e = error_of([&] { load_sentencepiece_tokenizer(file, TokenizerConfig{}); });
  CHECK_MESSAGE(e.find("tokenizer.model: cannot load as a SentencePiece model") != std::string::npos, e);
}

TEST_CASE("trace manifest: a config nested 20k deep is refused (copying it overflowed the stack)") {
  ScratchDir dir("manifest-deep");
  const fs::path file = dir.write("manifest.json", crash_input("trace/deep-config.txt"));
  const std::string e = error_of([&] { read_manifest(file); });
  CHECK_MESSAGE(e.find("manifest.json: JSON nested deeper than 64 levels") != std::string::npos, e);
}

TEST_CASE("trace manifest: integers that do not fit are refused (get<int>() of 1e20 was undefined behaviour)") {
  ScratchDir dir("manifest-int");
  std::string e = error_of([&] { read_manifest(dir.write("manifest.json", crash_input("trace/version-1e20.txt"))); });
  CHECK_MESSAGE(e.find("field \"version\" of the manifest must hold integers that fit in 32 bits, found number 1e+20") !=
                    std::string::npos, e);
  e = error_of([&] {
    read_manifest(dir.write("manifest.json", R"({"format": "journey-trace", "version": 1, "steps": [{"step": 0,
      "kind": "prefill", "positions": [0, 1e300]}]})"));
  });
  CHECK_MESSAGE(e.find("field \"positions\"") != std::string::npos, e);
}

TEST_CASE(".npy: a dimension beyond 64 bits and a shape whose element count wraps are refused") {
  ScratchDir dir("npy");
  auto npy_part = [](const std::string& input) { return input.substr(input.find("\n--\n") + 4); };
  // std::stoll threw std::out_of_range (not a journey::Error) for a 20-digit dimension.
  std::string e = error_of([&] { read_npy(dir.write("a.npy", npy_part(crash_input("trace/npy-dimension-beyond-int64.txt")))); });
  CHECK_MESSAGE(e.find(".npy header: bad dimension") != std::string::npos, e);
  // (2^32, 2^32): 2^64 elements wrapped to 0, and the empty file was accepted with that shape.
  e = error_of([&] { read_npy(dir.write("b.npy", npy_part(crash_input("trace/npy-shape-wraps-to-zero.txt")))); });
  CHECK_MESSAGE(e.find("shape [4294967296, 4294967296] needs more data than the whole file") != std::string::npos, e);
  // A shape with a zero in it is an empty array: read as one, without copying (memcpy from a null
  // pointer was undefined behaviour that UBSan flagged; fuzz.trace runs this input under UBSan).
  NpyArray empty;
  e = error_of([&] { empty = read_npy(dir.write("c.npy", npy_part(crash_input("trace/npy-zero-elements.txt")))); });
  if (e == "(no error)") {
    CHECK(empty.numel() == 0);
    CHECK(empty.f32.empty());
  } else {
    CHECK_MESSAGE(e.find("c.npy") != std::string::npos, e);  // or refused, naming the file
  }
}

// ---- the OpenAI request parser -----------------------------------------------------------------

struct StoriesContext {
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(JOURNEY_SOURCE_DIR "/data/stories260K");
  ModelChatTemplate chat_template{make_builtin_template("chatml"), "<s>", "</s>"};
  server::ModelContext ctx;
  StoriesContext() {
    ctx.served_model_name = "stories";
    ctx.tokenizer = tokenizer.get();
    ctx.chat_template = &chat_template;
    ctx.max_model_len = 512;
  }
};

int status_of(const std::function<void()>& fn, std::string* message = nullptr) {
  try {
    fn();
  } catch (const server::ApiError& e) {
    if (message) *message = e.what();
    return e.status;
  }
  return 200;
}

TEST_CASE("requests nested 100k deep are refused before any endpoint parses them") {
  StoriesContext s;
  std::string message;
  // /v1/completions {"prompt": [[[…]]]}: was endless recursion in prompt parsing.
  CHECK(status_of([&] { server::parse_request_body(R"({"prompt": )" + nested_arrays(100000) + "}"); }, &message) == 400);
  CHECK_MESSAGE(message.find("the request body: JSON nested deeper than 64 levels") != std::string::npos, message);
  // A chat message with an extra field nested deep (the error path dumped it).
  CHECK(status_of([&] {
          server::parse_request_body(R"({"messages": [{"role": "user", "content": "hi", "name": )" + nested_objects(100000) + "}]}");
        }) == 400);
  // /detokenize {"tokens": [[[…]]]}.
  CHECK(status_of([&] { server::parse_request_body(R"({"tokens": )" + nested_arrays(100000) + "}"); }) == 400);
}

TEST_CASE("prompts nested within the limit are read without recursion, and odd shapes are 400s") {
  StoriesContext s;
  auto completion = [&](const std::string& body, std::string* message = nullptr) {
    return status_of([&] { server::parse_completion_request(server::parse_request_body(body), s.ctx); }, message);
  };
  CHECK(completion(R"({"prompt": "Once upon a time"})") == 200);
  CHECK(completion(R"({"prompt": ["Once upon a time"]})") == 200);
  CHECK(completion(R"({"prompt": [1, 403, 407]})") == 200);
  CHECK(completion(R"({"prompt": [[1, 403, 407]]})") == 200);
  std::string message;
  CHECK(completion(R"({"prompt": )" + nested_arrays(60) + "}", &message) == 400);
  CHECK_MESSAGE(message.find("'prompt' token lists must hold integers; found a array") != std::string::npos, message);
  CHECK(completion(R"({"prompt": {"a": 1}})", &message) == 400);
  CHECK_MESSAGE(message.find("'prompt' must be a string, a list of one string, a list of token ids") != std::string::npos, message);
  CHECK(completion(R"({"prompt": ["a", "b"]})") == 400);
  // Chat: a message field nested to the limit is a 400 naming it (a message's name is a string), and
  // a tool's parameters schema nested past its own limit (32) is refused by the iterative check.
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi", "name": )" + nested_objects(58) + "}]}";
  CHECK(status_of([&] { server::parse_chat_request(server::parse_request_body(chat), s.ctx); }, &message) == 400);
  CHECK_MESSAGE(message.find("messages[0].name must be a string") != std::string::npos, message);
  const std::string tools = R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", )"
                            R"("function": {"name": "f", "parameters": )" + nested_objects(58) + "}}]}";
  CHECK(status_of([&] { server::parse_chat_request(server::parse_request_body(tools), s.ctx); }, &message) == 400);
  CHECK_MESSAGE(message.find("tools[0].function.parameters is nested deeper than 32 levels") != std::string::npos, message);
  CHECK(status_of([&] { server::parse_detokenize_request(server::parse_request_body(R"({"tokens": [[1]]})"), s.ctx); },
                  &message) == 400);
  CHECK_MESSAGE(message.find("found [1]") != std::string::npos, message);
}

TEST_CASE("request inputs the fuzzer found (fuzz/crashes/openai_request) are 400s") {
  StoriesContext s;
  for (const auto& entry : fs::directory_iterator(JOURNEY_SOURCE_DIR "/fuzz/crashes/openai_request")) {
    const std::string input = crash_input("openai_request/" + entry.path().filename().string());
    REQUIRE(!input.empty());
    const std::string body = input.substr(1);
    std::string message;
    const int status = status_of(
        [&] {
          const nlohmann::json parsed = server::parse_request_body(body);
          switch (input[0] % 4) {
            case 0: server::parse_completion_request(parsed, s.ctx); break;
            case 1: server::parse_chat_request(parsed, s.ctx); break;
            case 2: server::parse_tokenize_request(parsed, s.ctx); break;
            default: server::parse_detokenize_request(parsed, s.ctx); break;
          }
        },
        &message);
    CHECK_MESSAGE(status == 400, entry.path().filename().string(), ": ", status, " ", message);
  }
}

TEST_CASE("the prompt is capped in bytes and in tokens before tokenizing") {
  StoriesContext s;
  const int64_t cap = server::max_prompt_bytes(s.ctx);
  CHECK(cap == 64 * 1024);  // stories260K: 512 tokens * 64 bytes = 32 KiB, below the 64 KiB floor
  std::string message;
  const std::string long_text = repeat("a", size_t(cap) + 1);
  CHECK(status_of([&] { server::parse_completion_request({{"prompt", long_text}}, s.ctx); }, &message) == 400);
  CHECK_MESSAGE(message.find("refused before tokenizing") != std::string::npos, message);
  CHECK(status_of([&] { server::parse_tokenize_request({{"prompt", long_text}}, s.ctx); }) == 400);
  nlohmann::json messages = nlohmann::json::array();
  for (int i = 0; i < 5; ++i) messages.push_back({{"role", "user"}, {"content", repeat("b", size_t(cap) / 4)}});
  CHECK(status_of([&] { server::parse_chat_request({{"messages", messages}}, s.ctx); }, &message) == 400);
  CHECK_MESSAGE(message.find("refused before tokenizing") != std::string::npos, message);
  // Token ids: the count is checked before the ids themselves.
  nlohmann::json ids = nlohmann::json::array();
  for (int i = 0; i < 512; ++i) ids.push_back(1);
  CHECK(status_of([&] { server::parse_completion_request({{"prompt", ids}}, s.ctx); }, &message) == 400);
  CHECK_MESSAGE(message.find("the prompt has 512 tokens but the model's context is 512 tokens") != std::string::npos, message);
}

TEST_CASE("a chat template error is a 400 for that request") {
  StoriesContext s;
  ModelChatTemplate bad{make_jinja_template("{{ (-9223372036854775807 - 1) // -1 }}", "overflow.jinja"), "", ""};
  s.ctx.chat_template = &bad;
  std::string message;
  CHECK(status_of([&] { server::parse_chat_request({{"messages", {{{"role", "user"}, {"content", "hi"}}}}}, s.ctx); },
                  &message) == 400);
  CHECK_MESSAGE(message.find("the chat template failed: jinja:overflow.jinja:1:") != std::string::npos, message);
  CHECK_MESSAGE(message.find("integer overflow") != std::string::npos, message);
}

}  // namespace
}  // namespace journey
