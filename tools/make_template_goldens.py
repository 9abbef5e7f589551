#!/usr/bin/python3
"""Writes tests/golden/templates/*.json: chat templates rendered by the reference Jinja2.

The renderer is Debian's python3-jinja2 configured the way Hugging Face transformers renders
chat templates (ImmutableSandboxedEnvironment, trim_blocks=True, lstrip_blocks=True, the
loopcontrols extension, a tojson filter that is json.dumps(ensure_ascii=False), raise_exception,
strftime_now). strftime_now is pinned to 2024-07-26 00:00:00 UTC so the goldens are stable.
The C++ test (tests/text/test_template_goldens.cpp) renders the same inputs with journey's own
Jinja subset and compares byte for byte.

Run from the repository root:  /usr/bin/python3 tools/make_template_goldens.py
"""
import datetime
import hashlib
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

VERSION = 1
MAGIC = "journey-chat-template-golden"
COMMAND = "/usr/bin/python3 tools/make_template_goldens.py"
NOW = datetime.datetime(2024, 7, 26, tzinfo=datetime.timezone.utc)
NOW_UNIX_SECONDS = int(NOW.timestamp())
DATA = "tests/data/chat-templates"
OUT = "tests/golden/templates"


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers.utils.chat_template_utils: json.dumps with ensure_ascii=False
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return NOW.strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def msg(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = {
    "system_user": [msg("system", "You are a helpful assistant."), msg("user", "Hello!")],
    "multi_turn": [
        msg("system", "You are terse."),
        msg("user", "What is 2+2?"),
        msg("assistant", "4"),
        msg("user", "And 3+3?"),
    ],
    "no_system": [msg("user", "Hi there"), msg("assistant", "Hello! How can I help?"), msg("user", "Tell me a joke.")],
    "unicode": [
        msg("user", "你好，请介绍一下你自己。Ünïcödé ✓ 🙂"),
        msg("assistant", "我是一个语言模型。"),
        msg("user", "谢谢！"),
    ],
    "jinja_braces": [msg("user", "Print {{ messages }} and {% if x %}y{% endif %} and {# not a comment #} literally.")],
    "empty_content": [msg("system", ""), msg("user", "")],
    "whitespace": [msg("user", "  padded question \n\n"), msg("assistant", "\n  padded answer  "), msg("user", "ok")],
    "thinking": [
        msg("user", "Think first: 1+1?"),
        msg("assistant", "<think>\nOne plus one.\n</think>\n\nIt is 2."),
        msg("user", "And 2+2?"),
    ],
}

# Tool calling (OpenAI `tools`, assistant `tool_calls`, role "tool" answers) as journey's server
# hands it to a template: function arguments as a JSON object (vLLM and transformers parse the
# OpenAI argument string), content "" when an assistant turn only calls a tool (OpenAI's null; None
# would break Qwen3's template, which searches the content for "</think>").
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
                                                        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"]}}},
]
TOOL_CALL = {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "巴黎", "unit": "celsius"}}}
TOOL_CONVERSATIONS = {
    "tools_offered": [msg("system", "You are a helpful assistant."), msg("user", "What is the weather in Paris?")],
    "tools_no_system": [msg("user", "Add 2 and 3.")],
    "tool_call_and_answer": [
        msg("user", "What is the weather in Paris?"),
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_0", "name": "get_weather", "content": "{\"temperature\": 21}"},
    ],
}
# Templates with a tool section, rendered with TOOLS.
TOOL_TEMPLATES = ["Qwen-Qwen2.5-7B-Instruct.jinja", "hf-qwen3.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja",
                  "meta-llama-Llama-3.2-3B-Instruct.jinja"]

# template file -> (bos_token, eos_token) as the model's tokenizer_config.json names them,
# and extra variables to render with (besides the defaults).
TEMPLATES = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": ("", "<|im_end|>", [{}]),
    "hf-qwen3.jinja": ("", "<|im_end|>", [{}, {"enable_thinking": False}]),
    "hf-llama3-instruct.jinja": ("<|begin_of_text|>", "<|end_of_text|>", [{}]),
    "meta-llama-Llama-3.1-8B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>", [{}]),
    "meta-llama-Llama-3.2-3B-Instruct.jinja": ("<|begin_of_text|>", "<|eot_id|>", [{}]),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", [{}]),
    "microsoft-Phi-3.5-mini-instruct.jinja": ("<s>", "<|endoftext|>", [{}]),
    "google-gemma-2-2b-it.jinja": ("<bos>", "<eos>", [{}]),
}


