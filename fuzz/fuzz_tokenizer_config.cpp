// tokenizer_config.json: special tokens and added_tokens_decoder (read_tokenizer_config), and the
// chat template it carries (load_chat_template parses it; a render with two messages follows).
#include <cstdint>

#include "fuzz/fuzz_input.h"
#include "text/chat_template.h"
#include "text/special_tokens.h"

using namespace journey;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::write_file("tokenizer_config.json", data, size);
  fuzz::expect_only_journey_errors("read_tokenizer_config", [&] { (void)read_tokenizer_config(path); });
  fuzz::expect_only_journey_errors("load_chat_template(tokenizer_config.json)", [&] {
    ModelChatTemplate t = load_chat_template(path);
    ChatTemplateInputs inputs;
    inputs.messages = {{"system", "Be brief."}, {"user", "Hi"}};
    inputs.now_unix_seconds = 0;
    (void)t.chat_template->render(inputs);
  });
  return 0;
}
