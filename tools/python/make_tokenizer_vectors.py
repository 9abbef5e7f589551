#!/usr/bin/env python3
"""Tokenizer test vectors from the Rust `tokenizers` library (Hugging Face's own implementation).

Writes, in llama.cpp's vector format (tests/text/vectors.h reads it):

    tests/data/tokenizers/tokenizers-rs/strings.inp.xz    the strings, each + "\\n__ggml_vocab_test__\\n"
    tests/data/tokenizers/tokenizers-rs/<name>.out.xz     one line of ids per string, per tokenizer.json

(xz-compressed: 1.8 MB of text in 0.4 MB; tests/text/CMakeLists.txt decompresses them at build time)

for the tokenizer.json files shipped in tests/data/tokenizers/hf/ (Llama 3, Qwen2.5, Qwen3):
`Tokenizer.from_file(...).encode(text, add_special_tokens=False).ids`, which matches special
tokens written in the text (journey: parse_special) and adds no BOS/EOS.

    tools/python/venv-python tools/python/make_tokenizer_vectors.py            # rewrite the files
    tools/python/venv-python tools/python/make_tokenizer_vectors.py --check    # compare, write nothing

The strings: the seeds' sentences, llama.cpp's 46 edge cases, and a few thousand mixtures drawn
with a fixed seed from English, Chinese (simplified and traditional), Japanese, Korean, Cyrillic,
Arabic, Devanagari, emoji (ZWJ sequences, skin tones, flags), digit runs, contractions, code,
whitespace runs (tabs, CR LF, NBSP, ideographic space), combining accents (NFC matters to Qwen),
full-width forms, special-token text and random code points from every plane. --check (ctest
text.tokenizers_rs_vectors) re-encodes the committed strings with the pinned library and fails
on any difference, so the committed .out files are exactly the library's answers.
"""
import argparse
import lzma
import os
import random
import sys

from tokenizers import Tokenizer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests", "data", "tokenizers")
OUT_DIR = os.path.join(DATA, "tokenizers-rs")
SEPARATOR = "\n__ggml_vocab_test__\n"
TOKENIZERS = ["llama3-instruct", "qwen2.5-instruct", "qwen3"]
COUNT = 3000  # generated strings, besides the fixed ones

SEEDS = [
    "北京今天下雨吗？", "我喜欢编程", "北京今天下雨吗？ 我喜欢编程", "What is the capital of France?",
    "The capital of France is Paris.", "你好，我是一个AI助手。", "请用中文回答：什么是大语言模型？",
    "Once upon a time", "<|im_start|>user\n北京今天下雨吗？<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
]
WORDS = {
    "en": "the of and to in is you that it he was for on are as with his they at be this have from or one had by "
          "word but not what all were we when your can said there use an each which she do how their if will up "
          "other about out many then them these so some her would make like him into time has look two more write "
          "go see number no way could people my than first water been call who oil its now find long down day did "
          "get come made may part tokenizer transformer attention Paris France capital weather programming".split(),
    "zh": "北京 今天 下雨 吗 我 喜欢 编程 你好 世界 中国 上海 天气 怎么样 明天 会 晴天 人工 智能 语言 模型 学习 "
          "分词器 计算机 程序 数据 问题 回答 谢谢 不客气 朋友 家人 工作 时间 开始 结束 繁體 中文 與 简体 混合 "
          "龍 體 臺灣 香港 漢字 的 了 是 在 有 和 就 不 人 都 一 一个 也 很 到 说 要 去 会 着 没有 看 好 自己".split(),
    "ja": "こんにちは 世界 日本語 の テスト です カタカナ ひらがな 東京 は 今日 雨 ですか プログラミング 好き".split(),
    "ko": "안녕하세요 세계 한국어 테스트 입니다 서울 오늘 비 가 오나요 프로그래밍 좋아해요".split(),
    "ru": "Привет мир это тест русский язык Москва сегодня дождь программирование".split(),
    "ar": "مرحبا بالعالم هذا اختبار اللغة العربية".split(),
    "hi": "नमस्ते दुनिया यह एक परीक्षण है हिन्दी".split(),
    "emoji": ["😀", "🦙", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷", "🇨🇳", "❤️", "🤖", "✨", "🔥", "🧑🏿‍💻", "☕"],
    "code": ["def f(x):", "return x+1;", "int main() {", "}", "std::vector<int>", "x = [1, 2, 3]", "i++",
             "if (a && b || !c)", "// comment", "#include <stdio.h>", "$HOME/.cache", "a_b_c", "camelCaseName",
             "0x1F", "1e-6", "<div class=\"x\">", "</div>", "SELECT * FROM t;", "=>", "!=", "...", "---"],
    "contractions": ["it's", "don't", "we're", "I've", "I'm", "you'll", "he'd", "IT'S", "DON'T", "O'Neil"],
    "accents": ["café", "naïve", "Zoë", "cafe\u0301", "e\u0301te\u0301", "A\u030a", "n\u0303", "Ångström", "Straße"],
    "fullwidth": ["ＡＢＣ", "１２３", "（全角）", "！？", "，", "。", "、", "「引用」", "ｶﾀｶﾅ"],
}
SPACES = [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", " \n ", ""]
PUNCT = list(".,;:!?-()[]{}\"'/\\@#$%^&*_+=<>|~`") + ["。", "，", "？", "！", "：", "；", "…", "—", "«", "»"]
SPECIAL_TEXT = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>"]
PLANES = [(0x20, 0x7E), (0xA0, 0x2FF), (0x370, 0x52F), (0x590, 0x6FF), (0x900, 0xDFF), (0x1100, 0x11FF),
          (0x2000, 0x2BFF), (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xE000, 0xF8FF),
          (0xFF00, 0xFFEF), (0x10000, 0x1FFFF), (0x1F300, 0x1FAFF), (0x20000, 0x2A6DF), (0xE0000, 0xE007F)]


def random_codepoints(rng):
    lo, hi = rng.choice(PLANES)
    out = []
    for _ in range(rng.randint(1, 6)):
        c = rng.randint(lo, hi)
        if 0xD800 <= c <= 0xDFFF or (c & 0xFFFE) == 0xFFFE:
            c = 0x41
        out.append(chr(c))
    return "".join(out)


def digits(rng):
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 14)))


