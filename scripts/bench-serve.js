#!/usr/bin/env node
// Load test for a running `journey serve`: N concurrent streaming completions with varied prompt
// and output lengths. Reports output tokens/s, requests/s, TTFT and inter-token latency P50/P99,
// checks that every request finished with the tokens it asked for, and that afterwards every KV
// block is free (GET /metrics). Also samples KV slot use under load (filled / allocated slots).
//
//   node scripts/bench-serve.js --url http://127.0.0.1:8000 --key KEY --model NAME \
//        --requests 32 --concurrency 16 --min-out 32 --max-out 128 [--seed 1]
const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const url = args.url ?? 'http://127.0.0.1:8000';
const key = args.key ?? process.env.JOURNEY_API_KEY ?? '';
const model = args.model;
const total = Number(args.requests ?? 32);
const concurrency = Number(args.concurrency ?? 16);
const minOut = Number(args['min-out'] ?? 32), maxOut = Number(args['max-out'] ?? 128);
let seed = Number(args.seed ?? 1);
const rand = () => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed / 2147483648; };
const words = 'once upon a time there was a little girl named lily she loved to play outside with her dog in the park'.split(' ');

const metrics = async () => {
  const text = await (await fetch(`${url}/metrics`)).text();
  const get = (n) => Number((text.split('\n').find((l) => l.startsWith(n + ' ')) ?? 'x NaN').split(' ')[1]);
  return { used: get('journey:kv_blocks_used'), allocated: get('journey:kv_slots_allocated'), filled: get('journey:kv_slots_filled'),
           preemptions: get('journey:num_preemptions_total'), running: get('journey:num_requests_running') };
};

async function one(i) {
  const promptWords = 4 + Math.floor(rand() * 60);
  const prompt = Array.from({ length: promptWords }, () => words[Math.floor(rand() * words.length)]).join(' ');
  const maxTokens = minOut + Math.floor(rand() * (maxOut - minOut + 1));
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

const results = [];
let next = 0;
const slotSamples = [];
const sampler = setInterval(async () => {
  try { const m = await metrics(); if (m.allocated > 0) slotSamples.push(m.filled / m.allocated); } catch {}
}, 250);
const t0 = performance.now();
await Promise.all(Array.from({ length: Math.min(concurrency, total) }, async () => {
  while (next < total) results.push(await one(next++));
}));
const seconds = (performance.now() - t0) / 1000;
clearInterval(sampler);
await new Promise((r) => setTimeout(r, 300));
const after = await metrics();
const outTokens = results.reduce((a, r) => a + r.tokens, 0);
const itl = results.flatMap((r) => r.itl);
const report = {
  requests: results.length, concurrency, seconds: +seconds.toFixed(2), output_tokens: outTokens,
  output_tokens_per_s: +(outTokens / seconds).toFixed(2), requests_per_s: +(results.length / seconds).toFixed(3),
  ttft_ms: { p50: +pct(results.map((r) => r.ttft), 50).toFixed(1), p99: +pct(results.map((r) => r.ttft), 99).toFixed(1) },
  itl_ms: { p50: +pct(itl, 50).toFixed(1), p99: +pct(itl, 99).toFixed(1) },
  kv_slot_fill_under_load: slotSamples.length ? +(slotSamples.reduce((a, b) => a + b, 0) / slotSamples.length).toFixed(4) : null,
  preemptions: after.preemptions, kv_blocks_used_after: after.used,
};
console.log(JSON.stringify(report, null, 2));
if (results.length !== total || after.used !== 0) { console.error('FAIL: lost requests or KV blocks still in use'); process.exit(1); }
