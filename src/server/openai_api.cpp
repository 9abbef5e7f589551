#include "server/openai_api.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/untrusted.h"
#include "sampling/params.h"
#include "server/response_format.h"

namespace journey::server {

json error_body(const std::string& message, const std::string& type, const std::string& param, const std::string& code) {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}

int64_t max_prompt_bytes(const ModelContext& ctx) {
  return std::max<int64_t>(kMinPromptBytes, ctx.max_model_len * kPromptBytesPerToken);
}

json parse_request_body(std::string_view body) {
  try {
    return parse_untrusted_json<json>(body, "the request body");
  } catch (const Error& e) {
    throw ApiError(400, e.what());
  }
}

namespace {
constexpr auto C = kCompletionsEndpoint, H = kChatEndpoint, B = kBothEndpoints;
constexpr auto yes = FieldSupport::implemented, no = FieldSupport::unsupported;
constexpr ApiField kApiFields[] = {
    {"model", B, yes, "must be the served name (`--served-model-name`); another name is a 404"},
    {"prompt", C, yes, "a string, a list of one string, a list of token ids, or a list of one list of token ids"},
    {"messages", H, yes, "roles system, developer (= system), user, assistant (with `tool_calls`), tool (with `tool_call_id`); content a string or text parts; rendered by the model's chat template"},
    {"max_tokens", B, yes, "default 16 (completions) or the rest of the context (chat)"},
    {"max_completion_tokens", H, yes, "the same as `max_tokens` (which wins when both are given)"},
    {"n", B, yes, "1 to 16 choices; with a `seed`, choice i uses seed + i"},
    {"best_of", C, yes, "accepted only equal to `n` (every candidate is returned; journey does not rank candidates); otherwise 400"},
    {"stream", B, yes, "server-sent events, ending with `data: [DONE]`"},
    {"stream_options", B, yes, "`include_usage` only; needs `stream`"},
    {"temperature", B, yes, "0 to 2; 0 = greedy"},
    {"top_p", B, yes, "(0, 1]"},
    {"top_k", B, yes, "vLLM extension; 0 or -1 = off"},
    {"min_p", B, yes, "vLLM extension; [0, 1]"},
    {"frequency_penalty", B, yes, "-2 to 2, over the generated tokens"},
    {"presence_penalty", B, yes, "-2 to 2, over the generated tokens"},
    {"repetition_penalty", B, yes, "vLLM extension (Hugging Face's), over prompt and output; 1 = off"},
    {"seed", B, yes, "the same seed gives the same text"},
    {"stop", B, yes, "a string or up to 16 strings; the text ends right before the first one"},
    {"ignore_eos", B, yes, "vLLM extension: generate past the end-of-sequence token"},
    {"logit_bias", B, yes, "{\"token id\": bias in [-100, 100]}, at most 1024 ids of the vocabulary; added to the logits before sampling"},
    {"logprobs", B, yes, "completions: the number of alternatives (0 to 20); chat: true/false"},
    {"top_logprobs", H, yes, "0 to 20 alternatives per token; needs `logprobs`: true"},
    {"echo", C, yes, "the prompt text before the completion"},
    {"user", B, yes, "shown in the request's log line; no effect on the answer"},
    {"tools", H, yes, "functions offered to the model through its chat template (docs/serving.md, Tool calls)"},
    {"tool_choice", H, yes, "\"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\"}}; the last two are enforced by the grammar: the answer is one call"},
    {"parallel_tool_calls", H, yes, "false keeps only the first call"},
    {"journey_trace", B, yes, "journey extension: dump the request's stages (needs `--trace-dir`)"},
    {"response_format", B, yes, "{\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": {\"name\", \"schema\", \"strict\"}}: the output is constrained by a grammar (docs/structured-output.md)"},
    {"suffix", C, no, "insertion (fill in the middle) is not implemented"},
    {"functions", H, no, "the legacy form of `tools`: send `tools`"},
    {"function_call", H, no, "the legacy form of `tool_choice`: send `tool_choice`"},
    {"store", H, no, "journey stores no completions"},
    {"metadata", H, no, "journey stores no completions"},
    {"modalities", H, no, "text only"},
    {"audio", H, no, "text only"},
    {"prediction", H, no, "predicted outputs are not implemented"},
    {"reasoning_effort", H, no, "not a reasoning-effort model API"},
    {"service_tier", H, no, "one tier"},
    {"web_search_options", H, no, "no web search"},
};

const char* endpoint_names(unsigned endpoints) {
  return endpoints == kBothEndpoints ? "both" : endpoints == kChatEndpoint ? "chat" : "completions";
}
}  // namespace

std::span<const ApiField> api_fields() { return kApiFields; }

std::string api_fields_markdown() {
  std::string out = "| field | endpoint | supported | what journey does |\n|---|---|---|---|\n";
  for (const ApiField& f : kApiFields)
    out += cat("| `", f.name, "` | ", endpoint_names(f.endpoints), " | ",
               f.support == FieldSupport::implemented ? "yes" : "no (400)", " | ", f.what, " |\n");
  return out;
}

void check_fields(const json& body, unsigned endpoint) {
  if (!body.is_object()) return;
  const char* here = endpoint == kChatEndpoint ? "/v1/chat/completions" : "/v1/completions";
  for (const auto& [key, value] : body.items()) {
    const ApiField* found = nullptr;
    for (const ApiField& f : kApiFields)
      if (key == f.name) found = &f;
    if (!found)
      throw ApiError(400, cat("unknown field '", excerpt(key), "' (", here, " takes the fields listed in docs/serving.md)"),
                     excerpt(key));
    if (!(found->endpoints & endpoint))
      throw ApiError(400, cat("'", key, "' is not a field of ", here, " (only of ",
                              endpoint == kChatEndpoint ? "/v1/completions" : "/v1/chat/completions", ")"),
                     key);
    if (found->support == FieldSupport::unsupported && !value.is_null())
      throw ApiError(400, cat("'", key, "' is not supported: ", found->what), key);
  }
}

namespace {

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

bool get_bool(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) bad(name, cat("'", name, "' must be a boolean, got ", v->type_name()));
  return v->get<bool>();
}

int64_t get_int(const json& body, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer())
    bad(name, cat("'", name, "' must be an integer", v->is_number() ? " within 64 bits" : "", ", got ",
                  v->is_number() ? v->dump() : v->type_name()));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    bad(name, cat("'", name, "' must be between ", lo, " and ", hi, ", got ", v->dump()));
  int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(name, cat("'", name, "' must be between ", lo, " and ", hi, ", got ", x));
  return x;
}

double get_double(const json& body, const char* name, double fallback, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) bad(name, cat("'", name, "' must be a number, got ", v->type_name()));
  double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) bad(name, cat("'", name, "' must be between ", lo, " and ", hi, ", got ", v->dump()));
  return x;
}

