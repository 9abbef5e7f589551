#!/usr/bin/python3
"""The output a chapter README shows is the real output of the chapter's program, and stays so.

A README marks a block with two HTML comments (invisible on GitHub):

    <!-- journey:output ch04_attention -->
    ```text
    ...what ./build/chapters/ch04_attention prints...
    ```
    <!-- journey:end -->

The opening marker names the chapter's program and may add, shell-quoted:
    args="data/stories260K 'Once upon a time'"   arguments for the program
    mask="[0-9.]+ ms"                             a regular expression for text that changes from
                                                  run to run (timings, ports); repeatable. Masked
                                                  text is shown as it came out, but not compared.
    lines="0:22,-27:"                             show only these lines of the output, as Python
                                                  slices of its lines (0-based, end excluded,
                                                  negative from the end), comma-separated; each gap
                                                  becomes one "[… N more lines …]" line, so the
                                                  count of what is left out is compared too.
    rtol=0.02                                     compare decimal numbers (with a point or an
                                                  exponent) within this relative tolerance plus one
                                                  unit of their last printed digit, for results
                                                  whose f32 sums round differently on other CPUs;
                                                  integers, words and the number of lines exactly,
                                                  runs of spaces as one.
    needs="models/smollm2-135m-instruct"          a path (from the repository root) the block's run
                                                  needs that the repository does not ship: the
                                                  git-ignored models/ that scripts/install-deps.sh
                                                  fills. Such blocks are checked by their own ctest,
                                                  which skips (exit 77, saying what is missing)
                                                  without it.

Two modes:
    update_outputs.py --build BUILD [--chapter NAME]...
        runs BUILD/chapters/NAME for every marked block of chapters/*/README*.md (English and
        zh-CN) and rewrites the block with what it printed (stdout), unless only masked text
        differs (so timings do not churn the READMEs). A block whose `needs` path is absent is
        left as it is, and said so.
    update_outputs.py --check --chapter NAME --binary PATH
        what `ctest -R chapter.NAME` runs: the program once per distinct args, exit status 0
        required (77 passes through: skipped), and every marked block of that chapter without
        `needs` must equal its output after masking (within rtol); a difference prints a diff and
        the command that refreshes it. A chapter whose READMEs mark no such block is just run.
    update_outputs.py --check --needs --chapter NAME --binary PATH
        what `ctest -R chapter.NAME.models` runs: the same for the blocks WITH `needs`; exit 77
        and a message naming the missing path when one is absent.

Runs from the repository root (the chapters name data/ by relative path). Standard library only.
"""
import argparse
import difflib
import glob
import os
import re
import shlex
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPEN = re.compile(r"^<!-- journey:output (\S+)(.*?)-->\s*$")
END = "<!-- journey:end -->"
# A decimal number: digits with a point, or with an exponent ("0.25", "-.5", "+3.060e-02", "1e-5").
DECIMAL = re.compile(r"([-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+)")
TIMEOUT_S = 900
MODELS_HINT = "scripts/install-deps.sh (tools/python/fetch-models.sh) fetches the models into models/"


