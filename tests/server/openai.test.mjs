// Drives a running `journey serve` (JOURNEY_URL, JOURNEY_API_KEY, JOURNEY_MODEL_NAME) with the
// official OpenAI client, plus raw fetch for what the client hides (status codes, SSE bytes).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const base = process.env.JOURNEY_URL;
const key = process.env.JOURNEY_API_KEY;
const model = process.env.JOURNEY_MODEL_NAME;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });

const metric = async (name) => {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  return Number(line.split(' ')[1]);
};
const raw = (path, body, headers = {}) =>
  fetch(`${base}${path}`, { method: 'POST', headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json', ...headers }, body });

test('models lists the served model', async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [model]);
});

test('completion: greedy text, usage, finish_reason length, deterministic', async () => {
  const a = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
  const b = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
  assert.equal(a.choices[0].finish_reason, 'length');
  assert.equal(a.usage.completion_tokens, 12);
  assert.equal(a.usage.total_tokens, a.usage.prompt_tokens + 12);
  assert.ok(a.choices[0].text.length > 0);
  assert.equal(a.choices[0].text, b.choices[0].text);
  // /tokenize agrees with the prompt token count in usage.
  const tok = await (await raw('/tokenize', JSON.stringify({ prompt: 'Once upon a time' }))).json();
  assert.equal(tok.count, a.usage.prompt_tokens);
  const detok = await (await raw('/detokenize', JSON.stringify({ tokens: tok.tokens }))).json();
  assert.equal(detok.prompt.trim(), 'Once upon a time');
});

test('streamed completion equals the non-streamed one', async () => {
  const full = await client.completions.create({ model, prompt: 'The cat', max_tokens: 15, temperature: 0 });
  const stream = await client.completions.create({ model, prompt: 'The cat', max_tokens: 15, temperature: 0, stream: true });
  let text = '';
  let reason = null;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.text ?? '';
    reason = chunk.choices[0]?.finish_reason ?? reason;
  }
  assert.equal(text, full.choices[0].text);
  assert.equal(reason, 'length');
});

test('chat: template applied, streaming with include_usage, stop string', async () => {
  const res = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 10, temperature: 0 });
  assert.equal(res.choices[0].message.role, 'assistant');
  assert.equal(res.usage.completion_tokens, 10);
  const stream = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Tell me a story.' }], max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    text += chunk.choices[0]?.delta?.content ?? '';
  }
  assert.equal(text, res.choices[0].message.content);
  assert.equal(usage.completion_tokens, 10);
  assert.equal(usage.prompt_tokens, res.usage.prompt_tokens);
  // A stop string taken from the greedy text cuts the output right before it.
  const full = (await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 30, temperature: 0 })).choices[0].text;
  const word = full.trim().split(' ')[3];
  const cut = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 30, temperature: 0, stop: [word] });
  assert.equal(cut.choices[0].finish_reason, 'stop');
  assert.equal(cut.choices[0].text, full.slice(0, full.indexOf(word)));
});

test('n > 1 with a seed: n distinct reproducible choices', async () => {
  const req = { model, prompt: 'Once', max_tokens: 12, temperature: 1.0, seed: 7, n: 3 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index).sort(), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.text), b.choices.map((c) => c.text));
  assert.ok(new Set(a.choices.map((c) => c.text)).size > 1);
  assert.equal(a.usage.completion_tokens, 36);
});

test('logprobs in both shapes', async () => {
  const c = await client.completions.create({ model, prompt: 'Once upon', max_tokens: 5, temperature: 0, logprobs: 3 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, 5);
  assert.equal(lp.tokens.join(''), c.choices[0].text);
  for (let i = 0; i < 5; i++) {
    assert.equal(Object.keys(lp.top_logprobs[i]).length, 3);
    // greedy: the chosen token is the most likely one
    assert.equal(Math.max(...Object.values(lp.top_logprobs[i])), lp.token_logprobs[i]);
  }
  const chat = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.length, 4);
  assert.equal(content[0].top_logprobs.length, 2);
  assert.ok(content[0].logprob <= 0);
});

