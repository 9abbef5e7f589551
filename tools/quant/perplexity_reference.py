#!/usr/bin/python3
"""Perplexity and KL divergence computed independently of journey: the PyTorch forward pass of
tools/trace/reference.py (written from Hugging Face's modeling code, float64), SentencePiece's Python
package for the tokens, and llama.cpp's scoring rule written out again here:

  tokens = [BOS] + sp.encode(text); windows of C tokens (the tail that does not fill one is dropped);
  each window runs as a fresh sequence with BOS as its first token; the logits at positions
  C/2 .. C-2 predict the tokens at C/2+1 .. C-1 (llama-perplexity's `first = n_ctx/2`).

With --base, the same windows through the base model give KL(base || model) per scored token (mean,
median, 99th percentile by linear interpolation, maximum) and the fraction of positions whose top token
agrees. Prints one JSON object; tests/engine/test_perplexity.cpp compares journey's figures with it.

    /usr/bin/python3 tools/quant/perplexity_reference.py --model DIR --file data/texts/tinystories-original.txt \\
        --ctx 256 [--base DIR0] > OUT.json

Requires Debian's python3 with numpy, torch and sentencepiece (as reference.py).
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "trace"))
import reference  # noqa: E402  (tools/trace/reference.py: the independent forward pass)


class NoDump:
    def emit(self, *args, **kwargs):
        pass


def window_log_probs(model, window, bos):
    """log_softmax of the logits of one window run as a fresh sequence, float64 [C, V]."""
    model.k_cache = [None] * model.L
    model.v_cache = [None] * model.L
    ids = [bos] + list(window[1:])
    logits = model.forward(ids, 0, NoDump()).to(torch.float64)
    return torch.log_softmax(logits, dim=-1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--base", help="base model directory for the KL divergence")
    ap.add_argument("--file", required=True)
    ap.add_argument("--ctx", type=int, required=True)
    args = ap.parse_args()
    torch.set_grad_enabled(False)

    import sentencepiece
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(args.model, "tokenizer.model"))
    with open(args.file, encoding="utf-8") as f:
        text = f.read()
    model = reference.Model(args.model, torch.float64)
    bos = model.config.get("bos_token_id", sp.bos_id())
    tokens = [bos] + sp.encode(text)
    base = reference.Model(args.base, torch.float64) if args.base else None

    C = args.ctx
    first = C // 2
    windows = len(tokens) // C
    if windows < 2:
        sys.exit(f"{len(tokens)} tokens make fewer than two windows of {C}")
    nll, base_nll, kl, same = [], [], [], 0
    for w in range(windows):
        window = tokens[w * C:(w + 1) * C]
        lp = window_log_probs(model, window, bos)                    # [C, V]
        targets = torch.tensor(window[first + 1:C])                  # [C - 1 - first]
        rows = lp[first:C - 1]                                       # [C - 1 - first, V]
        nll += (-rows[torch.arange(len(targets)), targets]).tolist()
        if base is not None:
            lb = window_log_probs(base, window, bos)[first:C - 1]
            base_nll += (-lb[torch.arange(len(targets)), targets]).tolist()
            kl += (lb.exp() * (lb - rows)).sum(-1).tolist()
            same += int((lb.argmax(-1) == rows.argmax(-1)).sum())

    out = {"generated_by": "/usr/bin/python3 tools/quant/perplexity_reference.py " + " ".join(sys.argv[1:]),
           "model": args.model, "file": args.file, "context": C, "tokens": len(tokens),
           "tokens_sha256": hashlib.sha256(np.array(tokens, dtype="<i4").tobytes()).hexdigest(),
           "windows": windows, "tokens_scored": len(nll),
           "mean_nll": float(np.mean(nll)), "ppl": float(np.exp(np.mean(nll)))}
    if base is not None:
        out.update({"base": args.base, "base_ppl": float(np.exp(np.mean(base_nll))),
                    "mean_kl": float(np.mean(kl)), "kl_median": float(np.percentile(kl, 50)),
                    "kl_p99": float(np.percentile(kl, 99)), "kl_max": float(np.max(kl)),
                    "top1_agreement": same / len(kl)})
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
