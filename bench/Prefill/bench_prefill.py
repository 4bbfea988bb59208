#!/usr/bin/env python3
"""Prefill attention benchmark: one command on the GPU machine.

Measures, in the same run:
  * the dense bf16 matmul ceiling (torch.matmul 8192^3),
  * PyTorch SDPA with the flash and the cuDNN backends (is_causal=True, enable_gqa=True),
  * Kiln's kernel (the kiln_prefill_bench binary, run as a subprocess),
on the same shapes, and prints TFLOP/s (causal FLOPs = 4*B*Hq*L*L*D/2), % of the
ceiling and the ratio to each peer.

Usage: python3 bench/Prefill/bench_prefill.py --kiln-bench <build>/bench/Prefill/kiln_prefill_bench
"""
import argparse
import re
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [  # name, B, L, Hq, Hkv, D
    ("L4096_d128", 4, 4096, 32, 8, 128),
    ("L8192_d128", 2, 8192, 32, 8, 128),
    ("L16384_d128", 1, 16384, 32, 8, 128),
    ("L8192_d64", 2, 8192, 32, 8, 64),
    ("L8192_d256", 2, 8192, 16, 2, 256),  # Qwen3-Next's gated full attention (TP1)
]


def time_ms(fn, iters=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def matmul_ceiling():
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = time_ms(lambda: torch.matmul(a, b))
    return 2 * n**3 / (ms * 1e-3) / 1e12


def sdpa_tflops(backend, B, L, Hq, Hkv, D):
    q = torch.randn(B, Hq, L, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, Hkv, L, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, Hkv, L, D, device="cuda", dtype=torch.bfloat16)
    flops = 4 * B * Hq * L * L * D / 2

    def run():
        with sdpa_kernel([backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    try:
        ms = time_ms(run)
        note = ""
    except Exception as e:  # backend refuses GQA: expand K/V (same FLOPs, more bytes)
        g = Hq // Hkv
        k2, v2 = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)

        def run2():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k2, v2, is_causal=True)

        try:
            ms = time_ms(run2)
            note = "(kv expanded)"
        except Exception as e2:
            return None, f"failed: {type(e2).__name__}: {str(e2)[:80]}"
    return flops / (ms * 1e-3) / 1e12, note


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln-bench", required=True)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--kiln-timeout", type=float, default=None,
                    help="seconds the Kiln binary may run; its lines so far are kept")
    args = ap.parse_args()

    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    ceiling = matmul_ceiling()
    print(f"ceiling: torch.matmul bf16 8192^3 = {ceiling:.1f} TFLOP/s")

    peers = {}
    for name, B, L, Hq, Hkv, D in SHAPES:
        for label, backend in (("flash", SDPBackend.FLASH_ATTENTION),
                               ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            peers[(name, label)] = sdpa_tflops(backend, B, L, Hq, Hkv, D)
            t, note = peers[(name, label)]
            print(f"peer {name} {label}: {t if t is None else round(t, 1)} TFLOP/s {note}")
    torch.cuda.empty_cache()
    sys.stdout.flush()

    try:
        proc = subprocess.run([args.kiln_bench, str(args.iters)], capture_output=True, text=True,
                              timeout=args.kiln_timeout)
        stdout, returncode = proc.stdout, proc.returncode
        if returncode != 0:
            print(proc.stderr, file=sys.stderr)
    except subprocess.TimeoutExpired as e:  # a hung kernel: keep the rows measured so far
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        returncode = 124
        print(f"kiln bench: timed out after {args.kiln_timeout} s", file=sys.stderr)
    print(stdout, end="")
    kiln = []
    for line in stdout.splitlines():
        m = re.match(r"KILN case=(\S+) .*config=(\S+) ms=(\S+) tflops=(\S+)", line)
        if m:
            kiln.append((m.group(1), m.group(2), float(m.group(3)), float(m.group(4))))

    print()
    print(f"| case | config | Kiln ms | Kiln TFLOP/s | % ceiling | flash TFLOP/s | "
          f"Kiln/flash | cuDNN TFLOP/s | Kiln/cuDNN |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, config, ms, t in kiln:
        fl, _ = peers.get((name, "flash"), (None, ""))
        cu, _ = peers.get((name, "cudnn"), (None, ""))
        fmt = lambda x: "n/a" if x is None else f"{x:.1f}"
        ratio = lambda p: "n/a" if p is None else f"{t / p:.2f}x"
        print(f"| {name} | {config} | {ms:.3f} | {t:.1f} | {100 * t / ceiling:.1f}% | "
              f"{fmt(fl)} | {ratio(fl)} | {fmt(cu)} | {ratio(cu)} |")
    return returncode


if __name__ == "__main__":
    sys.exit(main())
