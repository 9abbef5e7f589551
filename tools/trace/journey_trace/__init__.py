"""Read a journey trace dump like an activation cache.

A dump (docs/dump-format.md) is a directory with manifest.json and one .npy file per tensor. This
module opens it the way TransformerLens's ActivationCache is read:

    import journey_trace
    cache = journey_trace.load("out/once")
    cache["L3.attn_weights", 0]          # step 0 (the prefill): np.ndarray [H, T, P]
    cache["logits", 5]                   # the 5th decode step's logits [1, V]
    cache["embeddings"]                  # a name recorded in one step only needs no step
    cache.axes("L3.attn_weights")        # ('H', 'T', 'P')
    cache.describe("attn_weights")       # what it holds and where in journey's code it is made
    cache.stack("attn_weights", 0)       # every layer: [L, H, T, P]
    cache.logit_lens(0)                  # per layer: the top tokens of the last position
    cache.tokens, cache.pieces(), cache.steps, cache.generated_text

Only the standard library and NumPy are needed. Arrays are read on first use and kept. Every
error names the dump, the tensor and what was expected.

usage as a script:  python3 -m journey_trace DIR      (lists what the dump holds)
"""
import difflib
import json
import os

import numpy as np

FORMAT = "journey-trace"
VERSION = 1

__all__ = ["load", "Cache", "DumpError"]


class DumpError(Exception):
    """A dump that cannot be read as its manifest describes it."""


def load(directory):
    """Open the dump in `directory` (reads manifest.json; tensors are read when asked for)."""
    return Cache(directory)


