#!/usr/bin/env python3
"""kiln_moe (routing + the routed experts' SwiGLU MLPs + combine) against PyTorch, H100/H200.

Shapes of Qwen3-30B-A3B (hidden 2048, 128 experts of 768, 8 per token) and
Mixtral-8x7B (hidden 4096, 8 experts of 14336, 2 per token) at decode batches (1, 8, 64,
256 tokens) and a prefill chunk (2048 tokens), and DeepSeek-V3's routed experts (hidden
7168, 256 experts of moe_intermediate_size 2048, 8 per token) at 1, 64, 512 and 4096
tokens; random router logits (DeepSeek-V3: fp32 logits, sigmoid scores, top-8 normalized
and scaled by 2.5, no expert groups and no correction bias, so the random choices spread
over all 256 experts). Peers in the same run, on the same tensors:
  loop     transformers' eager experts loop (the per-expert loop of GEMMs: for each
           chosen expert, gather its tokens, gate/up/down linears, index_add_)
  grouped  transformers 5's default `grouped_mm` experts (torch._grouped_mm), when the
           installed transformers has it
  dense    the ceiling of the issue's target: a dense bf16 GEMM chain of the same FLOPs,
           [tokens x top_k, hidden] x [hidden, 2 x inter] then [tokens x top_k, inter] x
           [inter, hidden] (weights stored [out, in] as the experts'), in a CUDA graph
Kiln in its modes: pairs (one one-row GEMM per (token, expert) pair), invariant (a
token's bits independent of the batch, as in pairs, on Kiln's own grouped GEMM where it
runs: what decode and verify steps run) and grouped (pairs sorted by expert: prefill and
extend; on sm_90 Kiln's own grouped GEMM, and as "grouped-cublaslt" the same layer on
cuBLASLt's pointer-array GEMM over padded M-row tiles, compared in the same run), each
inside a CUDA graph of CALLS calls (kiln_moe never syncs with the host); the
loop peer cannot be captured (it asks the host which experts were hit), so it is timed
with events around CALLS eager calls (3 single calls when that would pass LOOP_BUDGET_S,
skipped when even those would); grouped likewise. Bytes = the distinct experts'
weights the batch touches (3 matrices each) + x + out: the least any implementation must
read; TB/s over that and the % of a 4 GiB read ceiling measured in the same run. Kiln
reads each (token, expert) pair's weights on its own (one-row GEMMs): where tokens share
experts (large batches, few experts) it reads more than that and the % drops.
FLOPs = 2 x tokens x top_k x 3 x hidden x inter (the expert GEMMs); Kiln's TFLOP/s over
the dense chain's is the issue's ratio (target: DeepSeek-V3 at 4096 tokens >= 0.7). The
memory floor (those bytes at the read ceiling) bounds Kiln's time from below, so
dense ms / floor ms is the largest ratio this card allows any implementation.
Writes OUT/bench-moe.json.

Usage: python3 bench/Moe/bench_moe.py --lib BUILD/lib/libkiln_runtime.so [--out DIR]
           [--models NAME ...]
"""
import argparse
import ctypes
import gc
import json
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

# kiln_moe flags (include/kiln/Kernels/Moe.h).
NORMALIZE_TOP_K = 1    # KILN_MOE_NORMALIZE_TOP_K
ROUND_WEIGHTS = 2      # KILN_MOE_ROUND_WEIGHTS
GROUPED = 4            # KILN_MOE_GROUPED
LIBRARY_GEMM = 128     # KILN_MOE_LIBRARY_GEMM
SIGMOID = 8            # KILN_MOE_SIGMOID
F32_LOGITS = 16        # KILN_MOE_F32_LOGITS
ROW_INVARIANT = 256    # KILN_MOE_ROW_INVARIANT

# scale: the routed scaling factor (1 = none); target: (tokens, least Kiln / dense ratio).
MODELS = {"qwen3-30b-a3b": dict(hidden=2048, inter=768, experts=128, top_k=8,
                                flags=NORMALIZE_TOP_K | ROUND_WEIGHTS, scale=1.0,
                                tokens=[1, 8, 64, 256, 2048]),
          "mixtral-8x7b": dict(hidden=4096, inter=14336, experts=8, top_k=2,
                               flags=NORMALIZE_TOP_K, scale=1.0,
                               tokens=[1, 8, 64, 256, 2048]),
          "deepseek-v3": dict(hidden=7168, inter=2048, experts=256, top_k=8,
                              flags=NORMALIZE_TOP_K | SIGMOID | F32_LOGITS, scale=2.5,
                              tokens=[1, 64, 512, 4096], target=(4096, 0.7))}