void check_model(const json& body, const ModelContext& ctx) {
  const json* v = field(body, "model");
  if (!v) return;
  if (!v->is_string()) bad("model", cat("'model' must be a string, got ", v->type_name()));
  if (v->get<std::string>() != ctx.served_model_name)
    throw ApiError(404, cat("The model '", excerpt(v->get<std::string>()), "' does not exist; this server serves '",
                            ctx.served_model_name, "'"),
                   "model", "invalid_request_error", "model_not_found");
}

// {"token id": bias}: ids as decimal strings (JSON keys), each in the tokenizer's vocabulary.
std::vector<std::pair<int32_t, float>> get_logit_bias(const json& body, const ModelContext& ctx) {
  std::vector<std::pair<int32_t, float>> bias;
  const json* v = field(body, "logit_bias");
  if (!v) return bias;
  if (!v->is_object()) bad("logit_bias", cat("'logit_bias' must be an object {\"token id\": bias}, got ", v->type_name()));
  if (v->size() > static_cast<size_t>(kMaxLogitBiasEntries))
    bad("logit_bias", cat("'logit_bias' may hold at most ", kMaxLogitBiasEntries, " tokens, got ", v->size()));
  const int64_t vocab = ctx.tokenizer->vocab_size();
  for (const auto& [key, value] : v->items()) {
    int64_t id = -1;
    const bool digits = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
    if (digits) id = std::stoll(key);
    if (!digits || id >= vocab)
      bad("logit_bias", cat("'logit_bias' keys must be token ids in [0, ", vocab, "), got \"", excerpt(key), "\""));
    if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < -kMaxLogitBias ||
        value.get<double>() > kMaxLogitBias)
      bad("logit_bias", cat("'logit_bias' of token ", id, " must be a number in [", -kMaxLogitBias, ", ", kMaxLogitBias,
                            "], got ", excerpt_json(value)));
    bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  return bias;
}

