#!/usr/bin/env python3
"""A stand-in for kiln-run with the same command line, computed by transformers.

It exists to test the parity harness itself (selftest.sh): every check should PASS
against it, and --break makes it lie in a chosen way so that the matching check must
FAIL. The MODEL.so argument is ignored; the model comes from --weights.
"""
import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from parity import greedy_with_logits, load_reference_model  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_so")
    parser.add_argument("--weights", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--max-new-tokens", type=int, required=True)
    parser.add_argument("--spec")
    parser.add_argument("--draft-model")
    parser.add_argument("--draft-weights")
    parser.add_argument("--json")
    parser.add_argument("--logits")
    parser.add_argument("--teacher-forced")
    parser.add_argument("--cuda-graphs", type=int, default=64)
    parser.add_argument("--break", dest="breakage", default="",
                        choices=["", "tokens", "logits", "memory", "crash", "graphs"])
    args = parser.parse_args()
    if args.breakage == "crash":
        print("fake kiln-run: asked to crash", file=sys.stderr)
        return 1

    prompts = [[int(t) for t in line.split()]
               for line in Path(args.prompts).read_text().splitlines() if line.strip()]
    model = load_reference_model(args.weights, "cuda")
    outputs, first = [], []
    for prompt in prompts:
        tokens, logits = greedy_with_logits(model, prompt, args.max_new_tokens, "cuda")
        outputs.append(tokens)
        first.append(logits[0].cpu())
    eager = args.cuda_graphs == 0
    if args.breakage == "tokens" or (args.breakage == "graphs" and eager):
        outputs[-1][3] = (outputs[-1][3] + 1) % len(first[0])
    result = {"outputs": outputs, "decode_tokens_per_s": 1.0, "prefill_tokens_per_s": 1.0,
              "acceptance_rate": 0.5 if args.spec else None, "steps": args.max_new_tokens,
              "planned_device_bytes": 1000,
              "used_device_bytes": 1100 if args.breakage == "memory" else 1004,
              "cuda_graphs": {"max": args.cuda_graphs, "captured": 0 if eager else 1,
                              "replayed_steps": 0 if eager else args.max_new_tokens - 2}}
    if args.teacher_forced:
        continuations = json.loads(Path(args.teacher_forced).read_text())["continuations"]
        mismatches, positions = [], 0
        for p, (got, want) in enumerate(zip(outputs, continuations)):
            for i, (a, b) in enumerate(zip(got, want)):
                positions += 1
                if a != b:
                    mismatches.append([p, i])
        result["teacher_forced"] = {"positions": positions,
                                    "agree": positions - len(mismatches),
                                    "mismatch_positions": mismatches}
    if args.logits:
        logits = torch.stack(first)
        if args.breakage == "logits":
            logits = logits * 1.1
        Path(args.logits).write_bytes(logits.numpy().tobytes())
    Path(args.json).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
