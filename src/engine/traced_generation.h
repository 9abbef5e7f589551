// generate() with every stage of every step recorded into a dump: what `journey trace` runs, and
// what a test runs when it needs a dump from a backend of its own making (a planted bug). The dump
// is told where each step begins — a backend cannot know whether a forward pass is the prefill or
// a decode step — and the prefill keeps the logits of every prompt position, as the goldens do.
#pragma once
#include "engine/generate.h"
#include "trace/dump_sink.h"

namespace journey {

class Backend;
class Tokenizer;

class LogitLens;

// Runs the request like generate() with `sink` receiving every wanted stage, step 0 being the
// prefill of request.prompt_ids and each later step one decode; every sampled token goes into the
// manifest's steps with its probability and request.sampling.logprobs alternatives. With a `lens`, the logit lens of
// every layer is recorded too (when the sink's filters want it; engine/logit_lens.h). The caller
// fills the manifest's model, prompt and settings, then calls sink.finish().
GenerationResult generate_traced(Backend& backend, const Tokenizer& tokenizer, const GenerationRequest& request,
                                 DumpSink& sink, const GenerationCallbacks& callbacks = {},
                                 const LogitLens* lens = nullptr);

}  // namespace journey
