#!/usr/bin/env python3
"""Kiln's cuBLASLt GEMM (both policies) against torch.nn.functional.linear, H200.

Llama-3.1-8B's linear layers (q, k/v, o, gate/up, down, lm_head) at the row counts of
decode (1, 16, 64), a verify step (80 = 16 x 5) and prefill (4096). Through the C ABI
of libkiln_runtime.so (ctypes), each case captured in a CUDA graph of 20 calls that
rotate over enough weight copies to leave the 60 MiB L2, so host overhead and cache
reuse stay out. Prints per case the achieved TB/s (weights + x + out bytes) and
TFLOP/s, the % of the ceilings measured in the same run (a 4 GiB reduction for reads,
bf16 8192^3 matmul for FLOPs), and the ratio to torch (its cuBLAS heuristic).
  row_invariant  Kiln's default: one split-K-free algorithm (lossless speculation)
  heuristic      cuBLASLt's choice per shape (split-K allowed)
  skinny_mma     the skinny GEMM of batch-1 models on tensor cores (kiln_gemm_set_skinny;
                 m <= 64, the default invariant rows). The 20 calls of a graph follow one
                 another as a step's GEMMs do, so its programmatic dependent launch
                 overlaps each call with the end of the one before, as in a step.
  skinny_fma     the same on CUDA cores.
Then the pinned sweep: a handle kept invariant up to 320 rows (a model of batch 64 with
4 drafts; the runtime's max_batch x (1 + drafts)) with its one algorithm a shape picked
for PIN rows (kiln_gemm_set_pin_rows: 64, the default, 128, 256, 320), timed at m 1, 16,
64, 256 and 320, and the sum over one Llama-8B layer's seven projections at each m:
which pinned choice a model's decode batches want (batch 1 against batch 256).
Writes OUT/bench-gemm.json.

Usage: python3 bench/Gemm/bench_gemm.py --lib BUILD/lib/libkiln_runtime.so [--out DIR]
"""
import argparse
import ctypes
import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F

SHAPES = {"q_proj": (4096, 4096), "kv_proj": (1024, 4096), "o_proj": (4096, 4096),
          "gate_up": (14336, 4096), "down_proj": (4096, 14336), "lm_head": (128256, 4096)}
ROWS = [1, 16, 64, 80, 4096]
CALLS = 20
# name: (kiln_gemm_policy_t, kiln_gemm_set_skinny)
POLICIES = {"row_invariant": (0, 0), "heuristic": (1, 0), "skinny_mma": (0, 1),
            "skinny_fma": (0, 2)}
SKINNY_MAX_M = 64
SWEEP_INVARIANT_ROWS = 320
SWEEP_PIN_ROWS = [64, 128, 256, 320]
SWEEP_M = [1, 16, 64, 256, 320]
# One decoder layer's projections: q, k, v, o, gate, up, down.
LAYER = {"q_proj": 1, "kv_proj": 2, "o_proj": 1, "gate_up": 2, "down_proj": 1}