class Block:
    def __init__(self, readme, chapter, options, start, end):
        self.readme, self.chapter, self.start, self.end = readme, chapter, start, end  # lines [start, end) between markers
        self.args, self.masks, self.lines, self.rtol, self.needs = [], [], None, None, None
        for token in shlex.split(options):
            key, _, value = token.partition("=")
            if key == "args":
                self.args = shlex.split(value)
            elif key == "needs":
                self.needs = value
            elif key == "mask":
                self.masks.append(re.compile(value))
            elif key == "rtol":
                self.rtol = float(value)
            elif key == "lines":
                self.lines = []
                for part in value.split(","):
                    first, _, last = part.partition(":")
                    self.lines.append((int(first) if first else None, int(last) if last else None))
            else:
                raise SystemExit(f"{readme}: unknown option {key!r} in the journey:output marker of {chapter}")

    def shown(self, output):
        """The part of the output the README shows."""
        lines = output.splitlines()
        if self.lines:
            kept, shown = set(), []
            for first, last in self.lines:
                kept.update(range(len(lines))[slice(first, last)])
            gap = 0
            for i, line in enumerate(lines):
                if i in kept:
                    if gap:
                        shown.append(f"[… {gap} more lines …]")
                        gap = 0
                    shown.append(line)
                else:
                    gap += 1
            if gap:
                shown.append(f"[… {gap} more lines …]")
            lines = shown
        return "\n".join(line.rstrip() for line in lines).rstrip("\n") + "\n"  # as fence() keeps it

    def masked(self, text):
        for mask in self.masks:
            text = mask.sub("…", text)
        return text

    def same(self, shown, printed):
        """Whether the README's block says what the program printed: equal after masking, or, with
        rtol, equal words and integers and decimal numbers within the tolerance."""
        a, b = self.masked(shown), self.masked(printed)
        if self.rtol is None or a == b:
            return a == b
        lines_a, lines_b = a.split("\n"), b.split("\n")
        return len(lines_a) == len(lines_b) and all(self.same_line(x, y) for x, y in zip(lines_a, lines_b))

    def same_line(self, a, b):
        parts_a, parts_b = DECIMAL.split(a), DECIMAL.split(b)  # text, number, text, number, ..., text
        if len(parts_a) != len(parts_b):
            return False
        for i, (x, y) in enumerate(zip(parts_a, parts_b)):
            if i % 2 == 0:
                if " ".join(x.split()) != " ".join(y.split()):
                    return False
            elif not (abs(float(x) - float(y)) <= self.rtol * max(abs(float(x)), abs(float(y))) + last_digit(x) + last_digit(y)):
                return False
        return True