std::vector<std::string> get_stop(const json& body) {
  const json* v = field(body, "stop");
  std::vector<std::string> stops;
  if (!v) return stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > 16) bad("stop", cat("'stop' may hold at most 16 strings, got ", v->size()));
    for (const json& s : *v) {
      if (!s.is_string()) bad("stop", cat("'stop' must be a string or a list of strings; found a ", s.type_name()));
      stops.push_back(s.get<std::string>());
    }
  } else {
    bad("stop", cat("'stop' must be a string or a list of strings, got ", v->type_name()));
  }
  for (const std::string& s : stops)
    if (s.empty()) bad("stop", "stop strings must not be empty");
  return stops;
}

// Fields common to both endpoints. max_tokens_default < 0: "the rest of the context".
ApiRequest parse_common(const json& body, const ModelContext& ctx, std::vector<int32_t> prompt, int64_t max_tokens) {
  ApiRequest req;
  req.n = static_cast<int>(get_int(body, "n", 1, 1, 16));
  if (field(body, "best_of")) {
    const int64_t best_of = get_int(body, "best_of", 1, 1, 16);
    if (best_of != req.n)
      bad("best_of", cat("'best_of' must equal 'n' (", req.n, "), got ", best_of,
                         ": journey returns every candidate and does not rank them"));
  }
  if (const json* user = field(body, "user")) {
    if (!user->is_string()) bad("user", cat("'user' must be a string, got ", user->type_name()));
    req.user = excerpt(user->get<std::string>(), 64);
  }
  req.trace = get_bool(body, "journey_trace", false);
  if (req.trace && req.n != 1) bad("journey_trace", cat("'journey_trace' traces one sequence; 'n' must be 1, got ", req.n));
  req.stream = get_bool(body, "stream", false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", cat("'stream_options' must be an object, got ", so->type_name()));
    for (const auto& [key, value] : so->items())
      if (key != "include_usage")
        bad("stream_options." + excerpt(key), cat("unknown field '", excerpt(key), "' in 'stream_options' (journey takes include_usage)"));
    if (!req.stream) bad("stream_options", "'stream_options' is only allowed when 'stream' is true");
    req.include_usage = get_bool(*so, "include_usage", false);
  }
  SamplingParams p;
  p.temperature = get_double(body, "temperature", 1.0, 0.0, 2.0);
  p.top_p = get_double(body, "top_p", 1.0, 0.0, 1.0);
  if (p.top_p <= 0.0) bad("top_p", cat("'top_p' must be in (0, 1], got ", p.top_p));
  p.top_k = static_cast<int>(get_int(body, "top_k", 0, -1, 1 << 30));
  p.min_p = get_double(body, "min_p", 0.0, 0.0, 1.0);
  p.frequency_penalty = get_double(body, "frequency_penalty", 0.0, -2.0, 2.0);
  p.presence_penalty = get_double(body, "presence_penalty", 0.0, -2.0, 2.0);
  p.repetition_penalty = get_double(body, "repetition_penalty", 1.0, 0.01, 10.0);
  p.logit_bias = get_logit_bias(body, ctx);
  if (field(body, "seed")) p.seed = static_cast<uint64_t>(get_int(body, "seed", 0, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
  std::vector<std::string> stops = get_stop(body);
  bool ignore_eos = get_bool(body, "ignore_eos", false);
  const std::optional<Grammar> grammar = parse_response_format(body);  // server/response_format.h
  if (prompt.empty()) bad("prompt", "the prompt is empty (it encodes to no tokens)");
  int64_t prompt_len = static_cast<int64_t>(prompt.size());
  if (prompt_len >= ctx.max_model_len)
    bad(req.chat ? "messages" : "prompt", cat("the prompt has ", prompt_len, " tokens but the model's context is ",
                                              ctx.max_model_len, " tokens (at least one must be left to generate)"));
  if (max_tokens < 0) max_tokens = ctx.max_model_len - prompt_len;
  if (prompt_len + max_tokens > ctx.max_model_len)
    bad("max_tokens", cat("max_tokens (", max_tokens, ") + the prompt (", prompt_len, " tokens) = ", prompt_len + max_tokens,
                          " exceeds the model's context of ", ctx.max_model_len, " tokens"));
  for (int i = 0; i < req.n; ++i) {
    EngineRequest r;
    r.prompt = prompt;
    r.params = p;
    if (p.seed) r.params.seed = *p.seed + static_cast<uint64_t>(i);  // n choices must differ, reproducibly
    r.max_tokens = max_tokens;
    r.stop = stops;
    r.ignore_eos = ignore_eos;
    r.grammar = grammar;
    try {
      validate(r.params);
    } catch (const Error& e) {
      bad("", e.what());
    }
    req.sequences.push_back(std::move(r));
  }
  return req;
}

void check_prompt_bytes(int64_t bytes, const ModelContext& ctx, const char* param) {
  if (bytes > max_prompt_bytes(ctx))
    bad(param, cat("the prompt holds ", bytes, " bytes of text; the limit is ", max_prompt_bytes(ctx), " (",
                   kPromptBytesPerToken, " bytes per token of the model's context of ", ctx.max_model_len,
                   " tokens), refused before tokenizing"));
}

// Token ids given directly: checked for count (before anything else) and range.
std::vector<int32_t> token_ids(const json& list, const ModelContext& ctx, const char* param) {
  if (static_cast<int64_t>(list.size()) >= ctx.max_model_len)
    bad(param, cat("the prompt has ", list.size(), " tokens but the model's context is ", ctx.max_model_len,
                   " tokens (at least one must be left to generate)"));
  std::vector<int32_t> ids;
  for (const json& t : list) {
    if (!t.is_number_integer()) bad(param, cat("'", param, "' token lists must hold integers; found a ", t.type_name()));
    if (t.is_number_unsigned() && t.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      bad(param, cat("token id ", t.dump(), " in '", param, "' is outside the vocabulary [0, ", ctx.tokenizer->vocab_size(), ")"));
    int64_t id = t.get<int64_t>();
    if (id < 0 || id >= ctx.tokenizer->vocab_size())
      bad(param, cat("token id ", id, " in '", param, "' is outside the vocabulary [0, ", ctx.tokenizer->vocab_size(), ")"));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

// 'prompt': a string, a list of one string, a list of token ids, or a list of one list of ids
// (OpenAI's batch forms with a batch of one). Read without recursion: nothing deeper is a prompt.
std::vector<int32_t> prompt_ids(const json& v, const ModelContext& ctx, std::string& text) {
  const json* p = &v;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    text = p->get<std::string>();
    check_prompt_bytes(static_cast<int64_t>(text.size()), ctx, "prompt");
    return encode_text(text, ctx);
  }
  if (p->is_array()) {
    std::vector<int32_t> ids = token_ids(*p, ctx, "prompt");
    text = ctx.tokenizer->decode(std::vector<int>(ids.begin(), ids.end()));
    return ids;
  }
  bad("prompt", cat("'prompt' must be a string, a list of one string, a list of token ids or a list of one list of "
                    "token ids; got ", v.is_array() ? "a list of " + std::to_string(v.size()) + " items" : v.type_name()));
}

}  // namespace

std::vector<int32_t> encode_text(const std::string& text, const ModelContext& ctx) {
  std::vector<int> ids = ctx.tokenizer->encode(text, /*add_special=*/true, /*parse_special=*/false);
  return {ids.begin(), ids.end()};
}

namespace {
// An assistant message's tool_calls, checked, with each call's arguments string parsed into the
// JSON object templates expect (vLLM and transformers do the same).
std::string message_tool_calls(const json& calls, const std::string& where) {
  if (!calls.is_array()) bad(where, cat(where, " must be a list, got ", calls.type_name()));
  if (calls.size() > kMaxTools) bad(where, cat(where, " may hold at most ", kMaxTools, " calls"));
  json out = json::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string at = cat(where, "[", j, "]");
    const json& call = calls[j];
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
      bad(at, cat(at, " must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}"));
    const json& f = call["function"];
    if (!f.contains("name") || !f["name"].is_string()) bad(at + ".function.name", cat(at, ".function.name must be a string"));
    json arguments = json::object();
    if (f.contains("arguments") && f["arguments"].is_string()) {
      try {
        arguments = parse_untrusted_json<json>(f["arguments"].get<std::string>(), at + ".function.arguments");
      } catch (const Error& e) {
        bad(at + ".function.arguments", e.what());
      }
    } else if (f.contains("arguments") && f["arguments"].is_object()) {
      arguments = f["arguments"];
    } else if (f.contains("arguments") && !f["arguments"].is_null()) {
      bad(at + ".function.arguments", cat(at, ".function.arguments must be a JSON object written as a string"));
    }
    if (!arguments.is_object()) bad(at + ".function.arguments", cat(at, ".function.arguments must be a JSON object"));
    json entry = {{"id", call.contains("id") && call["id"].is_string() ? call["id"] : json("")},
                  {"type", "function"},
                  {"function", {{"name", f["name"]}, {"arguments", arguments}}}};
    out.push_back(std::move(entry));
  }
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}
}  // namespace

std::vector<int32_t> encode_chat(const json& messages, const ModelContext& ctx, std::string* rendered,
                                 const ToolRequest* tools) {
  if (!messages.is_array()) bad("messages", cat("'messages' must be an array, got ", messages.type_name()));
  if (messages.empty()) bad("messages", "'messages' must hold at least one message");
  ChatTemplateInputs inputs;
  int64_t text_bytes = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    std::string where = cat("messages[", i, "]");
    if (!m.is_object()) bad(where, cat(where, " must be an object, got ", m.type_name()));
    for (const auto& [key, value] : m.items())
      if (!value.is_null() && key != "role" && key != "content" && key != "name" && key != "tool_calls" &&
          key != "tool_call_id")
        bad(where + "." + excerpt(key), cat("unknown field '", excerpt(key), "' in ", where,
                                            " (a message has role, content, name, tool_calls, tool_call_id)"));
    const json* role = field(m, "role");
    if (!role || !role->is_string()) bad(where + ".role", cat(where, ".role must be a string"));
    std::string r = role->get<std::string>();
    if (r != "system" && r != "user" && r != "assistant" && r != "developer" && r != "tool")
      bad(where + ".role", cat(where, ".role must be one of system, user, assistant, developer, tool; got '", excerpt(r), "'"));
    if (r == "developer") r = "system";
    const json* content = field(m, "content");
    std::string text;
    if (content && content->is_string()) {
      text = content->get<std::string>();
    } else if (content && content->is_array()) {
      for (const json& part : *content) {
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
            !part["text"].is_string())
          bad(where + ".content", cat(where, ".content parts must be {\"type\": \"text\", \"text\": string}"));
        text += part["text"].get<std::string>();
      }
    } else if (!(content == nullptr && r == "assistant")) {
      bad(where + ".content", cat(where, ".content must be a string or a list of text parts"));
    }
    ChatMessage message{r, text};
    if (const json* calls = field(m, "tool_calls")) {
      if (r != "assistant") bad(where + ".tool_calls", cat(where, ".tool_calls is only allowed in assistant messages"));
      message.tool_calls_json = message_tool_calls(*calls, where + ".tool_calls");
    } else if (content == nullptr && r == "assistant") {
      bad(where + ".content", cat(where, ".content may be null only when the message has tool_calls"));
    }
    if (const json* id = field(m, "tool_call_id")) {
      if (r != "tool" || !id->is_string())
        bad(where + ".tool_call_id", cat(where, ".tool_call_id must be a string, in a tool message"));
      message.tool_call_id = id->get<std::string>();
    } else if (r == "tool") {
      bad(where + ".tool_call_id", cat(where, " (role tool) needs tool_call_id: the id of the call it answers"));
    }
    if (const json* name = field(m, "name")) {
      if (!name->is_string()) bad(where + ".name", cat(where, ".name must be a string"));
      message.name = name->get<std::string>();
    }
    text_bytes += static_cast<int64_t>(text.size() + r.size() + message.tool_calls_json.size());
    check_prompt_bytes(text_bytes, ctx, "messages");
    inputs.messages.push_back(std::move(message));
  }
  inputs.add_generation_prompt = true;
  ToolRequest no_tools;
  no_tools.choice = ToolChoiceKind::none;  // earlier calls and answers are still rendered
  add_tools_to_prompt(tools ? *tools : no_tools, *ctx.chat_template->chat_template, inputs);
  RenderedPrompt prompt;
  try {
    prompt = render_and_encode(*ctx.chat_template, *ctx.tokenizer, std::move(inputs));
  } catch (const Error& e) {
    bad("messages", cat("the chat template failed: ", e.what()));
  }
  if (rendered) *rendered = prompt.text;
  return {prompt.ids.begin(), prompt.ids.end()};
}

