// generate() with every stage of every step recorded into a dump: what `journey trace` runs, and
// what a test runs when it needs a dump from a backend of its own making (a planted bug). The dump
// is told where each step begins — a backend cannot know whether a forward pass is the prefill or
// a decode step — and the prefill keeps the logits of every prompt position, as the goldens do.
#pragma once
#include "engine/generate.h"
#include "trace/dump_sink.h"

namespace journey {

class Backend;

// What a dump's manifest says of the backend that made it (settings "backend", "dtype" — the type
// its matrices are multiplied in — and "weights_as_stored", the model file's types): what
// journey-trace diff labels each side with and picks its tolerances by. Every writer uses this.
nlohmann::json backend_manifest_settings(const Backend& backend);

// The positions of a prefill from position 0: 0, 1, ..., prompt_tokens - 1.
std::vector<int64_t> prefill_positions(size_t prompt_tokens);
class Tokenizer;
class LogitLens;

// Runs the request like generate() with `sink` receiving every wanted stage, step 0 being the
// prefill of request.prompt_ids and each later step one decode. Step 0 is started here unless the
// caller started it already (to record something before the prefill, such as the chat template's
// text). Every sampled token goes into the manifest's steps with its probability and
// request.sampling.logprobs alternatives. With a `lens`, the logit lens of every layer is recorded
// too (when the sink's filters want it; engine/logit_lens.h). The caller fills the manifest's
// model, prompt and settings, then calls sink.finish().
GenerationResult generate_traced(Backend& backend, const Tokenizer& tokenizer, const GenerationRequest& request,
                                 DumpSink& sink, const GenerationCallbacks& callbacks = {},
                                 const LogitLens* lens = nullptr);

}  // namespace journey
