#!/usr/bin/env python3
"""Does a prompt's prefill result depend on where it sits in the packed batch?

Runs `<family>-nospec.so` on the attn0 weight variant of diagnose.py (only layer 0's
attention reaches the logits) with the prompts in their order and reversed, and
prints per prompt: Kiln's logits in the two orders against each other and against
transformers (bf16 sdpa and fp32). A prompt whose bits change with its place points at
the packing (cu_seqlens / positions), not at rounding.

Usage: python3 test/Parity/order_check.py --models DIR --so-dir DIR --kiln-run BIN
           --lib-dir DIR --out OUT [--family llama]
"""
import argparse

import torch

from diagnose import add_run_arguments, kiln_logits, last_logits, rel, write_variant
from parity import load_reference_model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser)
    parser.add_argument("--family", default="llama")
    parser.add_argument("--variant", default="attn0")
    args = parser.parse_args()
    model_dir = args.models / args.family
    prompts = [[int(t) for t in line.split()]
               for line in (model_dir / "prompts.txt").read_text().splitlines() if line.strip()]
    work = args.out / "order" / args.family
    weights = write_variant(model_dir, args.variant, work)
    runs = {}
    for name, order in (("given", list(range(len(prompts)))),
                        ("reversed", list(reversed(range(len(prompts)))))):
        (work / name).mkdir(parents=True, exist_ok=True)
        path = work / name / "prompts.txt"
        path.write_text("".join(" ".join(map(str, prompts[i])) + "\n" for i in order))
        logits = kiln_logits(args.so_dir / f"{args.family}-nospec.so", weights, path,
                             work / name, args, len(prompts))
        runs[name] = {i: logits[j] for j, i in enumerate(order)}
    model = load_reference_model(weights, "cuda")
    sdpa = last_logits(model, prompts, "cuda")
    exact = last_logits(model.float(), prompts, "cuda")
    for i, prompt in enumerate(prompts):
        a, b = runs["given"][i], runs["reversed"][i]
        print(f"prompt {i} ({len(prompt):3d} tokens): given==reversed {torch.equal(a, b)} "
              f"(rel {rel(a, b):.1e}); kiln-vs-sdpa {rel(a, sdpa[i]):.1e} "
              f"kiln-vs-fp32 {rel(a, exact[i]):.1e} sdpa-vs-fp32 {rel(sdpa[i], exact[i]):.1e}",
              flush=True)


if __name__ == "__main__":
    main()
