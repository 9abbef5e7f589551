"""A real `journey serve` (data/stories260K) driven by the official Python `openai` client and curl.

    tools/python/venv-python tests/server/test_openai_client.py --journey build/src/cli/journey \
        --model data/stories260K [unittest arguments, e.g. -k logprobs]

Run by ctest as server_openai_clients. The client is what the seeds use (request_demo.py: system +
user messages, max_tokens, temperature, streaming, usage); raw HTTP (http.client, curl) checks
what a client library hides: status codes, the SSE bytes, /metrics. Every request goes to
127.0.0.1 and every loop is bounded.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from journey_server import JourneyServer  # noqa: E402

MODEL = "stories"  # --served-model-name
server = None      # the JourneyServer of this run (setUpModule)
client = None      # openai.OpenAI pointed at it


def setUpModule():
    global server, client
    server = JourneyServer(ARGS.journey, ARGS.model, MODEL).__enter__()
    client = server.openai_client()


def tearDownModule():
    server.stop_checked()


def collect_completion_stream(stream):
    """(text, finish_reason) of a streamed /v1/completions."""
    text, reason = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].text or ""
            reason = chunk.choices[0].finish_reason or reason
    return text, reason


class SeedsRequest(unittest.TestCase):
    """The request the seeds make (request_demo.py): system + user, max_tokens, temperature, streaming, usage."""

    MESSAGES = [{"role": "system", "content": "You are a storyteller."},
                {"role": "user", "content": "Tell me a story about a cat."}]

    def test_system_and_user_streamed_with_usage(self):
        request = dict(model=MODEL, messages=self.MESSAGES, max_tokens=24, temperature=0.7, seed=11)
        full = client.chat.completions.create(**request)
        self.assertEqual(full.choices[0].message.role, "assistant")
        self.assertEqual(full.usage.completion_tokens, 24)
        self.assertEqual(full.usage.total_tokens, full.usage.prompt_tokens + 24)
        # The prompt is the chat template over BOTH messages: /tokenize of the messages agrees, and
        # dropping the system message makes it shorter.
        counted = server.post_json("/tokenize", {"messages": self.MESSAGES})
        self.assertEqual(counted["count"], full.usage.prompt_tokens)
        user_only = server.post_json("/tokenize", {"messages": self.MESSAGES[1:]})
        self.assertLess(user_only["count"], counted["count"])
        # Streamed with the same seed: the same text, delivered in pieces, usage at the end.
        stream = client.chat.completions.create(**request, stream=True, stream_options={"include_usage": True})
        pieces, usage, reason = [], None, None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
                reason = chunk.choices[0].finish_reason or reason
        self.assertGreater(len([p for p in pieces if p]), 1, "the answer came in one piece, not streamed")
        self.assertEqual("".join(pieces), full.choices[0].message.content)
        self.assertEqual(reason, "length")
        self.assertEqual(usage.completion_tokens, 24)
        self.assertEqual(usage.prompt_tokens, full.usage.prompt_tokens)

    def test_temperature_changes_the_answer_and_zero_is_greedy(self):
        greedy = [client.chat.completions.create(model=MODEL, messages=self.MESSAGES, max_tokens=16, temperature=0)
                  .choices[0].message.content for _ in range(2)]
        self.assertEqual(greedy[0], greedy[1])
        hot = {client.chat.completions.create(model=MODEL, messages=self.MESSAGES, max_tokens=16, temperature=1.5,
                                              seed=seed).choices[0].message.content for seed in range(4)}
        self.assertGreater(len(hot), 1, "four seeds at temperature 1.5 gave one answer")


class Completions(unittest.TestCase):
    def test_models_lists_the_served_model(self):
        self.assertEqual([m.id for m in client.models.list().data], [MODEL])

    def test_greedy_text_usage_length_deterministic(self):
        a = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=0)
        b = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=0)
        self.assertEqual(a.choices[0].finish_reason, "length")
        self.assertEqual(a.usage.completion_tokens, 12)
        self.assertEqual(a.usage.total_tokens, a.usage.prompt_tokens + 12)
        self.assertGreater(len(a.choices[0].text), 0)
        self.assertEqual(a.choices[0].text, b.choices[0].text)
        # /tokenize agrees with the prompt token count in usage; /detokenize inverts it.
        tok = server.post_json("/tokenize", {"prompt": "Once upon a time"})
        self.assertEqual(tok["count"], a.usage.prompt_tokens)
        detok = server.post_json("/detokenize", {"tokens": tok["tokens"]})
        self.assertEqual(detok["prompt"].strip(), "Once upon a time")

    def test_streamed_equals_non_streamed(self):
        full = client.completions.create(model=MODEL, prompt="The cat", max_tokens=15, temperature=0)
        text, reason = collect_completion_stream(
            client.completions.create(model=MODEL, prompt="The cat", max_tokens=15, temperature=0, stream=True))
        self.assertEqual(text, full.choices[0].text)
        self.assertEqual(reason, "length")

    def test_stop_string_cuts_right_before_it(self):
        full = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=30, temperature=0).choices[0].text
        word = full.strip().split(" ")[3]
        cut = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=30, temperature=0, stop=[word])
        self.assertEqual(cut.choices[0].finish_reason, "stop")
        self.assertEqual(cut.choices[0].text, full[:full.index(word)])

    def test_n_with_a_seed_gives_n_distinct_reproducible_choices(self):
        request = dict(model=MODEL, prompt="Once", max_tokens=12, temperature=1.0, seed=7, n=3)
        a = client.completions.create(**request)
        b = client.completions.create(**request)
        self.assertEqual(len(a.choices), 3)
        self.assertEqual(sorted(c.index for c in a.choices), [0, 1, 2])
        by_index = lambda r: [c.text for c in sorted(r.choices, key=lambda c: c.index)]  # noqa: E731
        self.assertEqual(by_index(a), by_index(b))
        self.assertGreater(len(set(by_index(a))), 1)
        self.assertEqual(a.usage.completion_tokens, 36)

    def test_logprobs_in_both_shapes(self):
        c = client.completions.create(model=MODEL, prompt="Once upon", max_tokens=5, temperature=0, logprobs=3)
        lp = c.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 5)
        self.assertEqual("".join(lp.tokens), c.choices[0].text)
        for i in range(5):
            self.assertEqual(len(lp.top_logprobs[i]), 3)
            # greedy: the chosen token is the most likely one
            self.assertEqual(max(lp.top_logprobs[i].values()), lp.token_logprobs[i])
        chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}],
                                              max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
        content = chat.choices[0].logprobs.content
        self.assertEqual(len(content), 4)
        self.assertEqual(len(content[0].top_logprobs), 2)
        self.assertLessEqual(content[0].logprob, 0)


class Chat(unittest.TestCase):
    def test_template_applied_streaming_with_include_usage(self):
        messages = [{"role": "user", "content": "Tell me a story."}]
        res = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10, temperature=0)
        self.assertEqual(res.choices[0].message.role, "assistant")
        self.assertEqual(res.usage.completion_tokens, 10)
        stream = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10, temperature=0,
                                                stream=True, stream_options={"include_usage": True})
        text, usage = "", None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
        self.assertEqual(text, res.choices[0].message.content)
        self.assertEqual(usage.completion_tokens, 10)
        self.assertEqual(usage.prompt_tokens, res.usage.prompt_tokens)


class Errors(unittest.TestCase):
    def test_auth_validation_context_unknown_model(self):
        bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong-key", max_retries=0)
        with self.assertRaises(openai.AuthenticationError) as e:
            bad.models.list()
        self.assertEqual(e.exception.status_code, 401)
        with self.assertRaises(openai.BadRequestError) as e:
            client.completions.create(model=MODEL, prompt="x", temperature="hot")
        self.assertIn("temperature", e.exception.message)
        with self.assertRaises(openai.BadRequestError) as e:
            client.completions.create(model=MODEL, prompt="x", max_tokens=1000000)
        self.assertIn("context", e.exception.message)
        with self.assertRaises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL, messages=[])
        self.assertIn("messages", e.exception.message)
        with self.assertRaises(openai.NotFoundError) as e:
            client.completions.create(model="gpt-4", prompt="x")
        self.assertEqual(e.exception.status_code, 404)
        status, text = server.post("/v1/completions", '{"prompt": ')
        self.assertEqual(status, 400)
        error = json.loads(text)["error"]
        self.assertIn("JSON", error["message"])
        for field in ("type", "param", "code"):
            self.assertIn(field, error)
        self.assertEqual(server.get("/health")[0], 200)  # no key needed
        # still serving
        ok = client.completions.create(model=MODEL, prompt="x", max_tokens=2)
        self.assertLessEqual(ok.usage.completion_tokens, 2)


class Disconnects(unittest.TestCase):
    ABORTED = 'journey:request_success_total{finished_reason="abort"}'

    def test_streaming_client_that_leaves_has_its_sequence_aborted_and_blocks_freed(self):
        stream = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=200, stream=True,
                                           extra_body={"ignore_eos": True})
        chunks = iter(stream)
        next(chunks)
        next(chunks)
        self.assertGreater(server.metric("journey:kv_blocks_used"), 0)
        stream.close()  # what a client does when its user stops reading: the connection goes away
        self.assertEqual(server.wait_for_metric("journey:kv_blocks_used", lambda v: v == 0), 0)
        self.assertEqual(server.metric("journey:num_requests_running"), 0)

    def test_non_streaming_client_that_leaves_has_its_sequences_aborted_and_blocks_freed(self):
        before = server.metric(self.ABORTED)
        # 16 choices of 480 tokens: far longer than it takes to notice that the client left.
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 480, "n": 16, "ignore_eos": True, "seed": 3}
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"Authorization": f"Bearer {server.key}", "Content-Type": "application/json"})
        used = server.wait_for_metric("journey:kv_blocks_used", lambda v: v > 0, timeout_s=5, poll_s=0.005)
        self.assertGreater(used, 0, "the request never started running")
        conn.close()
        self.assertEqual(server.wait_for_metric("journey:kv_blocks_used", lambda v: v == 0), 0)
        # Aborted, not run to the end for nobody.
        self.assertEqual(server.wait_for_metric(self.ABORTED, lambda v: v == before + 16, timeout_s=5), before + 16)


class Concurrency(unittest.TestCase):
    def test_concurrent_requests_all_complete_and_every_block_is_free_afterwards(self):
        # A shared opening longer than one 16-token block, computed once before the burst.
        opening = ("Once upon a time there was a little girl named Lily. She loved to play outside in the park "
                   "with her friends.")
        client.completions.create(model=MODEL, prompt=opening, max_tokens=1)
        hits_before = server.metric("journey:prefix_cache_hits_total")

        def one(i):
            return client.completions.create(model=MODEL, prompt=opening + " One day" * (1 + i % 4), max_tokens=5 + i,
                                             temperature=0, extra_body={"ignore_eos": True})
        with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
            results = list(pool.map(one, range(12)))
        for i, r in enumerate(results):
            self.assertEqual(r.usage.completion_tokens, 5 + i)
        self.assertEqual(server.metric("journey:kv_blocks_used"), 0)
        self.assertGreater(server.metric("journey:prefix_cache_hits_total"), hits_before)


class Curl(unittest.TestCase):
    """The same server through curl: status codes and SSE bytes exactly as they go over the wire."""

    def curl(self, *args, data=None):
        command = ["curl", "-s", "--max-time", "60"] + list(args)
        return subprocess.run(command, input=data, capture_output=True, check=True).stdout

    def status(self, path, *args, data=None):
        return self.curl("-o", "/dev/null", "-w", "%{http_code}", *args, server.url + path, data=data).decode()

    def auth(self):
        return ["-H", f"Authorization: Bearer {server.key}", "-H", "Content-Type: application/json"]

    def test_status_codes(self):
        self.assertEqual(self.status("/health"), "200")                     # no key needed
        self.assertEqual(self.status("/v1/models"), "401")                  # no key
        models = json.loads(self.curl(*self.auth(), server.url + "/v1/models"))
        self.assertEqual([m["id"] for m in models["data"]], [MODEL])
        big = b'{"prompt":"' + b"a" * 2_000_000 + b'"}'
        self.assertEqual(self.status("/v1/completions", *self.auth(), "--data-binary", "@-", data=big), "413")
        self.assertEqual(self.status("/v1/completions", *self.auth(), "--data-binary", "@-",
                                     data=b'{"prompt":"\xc3\x28"}'), "400")  # invalid UTF-8

    def test_sse_bytes(self):
        sse = self.curl("-N", *self.auth(), server.url + "/v1/completions",
                        "-d", '{"prompt":"Once","max_tokens":4,"stream":true,"ignore_eos":true}').decode()
        data = [line for line in sse.split("\n") if line.startswith("data: ")]
        self.assertEqual(data[-1], "data: [DONE]")
        self.assertEqual(len([line for line in data if line.startswith("data: {")]), 4)
        self.assertTrue(sse.endswith("\n\n"), "every SSE event ends with a blank line")

    def test_metrics_exposed(self):
        text = self.curl(server.url + "/metrics").decode()
        self.assertEqual(len([l for l in text.splitlines() if l.startswith("journey:time_to_first_token_seconds_count")]), 1)


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
# A conversation that called the tool and got its answer back.
TOOL_HISTORY = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21}"},
]
QWEN_TEMPLATE = "tests/data/chat-templates/templates/Qwen-Qwen2.5-7B-Instruct.jinja"


def reference_render(template_path, messages, tools=None):
    """transformers' own Jinja environment (apply_chat_template's) on a template file: the
    independent reference for what journey's interpreter renders. Tool-call arguments go in as
    objects, as transformers and vLLM pass them."""
    from transformers.utils.chat_template_utils import _compile_jinja_template
    template = _compile_jinja_template(open(template_path, encoding="utf-8").read())
    messages = json.loads(json.dumps(messages))
    for m in messages:
        if m.get("content") is None:
            m["content"] = ""
        for call in m.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return template.render(messages=messages, tools=tools, add_generation_prompt=True, bos_token="", eos_token="<|im_end|>")


def rendered_prompt(srv, body):
    """The prompt text journey built for a chat request: /tokenize, then /detokenize."""
    ids = srv.post_json("/tokenize", body)["tokens"]
    return srv.post_json("/detokenize", {"tokens": ids})["prompt"]


def bad_request(test, call, param, words=""):
    """Asserts that call() is refused with a 400 whose error names `param` (and says `words`)."""
    with test.assertRaises(openai.BadRequestError) as e:
        call()
    error = e.exception.body if isinstance(e.exception.body, dict) else {}
    test.assertEqual(error.get("param"), param, e.exception.message)
    test.assertIn(words, e.exception.message)


class ApiSurface(unittest.TestCase):
    """Every field is implemented or refused by name; logit_bias, seed, /version, logs, labels."""

    def test_unknown_other_endpoint_and_unsupported_fields_are_refused_by_name(self):
        bad_request(self, lambda: client.completions.create(model=MODEL, prompt="x", extra_body={"temprature": 1}),
                    "temprature", "unknown field")
        bad_request(self, lambda: client.completions.create(model=MODEL, prompt="x", suffix="y"), "suffix", "not supported")
        bad_request(self, lambda: client.completions.create(model=MODEL, prompt="x", best_of=3), "best_of", "must equal 'n'")
        bad_request(self, lambda: client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], extra_body={"prediction": {"type": "content"}}),
            "prediction", "not supported")
        bad_request(self, lambda: client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], extra_body={"echo": True}),
            "echo", "not a field of /v1/chat/completions")
        bad_request(self, lambda: client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x", "weight": 2}]), "messages[0].weight", "unknown field")
        bad_request(self, lambda: client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], stream=True, stream_options={"include_usage": True, "x": 1}),
            "stream_options.x", "unknown field")
        # best_of equal to n, user, and nulls are accepted
        ok = client.completions.create(model=MODEL, prompt="x", max_tokens=2, n=2, best_of=2, user="tester",
                                       extra_body={"suffix": None})
        self.assertEqual(len(ok.choices), 2)

    def token_ids_of(self, prompt_ids, text):
        """The ids whose text, after the prompt, is `text` (stories260K has 512 ids: try them all; a
        piece and its byte-fallback token can read the same)."""
        base = server.post_json("/detokenize", {"tokens": prompt_ids})["prompt"]
        ids = [i for i in range(3, 512)
               if server.post_json("/detokenize", {"tokens": prompt_ids + [i]})["prompt"] == base + text]
        self.assertTrue(ids, f"no token reads {text!r} after the prompt")
        return ids

    def test_logit_bias_plus_100_forces_a_token_and_minus_100_bans_it(self):
        prompt = server.post_json("/tokenize", {"prompt": "Once upon a time"})["tokens"]
        base = server.post_json("/detokenize", {"tokens": prompt})["prompt"]
        greedy = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0).choices[0].text
        greedy_ids = self.token_ids_of(prompt, greedy)
        banned = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, temperature=0,
                                           logit_bias={str(i): -100 for i in greedy_ids}).choices[0].text
        self.assertNotEqual(banned, greedy)
        forced_id = self.token_ids_of(prompt, banned)[0]  # some other token, now forced at every step
        forced = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, temperature=1.0, seed=5,
                                           logit_bias={str(forced_id): 100})
        self.assertEqual(forced.usage.completion_tokens, 6)
        self.assertEqual(base + forced.choices[0].text,
                         server.post_json("/detokenize", {"tokens": prompt + [forced_id] * 6})["prompt"])
        # ids outside the vocabulary, biases outside [-100, 100]
        bad_request(self, lambda: client.completions.create(model=MODEL, prompt="x", logit_bias={"512": 1}), "logit_bias",
                    "token ids in [0, 512)")
        bad_request(self, lambda: client.completions.create(model=MODEL, prompt="x", logit_bias={"5": 101}), "logit_bias",
                    "[-100, 100]")

    def test_seed_same_text_at_temperature_1_and_different_seeds_differ(self):
        def run(seed):
            return client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=16, temperature=1.0,
                                             seed=seed).choices[0].text
        self.assertEqual(run(123), run(123))
        self.assertGreater(len({run(seed) for seed in (1, 2, 3, 4)}), 1)

    def test_version_metric_labels_and_one_log_line_per_request(self):
        status, text = server.get("/version")
        self.assertEqual(status, 200)
        version = json.loads(text)
        self.assertEqual(version["model"], MODEL)
        self.assertRegex(version["version"], r"^\d+\.\d+\.\d+$")
        r = client.completions.create(model=MODEL, prompt="Once", max_tokens=3, temperature=0, user="log-test")
        with self.assertRaises(openai.BadRequestError):
            client.completions.create(model=MODEL, prompt="x", extra_body={"nonsense": 1})
        status, metrics = server.get("/metrics")
        samples = [line for line in metrics.splitlines() if line and not line.startswith("#")]
        self.assertGreater(len(samples), 30)
        for line in samples:
            self.assertIn(f'model_name="{MODEL}"', line)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and f"request {r.id} " not in server.log_text():
            time.sleep(0.05)
        log = server.log_text()
        line = next(l for l in log.splitlines() if f"request {r.id} " in l)
        self.assertRegex(line, r"POST /v1/completions 200 prompt_tokens=\d+ completion_tokens=3 ttft_ms=[\d.]+ "
                               r"total_ms=[\d.]+ finish=length user=\"log-test\"")
        self.assertRegex(log, r"request req-[0-9a-f]+ POST /v1/completions 400 total_ms=[\d.]+ error=\"unknown field 'nonsense'")


class Tools(unittest.TestCase):
    """stories260K's template has no tool section: journey's default (a system message, Hermes calls)."""

    def test_default_tool_text_is_qwens_and_history_is_written_as_hermes(self):
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        prompt = rendered_prompt(server, {"messages": messages, "tools": TOOLS})
        # The system text is Qwen2.5's tool section, as transformers renders it with the same tools.
        qwen = reference_render(QWEN_TEMPLATE, messages, TOOLS)
        qwen_tools = qwen[qwen.index("# Tools"):qwen.index("<|im_end|>")]
        self.assertEqual(prompt, qwen_tools + "\n" + messages[0]["content"])
        history = rendered_prompt(server, {"messages": TOOL_HISTORY, "tools": TOOLS})
        self.assertTrue(history.endswith(
            "What is the weather in Paris?\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}"
            "\n</tool_call>\n<tool_response>\n{\"temperature\": 21}\n</tool_response>"), history[-300:])
        none = rendered_prompt(server, {"messages": messages, "tools": TOOLS, "tool_choice": "none"})
        self.assertEqual(none, messages[0]["content"])

    def test_auto_without_a_call_is_plain_content_and_history_is_accepted(self):
        tiny = [{"type": "function", "function": {"name": "f"}}]  # the tool text must fit a 512-token context
        history = json.loads(json.dumps(TOOL_HISTORY))
        history[1]["tool_calls"][0]["function"]["name"] = "f"
        for stream in (False, True):
            r = client.chat.completions.create(model=MODEL, messages=history, tools=tiny, max_tokens=8,
                                               temperature=0, stream=stream)
            if stream:
                chunks = list(r)
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                self.assertFalse(any(c.choices[0].delta.tool_calls for c in chunks if c.choices))
                self.assertEqual(chunks[-1].choices[0].finish_reason, "length")
            else:
                self.assertIsNone(r.choices[0].message.tool_calls)
                self.assertEqual(r.choices[0].finish_reason, "length")
                text = r.choices[0].message.content
            self.assertGreater(len(text), 0)

    def test_tool_errors_name_the_field(self):
        chat = lambda **kw: client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],  # noqa: E731
                                                           max_tokens=2, **kw)
        bad = json.loads(json.dumps(TOOLS))
        bad[0]["function"]["name"] = "get weather!"
        bad_request(self, lambda: chat(tools=bad), "tools[0].function.name")
        bad_request(self, lambda: chat(tools=TOOLS, tool_choice="required", response_format={"type": "json_object"}),
                    "tool_choice", "cannot be combined")
        strict = json.loads(json.dumps(TOOLS))
        strict[0]["function"]["parameters"]["properties"]["city"]["pattern"] = "^[A-Z]"
        bad_request(self, lambda: chat(tools=strict, tool_choice="required"), "tools[0].function.parameters.properties.city.pattern")
        bad_request(self, lambda: chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}),
                    "tool_choice.function.name")
        bad_request(self, lambda: chat(tool_choice="auto"), "tool_choice")
        bad_request(self, lambda: chat(functions=[{"name": "f"}]), "functions", "legacy")
        bad_request(self, lambda: client.chat.completions.create(
            model=MODEL, messages=TOOL_HISTORY[:2] + [{"role": "tool", "content": "21"}]), "messages[2].tool_call_id")
        broken = json.loads(json.dumps(TOOL_HISTORY))
        broken[1]["tool_calls"][0]["function"]["arguments"] = "{city: Paris"
        bad_request(self, lambda: client.chat.completions.create(model=MODEL, messages=broken),
                    "messages[1].tool_calls[0].function.arguments")


class EnforcedToolChoice(unittest.TestCase):
    """tool_choice "required" / a named function on a random-weight model with Qwen2.5's vocabulary
    and Qwen2.5's own chat template (tools/make_random_model.py --preset tiny-qwen2-151k): the
    template renders the tools, the grammar makes a model that knows nothing answer with exactly one
    valid Hermes call, and the parser reads it back."""
    TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.", "parameters": {
                 "type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}, "days": {"type": "integer"}},
                 "required": ["city"]}}},
             {"type": "function", "function": {"name": "add", "parameters": {
                 "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                 "required": ["a", "b"]}}}]
    MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]

    @classmethod
    def setUpClass(cls):
        if not ARGS.qwen_tokenizer or not os.path.exists(os.path.join(ARGS.qwen_tokenizer, "tokenizer.json")):
            raise unittest.SkipTest(f"no Qwen2.5 tokenizer.json in {ARGS.qwen_tokenizer!r}")
        cls.dir = tempfile.mkdtemp(prefix="journey-tiny-qwen-tools-")
        subprocess.run(["/usr/bin/python3", os.path.join(os.path.dirname(__file__), "..", "..", "tools", "make_random_model.py"),
                        "--preset", "tiny-qwen2-151k", "--seed", "7", "--out", cls.dir,
                        "--tokenizer-from", ARGS.qwen_tokenizer], check=True, capture_output=True)
        cls.server = JourneyServer(ARGS.journey, cls.dir, "tiny-qwen").__enter__()
        cls.client = cls.server.openai_client()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop_checked()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def check_call(self, call, allowed):
        import jsonschema
        self.assertIn(call.function.name, allowed)
        self.assertRegex(call.id, r"^call_[0-9a-f]{24}$")
        schema = next(t["function"]["parameters"] for t in self.TOOLS if t["function"]["name"] == call.function.name)
        jsonschema.validate(json.loads(call.function.arguments), schema)

    def test_the_qwen_template_renders_the_tools(self):
        """The prompt ids: transformers' render of Qwen2.5's template, tokenized by the Rust tokenizers."""
        from tokenizers import Tokenizer
        tokenizer = Tokenizer.from_file(os.path.join(ARGS.qwen_tokenizer, "tokenizer.json"))
        for messages in (self.MESSAGES, TOOL_HISTORY):
            expected = tokenizer.encode(reference_render(QWEN_TEMPLATE, messages, self.TOOLS), add_special_tokens=False).ids
            served = self.server.post_json("/tokenize", {"messages": messages, "tools": self.TOOLS})["tokens"]
            self.assertEqual(served, expected)

    def test_required_gives_one_valid_call_for_every_seed(self):
        names = set()
        for seed in range(10):
            r = self.client.chat.completions.create(model="tiny-qwen", messages=self.MESSAGES, tools=self.TOOLS,
                                                    tool_choice="required", max_tokens=200, temperature=1.0, seed=seed)
            choice = r.choices[0]
            self.assertEqual(choice.finish_reason, "tool_calls", choice.message)
            self.assertIsNone(choice.message.content)
            self.assertEqual(len(choice.message.tool_calls), 1)
            self.check_call(choice.message.tool_calls[0], {"get_weather", "add"})
            names.add(choice.message.tool_calls[0].function.name)
        print(f"\n  tool_choice required, 10 seeds on random weights: 10 valid calls, functions {sorted(names)}",
              file=sys.stderr)

    def test_named_function_streamed_and_reassembled(self):
        request = dict(model="tiny-qwen", messages=self.MESSAGES, tools=self.TOOLS, max_tokens=200,
                       tool_choice={"type": "function", "function": {"name": "add"}}, temperature=1.0, seed=3)
        full = self.client.chat.completions.create(**request).choices[0]
        self.assertEqual(full.finish_reason, "tool_calls")
        self.check_call(full.message.tool_calls[0], {"add"})
        arguments, name, reason = "", None, None
        for chunk in self.client.chat.completions.create(**request, stream=True):
            if not chunk.choices:
                continue
            for d in chunk.choices[0].delta.tool_calls or []:
                name = d.function.name if d.function and d.function.name else name
                arguments += d.function.arguments if d.function and d.function.arguments else ""
            reason = chunk.choices[0].finish_reason or reason
        self.assertEqual((name, arguments, reason), ("add", full.message.tool_calls[0].function.arguments, "tool_calls"))


class SecondServer(unittest.TestCase):
    """--chat-template, --allowed-origins, --replica-name on a server of their own."""

    @classmethod
    def setUpClass(cls):
        cls.server = JourneyServer(ARGS.journey, ARGS.model, "stories-qwen-template", extra_args=[
            "--chat-template", QWEN_TEMPLATE, "--allowed-origins", "https://app.example,https://other.example",
            "--replica-name", "replica-2"]).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop_checked()

    def test_chat_template_file_renders_tools_and_history_as_transformers_does(self):
        for messages in ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}],
                         TOOL_HISTORY):
            prompt = rendered_prompt(self.server, {"messages": messages, "tools": TOOLS})
            self.assertEqual(prompt, reference_render(QWEN_TEMPLATE, messages, TOOLS))
        self.assertEqual(rendered_prompt(self.server, {"messages": TOOL_HISTORY}), reference_render(QWEN_TEMPLATE, TOOL_HISTORY))

    def test_cors_preflight_and_origins(self):
        def request(method, origin, path="/v1/models", headers=()):
            conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
            try:
                all_headers = {"Origin": origin, "Authorization": f"Bearer {self.server.key}", **dict(headers)}
                conn.request(method, path, headers=all_headers)
                response = conn.getresponse()
                response.read()
                return response.status, {k.lower(): v for k, v in response.getheaders()}
            finally:
                conn.close()
        status, headers = request("OPTIONS", "https://app.example", "/v1/chat/completions",
                                  {"Access-Control-Request-Method": "POST",
                                   "Access-Control-Request-Headers": "authorization, content-type"})
        self.assertEqual(status, 204)
        self.assertEqual(headers["access-control-allow-origin"], "https://app.example")
        self.assertIn("POST", headers["access-control-allow-methods"])
        self.assertEqual(headers["access-control-allow-headers"], "authorization, content-type")
        status, headers = request("GET", "https://other.example")
        self.assertEqual((status, headers["access-control-allow-origin"]), (200, "https://other.example"))
        for method in ("OPTIONS", "GET"):
            status, headers = request(method, "https://evil.example")
            self.assertFalse([h for h in headers if h.startswith("access-control-")], headers)
        # The default server allows no origin at all.
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        conn.request("OPTIONS", "/v1/chat/completions", headers={"Origin": "https://app.example"})
        response = conn.getresponse()
        self.assertIsNone(response.getheader("Access-Control-Allow-Origin"))
        conn.close()

    def test_a_broken_chat_template_file_stops_the_server_naming_file_and_line(self):
        with tempfile.TemporaryDirectory() as scratch:
            broken = os.path.join(scratch, "broken.jinja")
            with open(broken, "w", encoding="utf-8") as f:
                f.write("{{ messages[0].content }}\n{% for m in %}\n")
            started = time.monotonic()
            with self.assertRaises(RuntimeError) as e:
                JourneyServer(ARGS.journey, ARGS.model, "broken", extra_args=["--chat-template", broken]).__enter__()
            self.assertIn(f"{broken}:2:", str(e.exception))
            self.assertIn("exited with 1", str(e.exception))
            self.assertLess(time.monotonic() - started, 30)

    def test_replica_label_and_version(self):
        self.assertEqual(json.loads(self.server.get("/version")[1])["replica"], "replica-2")
        _, metrics = self.server.get("/metrics")
        self.assertIn('journey:kv_blocks_used{model_name="stories-qwen-template",replica="replica-2"} 0', metrics)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--journey", required=True, help="the journey binary")
    parser.add_argument("--model", required=True, help="the model directory to serve")
    parser.add_argument("--qwen-tokenizer", help="a directory with Qwen2.5's tokenizer files (the random-weight model "
                                                 "of the enforced tool_choice tests)")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
