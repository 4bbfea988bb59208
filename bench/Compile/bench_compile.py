#!/usr/bin/env python3
"""Compile time against layer count: is every stage of kiln-compile linear in layers?

Synthetic models from two bundled configs with num_hidden_layers set to 512 ... 32768:
a dense Llama (whole decoder graph: 15 graph ops and one cached attention per layer)
and a Nemotron-H hybrid (the parity model's Mamba2 + MoE + attention + MLP pattern
`*MEM*M-E`, repeated). For each, the median wall time of `kiln-compile` for the report
(import, deploy pipeline, report) and for `--emit=so` (lowering, LLVM, link), and the
time per layer. A linear pipeline keeps
the time per layer flat as the count grows; the last column is the ratio of the time per
layer to the smallest model's. No GPU needed.

Usage: python3 bench/Compile/bench_compile.py --kiln-compile BUILD/bin/kiln-compile
           [--layers 512 2048 8192 32768] [--repeat 3] [--out DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    "llama": ROOT / "test/Parity/configs/llama-tiny.json",
    "nemotron_h": ROOT / "test/Parity/configs/nemotron-h-tiny.json",
}
STAGES = {"llama": ("report", "so"), "nemotron_h": ("report", "so")}


def synthetic(model, layers, work):
    """The model's config with `layers` layers (a hybrid repeats its layer pattern)."""
    config = json.loads(MODELS[model].read_text())
    config["num_hidden_layers"] = layers
    pattern = config.get("hybrid_override_pattern")
    if pattern:
        config["hybrid_override_pattern"] = (pattern * (layers // len(pattern) + 1))[:layers]
    path = work / f"{model}-{layers}.json"
    path.write_text(json.dumps(config))
    return path


def seconds(cmd, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        # Only a finished compile counts: a model refused before its graph is built (its
        # weights cannot fit the target) would time nothing.
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, cmd))}: exit {proc.returncode}\n"
                               f"{proc.stderr[-600:]}")
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln-compile", type=Path,
                        default=ROOT / "build/bin/kiln-compile")
    parser.add_argument("--layers", type=int, nargs="+", default=[512, 2048, 8192, 32768])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    args = parser.parse_args()
    rows = []
    print(f"{'model':<12}{'layers':>8}{'stage':>8}{'seconds':>10}{'ms/layer':>10}{'x first':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for model in args.models:
            first = {}
            for layers in args.layers:
                config = synthetic(model, layers, work)
                for stage in STAGES[model]:
                    extra = ["--emit=so", "-o", str(work / "m.so")] if stage == "so" else []
                    # sm_90 without a memory size: no budget, so tens of thousands of
                    # layers compile instead of being refused for their weights.
                    cmd = [str(args.kiln_compile), str(config), "--target", "sm_90",
                           "--max-batch", "8", "--max-seq-len", "512", *extra]
                    s = seconds(cmd, args.repeat)
                    per = 1e3 * s / layers
                    first.setdefault(stage, per)
                    rows.append({"model": model, "layers": layers, "stage": stage,
                                 "seconds": s, "ms_per_layer": per})
                    print(f"{model:<12}{layers:>8}{stage:>8}{s:>10.2f}{per:>10.3f}"
                          f"{per / first[stage]:>9.2f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench-compile.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
