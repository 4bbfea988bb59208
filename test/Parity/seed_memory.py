#!/usr/bin/env python3
"""The seed scenario on real memory (GPU machine; issue 14, docs/performance.md).

A Nemotron-Nano-9B-v2-shaped model (test/Tools/Inputs/nemotron-nano-9b-v2-seed.json:
27 Mamba2 layers with the real state shapes, small hidden size) compiled for an L40S
(test/Tools/seed-nano-l40s.test checks the plans) runs on this GPU:
  seed-nospec.so   no speculation, max_batch 64: no speculative-only state exists
  seed-ngram.so    ngram:3 in rewind mode, max_batch 32: the intermediates are planned
  seed-replay.so   ngram:3 in replay mode, max_batch 64: the replay buffers are planned
For each: the device memory the model holds after loading and after generating equals
its plan (nothing allocated outside it), and the speculative run's tokens equal the
plain run's (lossless). Weights are random (make_models.randomize) and saved with
save_pretrained.

Usage: python3 test/Parity/seed_memory.py --kiln-run BIN --so-dir DIR --out DIR
"""
import argparse
import json
import random
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_models import build_model, load_config, randomize, save  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "Tools" / "Inputs" / "nemotron-nano-9b-v2-seed.json"
PROMPT_LENGTHS = [3, 40, 300, 1100]  # one prompt crosses many 64-token scan chunks
NEW_TOKENS = 24


def run(args, so, spec, work):
    out = work / f"{so}.json"
    cmd = [str(args.kiln_run), str(args.so_dir / f"{so}.so"), "--weights", str(work / "model"),
           "--prompts", str(work / "prompts.txt"), "--max-new-tokens", str(NEW_TOKENS),
           "--json", str(out)]
    if spec:
        cmd += ["--spec", spec]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return None, proc.stderr[-2000:]
    return json.loads(out.read_text()), None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln-run", type=Path, required=True)
    parser.add_argument("--so-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    work = args.out
    work.mkdir(parents=True, exist_ok=True)
    config = load_config(CONFIG)
    model = build_model(config, "cuda")
    randomize(model, 0.1, 14, "cuda")
    save(model, work / "model")
    del model
    torch.cuda.empty_cache()
    rng = random.Random(14)
    (work / "prompts.txt").write_text("".join(
        " ".join(str(rng.randrange(config.vocab_size)) for _ in range(n)) + "\n"
        for n in PROMPT_LENGTHS))
    results, failed = {}, False
    for so, spec in (("seed-nospec", None), ("seed-ngram", "ngram:3"),
                     ("seed-replay", "ngram:3")):
        result, error = run(args, so, spec, work)
        if error:
            print(f"{so}: FAIL kiln-run: {error}")
            failed = True
            continue
        planned, used = result["planned_device_bytes"], result["used_device_bytes"]
        after = result["used_device_bytes_after_run"]
        ok = planned == used == after
        failed |= not ok
        print(f"{so}: {'PASS' if ok else 'FAIL'} planned {planned} used {used} "
              f"after the run {after} ({(used - planned) / planned * 100:+.3f}%)")
        results[so] = result
    for so in ("seed-ngram", "seed-replay"):
        if "seed-nospec" not in results or so not in results:
            continue
        same = results["seed-nospec"]["outputs"] == results[so]["outputs"]
        failed |= not same
        print(f"lossless {so} ngram:3: {'PASS' if same else 'FAIL'}; acceptance "
              f"{results[so].get('acceptance_rate')}; decode "
              f"{results[so].get('decode_tokens_per_s')} tok/s")
    (work / "seed.json").write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