ApiRequest parse_completion_request(const json& body, const ModelContext& ctx) {
  if (!body.is_object()) bad("", cat("the request body must be a JSON object, got ", body.type_name()));
  check_fields(body, kCompletionsEndpoint);
  check_model(body, ctx);
  const json* prompt = field(body, "prompt");
  if (!prompt) bad("prompt", "'prompt' is required");
  std::string text;
  std::vector<int32_t> ids = prompt_ids(*prompt, ctx, text);
  int top = 0;
  bool want_logprobs = false;
  if (field(body, "logprobs")) {
    top = static_cast<int>(get_int(body, "logprobs", 0, 0, kMaxLogprobs));
    want_logprobs = true;
  }
  int64_t max_tokens = get_int(body, "max_tokens", 16, 1, std::numeric_limits<int64_t>::max());
  ApiRequest req = parse_common(body, ctx, std::move(ids), max_tokens);
  req.logprobs = want_logprobs;
  req.top_logprobs = top;
  for (EngineRequest& r : req.sequences) r.params.logprobs = top;
  req.echo = get_bool(body, "echo", false);
  req.prompt_text = text;
  return req;
}

ApiRequest parse_chat_request(const json& body, const ModelContext& ctx) {
  if (!body.is_object()) bad("", cat("the request body must be a JSON object, got ", body.type_name()));
  check_fields(body, kChatEndpoint);
  check_model(body, ctx);
  const json* messages = field(body, "messages");
  if (!messages) bad("messages", "'messages' is required");
  std::optional<ToolRequest> tools = parse_tool_request(body);
  std::string rendered;
  std::vector<int32_t> ids = encode_chat(*messages, ctx, &rendered, tools ? &*tools : nullptr);
  bool want_logprobs = get_bool(body, "logprobs", false);
  int top = static_cast<int>(get_int(body, "top_logprobs", 0, 0, kMaxLogprobs));
  if (top > 0 && !want_logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  int64_t max_tokens = -1;
  if (field(body, "max_completion_tokens"))
    max_tokens = get_int(body, "max_completion_tokens", 0, 1, std::numeric_limits<int64_t>::max());
  if (field(body, "max_tokens")) max_tokens = get_int(body, "max_tokens", 0, 1, std::numeric_limits<int64_t>::max());
  ApiRequest req = parse_common(body, ctx, std::move(ids), max_tokens);
  req.chat = true;
  req.tool_format = tool_call_format(*ctx.chat_template->chat_template);
  // "required" / a named function: the output is one call, forced by the grammar.
  if (std::optional<Grammar> call = tools ? tool_call_grammar(*tools, req.tool_format) : std::nullopt) {
    if (req.sequences.at(0).grammar)
      bad("tool_choice", "'tool_choice' \"required\" or a named function cannot be combined with 'response_format': "
                         "the answer is a tool call");
    for (EngineRequest& r : req.sequences) r.grammar = call;
  }
  req.tools = std::move(tools);
  req.template_text = std::move(rendered);
  req.prompt_text = messages->dump(-1, ' ', false, json::error_handler_t::replace);  // for the trace manifest
  req.logprobs = want_logprobs;
  req.top_logprobs = top;
  for (EngineRequest& r : req.sequences) r.params.logprobs = top;
  return req;
}

std::vector<int32_t> parse_tokenize_request(const json& body, const ModelContext& ctx) {
  if (!body.is_object()) bad("", cat("the request body must be a JSON object, got ", body.type_name()));
  if (body.contains("messages")) {
    std::optional<ToolRequest> tools = parse_tool_request(body);
    return encode_chat(body["messages"], ctx, nullptr, tools ? &*tools : nullptr);
  }
  if (!body.contains("prompt") || !body["prompt"].is_string()) bad("prompt", "/tokenize needs 'prompt' (a string) or 'messages'");
  const std::string& prompt = body["prompt"].get_ref<const std::string&>();
  check_prompt_bytes(static_cast<int64_t>(prompt.size()), ctx, "prompt");
  const bool special = get_bool(body, "add_special_tokens", true);
  std::vector<int> raw = ctx.tokenizer->encode(prompt, special, /*parse_special=*/false);
  return {raw.begin(), raw.end()};
}

std::vector<int> parse_detokenize_request(const json& body, const ModelContext& ctx) {
  if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
    bad("tokens", "/detokenize needs 'tokens', a list of token ids");
  const json& tokens = body["tokens"];
  std::vector<int> ids;
  for (const json& t : tokens) {
    const bool in_range = t.is_number_integer() && !(t.is_number_unsigned() && t.get<uint64_t>() > uint64_t(INT32_MAX)) &&
                          t.get<int64_t>() >= 0 && t.get<int64_t>() < ctx.tokenizer->vocab_size();
    if (!in_range)
      bad("tokens", cat("'tokens' must hold token ids in [0, ", ctx.tokenizer->vocab_size(), "); found ", excerpt_json(t)));
    ids.push_back(static_cast<int>(t.get<int64_t>()));
  }
  return ids;
}

std::string token_text(const ModelContext& ctx, int32_t id, int32_t previous) {
  // Ids past the tokenizer's vocabulary (a padded embedding table) have no text; the engine
  // emits none for them either.
  const int32_t vocab = ctx.tokenizer->vocab_size();
  if (id < 0 || id >= vocab) return "";
  return ctx.tokenizer->token_bytes(id, previous >= 0 && previous < vocab ? previous : -1, /*skip_special=*/false);
}

namespace {
json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}
}  // namespace

json logprobs_json(const ApiRequest& req, const ModelContext& ctx, const std::vector<SampledToken>& tokens,
                   int32_t previous, size_t text_offset) {
  if (req.chat) {
    json content = json::array();
    for (const SampledToken& t : tokens) {
      std::string s = token_text(ctx, t.id, previous);
      json top = json::array();
      for (const TokenLogprob& alt : t.top) {
        std::string a = token_text(ctx, alt.id, previous);
        top.push_back({{"token", a}, {"logprob", alt.logprob}, {"bytes", bytes_of(a)}});
      }
      content.push_back({{"token", s}, {"logprob", t.logprob}, {"bytes", bytes_of(s)}, {"top_logprobs", top}});
      previous = t.id;
    }
    return {{"content", content}};
  }
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const SampledToken& t : tokens) {
    std::string s = token_text(ctx, t.id, previous);
    out["tokens"].push_back(s);
    out["token_logprobs"].push_back(t.logprob);
    json top = json::object();
    for (const TokenLogprob& alt : t.top) top[token_text(ctx, alt.id, previous)] = alt.logprob;
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(text_offset);
    text_offset += s.size();
    previous = t.id;
  }
  return out;
}

json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

}  // namespace journey::server
