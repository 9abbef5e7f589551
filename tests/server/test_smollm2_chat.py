"""A real instruct model behind `journey serve`, asked the seeds' way with the official `openai` client.

    tools/python/venv-python tests/server/test_smollm2_chat.py --journey build/src/cli/journey \
        --model models/smollm2-135m-instruct

SmolLM2-135M-Instruct (Q4_1 GGUF, fetched by tools/python/fetch-models.sh into the git-ignored
models/) answers "What is the capital of France?" through the chat template in its GGUF metadata
(ChatML) and stops on its EOS, <|im_end|>. Checked against transformers on the same GGUF file
(tools/python/gguf_reference.py): the prompt token ids equal apply_chat_template(...) with the
GGUF's own template, tokenized by the tokenizer transformers builds from the GGUF vocabulary; the greedy answer is the one
tests/golden/check_smollm2.py checks token for token against transformers' LlamaForCausalLM.
Skips (exit 77, saying so) when the model is absent. Run by ctest as server_smollm2_chat.
"""
import argparse
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from journey_server import JourneyServer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = "smollm2"
QUESTION = [{"role": "system", "content": "You are a concise assistant. Answer in one sentence."},
            {"role": "user", "content": "What is the capital of France?"}]
server = None
client = None
HF_TOKENIZER = None
sys.path.insert(0, os.path.join(REPO, "tools", "python"))


def setUpModule():
    global server, client
    server = JourneyServer(ARGS.journey, ARGS.model, MODEL).__enter__()
    client = server.openai_client()


def tearDownModule():
    server.stop_checked()


def hf_tokenizer():
    """transformers' tokenizer from the same GGUF file (tools/python/gguf_reference.py), made once."""
    global HF_TOKENIZER
    if HF_TOKENIZER is None:
        from gguf_reference import tokenizer_for_gguf
        HF_TOKENIZER = tokenizer_for_gguf(ARGS.model, [f for f in os.listdir(ARGS.model) if f.endswith(".gguf")][0])
    return HF_TOKENIZER


def hf_prompt_ids(messages):
    """The prompt as transformers builds it from the same GGUF file: its template, its vocabulary."""
    tokenizer = hf_tokenizer()
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return text, tokenizer(text, add_special_tokens=False).input_ids


class SeedsRequest(unittest.TestCase):
    def test_capital_of_france_streamed_stops_on_im_end(self):
        full = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=64, temperature=0)
        answer = full.choices[0].message.content
        print(f"\n  SmolLM2 (greedy): {answer!r}", file=sys.stderr)
        self.assertIn("Paris", answer)
        # Stopped by the model's EOS (<|im_end|>), not by max_tokens; the EOS is not in the text.
        self.assertEqual(full.choices[0].finish_reason, "stop")
        self.assertLess(full.usage.completion_tokens, 64)
        self.assertNotIn("<|im_end|>", answer)
        self.assertNotIn("<|im_start|>", answer)
        # Streamed: the same text in pieces, the same usage.
        stream = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=64, temperature=0,
                                                stream=True, stream_options={"include_usage": True})
        pieces, usage, reason = [], None, None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
                reason = chunk.choices[0].finish_reason or reason
        self.assertGreater(len([p for p in pieces if p]), 1)
        self.assertEqual("".join(pieces), answer)
        self.assertEqual(reason, "stop")
        self.assertEqual(usage.completion_tokens, full.usage.completion_tokens)
        self.assertEqual(usage.prompt_tokens, full.usage.prompt_tokens)

    def test_prompt_is_the_gguf_chat_template_tokenized_as_transformers_does(self):
        text, ids = hf_prompt_ids(QUESTION)
        self.assertTrue(text.startswith("<|im_start|>system\nYou are a concise assistant."), text)
        self.assertTrue(text.endswith("<|im_start|>assistant\n"), text)
        served = server.post_json("/tokenize", {"messages": QUESTION})
        self.assertEqual(served["tokens"], ids)
        full = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=1, temperature=0)
        self.assertEqual(full.usage.prompt_tokens, len(ids))
        # Without a system message the template inserts SmolLM's default one.
        _, user_only = hf_prompt_ids(QUESTION[1:])
        self.assertEqual(server.post_json("/tokenize", {"messages": QUESTION[1:]})["tokens"], user_only)

    def test_gguf_tokenizer_over_3056_strings(self):
        """The tokenizer journey builds from the GGUF vocabulary against the Rust tokenizers that
        transformers builds from the same vocabulary, over the tokenizers-rs strings (Chinese, emoji,
        whitespace runs ...); special-token text is plain text on both sides (/tokenize's prompt)."""
        import lzma
        path = os.path.join(REPO, "tests", "data", "tokenizers", "tokenizers-rs", "strings.inp.xz")
        with lzma.open(path, "rt", encoding="utf-8", newline="") as f:
            texts = f.read().split("\n__ggml_vocab_test__\n")[:-1]
        tokenizer = hf_tokenizer()
        mismatches = []
        for text in texts:
            ours = server.post_json("/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]
            theirs = tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids
            if ours != theirs:
                mismatches.append(f"{text!r}\n    journey      {ours}\n    transformers {theirs}")
        print(f"\n  GGUF tokenizer: {len(texts) - len(mismatches)}/{len(texts)} strings identical", file=sys.stderr)
        self.assertEqual(mismatches, [], "\n".join(mismatches[:5]))

    def test_sampling_with_temperature_and_seed_is_reproducible(self):
        request = dict(model=MODEL, messages=QUESTION, max_tokens=24, temperature=0.8, seed=5)
        a = client.chat.completions.create(**request).choices[0].message.content
        b = client.chat.completions.create(**request).choices[0].message.content
        self.assertEqual(a, b)
        others = {client.chat.completions.create(**dict(request, seed=s, temperature=1.3)).choices[0].message.content
                  for s in range(4)}
        self.assertGreater(len(others), 1, "four seeds at temperature 1.3 gave one answer")

    def test_blocks_free_and_metrics_after_the_requests(self):
        self.assertEqual(server.wait_for_metric("journey:kv_blocks_used", lambda v: v == 0), 0)
        self.assertEqual([m.id for m in client.models.list().data], [MODEL])


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
# One earlier round (a call, its answer, a reply), then the same question again: the model sees
# how a call is written (journey's default tool text and Hermes blocks: SmolLM2's template has no
# tool section) and is nudged to write one with a logit bias built from token ids below.
WEATHER_AGAIN = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21}"},
    {"role": "assistant", "content": "It is 21 degrees in Paris."},
    {"role": "user", "content": "What is the weather in Paris?"},
]


