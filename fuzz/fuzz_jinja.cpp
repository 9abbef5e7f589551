// A chat template and its variables: template source, then "\n--\n", then a JSON object of
// variables (messages, add_generation_prompt, tools, anything). Parsed, then rendered under a
// step and output budget (smaller than the default, so that runaway templates end quickly).
#include <cstdint>

#include "core/untrusted.h"
#include "fuzz/fuzz_input.h"
#include "text/jinja.h"

using namespace journey;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split_input(data, size);
  const std::string_view source = parts.first, variables = parts.second;  // (clang 14 lambdas cannot capture bindings)
  fuzz::expect_only_journey_errors("jinja", [&] {
    jinja::Template t = jinja::Template::parse(std::string(source), "fuzz.jinja");
    jinja::Value context = jinja::default_globals(0);
    context.set("messages", jinja::Value(jinja::ValueList{
                                jinja::Value::dict({{"role", jinja::Value("user")}, {"content", jinja::Value("Hi")}})}));
    context.set("bos_token", jinja::Value("<s>"));
    context.set("eos_token", jinja::Value("</s>"));
    context.set("add_generation_prompt", jinja::Value(true));
    if (!variables.empty()) {
      auto json = parse_untrusted_json<nlohmann::ordered_json>(variables, "variables");
      if (json.is_object())
        for (const auto& [key, value] : json.items()) context.set(key, jinja::Value::from_json(value));
    }
    jinja::RenderLimits limits;
    limits.max_steps = 200'000;
    limits.max_string_bytes = 1 << 20;
    (void)t.render(context, limits);
  });
  return 0;
}
