#!/usr/bin/env python3
"""Where a decode step's GPU time goes: Nsight Compute (ncu) on kiln-run's eager decode
of the whole-model benchmark, one row per kernel function with its share of the step,
its time per step and the DRAM bytes it read per second (against the read ceiling the
benchmark measured, when given).

The weights are bench_model.py's (written into --work when missing):
  python3 bench/Model/kernel_profile.py --kiln-run BUILD/bin/kiln-run \
      --kiln-so .carry/models/llama-3.1-8b-bench.so --work /tmp/kiln-bench-model \
      --lib-dir BUILD/lib --batch 1 [--ceiling-tbs 4.25]

Eager launches (--cuda-graphs 0): ncu times each kernel alone, with the caches flushed
before it (--cache-control all), which is what a weight-streaming decode kernel sees.
"""
import argparse
import csv
import io
import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

METRICS = "gpu__time_duration.sum,dram__bytes_read.sum"


def ncu_binary():
    found = shutil.which("ncu")
    if found:
        return found
    for root in sorted(Path("/opt/nvidia").glob("nsight-compute/*"), reverse=True):
        if (root / "ncu").exists():
            return str(root / "ncu")
    return None


def prepare(args):
    """The weights (bench_model.py --prepare-only, unless a benchmark run left them) and
    `batch` prompts of 128 ids, as the benchmark's decode rows have."""
    if not (args.work / "model.safetensors").exists():
        subprocess.run([sys.executable, str(Path(__file__).with_name("bench_model.py")),
                        "--prepare-only", "--work", str(args.work)], check=True)
    prompts = args.work / f"profile-b{args.batch}.prompts"
    rows = (" ".join(str((17 * row + 31 * i) % 1000 + 1) for i in range(128))
            for row in range(args.batch))
    prompts.write_text("\n".join(rows) + "\n")
    return prompts


def profile(args, ncu):
    prompts = prepare(args)
    cmd = [ncu, "--clock-control", "none", "--metrics", METRICS, "--csv", "--page", "raw",
           "--print-units", "base", "--print-kernel-base", "function",
           "--launch-skip", str(args.skip),
           "--launch-count", str(args.count),
           str(args.kiln_run), str(args.kiln_so), "--weights", str(args.work),
           "--prompts", str(prompts), "--max-new-tokens", str(args.new_tokens),
           "--cuda-graphs", "0"]
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join([str(d) for d in args.lib_dir] +
                                      [env.get("LD_LIBRARY_PATH", "")])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    if proc.returncode != 0:
        sys.exit(f"kernel_profile: ncu exit {proc.returncode}: {proc.stderr[-2000:]}")
    return proc.stdout


def rows_of(text):
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if '"Kernel Name"' in line), None)
    if start is None:
        sys.exit("kernel_profile: no kernel rows in ncu's output:\n" + text[-2000:])
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    for row in reader:
        duration = number(row.get("gpu__time_duration.sum"))
        if duration is None:
            continue  # the units row under the header
        yield row["Kernel Name"], duration, number(row.get("dram__bytes_read.sum")) or 0.0


def number(text):
    """A CSV cell as a float (ncu may group digits with commas); None when not a number."""
    try:
        return float((text or "").replace(",", ""))
    except ValueError:
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln-run", type=Path, required=True)
    parser.add_argument("--kiln-so", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/kiln-bench-model"))
    parser.add_argument("--lib-dir", type=Path, action="append", default=[])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--skip", type=int, default=2000,
                        help="launches skipped (load, prefill, first decode steps)")
    parser.add_argument("--count", type=int, default=1500, help="launches profiled")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--steps-marker", default="argmax",
                        help="a kernel name part launched once a decode step")
    parser.add_argument("--ceiling-tbs", type=float, default=0.0,
                        help="the read ceiling (TB/s) to print percentages against")
    parser.add_argument("--timeout", type=int, default=400)
    parser.add_argument("--raw", type=Path, help="where to keep ncu's CSV")
    args = parser.parse_args()
    ncu = ncu_binary()
    if not ncu:
        sys.exit("kernel_profile: ncu not found (PATH, /opt/nvidia/nsight-compute)")
    text = profile(args, ncu)
    if args.raw:
        args.raw.write_text(text)
    totals = defaultdict(lambda: [0, 0.0, 0.0])  # launches, ns, bytes
    for name, ns, read in rows_of(text):
        short = name.strip() or "?"
        entry = totals[short]
        entry[0] += 1
        entry[1] += ns
        entry[2] += read
    steps = sum(e[0] for n, e in totals.items() if args.steps_marker in n)
    if not steps:
        sys.exit(f"kernel_profile: no '{args.steps_marker}' kernel among the profiled "
                 f"launches: {sorted(totals)}")
    all_ns = sum(e[1] for e in totals.values())
    all_bytes = sum(e[2] for e in totals.values())
    print(f"decode b{args.batch}: {steps} steps profiled, {all_ns / steps / 1e3:.1f} us of "
          f"kernels a step, {all_bytes / steps / 1e9:.3f} GB read a step "
          f"({all_bytes / all_ns / 1e3:.2f} TB/s over the kernels' time)")
    print(f"{'kernel':60s} {'/step':>6s} {'us/step':>9s} {'share':>6s} {'TB/s':>6s}"
          + ("  % ceiling" if args.ceiling_tbs else ""))
    for name, (count, ns, read) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        tbs = read / ns / 1e3 if ns else 0.0
        line = (f"{name[:60]:60s} {count / steps:6.1f} {ns / steps / 1e3:9.1f} "
                f"{100 * ns / all_ns:5.1f}% {tbs:6.2f}")
        if args.ceiling_tbs:
            line += f"  {100 * tbs / args.ceiling_tbs:6.1f}%"
        print(line)


if __name__ == "__main__":
    main()
