"""Structured output through a real `journey serve` and the official `openai` client, every answer
checked by an INDEPENDENT validator (the `jsonschema` package, Draft 2020-12), not by journey's own
grammar code.

    tools/python/venv-python tests/server/test_structured_output.py --journey build/src/cli/journey \
        --model data/stories260K [--qwen-tokenizer DIR] [unittest arguments]

- 100 seeded generations on the shipped stories260K (a 512-token SentencePiece vocabulary whose
  model knows nothing of JSON), five schemas x 20 seeds, sampled at temperature 1: every answer
  must finish with "stop", parse, and validate against its schema.
- The same 100 on a random-weight model with Qwen2.5's 151,936-token byte-level BPE vocabulary
  (tools/make_random_model.py --preset tiny-qwen2-151k, made in a temporary directory), when the
  Qwen2.5 tokenizer is given (the build decompresses it for the tokenizer tests).
- response_format json_object: any answer that finishes with "stop" is a JSON object. (Free
  strings are unbounded: a model that never closes its string runs to max_tokens, finish
  "length", as with any other length limit.)
- Bad or unsupported schemas: HTTP 400 whose `param` names the schema path.
The schemas bound their strings and arrays so that a model that wants to write forever inside a
string cannot: what is tested is that the grammar makes every finished answer valid.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import jsonschema
import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from journey_server import JourneyServer  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 12},
            "age": {"type": "integer"},
            "happy": {"type": "boolean"},
        },
        "required": ["name", "age", "happy"],
        "additionalProperties": False,
    },
    "order": {
        "type": "object",
        "properties": {
            "item": {"enum": ["tea", "cake", "soup"]},
            "quantity": {"type": "integer"},
            "price": {"type": "number"},
            "note": {"type": ["string", "null"], "maxLength": 8},
            "toppings": {"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 1, "maxItems": 3},
        },
        "required": ["item", "quantity", "toppings"],
    },
    "shapes": {
        "$defs": {
            "circle": {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                       "required": ["kind", "r"]},
            "square": {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "integer"}},
                       "required": ["kind", "side"]},
        },
        "type": "array",
        "items": {"anyOf": [{"$ref": "#/$defs/circle"}, {"$ref": "#/$defs/square"}]},
        "maxItems": 3,
    },
    "nested": {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 10},
            "meta": {"type": "object", "properties": {
                "ok": {"type": "boolean"}, "n": {"type": "null"},
                "scores": {"type": "array", "items": {"type": "integer"}, "maxItems": 4}},
                "required": ["ok", "scores"]},
        },
        "required": ["title", "meta"],
    },
    "answer": {"type": "object", "properties": {"answer": {"oneOf": [{"type": "integer"}, {"enum": ["yes", "no"]}]}},
               "required": ["answer"]},
}
SEEDS = range(20)  # x 5 schemas = 100 generations per model
MAX_TOKENS = 400


def response_format(name):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": SCHEMAS[name], "strict": True}}


def generate_all(client, model, prompt):
    """[(schema name, seed, text, finish_reason)] of 100 seeded completions, 8 at a time."""
    def one(job):
        name, seed = job
        r = client.completions.create(model=model, prompt=prompt, max_tokens=MAX_TOKENS, temperature=1.0, seed=seed,
                                      extra_body={"response_format": response_format(name)})
        return name, seed, r.choices[0].text, r.choices[0].finish_reason
    jobs = [(name, seed) for name in SCHEMAS for seed in SEEDS]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, jobs))


class ValidatesIndependently:
    """Mixed into a TestCase with `server`, `client` and `prompt`."""

    def test_100_seeded_generations_all_valid(self):
        results = generate_all(self.client, self.model, self.prompt)
        self.assertEqual(len(results), 100)
        invalid = []
        for name, seed, text, finish in results:
            try:
                if finish != "stop":
                    raise ValueError(f"finish_reason {finish!r}")
                jsonschema.Draft202012Validator(SCHEMAS[name]).validate(json.loads(text))
            except (ValueError, jsonschema.ValidationError) as e:
                invalid.append(f"{name} seed {seed}: {str(e).splitlines()[0]}: {text[:200]!r}")
        self.assertEqual(invalid, [], f"{len(invalid)} of 100 answers invalid")
        # the answers differ: the grammar constrains, the model (and the seed) still choose
        self.assertGreater(len({text for _, _, text, _ in results}), 50)

    def test_json_object(self):
        stopped = 0
        for seed in range(10):
            r = self.client.completions.create(model=self.model, prompt=self.prompt, max_tokens=MAX_TOKENS, seed=seed,
                                               extra_body={"response_format": {"type": "json_object"}})
            choice = r.choices[0]
            if choice.finish_reason == "stop":
                stopped += 1
                self.assertIsInstance(json.loads(choice.text), dict, choice.text)
            else:
                self.assertEqual(choice.finish_reason, "length")
                self.assertTrue(choice.text.startswith("{"), choice.text[:100])
        print(f"{self.model}: json_object, {stopped} of 10 finished within {MAX_TOKENS} tokens", file=sys.stderr)


class Stories260K(ValidatesIndependently, unittest.TestCase):
    model = "stories"
    prompt = "Once upon a time"

    @classmethod
    def setUpClass(cls):
        cls.server = JourneyServer(ARGS.journey, ARGS.model, cls.model).__enter__()
        cls.client = cls.server.openai_client()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop_checked()

    def bad_request(self, response_format_value):
        with self.assertRaises(openai.BadRequestError) as caught:
            self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=8, response_format=response_format_value)
        return caught.exception.body

    def test_unsupported_schema_is_400_naming_the_path(self):
        cases = [
            ({"type": "object", "properties": {"age": {"type": "integer", "minimum": 0}}},
             "response_format.json_schema.schema.properties.age.minimum"),
            ({"type": "string", "pattern": "^[a-z]+$"}, "response_format.json_schema.schema.pattern"),
            ({"$ref": "https://example.com/schema.json"}, "response_format.json_schema.schema.$ref"),
            ({"type": "array", "items": {"type": "strng"}}, "response_format.json_schema.schema.items.type"),
            ({"type": "object", "properties": {"a": {}}, "required": ["b"]}, "response_format.json_schema.schema.required[0]"),
        ]
        for schema, path in cases:
            body = self.bad_request({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
            self.assertEqual(body["param"], path, body)
            self.assertIn(path, body["message"])
        self.assertEqual(self.bad_request({"type": "xml"})["param"], "response_format.type")
        self.assertEqual(self.bad_request({"type": "json_schema"})["param"], "response_format.json_schema")
        self.assertEqual(self.bad_request({"type": "json_schema", "json_schema": {"name": "x"}})["param"],
                         "response_format.json_schema.schema")
        self.assertEqual(self.bad_request({"type": "json_object", "schema": {}})["param"], "response_format.schema")
        # the server still serves
        ok = self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "hi"}],
                                                 max_tokens=4)
        self.assertEqual(len(ok.choices), 1)

    def test_streamed_answer_is_valid_too(self):
        stream = self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": "Who is Lily?"}], max_tokens=MAX_TOKENS, seed=5,
            stream=True, response_format=response_format("person"))
        text, finish = "", None
        for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        self.assertEqual(finish, "stop")
        jsonschema.validate(json.loads(text), SCHEMAS["person"])


class RandomQwenVocabulary(ValidatesIndependently, unittest.TestCase):
    model = "tiny-qwen"
    prompt = "Hello"

    @classmethod
    def setUpClass(cls):
        if not ARGS.qwen_tokenizer or not os.path.exists(os.path.join(ARGS.qwen_tokenizer, "tokenizer.json")):
            raise unittest.SkipTest(f"no Qwen2.5 tokenizer.json in {ARGS.qwen_tokenizer!r}")
        cls.dir = tempfile.mkdtemp(prefix="journey-tiny-qwen-")
        subprocess.run(["/usr/bin/python3", os.path.join(REPO, "tools", "make_random_model.py"), "--preset",
                        "tiny-qwen2-151k", "--seed", "7", "--out", cls.dir, "--tokenizer-from", ARGS.qwen_tokenizer],
                       check=True, capture_output=True)
        cls.server = JourneyServer(ARGS.journey, cls.dir, cls.model).__enter__()
        cls.client = cls.server.openai_client()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop_checked()
        shutil.rmtree(cls.dir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--journey", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--qwen-tokenizer", help="a directory with Qwen2.5's tokenizer.json (random-weight model)")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
