"""The chat-template goldens against transformers' own apply_chat_template.

tests/golden/templates/*.json hold the renders that journey's Jinja interpreter must reproduce
byte for byte (tests/text/test_template_goldens.cpp). They were written by
tools/make_template_goldens.py with a Jinja2 environment set up "the way transformers does it".
This test takes that claim away: every render (8 model templates x 8 conversations x with/without
the generation prompt, the 4 templates with a tool section given tools, a call and its answer, and
the 30 llama.cpp case templates) is rendered again by the pinned
transformers' PreTrainedTokenizerBase.apply_chat_template(..., tokenize=False) and must be
identical, errors included (raise_exception in a template). So journey == goldens == transformers.

Templates that print today's date (strftime_now) get date_string = the goldens' pinned date,
which those templates use instead of asking the clock.

    tools/python/venv-python tests/golden/check_templates_transformers.py
Run by ctest as golden.templates_vs_transformers.
"""
import datetime
import glob
import json
import os
import sys

import transformers
from jinja2.exceptions import TemplateError
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import PreTrainedTokenizerFast

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDENS = os.path.join(REPO, "tests", "golden", "templates")


def tokenizer_with(bos, eos):
    """A tokenizer object whose only role is to carry bos_token/eos_token into the template."""
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")),
                                   bos_token=bos or None, eos_token=eos or None)


def render(tokenizer, source, entry, date_string, tools=None):
    # The goldens render with bos_token/eos_token always defined ("" where the model has none);
    # a tokenizer without one would leave it undefined, so they are passed as template variables.
    kwargs = dict(entry.get("extra_context") or {}, bos_token=tokenizer.bos_token or "",
                  eos_token=tokenizer.eos_token or "")
    if "strftime_now" in source:
        kwargs.setdefault("date_string", date_string)
    try:
        return tokenizer.apply_chat_template(entry["messages"], chat_template=source, tokenize=False, tools=tools,
                                             add_generation_prompt=entry["add_generation_prompt"], **kwargs), None
    except TemplateError as e:
        return None, str(e)


def check(name, source, bos, eos, renders, date_string, failures, tools=None):
    tokenizer = tokenizer_with(bos, eos)
    for entry in renders:
        text, error = render(tokenizer, source, entry, date_string, tools)
        where = f"{name} / {entry['conversation']} / add_generation_prompt={entry['add_generation_prompt']} {entry.get('extra_context') or ''}"
        if "expected_error" in entry:
            if error != entry["expected_error"]:
                failures.append(f"{where}: golden error {entry['expected_error']!r}, transformers {error or text!r}")
        elif error is not None or text != entry["expected"]:
            failures.append(f"{where}:\n      golden:       {entry['expected']!r}\n      transformers: {error or text!r}")
    return len(renders)


def main():
    failures = []
    checked = 0
    files = sorted(glob.glob(os.path.join(GOLDENS, "*.json")))
    for path in files:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if doc.get("magic") != "journey-chat-template-golden" or doc.get("version") != 1:
            sys.exit(f"{path}: not a version-1 journey-chat-template-golden")
        date_string = datetime.datetime.fromtimestamp(doc["now_unix_seconds"], datetime.timezone.utc).strftime("%d %b %Y")
        if "template_file" in doc:
            with open(os.path.join(REPO, doc["template_file"]), encoding="utf-8") as f:
                source = f.read()
            checked += check(os.path.basename(path), source, doc["bos_token"], doc["eos_token"], doc["renders"],
                             date_string, failures)
        elif "tools" in doc:  # tool-templates.json: templates with a tool section, given `tools`
            for t in doc["templates"]:
                with open(os.path.join(REPO, t["template_file"]), encoding="utf-8") as f:
                    source = f.read()
                checked += check(f"{t['template_file']} with tools", source, t["bos_token"], t["eos_token"],
                                 t["renders"], date_string, failures, tools=doc["tools"])
        else:
            with open(os.path.join(REPO, doc["cases_file"]), encoding="utf-8") as f:
                cases = {c["name"]: c for c in json.load(f)["cases"]}
            for t in doc["templates"]:
                checked += check(f"llama.cpp case {t['name']}", cases[t["name"]]["template_str"], t["bos_token"],
                                 t["eos_token"], t["renders"], date_string, failures)
    print(f"transformers {transformers.__version__}: {checked} renders from {len(files)} golden files, "
          f"{len(failures)} differ")
    for f in failures[:30]:
        print("  FAIL", f)
    print(f"{checked - len(failures)} passed, {len(failures)} failed")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
