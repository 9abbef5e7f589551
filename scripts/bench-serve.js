#!/usr/bin/env node
// Load test for a running `journey serve`, in two phases in the same run so that their ratio means
// something: first --single-requests requests one at a time (the single-stream decode rate), then
// --requests requests with --concurrency in flight (continuous batching). Every request streams a
// completion with a varied prompt and asks for a given number of tokens (ignore_eos). Reports per
// phase output tokens/s, requests/s, TTFT and inter-token latency P50/P99, then the ratio of the
// batched to the single-stream output rate. Checks that every request got all its tokens and that
// afterwards every KV block is free (GET /metrics); samples KV slot use under load
// (filled / allocated slots of used blocks) and reads the engine's step histograms (tokens per
// step, seconds per step) and the prompt tokens the prefix cache served from /metrics for each
// phase (a run repeated with the same --seed finds its prompts cached: it says so on stderr).
//
//   node scripts/bench-serve.js --url http://127.0.0.1:8000 --key KEY --model NAME \
//        --single-requests 4 --requests 32 --concurrency 16 --min-out 32 --max-out 128 [--seed 1]
//
// Single-stream requests all ask for --max-out tokens. --single-requests 0 skips that phase.
//
// Behind a load balancer (tests/server/test_rolling_restart.py, deploy/README.md):
//   --metrics-url URL,URL  read /metrics from these servers (the replicas) instead of --url, summed
//   --keep-going           a failed request is counted, with its reason, instead of ending the run
//   SIGINT / SIGTERM       start no new request, finish those in flight, print the report
// The report counts requests sent, completed and failed; the run fails (exit 1) when one failed or
// a KV block is still in use afterwards.
const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const url = args.url ?? 'http://127.0.0.1:8000';
const key = args.key ?? process.env.JOURNEY_API_KEY ?? '';
const model = args.model;
const metricsUrls = (args['metrics-url'] ?? url).split(',');
const keepGoing = 'keep-going' in args;
let stopping = false;  // a signal came: no new requests
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => { stopping = true; });
const total = Number(args.requests ?? 32);
const concurrency = Number(args.concurrency ?? 16);
const singleRequests = Number(args['single-requests'] ?? 4);
const minOut = Number(args['min-out'] ?? 32), maxOut = Number(args['max-out'] ?? 128);
let seed = Number(args.seed ?? 1);
const rand = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
const words = 'once upon a time there was a little girl named lily she loved to play outside with her dog in the park'.split(' ');

const metricsOf = async (base) => {
  const text = await (await fetch(`${base}/metrics`)).text();
  // Series carry model_name="..." (and replica="...") labels: drop them to name a series.
  const plain = (l) => l.replace(/(model_name|replica)="(?:[^"\\]|\\.)*",?/g, '').replace(',}', '}').replace('{}', '');
  const get = (n) => Number((text.split('\n').map(plain).find((l) => l.startsWith(n + ' ')) ?? 'x NaN').split(' ')[1]);
  return { used: get('journey:kv_blocks_used'), allocated: get('journey:kv_slots_allocated'), filled: get('journey:kv_slots_filled'),
           preemptions: get('journey:num_preemptions_total'), running: get('journey:num_requests_running'),
           steps: get('journey:engine_step_seconds_count'), stepSeconds: get('journey:engine_step_seconds_sum'),
           sampled: get('journey:engine_step_sampled_tokens_sum'),
           prefixHits: get('journey:prefix_cache_hits_total'), prefixQueries: get('journey:prefix_cache_queries_total') };
};
// Summed over the servers (counters of a replica that restarted start again from 0).
const metrics = async () => {
  const all = await Promise.all(metricsUrls.map(metricsOf));
  return Object.fromEntries(Object.keys(all[0]).map((k) => [k, all.reduce((a, m) => a + m[k], 0)]));
};

