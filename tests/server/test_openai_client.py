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
import subprocess
import sys
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--journey", required=True, help="the journey binary")
    parser.add_argument("--model", required=True, help="the model directory to serve")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
