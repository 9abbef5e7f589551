// GGUF: the metadata table, the tensor index, llama config, weights and the vocabulary a
// GGUF file carries (tokenizer.ggml.*), and its chat template parsed.
#include <cstdint>

#include "assets/gguf.h"
#include "fuzz/fuzz_input.h"
#include "text/chat_template.h"
#include "text/loaders.h"

using namespace journey;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::write_file("model.gguf", data, size);
  fuzz::expect_only_journey_errors("GgufFile", [&] {
    GgufFile file = GgufFile::open(path);
    for (const std::string& key : file.keys()) {
      (void)file.summary(key);
      fuzz::expect_only_journey_errors("GgufFile getters", [&] { (void)file.get_int(key); });
      fuzz::expect_only_journey_errors("GgufFile getters", [&] { (void)file.get_float(key); });
      fuzz::expect_only_journey_errors("GgufFile getters", [&] { (void)file.get_string(key); });
      fuzz::expect_only_journey_errors("GgufFile getters", [&] { (void)file.get_string_array(key); });
      fuzz::expect_only_journey_errors("GgufFile getters", [&] { (void)file.get_int_array(key); });
      fuzz::expect_only_journey_errors("GgufFile getters", [&] { (void)file.get_float_array(key); });
    }
    // Touch the first and last byte of every tensor: each must lie inside the mapping.
    unsigned sum = 0;
    for (const GgufTensorInfo& t : file.tensors()) {
      const std::byte* p = file.tensor_data(t);
      if (t.nbytes > 0) sum += unsigned(p[0]) + unsigned(p[t.nbytes - 1]);
    }
    (void)sum;
    fuzz::expect_only_journey_errors("gguf_model_config", [&] { (void)gguf_model_config(file); });
    fuzz::expect_only_journey_errors("gguf_weights", [&] { (void)gguf_weights(file); });
  });
  fuzz::expect_only_journey_errors("load_gguf_tokenizer", [&] {
    auto tokenizer = load_gguf_tokenizer(path);
    fuzz::exercise_tokenizer(*tokenizer, std::string_view(reinterpret_cast<const char*>(data), std::min<size_t>(size, 256)));
  });
  fuzz::expect_only_journey_errors("load_chat_template(gguf)", [&] { (void)load_chat_template(path); });
  return 0;
}