test('errors: auth, validation, context, unknown model', async () => {
  const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong-key', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
  await assert.rejects(client.completions.create({ model, prompt: 'x', temperature: 'hot' }), (e) => e.status === 400 && /temperature/.test(e.message));
  await assert.rejects(client.completions.create({ model, prompt: 'x', max_tokens: 1000000 }), (e) => e.status === 400 && /context/.test(e.message));
  await assert.rejects(client.chat.completions.create({ model, messages: [] }), (e) => e.status === 400 && /messages/.test(e.message));
  await assert.rejects(client.completions.create({ model: 'gpt-4', prompt: 'x' }), (e) => e.status === 404);
  const r = await raw('/v1/completions', '{"prompt": ');
  assert.equal(r.status, 400);
  const body = await r.json();
  assert.ok(body.error.message.includes('JSON'));
  assert.ok('type' in body.error && 'param' in body.error && 'code' in body.error);
  const health = await fetch(`${base}/health`);  // no key needed
  assert.equal(health.status, 200);
  // still serving
  const ok = await client.completions.create({ model, prompt: 'x', max_tokens: 2 });
  assert.equal(ok.usage.completion_tokens <= 2, true);
});

test('a client that disconnects mid-stream has its sequence aborted and its blocks freed', async () => {
  const ctrl = new AbortController();
  const res = await raw('/v1/completions', JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 200, stream: true, ignore_eos: true }), {});
  const reader = res.body.getReader();
  await reader.read();
  await reader.read();
  assert.ok((await metric('journey:kv_blocks_used')) > 0);
  await reader.cancel();
  ctrl.abort();
  let used = -1;
  for (let i = 0; i < 100 && used !== 0; i++) {
    await new Promise((r) => setTimeout(r, 100));
    used = await metric('journey:kv_blocks_used');
  }
  assert.equal(used, 0);
  assert.equal(await metric('journey:num_requests_running'), 0);
});

test('a non-streaming client that disconnects has its sequences aborted and its blocks freed', async () => {
  const aborted = async () => {
    const text = await (await fetch(`${base}/metrics`)).text();
    const line = text.split('\n').find((l) => l.startsWith('journey:request_success_total{finished_reason="abort"}'));
    return Number(line.split(' ')[1]);
  };
  const before = await aborted();
  // 16 choices of 480 tokens: far longer than it takes to notice that the client left.
  const ctrl = new AbortController();
  const pending = fetch(`${base}/v1/completions`, {
    method: 'POST', signal: ctrl.signal,
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 480, n: 16, ignore_eos: true, seed: 3 }),
  }).then((res) => res.json()).then(() => 'answered', () => 'cancelled');  // headers come first; the body at the end
  let used = 0;
  for (let i = 0; i < 400 && used === 0; i++) {
    await new Promise((r) => setTimeout(r, 5));
    used = await metric('journey:kv_blocks_used');
  }
  assert.ok(used > 0, 'the request never started running');
  ctrl.abort();
  assert.equal(await pending, 'cancelled');
  for (let i = 0; i < 100 && used !== 0; i++) {
    await new Promise((r) => setTimeout(r, 50));
    used = await metric('journey:kv_blocks_used');
  }
  assert.equal(used, 0);
  // Aborted, not run to the end for nobody.
  assert.equal(await aborted(), before + 16);
});

test('concurrent requests all complete and every block is free afterwards', async () => {
  // A shared opening longer than one 16-token block, computed once before the burst.
  const opening = 'Once upon a time there was a little girl named Lily. She loved to play outside in the park with her friends.';
  await client.completions.create({ model, prompt: opening, max_tokens: 1 });
  const jobs = [];
  for (let i = 0; i < 12; i++)
    jobs.push(client.completions.create({ model, prompt: opening + ' One day'.repeat(1 + (i % 4)), max_tokens: 5 + i, temperature: 0, ignore_eos: true }));
  const results = await Promise.all(jobs);
  results.forEach((r, i) => assert.equal(r.usage.completion_tokens, 5 + i));
  assert.equal(await metric('journey:kv_blocks_used'), 0);
  assert.ok((await metric('journey:prefix_cache_hits_total')) > 0);
});