def last_digit(number):
    """One unit of the last printed digit of a decimal number: 0.0001 for "5.5764", 1e-05 for "3.147e-06"."""
    mantissa, _, exponent = number.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def find_blocks(readme):
    with open(readme, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = OPEN.match(lines[i])
        if m:
            j = i + 1
            while j < len(lines) and lines[j].strip() != END:
                if OPEN.match(lines[j]):
                    raise SystemExit(f"{readme}:{j + 1}: a journey:output marker inside another (line {i + 1})")
                j += 1
            if j == len(lines):
                raise SystemExit(f"{readme}:{i + 1}: journey:output {m.group(1)} has no {END}")
            blocks.append(Block(readme, m.group(1), m.group(2), i + 1, j))
            i = j
        i += 1
    return blocks, lines


def fenced_body(lines):
    """The text inside the ```text fence of a block, or None when the block holds no fence yet."""
    inner = [line for line in lines]
    if len(inner) >= 2 and inner[0].startswith("```") and inner[-1].startswith("```"):
        return "\n".join(inner[1:-1]) + "\n"
    return None


def fence(text):
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return [ticks + "text"] + text.rstrip("\n").split("\n") + [ticks]


def run(binary, args):
    try:
        r = subprocess.run([binary] + args, cwd=REPO, capture_output=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"{binary} {' '.join(args)}: no answer within {TIMEOUT_S} s")
    return r.returncode, r.stdout.decode("utf-8", errors="replace"), r.stderr.decode("utf-8", errors="replace")


def readmes_of(chapter):
    return sorted(glob.glob(os.path.join(REPO, "chapters", chapter, "README*.md")))


def update(build, only):
    changed = 0
    for readme in sorted(glob.glob(os.path.join(REPO, "chapters", "*", "README*.md"))):
        blocks, lines = find_blocks(readme)
        blocks = [b for b in blocks if not only or b.chapter in only]
        for b in [b for b in blocks if b.needs and not os.path.exists(os.path.join(REPO, b.needs))]:
            print(f"kept {os.path.relpath(readme, REPO)}:{b.start}: {b.chapter} {' '.join(b.args)} needs {b.needs}, "
                  f"which is absent ({MODELS_HINT})")
            blocks.remove(b)
        if not blocks:
            continue
        outputs = {}
        for b in reversed(blocks):  # from the end, so that earlier line numbers stay valid
            binary = os.path.join(build, "chapters", b.chapter)
            key = tuple(b.args)
            if (b.chapter, key) not in outputs:
                status, out, err = run(binary, b.args)
                if status != 0:
                    raise SystemExit(f"{binary} exited with {status}; the README keeps its old output\n{err}")
                outputs[(b.chapter, key)] = out
            new = b.shown(outputs[(b.chapter, key)])
            old = fenced_body(lines[b.start:b.end])
            if old is not None and b.same(old, new):
                continue  # only masked text (a timing, a port) or rounding differs: keep the README as it is
            lines[b.start:b.end] = fence(new)
        with open(readme, encoding="utf-8") as f:
            before = f.read()
        after = "\n".join(lines)
        if after != before:
            with open(readme, "w", encoding="utf-8") as f:
                f.write(after)
            changed += 1
            print(f"updated {os.path.relpath(readme, REPO)}")
    print(f"{changed} README(s) changed")


def check(chapter, binary, plain_args, needs):
    blocks = [b for readme in readmes_of(chapter) for b in find_blocks(readme)[0]
              if b.chapter == chapter and bool(b.needs) == needs]
    if needs:
        if not blocks:
            raise SystemExit(f"{chapter}: --needs given, but no README block of the chapter has a needs option")
        missing = sorted({b.needs for b in blocks if not os.path.exists(os.path.join(REPO, b.needs))})
        if missing:
            print(f"SKIP: {chapter}'s README shows output on {', '.join(missing)}, which is absent here; {MODELS_HINT}")
            sys.exit(77)
    runs = {}
    for key in {tuple(b.args) for b in blocks} or {tuple(plain_args)}:
        status, out, err = run(binary, list(key))
        sys.stdout.write(out)
        sys.stderr.write(err)
        if status == 77:
            sys.exit(77)  # the chapter cannot run here (no GPU): ctest shows it skipped
        if status != 0:
            print(f"{chapter} {' '.join(key)} exited with status {status}")
            sys.exit(1)
        runs[key] = out
    failures = 0
    for b in blocks:
        _, lines = find_blocks(b.readme)
        shown = fenced_body(lines[b.start:b.end])
        actual = b.shown(runs[tuple(b.args)])
        if shown is None or not b.same(shown, actual):
            failures += 1
            where = os.path.relpath(b.readme, REPO)
            print(f"\n{where}:{b.start}: the output shown for {chapter} {' '.join(b.args)} is not what the program prints now:")
            shown_lines, actual_lines = (shown or "").splitlines(True), actual.splitlines(True)
            if len(shown_lines) == len(actual_lines):  # leave out lines that differ only in masked text or within rtol
                shown_lines = [y if b.same(x.rstrip("\n"), y.rstrip("\n")) else x for x, y in zip(shown_lines, actual_lines)]
            sys.stdout.writelines(difflib.unified_diff(shown_lines, actual_lines,
                                                       f"{where} (shown)", f"{chapter} (printed now)"))
            print(f"\nIf the new output is right, refresh the README: tools/book/update_outputs.py --build BUILD --chapter {chapter}")
    if failures:
        sys.exit(1)
    if blocks:
        print(f"\n{chapter}: the output in {len(blocks)} README block(s) matches the program's")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", help="build directory holding chapters/<name> (update mode)")
    p.add_argument("--chapter", action="append", default=[], help="only this chapter (repeatable)")
    p.add_argument("--check", action="store_true", help="run one chapter and compare (ctest mode)")
    p.add_argument("--binary", help="the chapter's program (check mode)")
    p.add_argument("--needs", action="store_true", help="check the blocks with a needs option (check mode)")
    p.add_argument("args", nargs="*", help="arguments when no README marks a block (check mode)")
    a = p.parse_args()
    if a.check:
        if len(a.chapter) != 1 or not a.binary:
            p.error("--check needs one --chapter and --binary")
        check(a.chapter[0], a.binary, a.args, a.needs)
    else:
        if not a.build:
            p.error("give --build BUILD (the build directory) or --check")
        update(os.path.abspath(a.build), set(a.chapter))


if __name__ == "__main__":
    main()