def graph_ms(fn):
    """Median ms of one call of fn, from a CUDA graph of CALLS calls."""
    fn(0)  # plans and allocations outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(CALLS):
            fn(i)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / CALLS)
    return sorted(times)[len(times) // 2]


def read_ceiling():
    x = torch.ones(2 << 30, dtype=torch.bfloat16, device="cuda")
    ms = graph_ms(lambda i: x.sum(dtype=torch.float32))
    return x.numel() * 2 / (ms * 1e-3)


def flop_ceiling():
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    ms = graph_ms(lambda i: torch.matmul(a, a))
    return 2 * 8192 ** 3 / (ms * 1e-3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp")))
    args = parser.parse_args()
    lib = ctypes.CDLL(str(args.lib))
    lib.kiln_last_error.restype = ctypes.c_char_p
    handle = ctypes.c_void_p()
    assert lib.kiln_gemm_create(ctypes.byref(handle)) == 0
    workspace = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
    read, flops = read_ceiling(), flop_ceiling()
    print(f"ceilings: read {read / 1e12:.2f} TB/s, bf16 matmul {flops / 1e12:.0f} TFLOP/s")
    print(f"{'layer':<10}{'m':>6}{'policy':>15}{'ms':>9}{'TB/s':>7}{'%read':>7}"
          f"{'TFLOP/s':>9}{'%mma':>6}{'torch ms':>10}{'x torch':>9}")
    rows = []
    for name, (n, k) in SHAPES.items():
        weight_bytes = n * k * 2
        copies = max(1, -(-(256 << 20) // weight_bytes))
        weights = [torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02
                   for _ in range(copies)]
        for m in ROWS:
            x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
            out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            torch_ms = graph_ms(lambda i: F.linear(x, weights[i % copies]))
            moved = weight_bytes + (m * k + m * n) * 2
            for policy, (code, skinny) in POLICIES.items():
                if skinny and m > SKINNY_MAX_M:
                    continue
                checked(lib, lib.kiln_gemm_set_policy(handle, code), "set_policy")
                checked(lib, lib.kiln_gemm_set_skinny(handle, skinny), "set_skinny")
                ms = kiln_gemm_ms(lib, handle, workspace, x, weights, out)
                row = {"layer": name, "m": m, "n": n, "k": k, "policy": policy, "ms": ms,
                       "tb_s": moved / (ms * 1e-3) / 1e12,
                       "tflop_s": 2 * m * n * k / (ms * 1e-3) / 1e12, "torch_ms": torch_ms}
                row["pct_read"] = 100 * row["tb_s"] * 1e12 / read
                row["pct_mma"] = 100 * row["tflop_s"] * 1e12 / flops
                rows.append(row)
                print(f"{name:<10}{m:>6}{policy:>15}{ms:>9.4f}{row['tb_s']:>7.2f}"
                      f"{row['pct_read']:>7.1f}{row['tflop_s']:>9.1f}{row['pct_mma']:>6.1f}"
                      f"{torch_ms:>10.4f}{torch_ms / ms:>9.2f}", flush=True)
        del weights
        torch.cuda.empty_cache()
    summary = {"read_bytes_per_s": read, "matmul_flops_per_s": flops, "rows": rows,
               "gpu": torch.cuda.get_device_name()}
    args.out.mkdir(parents=True, exist_ok=True)
    write = lambda: (args.out / "bench-gemm.json").write_text(  # noqa: E731
        json.dumps(summary, indent=1) + "\n")
    write()  # the policies' table survives a failing sweep
    summary["pinned_sweep"] = pinned_sweep(lib, handle, workspace, read, flops)
    lib.kiln_gemm_destroy(handle)
    write()


def checked(lib, status, what):
    """Raises with Kiln's message when a kiln_* call did not return KILN_OK."""
    if status != 0:
        raise RuntimeError(f"{what}: {lib.kiln_last_error().decode()}")


def kiln_gemm_ms(lib, handle, workspace, x, weights, out):
    """Graph-timed ms of one kiln_gemm_bf16 call, rotating over the weight copies."""
    m, k = x.shape
    n = out.shape[1]

    def call(i):
        status = lib.kiln_gemm_bf16(
            handle, ctypes.c_void_p(x.data_ptr()),
            ctypes.c_void_p(weights[i % len(weights)].data_ptr()), None,
            ctypes.c_void_p(out.data_ptr()), ctypes.c_int64(m), ctypes.c_int64(n),
            ctypes.c_int64(k), ctypes.c_void_p(workspace.data_ptr()),
            ctypes.c_size_t(workspace.numel()),
            ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if status != 0:
            raise RuntimeError(lib.kiln_last_error().decode())

    return graph_ms(call)


def pinned_sweep(lib, handle, workspace, read, flops):
    """Each pinned choice of the row-invariant policy at the decode and verify m."""
    checked(lib, lib.kiln_gemm_set_policy(handle, POLICIES["row_invariant"][0]), "set_policy")
    checked(lib, lib.kiln_gemm_set_skinny(handle, 0), "set_skinny")
    checked(lib, lib.kiln_gemm_set_invariant_rows(handle, ctypes.c_int64(SWEEP_INVARIANT_ROWS)),
            "set_invariant_rows")
    print(f"\npinned sweep: invariant rows {SWEEP_INVARIANT_ROWS}; ms a call (% of the read "
          "ceiling, % of the matmul rate)")
    print(f"{'layer':<10}{'pin':>5}" + "".join(f"{'m ' + str(m):>22}" for m in SWEEP_M))
    results, layer_ms = [], {pin: {m: 0.0 for m in SWEEP_M} for pin in SWEEP_PIN_ROWS}
    for name, count in LAYER.items():
        n, k = SHAPES[name]
        copies = max(1, -(-(256 << 20) // (n * k * 2)))
        weights = [torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02
                   for _ in range(copies)]
        x = torch.randn(max(SWEEP_M), k, dtype=torch.bfloat16, device="cuda")
        out = torch.empty(max(SWEEP_M), n, dtype=torch.bfloat16, device="cuda")
        for pin in SWEEP_PIN_ROWS:
            checked(lib, lib.kiln_gemm_set_pin_rows(handle, ctypes.c_int64(pin)), "set_pin_rows")
            cells = []
            for m in SWEEP_M:
                try:  # a choice may not run every m: recorded, the sweep goes on
                    ms = kiln_gemm_ms(lib, handle, workspace, x[:m], weights, out[:m])
                except RuntimeError as error:
                    results.append({"layer": name, "pin_rows": pin, "m": m,
                                    "error": str(error)})
                    layer_ms[pin][m] = float("inf")
                    cells.append("failed")
                    continue
                moved = n * k * 2 + (m * k + m * n) * 2
                pct_read = 100 * moved / (ms * 1e-3) / read
                pct_mma = 100 * 2 * m * n * k / (ms * 1e-3) / flops
                layer_ms[pin][m] += count * ms
                results.append({"layer": name, "n": n, "k": k, "pin_rows": pin, "m": m,
                                "ms": ms, "pct_read": pct_read, "pct_mma": pct_mma})
                cells.append(f"{ms:8.4f} ({pct_read:4.0f}%,{pct_mma:4.0f}%)")
            print(f"{name:<10}{pin:>5}" + "".join(f"{c:>22}" for c in cells), flush=True)
        del weights
        torch.cuda.empty_cache()
    print("one layer's seven projections, ms (and against the best pin at that m):")
    best = {m: min(layer_ms[pin][m] for pin in SWEEP_PIN_ROWS) or 1.0 for m in SWEEP_M}
    for pin in SWEEP_PIN_ROWS:
        cells = [f"{layer_ms[pin][m]:8.4f} ({layer_ms[pin][m] / best[m]:4.2f}x)" for m in SWEEP_M]
        print(f"{'layer':<10}{pin:>5}" + "".join(f"{c:>22}" for c in cells), flush=True)
    return {"invariant_rows": SWEEP_INVARIANT_ROWS, "rows": results,
            "layer_ms": {str(pin): layer_ms[pin] for pin in SWEEP_PIN_ROWS}}


if __name__ == "__main__":
    main()