PAIRS_MAX_BYTES = 40e9  # the pairs mode reads an expert per pair: skip it beyond this
CALLS = 10
LOOP_BUDGET_S = 20.0    # the eager loop peer's timing may take this long per shape
LOOP_CAPPED_REPS = 3    # single calls timed when CALLS x 9 of them would pass the budget


class MoeParams(ctypes.Structure):
    """kiln_moe_params_t of include/kiln/Kernels/Moe.h, field for field (184 bytes)."""
    _fields_ = [("x", ctypes.c_void_p), ("logits", ctypes.c_void_p), ("gate", ctypes.c_void_p),
                ("up", ctypes.c_void_p), ("down", ctypes.c_void_p),
                ("score_bias", ctypes.c_void_p), ("gate_bias", ctypes.c_void_p),
                ("up_bias", ctypes.c_void_p), ("down_bias", ctypes.c_void_p),
                ("out", ctypes.c_void_p),
                ("scratch", ctypes.c_void_p), ("tokens", ctypes.c_int64),
                ("hidden", ctypes.c_int64), ("inter", ctypes.c_int64),
                ("experts", ctypes.c_int64), ("top_k", ctypes.c_int32),
                ("flags", ctypes.c_int32), ("groups", ctypes.c_int32),
                ("top_groups", ctypes.c_int32), ("scale", ctypes.c_float),
                ("activation", ctypes.c_int32), ("glu_alpha", ctypes.c_float),
                ("glu_limit", ctypes.c_float), ("gemm", ctypes.c_void_p),
                ("gemm_workspace", ctypes.c_void_p), ("gemm_workspace_bytes", ctypes.c_size_t),
                ("stream", ctypes.c_void_p)]


