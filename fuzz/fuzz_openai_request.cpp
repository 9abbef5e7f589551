// The OpenAI request parser, every endpoint's body: the first byte picks the endpoint
// (0 /v1/completions, 1 /v1/chat/completions, 2 /tokenize, 3 /detokenize), the rest is the body.
// The model context is stories260K's tokenizer with the ChatML template, as `journey serve` builds
// it; nothing runs the model: a parsed request is where the engine would take over.
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "server/openai_api.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

using namespace journey;

namespace {
struct Context {
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(JOURNEY_SOURCE_DIR "/data/stories260K");
  ModelChatTemplate chat_template{make_builtin_template("chatml"), "<s>", "</s>"};
  server::ModelContext ctx;
  Context() {
    ctx.served_model_name = "stories";
    ctx.tokenizer = tokenizer.get();
    ctx.chat_template = &chat_template;
    ctx.max_model_len = 512;
    ctx.eos_ids = {2};
  }
};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Context context;
  if (size == 0) return 0;
  const int endpoint = data[0] % 4;
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  // ApiError (400/404) and journey::Error are the two ways a request may be refused.
  fuzz::expect_only_journey_errors("openai request", [&] {
    try {
      server::json parsed = server::parse_request_body(body);
      switch (endpoint) {
        case 0: (void)server::parse_completion_request(parsed, context.ctx); break;
        case 1: (void)server::parse_chat_request(parsed, context.ctx); break;
        case 2: (void)server::parse_tokenize_request(parsed, context.ctx); break;
        case 3: (void)context.tokenizer->decode(server::parse_detokenize_request(parsed, context.ctx)); break;
      }
    } catch (const server::ApiError&) {
    }
  });
  return 0;
}