def ids_of(text):
    return server.post_json("/tokenize", {"prompt": text, "add_special_tokens": False})["tokens"]


def call_nudge():
    """logit_bias that turns SmolLM2-135M's greedy answer into a call: '<' up (a tag opens), 'response'
    and 'answer' banned (so the tag is <tool_call>, not a copy of <tool_response> nor a <tool_answer>:
    after "<tool_" 'call' and 'answer' are within 0.1 of each other, so float noise of the order of
    summation, as between a cached prefix and a whole prefill, chose either), 'temperature' banned
    (so the JSON is not the tool's answer copied), 'name' up a little (so the JSON starts with "name")."""
    less_than, _, _, response, _ = ids_of("<tool_response>")
    answer = ids_of("<tool_answer>")[3]
    temperature = ids_of("{\"temperature\"")[1]
    name = ids_of("{\"name\"")[1]
    return {str(less_than): 3, str(response): -100, str(answer): -100, str(temperature): -100, str(name): 2}


class ToolCalls(unittest.TestCase):
    def test_a_call_parsed_streamed_reassembled_and_answered(self):
        request = dict(model=MODEL, messages=WEATHER_AGAIN, tools=TOOLS, max_tokens=60, temperature=0,
                       logit_bias=call_nudge())
        full = client.chat.completions.create(**request)
        choice = full.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls", choice.message)
        self.assertIsNone(choice.message.content)
        self.assertEqual(len(choice.message.tool_calls), 1)
        call = choice.message.tool_calls[0]
        self.assertEqual((call.type, call.function.name), ("function", "get_weather"))
        self.assertEqual(json.loads(call.function.arguments), {"city": "Paris"})
        self.assertRegex(call.id, r"^call_[0-9a-f]{24}$")
        # Streamed: the client reassembles the deltas (index, id and name first, then the arguments).
        calls, reason, content = {}, None, ""
        for chunk in client.chat.completions.create(**request, stream=True):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content += delta.content or ""
            for d in delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
                if d.id:
                    entry["id"] = d.id
                if d.function and d.function.name:
                    entry["name"] = d.function.name
                if d.function and d.function.arguments:
                    entry["arguments"] += d.function.arguments
            reason = chunk.choices[0].finish_reason or reason
        self.assertEqual(reason, "tool_calls")
        self.assertEqual(content, "")
        self.assertEqual(list(calls), [0])
        self.assertEqual((calls[0]["name"], calls[0]["arguments"]), ("get_weather", call.function.arguments))
        self.assertRegex(calls[0]["id"], r"^call_")
        # The call and its result go back (the assistant message as the client returned it).
        answered = client.chat.completions.create(model=MODEL, tools=TOOLS, max_tokens=16, temperature=0, messages=[
            *WEATHER_AGAIN, choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "{\"temperature\": 19}"}])
        self.assertEqual(answered.choices[0].message.role, "assistant")

    def test_tools_reach_the_model_as_a_system_message_rendered_by_the_gguf_template(self):
        """SmolLM2's template has no tool section: journey's default system text (Qwen2.5's tool
        section) goes in as a system message; transformers, given that system message, builds the
        same prompt ids."""
        from transformers.utils.chat_template_utils import _compile_jinja_template
        qwen = _compile_jinja_template(open(os.path.join(
            REPO, "tests/data/chat-templates/templates/Qwen-Qwen2.5-7B-Instruct.jinja"), encoding="utf-8").read())
        question = [{"role": "user", "content": "What is the weather in Paris?"}]
        rendered = qwen.render(messages=question, tools=TOOLS, add_generation_prompt=True)
        tool_text = rendered[rendered.index("# Tools"):rendered.index("<|im_end|>")]
        _, expected = hf_prompt_ids([{"role": "system", "content": tool_text}] + question)
        self.assertEqual(server.post_json("/tokenize", {"messages": question, "tools": TOOLS})["tokens"], expected)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--journey", required=True, help="the journey binary")
    parser.add_argument("--model", required=True, help="models/smollm2-135m-instruct (a directory with one .gguf)")
    ARGS, rest = parser.parse_known_args()
    if not os.path.isdir(ARGS.model) or not any(f.endswith(".gguf") for f in os.listdir(ARGS.model)):
        print(f"SKIP: {ARGS.model} is absent; tools/python/fetch-models.sh (run by scripts/install-deps.sh) fetches it")
        sys.exit(77)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
