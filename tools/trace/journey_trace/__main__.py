"""python3 -m journey_trace DIR: what a dump holds, one line per tensor name with its steps, shape
and axes, then what each stage is (from the manifest)."""
import sys

from . import DumpError, load


def main(argv):
    if len(argv) != 2:
        print("usage: python3 -m journey_trace DIR", file=sys.stderr)
        return 2
    try:
        cache = load(argv[1])
    except DumpError as e:
        print(f"journey_trace: error: {e}", file=sys.stderr)
        return 2
    print(repr(cache))
    print(f"prompt {cache.prompt!r} -> {cache.generated_text!r}")
    for name in cache.names():
        steps = [s for n, s in cache.keys() if n == name]
        entry = cache.entry(name, steps[0])
        print(f"  {name:24s} steps {cache._ranges(steps):10s} {str(entry['shape']):18s} {entry['dtype']}")
    seen = set()
    for name in cache.names():
        stage = name.split(".", 1)[1] if name.startswith("L") and "." in name else name
        if stage not in seen:
            seen.add(stage)
            print("  " + cache.describe(stage))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