def events_ms(fn, graph, calls=CALLS, reps=7, warm=2):
    """Median ms of one call: from a CUDA graph of `calls` calls, or `calls` eager calls,
    timed `reps` times after `warm` untimed runs (and one call before them)."""
    fn()
    torch.cuda.synchronize()
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                fn()
        run = g.replay
    else:
        def run():
            for _ in range(calls):
                fn()
    for _ in range(warm):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[len(times) // 2]


def read_ceiling():
    x = torch.ones(2 << 30, dtype=torch.bfloat16, device="cuda")
    return x.numel() * 2 / (events_ms(lambda: x.sum(dtype=torch.float32), True) * 1e-3)


def randn(*shape, std=1.0, dtype=torch.bfloat16, generator=None):
    """N(0, std^2) on the GPU, scaled in place (no second tensor of the size)."""
    return torch.randn(*shape, dtype=dtype, device="cuda", generator=generator).mul_(std)


def route(logits, top_k, flags, scale=1.0):
    logits = logits.float()
    probs = torch.sigmoid(logits) if flags & SIGMOID else torch.softmax(logits, dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if flags & NORMALIZE_TOP_K:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    if scale != 1.0:
        weights = weights * scale
    if flags & ROUND_WEIGHTS:
        weights = weights.to(torch.bfloat16)
    return weights, ids


def loop_peer(x, logits, gate_up, down, top_k, flags, scale=1.0):
    """transformers' eager experts forward (MixtralExperts / Qwen3MoeExperts /
    DeepseekV3NaiveMoe)."""
    weights, ids = route(logits, top_k, flags, scale)
    out = torch.zeros_like(x)
    mask = F.one_hot(ids, num_classes=gate_up.shape[0]).permute(2, 1, 0)
    hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    for e in hit:
        e = e[0]
        pos, tok = torch.where(mask[e])
        g, u = F.linear(x[tok], gate_up[e]).chunk(2, dim=-1)
        y = F.linear(F.silu(g) * u, down[e]) * weights[tok, pos, None]
        out.index_add_(0, tok, y.to(out.dtype))
    return out


def time_loop(fn):
    """(ms, how) for the eager loop peer within LOOP_BUDGET_S: CALLS x 9 calls as the
    other timings when they fit, else LOOP_CAPPED_REPS single calls, else none. The
    caller has run fn once already (its warm-up)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one_s = time.perf_counter() - start
    if one_s * (1 + 9 * CALLS) <= LOOP_BUDGET_S:
        return events_ms(fn, False), "full"
    if one_s * (1 + LOOP_CAPPED_REPS) <= LOOP_BUDGET_S:
        return (events_ms(fn, False, calls=1, reps=LOOP_CAPPED_REPS, warm=0),
                f"{LOOP_CAPPED_REPS} single calls")
    return None, f"skipped (one call {one_s:.1f} s)"


def dense_chain_ms(rows, hidden, inter):
    """The target's ceiling: the expert GEMMs' FLOPs as one dense bf16 GEMM chain,
    [rows, hidden] x [hidden, 2 inter] (gate and up) then [rows, inter] x [inter, hidden]
    (down), weights stored [out, in] like the experts', in a CUDA graph. Its own random
    generator, so the experts' tensors and logits stay those of seed 0."""
    rng = torch.Generator(device="cuda")
    rng.manual_seed(1)
    a = randn(rows, hidden, generator=rng)
    w1 = randn(2 * inter, hidden, std=hidden ** -0.5, generator=rng)
    act = randn(rows, inter, generator=rng)
    w2 = randn(hidden, inter, std=inter ** -0.5, generator=rng)
    h = torch.empty(rows, 2 * inter, dtype=torch.bfloat16, device="cuda")
    y = torch.empty(rows, hidden, dtype=torch.bfloat16, device="cuda")

    def chain():
        torch.matmul(a, w1.t(), out=h)
        torch.matmul(act, w2.t(), out=y)
    return events_ms(chain, True)


def grouped_peer_fn():
    try:
        from transformers.integrations.moe import grouped_mm_experts_forward
    except Exception:
        return None
    return grouped_mm_experts_forward


class ExpertsShim(torch.nn.Module):
    """What transformers' experts functions read from `self`."""

    def __init__(self, gate_up, down):
        super().__init__()
        self.gate_up_proj, self.down_proj = gate_up, down
        self.num_experts = gate_up.shape[0]
        self.act_fn = F.silu
        self.has_gate, self.has_bias, self.is_transposed, self.is_concatenated = \
            True, False, False, True

    def _apply_gate(self, gate_up):
        g, u = gate_up.chunk(2, dim=-1)
        return F.silu(g) * u


def kernel_breakdown(fn, calls=5):
    """Where one call's GPU time goes: (kernel name, ms a call) for every kernel fn
    launches, largest first, from the PyTorch profiler's CUDA activity over `calls`
    eager calls."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows = []
    for item in prof.key_averages():
        us = getattr(item, "device_time_total", None)
        if us is None:
            us = getattr(item, "cuda_time_total", 0)
        if us > 0:
            rows.append((item.key, us / 1e3 / calls))
    return sorted(rows, key=lambda r: -r[1])


def bench_tokens(lib, gemm, workspace, ceiling, peers, name, m, weights, T):
    """One (model, tokens) row: Kiln's modes, the peers, the dense chain."""
    H, I, E, K, flags, scale = (m["hidden"], m["inter"], m["experts"], m["top_k"],
                                m["flags"], m["scale"])
    gate, up, down, gate_up, shim = weights
    x = randn(T, H)
    logits = randn(T, E, dtype=torch.float32 if flags & F32_LOGITS else torch.bfloat16)
    out = torch.empty_like(x)
    per = ctypes.c_uint64()
    assert lib.kiln_moe_scratch_bytes_per_token(H, I, K, ctypes.byref(per)) == 0
    scratch = torch.empty(T * per.value, dtype=torch.uint8, device="cuda")
    p = MoeParams(x=x.data_ptr(), logits=logits.data_ptr(), gate=gate.data_ptr(),
                  up=up.data_ptr(), down=down.data_ptr(), score_bias=None,
                  out=out.data_ptr(), scratch=scratch.data_ptr(), tokens=T, hidden=H,
                  inter=I, experts=E, top_k=K, flags=flags, groups=0, top_groups=0,
                  scale=scale, activation=0, gemm=gemm.value,
                  gemm_workspace=workspace.data_ptr(),
                  gemm_workspace_bytes=workspace.numel(),
                  stream=torch.cuda.current_stream().cuda_stream)

    def kiln():
        p.stream = torch.cuda.current_stream().cuda_stream
        status = lib.kiln_moe(ctypes.byref(p))
        if status:
            raise RuntimeError(lib.kiln_last_error().decode())

    ref = loop_peer(x, logits, gate_up, down, K, flags, scale)
    modes = {}
    if T * K * 3 * H * I * 2 <= PAIRS_MAX_BYTES:
        modes["pairs"] = flags
    modes["invariant"] = flags | ROW_INVARIANT
    if T * K >= 4 * E:
        modes["grouped"] = flags | GROUPED
        # The same grouped layer with its GEMMs on cuBLASLt (where the own grouped GEMM
        # runs, i.e. sm_90 and hidden, inter multiples of 128: the two compared).
        modes["grouped-cublaslt"] = flags | GROUPED | LIBRARY_GEMM
    times, errs = {}, {}
    for mode, mode_flags in modes.items():
        p.flags = mode_flags
        times[mode] = events_ms(kiln, True)
        errs[mode] = float((out.float() - ref.float()).norm() / ref.float().norm())
    kiln_ms = min(times.values())
    err = max(errs.values())
    breakdown = None
    target = m.get("target")
    # Where the time goes: the grouped mode at the target's tokens, and at one token the
    # invariant mode against the pairs mode (a batch-1 decode step).
    explain = []
    if target and target[0] == T and "grouped" in modes:
        explain = ["grouped"]
    elif T == 1 and "pairs" in modes:
        explain = ["invariant", "pairs"]
    for mode in explain:
        p.flags = modes[mode]
        rows = kernel_breakdown(kiln)
        total = sum(ms for _, ms in rows)
        print(f"{name} T={T}: {mode} mode's kernels (profiler, eager calls; {total:.3f} ms "
              f"of kernel time a call):")
        for kernel, ms in rows[:8]:
            print(f"    {ms:8.3f} ms {100 * ms / total:5.1f}%  {kernel[:90]}")
        if mode == "grouped":
            breakdown = rows
    loop_ms, loop_how = time_loop(lambda: loop_peer(x, logits, gate_up, down, K, flags, scale))
    grouped_ms = None
    if peers["grouped"]:
        top_weights, ids = route(logits, K, flags, scale)
        try:
            grouped_ms = events_ms(
                lambda: peers["grouped"](shim, x, ids, top_weights.to(x.dtype)), False)
        except Exception as error:
            print(f"  grouped peer failed: {type(error).__name__}: {error}"[:200])
            peers["grouped"] = None
    dense_ms = dense_chain_ms(T * K, H, I)
    distinct = int(torch.unique(route(logits, K, flags, scale)[1]).numel())
    bytes_ = distinct * 3 * H * I * 2 + 2 * T * H * 2
    flops = 2 * T * K * 3 * H * I
    floor_ms = bytes_ / ceiling * 1e3
    target_ratio = target[1] if target and target[0] == T else None
    row = {"model": name, "tokens": T, "hidden": H, "inter": I, "experts": E, "top_k": K,
           "distinct_experts": distinct,
           "kiln_ms": kiln_ms, "kiln_modes_ms": times, "kiln_best_mode":
           min(times, key=times.get), "loop_ms": loop_ms, "loop_timing": loop_how,
           "grouped_ms": grouped_ms,
           "kiln_TBps": bytes_ / (kiln_ms * 1e-3) / 1e12,
           "kiln_pct_ceiling": 100 * bytes_ / (kiln_ms * 1e-3) / ceiling,
           "kiln_vs_loop": loop_ms / kiln_ms if loop_ms else None,
           "kiln_vs_grouped": grouped_ms / kiln_ms if grouped_ms else None,
           "rel_err_vs_loop": err,
           "flops": flops,
           "kiln_TFLOPs": flops / (kiln_ms * 1e-3) / 1e12,
           "dense_ms": dense_ms,
           "dense_TFLOPs": flops / (dense_ms * 1e-3) / 1e12,
           "kiln_vs_dense": dense_ms / kiln_ms,
           "mem_floor_ms": floor_ms,
           "mem_floor_vs_dense": dense_ms / floor_ms,
           "target_vs_dense": target_ratio,
           "grouped_kernels_ms": breakdown,
           "meets_target": dense_ms / kiln_ms >= target_ratio if target_ratio else None}
    modes_text = " ".join(f"{k} {v:.3f}" for k, v in times.items())
    loop_text = (f"loop {loop_ms:8.3f} ms ({row['kiln_vs_loop']:.2f}x"
                 + (f", {loop_how})" if loop_how != "full" else ")")
                 if loop_ms else f"loop {loop_how}")
    print(f"{name} T={T:5d} experts hit {distinct:3d}: kiln [{modes_text}] best "
          f"{kiln_ms:8.3f} ms "
          f"{row['kiln_TBps']:.2f} TB/s ({row['kiln_pct_ceiling']:.0f}%), {loop_text}"
          + (f", grouped {grouped_ms:8.3f} ms ({row['kiln_vs_grouped']:.2f}x)"
             if grouped_ms else "") + f"; rel err vs loop {err:.1e}", flush=True)
    print(f"    {row['kiln_TFLOPs']:7.1f} TFLOP/s = {row['kiln_vs_dense']:.2f} of the dense "
          f"chain's {row['dense_TFLOPs']:.1f} ({dense_ms:.3f} ms); memory floor "
          f"{floor_ms:.3f} ms ({bytes_ / 1e9:.2f} GB at the read ceiling) allows <= "
          f"{row['mem_floor_vs_dense']:.2f} of dense"
          + (" (memory is not the limit)" if row["mem_floor_vs_dense"] > 1 else ""),
          flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True)
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/kiln-bench-out/moe"))
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS),
                        help="the shapes to run (default: all)")
    args = parser.parse_args()
    lib = ctypes.CDLL(args.lib)
    lib.kiln_moe.argtypes = [ctypes.POINTER(MoeParams)]
    lib.kiln_last_error.restype = ctypes.c_char_p
    lib.kiln_moe_scratch_bytes_per_token.argtypes = [
        ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, ctypes.POINTER(ctypes.c_uint64)]
    gemm = ctypes.c_void_p()
    assert lib.kiln_gemm_create(ctypes.byref(gemm)) == 0
    assert lib.kiln_moe_prepare() == 0  # the invariant mode is captured in graphs
    workspace = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
    device = torch.cuda.get_device_name()
    ceiling = read_ceiling()
    torch.cuda.empty_cache()  # the ceiling's 4 GiB
    peers = {"grouped": grouped_peer_fn()}
    print(f"{device}: read ceiling {ceiling / 1e12:.3f} TB/s; grouped peer: "
          f"{'yes' if peers['grouped'] else 'not in this transformers'}", flush=True)
    rows = []
    torch.manual_seed(0)
    for name in args.models:
        m = MODELS[name]
        H, I, E = m["hidden"], m["inter"], m["experts"]
        gate = randn(E, I, H, std=H ** -0.5)
        up = randn(E, I, H, std=H ** -0.5)
        down = randn(E, H, I, std=I ** -0.5)
        gate_up = torch.cat([gate, up], dim=1)  # the peers' fused layout
        weights = (gate, up, down, gate_up, ExpertsShim(gate_up, down))
        for T in m["tokens"]:
            rows.append(bench_tokens(lib, gemm, workspace, ceiling, peers, name, m, weights, T))
            gc.collect()
            torch.cuda.empty_cache()
        # DeepSeek-V3's experts are 22.5 GB (37.5 GB with the peers' gate_up): free them.
        del gate, up, down, gate_up, weights
        gc.collect()
        torch.cuda.empty_cache()
    for row in rows:
        if row["target_vs_dense"]:
            print(f"target {row['model']} T={row['tokens']}: Kiln {row['kiln_TFLOPs']:.1f} "
                  f"TFLOP/s / dense {row['dense_TFLOPs']:.1f} TFLOP/s = "
                  f"{row['kiln_vs_dense']:.2f} (target >= {row['target_vs_dense']:.2f}: "
                  f"{'met' if row['meets_target'] else 'not met'}); reading the "
                  f"{row['distinct_experts']} experts once at the read ceiling allows <= "
                  f"{row['mem_floor_vs_dense']:.2f} on this {device}", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "bench-moe.json").write_text(
        json.dumps({"device": device, "ceiling_TBps": ceiling / 1e12, "rows": rows},
                   indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