class Cache:
    def __init__(self, directory):
        self.directory = os.fspath(directory)
        path = os.path.join(self.directory, "manifest.json")
        try:
            with open(path, encoding="utf-8") as f:
                self.manifest = json.load(f)
        except FileNotFoundError:
            raise DumpError(f"{self.directory} is not a trace dump: {path} does not exist "
                            "(make one with `journey trace PROMPT --out DIR`)") from None
        except json.JSONDecodeError as e:
            raise DumpError(f"{path}: not valid JSON: {e}") from None
        m = self.manifest
        if m.get("format") != FORMAT:
            raise DumpError(f'{path}: field "format" is {m.get("format")!r}, expected {FORMAT!r}')
        if m.get("version") != VERSION:
            raise DumpError(f"{path}: dump format version {m.get('version')} is not supported (this reader reads {VERSION})")
        self._entries = {}  # (name, step) -> manifest entry
        for t in m.get("tensors", []):
            f = t.get("file", "")
            if ".." in f.split("/") or os.path.isabs(f):
                raise DumpError(f'{path}: tensor {t.get("name")!r} names file {f!r} outside the dump directory')
            self._entries[(t["name"], t["step"])] = t
        self._stages = {s["name"]: s for s in m.get("stages", [])}
        self._arrays = {}

    # -- what the dump holds ---------------------------------------------------------------
    @property
    def prompt(self):
        return self.manifest.get("prompt", "")

    @property
    def tokens(self):
        """The prompt's tokens: [{"id": ..., "piece": ...}]."""
        return self.manifest.get("tokens", [])

    @property
    def steps(self):
        """Step numbers, ascending (0 = the prefill, then one per decode step)."""
        return sorted({s["step"] for s in self.manifest.get("steps", [])} | {step for _, step in self._entries})

    @property
    def generated_text(self):
        return self.manifest.get("settings", {}).get("generated_text", "")

    @property
    def num_layers(self):
        config = self.manifest.get("model", {}).get("config", {})
        if isinstance(config.get("num_hidden_layers"), int):
            return config["num_hidden_layers"]
        layers = [t["layer"] for t in self.manifest.get("tensors", [])]
        return max(layers, default=-1) + 1

    def names(self):
        """Tensor names in the order they were recorded ("token_ids", "embeddings", "L0.attn_norm", ...)."""
        seen, out = set(), []
        for name, _ in self._entries:
            if name not in seen:
                seen.add(name)
                out.append(name)
        return out

    def keys(self):
        return list(self._entries)

    def __contains__(self, key):
        name, step = self._split(key)
        return (name, step) in self._entries if step is not None else any(n == name for n, _ in self._entries)

    def pieces(self):
        """The piece at every position: the prompt's, then each sampled token's."""
        out = [t["piece"] for t in self.tokens]
        out += [s["sampled"]["piece"] for s in self.manifest.get("steps", []) if s.get("sampled")]
        return out

    def step_info(self, step):
        for s in self.manifest.get("steps", []):
            if s["step"] == step:
                return s
        raise DumpError(f"{self.directory}: no step {step} (steps: {self._ranges(self.steps)})")

    # -- reading tensors ---------------------------------------------------------------------
    def __getitem__(self, key):
        """cache["L3.q", step] -> np.ndarray; cache["L3.q"] when that name has one step only."""
        name, step = self._split(key)
        steps = sorted(s for n, s in self._entries if n == name)
        if not steps:
            raise KeyError(self._unknown(name))
        if step is None:
            if len(steps) > 1:
                raise KeyError(f"{name!r} is recorded in {len(steps)} steps ({self._ranges(steps)}): "
                               f"ask for one, e.g. cache[{name!r}, {steps[0]}]")
            step = steps[0]
        entry = self._entries.get((name, step))
        if entry is None:
            raise KeyError(f"{name!r} is not recorded in step {step} (it is in steps {self._ranges(steps)})")
        return self._read(entry)

    def entry(self, name, step):
        """The manifest's entry for (name, step): shape, dtype, file, heads."""
        return self._entries[(name, step)]

    def axes(self, name):
        """The axis letters of a tensor, outermost first: ('H', 'T', 'P') for "L3.attn_weights"."""
        stage = name.split(".", 1)[1] if name.startswith("L") and "." in name else name
        info = self._stages.get(stage)
        if info is None:
            raise KeyError(f"{self.directory}: the manifest describes no stage {stage!r} "
                           f"(described: {', '.join(self._stages) or 'none (an old dump)'})")
        return tuple(info["axes"])

    def describe(self, name):
        """One line: the stage, its axes, what it holds and where in journey's code it is made."""
        stage = name.split(".", 1)[1] if name.startswith("L") and "." in name else name
        info = self._stages.get(stage)
        if info is None:
            return f"{stage}: not described in this dump's manifest"
        return f"{stage} [{', '.join(info['axes'])}]: {info['description']} (made in {info['made_in']})"

    def stack(self, stage, step):
        """The stage of every layer in one array, layers first: stack("attn_weights", 0) -> [L, H, T, P]."""
        arrays = []
        for layer in range(self.num_layers):
            name = f"L{layer}.{stage}"
            if (name, step) not in self._entries:
                raise KeyError(f"{name!r} is not recorded in step {step}: stack needs every layer "
                               f"(trace without --layers, or read the layers one by one)")
            arrays.append(self[name, step])
        return np.stack(arrays)

    def logit_lens(self, step, row=-1):
        """For each layer: [(piece, probability), ...] of the logit lens at one row of the step
        (default: its last token, the one whose next token is predicted)."""
        out = []
        for layer in range(self.num_layers):
            ids = self[f"L{layer}.logit_lens", step][row]
            probs = self[f"L{layer}.logit_lens_probs", step][row]
            out.append([(self.piece(int(i)), float(p)) for i, p in zip(ids, probs)])
        return out

    def piece(self, token_id):
        """A token's piece as the manifest knows it: its "pieces" (the top tokens of every
        distribution and the logit lens), the prompt, the sampled tokens and their alternatives."""
        if not hasattr(self, "_pieces"):
            self._pieces = {int(k): v for k, v in self.manifest.get("pieces", {}).items()}
            self._pieces.update({t["id"]: t["piece"] for t in self.tokens})
            for s in self.manifest.get("steps", []):
                if s.get("sampled"):
                    self._pieces[s["sampled"]["id"]] = s["sampled"]["piece"]
                    for alt in s["sampled"].get("top", []):
                        self._pieces[alt["id"]] = alt["piece"]
        return self._pieces.get(token_id, f"#{token_id}")

    # -- internals ---------------------------------------------------------------------------
    @staticmethod
    def _split(key):
        if isinstance(key, tuple):
            if len(key) != 2 or not isinstance(key[0], str) or not isinstance(key[1], (int, np.integer)):
                raise KeyError(f"expected cache[name] or cache[name, step], got cache[{key!r}]")
            return key[0], int(key[1])
        if not isinstance(key, str):
            raise KeyError(f"expected a tensor name such as 'L3.q', got {key!r}")
        return key, None

    def _unknown(self, name):
        names = self.names()
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        return f"{self.directory}: no tensor {name!r}{hint} ({len(names)} names, e.g. {', '.join(names[:4])})"

    @staticmethod
    def _ranges(values):
        values = sorted(values)
        out, start = [], None
        for i, v in enumerate(values):
            if start is None:
                start = v
            if i + 1 == len(values) or values[i + 1] != v + 1:
                out.append(str(start) if start == v else f"{start}-{v}")
                start = None
        return ",".join(out)

    def _read(self, entry):
        path = os.path.join(self.directory, entry["file"])
        if path not in self._arrays:
            try:
                array = np.load(path, allow_pickle=False)
            except FileNotFoundError:
                raise DumpError(f"{path}: missing (the manifest lists it as {entry['name']}, step {entry['step']})") from None
            want = np.float32 if entry["dtype"] == "f32" else np.int32
            if array.dtype != want or list(array.shape) != entry["shape"]:
                raise DumpError(f"{path} holds {array.dtype} {list(array.shape)}, the manifest says "
                                f"{entry['dtype']} {entry['shape']}")
            self._arrays[path] = array
        return self._arrays[path]

    def __repr__(self):
        return (f"<journey_trace.Cache {self.directory}: {len(self._entries)} tensors, "
                f"{len(self.steps)} steps, {self.num_layers} layers>")