async function one(i, fixedOut) {
  const promptWords = 4 + Math.floor(rand() * 60);
  const prompt = Array.from({ length: promptWords }, () => words[Math.floor(rand() * words.length)]).join(' ');
  const maxTokens = fixedOut ?? minOut + Math.floor(rand() * (maxOut - minOut + 1));
  const start = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(key ? { Authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ model, prompt, max_tokens: maxTokens, temperature: 0, ignore_eos: true, stream: true,
                           stream_options: { include_usage: true } }),
  });
  if (res.status !== 200) throw new Error(`request ${i}: HTTP ${res.status} ${await res.text()}`);
  const decoder = new TextDecoder();
  let buffer = '', times = [], usage = null, done = false;
  for await (const bytes of res.body) {
    buffer += decoder.decode(bytes, { stream: true });
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
      if (!event.startsWith('data: ')) continue;
      const data = event.slice(6);
      if (data === '[DONE]') { done = true; continue; }
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(`request ${i}: the server sent an error: ${JSON.stringify(chunk.error)}`);
      if (chunk.usage) usage = chunk.usage;
      if (chunk.choices?.length) times.push(performance.now());
    }
  }
  if (!done || !usage || usage.completion_tokens !== maxTokens)
    throw new Error(`request ${i}: incomplete (done=${done}, tokens=${usage?.completion_tokens} of ${maxTokens})`);
  const itl = times.slice(1).map((t, k) => t - times[k]);
  return { ttft: times[0] - start, itl, tokens: usage.completion_tokens, e2e: performance.now() - start };
}

const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))] : NaN; };

// One phase: `count` requests, `width` in flight at a time.
async function phase(count, width, fixedOut) {
  const before = await metrics();
  const results = [], failures = [];
  let next = 0;
  const slotSamples = [];
  const sampler = setInterval(async () => {
    try { const m = await metrics(); if (m.allocated > 0) slotSamples.push(m.filled / m.allocated); } catch {}
  }, 250);
  const t0 = performance.now();
  await Promise.all(Array.from({ length: Math.min(width, count) }, async () => {
    while (next < count && !stopping) {
      const i = next++;
      try {
        results.push(await one(i, fixedOut));
      } catch (e) {
        if (!keepGoing) throw e;
        failures.push(e.message);
      }
    }
  }));
  const seconds = (performance.now() - t0) / 1000;
  clearInterval(sampler);
  await new Promise((r) => setTimeout(r, 300));
  const after = await metrics();
  const outTokens = results.reduce((a, r) => a + r.tokens, 0);
  const itl = results.flatMap((r) => r.itl);
  const steps = after.steps - before.steps;
  const report = {
    requests: results.length, requests_sent: next, requests_failed: failures.length, failures: failures.slice(0, 20),
    concurrency: width, seconds: +seconds.toFixed(2), output_tokens: outTokens,
    output_tokens_per_s: +(outTokens / seconds).toFixed(2), requests_per_s: +(results.length / seconds).toFixed(3),
    ttft_ms: { p50: +pct(results.map((r) => r.ttft), 50).toFixed(1), p99: +pct(results.map((r) => r.ttft), 99).toFixed(1) },
    itl_ms: { p50: +pct(itl, 50).toFixed(1), p99: +pct(itl, 99).toFixed(1) },
    engine_steps: steps,
    engine_step_ms_mean: steps > 0 ? +(1000 * (after.stepSeconds - before.stepSeconds) / steps).toFixed(2) : null,
    sampled_tokens_per_step: steps > 0 ? +((after.sampled - before.sampled) / steps).toFixed(2) : null,
    engine_busy_fraction: steps > 0 ? +((after.stepSeconds - before.stepSeconds) / seconds).toFixed(3) : null,
    kv_slot_fill_under_load: slotSamples.length ? +(slotSamples.reduce((a, b) => a + b, 0) / slotSamples.length).toFixed(4) : null,
    preemptions: after.preemptions - before.preemptions, kv_blocks_used_after: after.used,
    // prompt tokens whose KV came from the prefix cache: a second run of the same --seed finds its
    // prompts cached, and its rates are then those of cache hits, not of the prefill
    prompt_tokens_looked_up: after.prefixQueries - before.prefixQueries,
    prompt_tokens_from_prefix_cache: after.prefixHits - before.prefixHits,
  };
  if (report.prompt_tokens_from_prefix_cache > 0)
    console.error(`note: ${report.prompt_tokens_from_prefix_cache} of ${report.prompt_tokens_looked_up} prompt tokens of this ` +
                  'phase came from the prefix cache (the same --seed again?): its rates include those hits; for ' +
                  'prefill and batching alone start the server with --no-prefix-caching or change --seed');
  if (results.length !== next || failures.length > 0 || (!stopping && next !== count) || after.used !== 0) {
    console.error(JSON.stringify(report, null, 2));
    console.error('FAIL: lost requests or KV blocks still in use');
    process.exit(1);
  }
  return report;
}

const out = {};
if (singleRequests > 0) out.single = await phase(singleRequests, 1, maxOut);
out.batched = await phase(total, concurrency);
if (out.single) out.batched_over_single_output_tok_s = +(out.batched.output_tokens_per_s / out.single.output_tokens_per_s).toFixed(2);
console.log(JSON.stringify(out, null, 2));