def render_all(source, bos, eos, extras, conversations, tools=None):
    env = environment()
    template = env.from_string(source)
    renders = []
    for name, messages in conversations.items():
        for extra in extras:
            for add_generation_prompt in (True, False):
                entry = {
                    "conversation": name,
                    "messages": messages,
                    "add_generation_prompt": add_generation_prompt,
                    "extra_context": extra,
                }
                context = dict(messages=messages, add_generation_prompt=add_generation_prompt,
                               bos_token=bos, eos_token=eos)
                if tools is not None:
                    context["tools"] = tools
                context.update(extra)
                try:
                    entry["expected"] = template.render(**context)
                except TemplateError as e:
                    entry["expected_error"] = str(e)
                renders.append(entry)
    return renders


def header(description):
    return {
        "magic": MAGIC,
        "version": VERSION,
        "regenerate": COMMAND,
        "renderer": f"jinja2 {jinja2.__version__} ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, "
                    "loopcontrols), tojson=json.dumps(ensure_ascii=False), raise_exception, strftime_now",
        "now_unix_seconds": NOW_UNIX_SECONDS,
        "description": description,
    }


def write(path, document):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}")


def main():
    if not os.path.isdir(DATA):
        sys.exit("run from the repository root")
    os.makedirs(OUT, exist_ok=True)
    for file_name, (bos, eos, extras) in TEMPLATES.items():
        path = f"{DATA}/templates/{file_name}"
        source = open(path, encoding="utf-8").read()
        doc = header(f"{file_name} rendered for {len(CONVERSATIONS)} conversations")
        doc.update({
            "template_file": path,
            "template_sha256": hashlib.sha256(source.encode("utf-8")).hexdigest(),
            "bos_token": bos,
            "eos_token": eos,
            "renders": render_all(source, bos, eos, extras, CONVERSATIONS),
        })
        write(f"{OUT}/{file_name[:-len('.jinja')]}.json", doc)

    # The templates with a tool section, given `tools` and conversations that call a tool and
    # answer it (role "tool").
    doc = header(f"{len(TOOL_TEMPLATES)} templates with a tool section rendered with {len(TOOLS)} tools")
    doc["tools"] = TOOLS
    doc["templates"] = []
    for file_name in TOOL_TEMPLATES:
        bos, eos, _ = TEMPLATES[file_name]
        path = f"{DATA}/templates/{file_name}"
        source = open(path, encoding="utf-8").read()
        doc["templates"].append({"template_file": path, "bos_token": bos, "eos_token": eos,
                                 "renders": render_all(source, bos, eos, [{}], TOOL_CONVERSATIONS, tools=TOOLS)})
    write(f"{OUT}/tool-templates.json", doc)

    # The 30 llama.cpp case templates rendered raw (no llama.cpp polyfills) by Jinja2: an
    # independent check of the interpreter on many small real templates.
    cases = json.load(open(f"{DATA}/test-chat-template.cases.json", encoding="utf-8"))
    conversations = {"llamacpp": cases["conversation"], "no_system": CONVERSATIONS["no_system"],
                     "unicode": CONVERSATIONS["unicode"]}
    doc = header("the llama.cpp test-case templates rendered raw by Jinja2 (no system-role polyfill, no BOS/EOS trimming)")
    doc["cases_file"] = f"{DATA}/test-chat-template.cases.json"
    doc["templates"] = []
    for case in cases["cases"]:
        bos, eos = case.get("bos_token", ""), case.get("eos_token", "")
        doc["templates"].append({
            "name": case["name"],
            "bos_token": bos,
            "eos_token": eos,
            "renders": render_all(case["template_str"], bos, eos, [{}], conversations),
        })
    write(f"{OUT}/llamacpp-case-templates.json", doc)

    # `journey template` end to end: a messages file and the exact stdout expected for it with the
    # Qwen2.5 tokenizer_config.json and --add-generation-prompt.
    os.makedirs(f"{OUT}/cli", exist_ok=True)
    messages = CONVERSATIONS["unicode"]
    with open(f"{OUT}/cli/unicode.messages.json", "w", encoding="utf-8") as f:
        json.dump(messages, f, ensure_ascii=False, indent=1)
        f.write("\n")
    config = json.load(open(f"{DATA}/qwen2.5-instruct.tokenizer_config.json", encoding="utf-8"))
    expected = environment().from_string(config["chat_template"]).render(
        messages=messages, add_generation_prompt=True, bos_token=config["bos_token"] or "", eos_token=config["eos_token"])
    with open(f"{OUT}/cli/unicode.qwen2.5.expected.txt", "w", encoding="utf-8", newline="") as f:
        f.write(expected)
    print(f"wrote {OUT}/cli/")


if __name__ == "__main__":
    main()