def fragment(rng):
    kind = rng.random()
    if kind < 0.55:
        lang = rng.choice(list(WORDS))
        words = [rng.choice(WORDS[lang]) for _ in range(rng.randint(1, 6))]
        sep = "" if lang in ("zh", "ja") and rng.random() < 0.7 else " "
        text = sep.join(words)
        if lang == "en" and rng.random() < 0.3:
            text = text.capitalize() if rng.random() < 0.5 else text.upper()
        return text
    if kind < 0.65:
        return digits(rng)
    if kind < 0.78:
        return random_codepoints(rng)
    if kind < 0.9:
        return "".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 4)))
    if kind < 0.97:
        return rng.choice(SPACES) * rng.randint(1, 3)
    return rng.choice(SPECIAL_TEXT)


def strings():
    with open(os.path.join(DATA, "llamacpp-vocab", "ggml-vocab-qwen2.gguf.inp"), encoding="utf-8") as f:
        edge_cases = f.read().split(SEPARATOR)[:-1]
    rng = random.Random(20250215)
    generated = []
    while len(generated) < COUNT:
        parts = [fragment(rng) for _ in range(rng.randint(1, 8))]
        text = "".join(p + (rng.choice(SPACES) if rng.random() < 0.6 else "") for p in parts)
        if SEPARATOR.strip() not in text:
            generated.append(text)
    return SEEDS + edge_cases + generated


def tokenizer_json(name):
    with lzma.open(os.path.join(DATA, "hf", name, "tokenizer.json.xz"), "rb") as f:
        return Tokenizer.from_str(f.read().decode("utf-8"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed files instead of writing them")
    args = ap.parse_args()
    inp_path = os.path.join(OUT_DIR, "strings.inp.xz")
    if args.check:
        with lzma.open(inp_path, "rt", encoding="utf-8", newline="") as f:
            texts = f.read().split(SEPARATOR)[:-1]
    else:
        texts = strings()
        os.makedirs(OUT_DIR, exist_ok=True)
        with lzma.open(inp_path, "wt", encoding="utf-8", newline="", preset=9) as f:
            f.write("".join(t + SEPARATOR for t in texts))
    failed = 0
    for name in TOKENIZERS:
        tokenizer = tokenizer_json(name)
        lines = [" ".join(str(i) for i in tokenizer.encode(t, add_special_tokens=False).ids) + "\n" for t in texts]
        out_path = os.path.join(OUT_DIR, name + ".out.xz")
        if args.check:
            with lzma.open(out_path, "rt", encoding="utf-8") as f:
                committed = f.readlines()
            diffs = [i for i, (a, b) in enumerate(zip(lines, committed)) if a != b]
            if len(committed) != len(lines) or diffs:
                failed += 1
                print(f"FAIL {name}: {len(committed)} committed lines for {len(lines)} strings, {len(diffs)} differ")
                for i in diffs[:5]:
                    print(f"    {texts[i]!r}\n      tokenizers: {lines[i].strip()}\n      committed:  {committed[i].strip()}")
            else:
                print(f"ok   {name}: {len(lines)} strings encode as committed")
        else:
            with lzma.open(out_path, "wt", encoding="utf-8", preset=9) as f:
                f.writelines(lines)
            print(f"wrote {out_path}: {len(lines)} strings, {sum(len(l.split()) for l in lines)} ids")
    if args.check:
        print(f"{len(TOKENIZERS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
