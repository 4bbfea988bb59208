#!/usr/bin/env python3
"""kiln_moe (routing + the routed experts' SwiGLU MLPs + combine) against PyTorch, H200.

Shapes of Qwen3-30B-A3B (hidden 2048, 128 experts of 768, 8 per token) and
Mixtral-8x7B (hidden 4096, 8 experts of 14336, 2 per token) at decode batches (1, 8, 64,
256 tokens) and a prefill chunk (2048 tokens, Qwen3 only), random router logits. Peers in the same
run, on the same tensors:
  loop     transformers' eager experts loop (the per-expert loop of GEMMs: for each
           chosen expert, gather its tokens, gate/up/down linears, index_add_)
  grouped  transformers 5's default `grouped_mm` experts (torch._grouped_mm), when the
           installed transformers has it
Kiln in both modes: pairs (one one-row GEMM per (token, expert) pair: what decode and
verify steps run) and grouped (pairs sorted by expert, M-row tiles: prefill and
extend), each inside a CUDA graph of CALLS calls (kiln_moe never syncs with the host); the
loop peer cannot be captured (it asks the host which experts were hit), so it is timed
with events around CALLS eager calls; grouped likewise. Bytes = the distinct experts'
weights the batch touches (3 matrices each) + x + out: the least any implementation must
read; TB/s over that and the % of a 4 GiB read ceiling measured in the same run. Kiln
reads each (token, expert) pair's weights on its own (one-row GEMMs): where tokens share
experts (large batches, few experts) it reads more than that and the % drops.
Writes OUT/bench-moe.json.

Usage: python3 bench/Moe/bench_moe.py --lib BUILD/lib/libkiln_runtime.so [--out DIR]
"""
import argparse
import ctypes
import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F

MODELS = {"qwen3-30b-a3b": dict(hidden=2048, inter=768, experts=128, top_k=8, flags=3,
                                tokens=[1, 8, 64, 256, 2048]),
          "mixtral-8x7b": dict(hidden=4096, inter=14336, experts=8, top_k=2, flags=1,
                               tokens=[1, 8, 64, 256, 2048])}
GROUPED = 4            # KILN_MOE_GROUPED
PAIRS_MAX_BYTES = 40e9  # the pairs mode reads an expert per pair: skip it beyond this
CALLS = 10


class MoeParams(ctypes.Structure):
    _fields_ = [("x", ctypes.c_void_p), ("logits", ctypes.c_void_p), ("gate", ctypes.c_void_p),
                ("up", ctypes.c_void_p), ("down", ctypes.c_void_p), ("out", ctypes.c_void_p),
                ("scratch", ctypes.c_void_p), ("tokens", ctypes.c_int64),
                ("hidden", ctypes.c_int64), ("inter", ctypes.c_int64),
                ("experts", ctypes.c_int64), ("top_k", ctypes.c_int32),
                ("flags", ctypes.c_int32), ("gemm", ctypes.c_void_p),
                ("gemm_workspace", ctypes.c_void_p), ("gemm_workspace_bytes", ctypes.c_size_t),
                ("stream", ctypes.c_void_p)]


def events_ms(fn, graph):
    """Median ms of one call: from a CUDA graph of CALLS calls, or CALLS eager calls."""
    fn()
    torch.cuda.synchronize()
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(CALLS):
                fn()
        run = g.replay
    else:
        def run():
            for _ in range(CALLS):
                fn()
    for _ in range(2):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / CALLS)
    return sorted(times)[len(times) // 2]


def read_ceiling():
    x = torch.ones(2 << 30, dtype=torch.bfloat16, device="cuda")
    return x.numel() * 2 / (events_ms(lambda: x.sum(dtype=torch.float32), True) * 1e-3)


def route(logits, top_k, flags):
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if flags & 1:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    if flags & 2:
        weights = weights.to(torch.bfloat16)
    return weights, ids


def loop_peer(x, logits, gate_up, down, top_k, flags):
    """transformers' eager experts forward (MixtralExperts / Qwen3MoeExperts)."""
    weights, ids = route(logits, top_k, flags)
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True)
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/kiln-bench-out/moe"))
    args = parser.parse_args()
    lib = ctypes.CDLL(args.lib)
    lib.kiln_moe.argtypes = [ctypes.POINTER(MoeParams)]
    lib.kiln_last_error.restype = ctypes.c_char_p
    lib.kiln_moe_scratch_bytes_per_token.argtypes = [
        ctypes.c_int64, ctypes.c_int64, ctypes.c_int32, ctypes.POINTER(ctypes.c_uint64)]
    gemm = ctypes.c_void_p()
    assert lib.kiln_gemm_create(ctypes.byref(gemm)) == 0
    workspace = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
    ceiling = read_ceiling()
    grouped = grouped_peer_fn()
    print(f"read ceiling {ceiling / 1e12:.3f} TB/s; grouped peer: "
          f"{'yes' if grouped else 'not in this transformers'}", flush=True)
    rows = []
    torch.manual_seed(0)
    for name, m in MODELS.items():
        H, I, E, K = m["hidden"], m["inter"], m["experts"], m["top_k"]
        gate = torch.randn(E, I, H, dtype=torch.bfloat16, device="cuda") * H ** -0.5
        up = torch.randn(E, I, H, dtype=torch.bfloat16, device="cuda") * H ** -0.5
        down = torch.randn(E, H, I, dtype=torch.bfloat16, device="cuda") * I ** -0.5
        gate_up = torch.cat([gate, up], dim=1)
        shim = ExpertsShim(gate_up, down)
        for T in m["tokens"]:
            x = torch.randn(T, H, dtype=torch.bfloat16, device="cuda")
            logits = torch.randn(T, E, dtype=torch.bfloat16, device="cuda")
            out = torch.empty_like(x)
            per = ctypes.c_uint64()
            assert lib.kiln_moe_scratch_bytes_per_token(H, I, K, ctypes.byref(per)) == 0
            scratch = torch.empty(T * per.value, dtype=torch.uint8, device="cuda")
            p = MoeParams(x.data_ptr(), logits.data_ptr(), gate.data_ptr(), up.data_ptr(),
                          down.data_ptr(), out.data_ptr(), scratch.data_ptr(), T, H, I, E, K,
                          m["flags"], gemm.value, workspace.data_ptr(), workspace.numel(),
                          torch.cuda.current_stream().cuda_stream)

            def kiln():
                p.stream = torch.cuda.current_stream().cuda_stream
                status = lib.kiln_moe(ctypes.byref(p))
                if status:
                    raise RuntimeError(lib.kiln_last_error().decode())

            ref = loop_peer(x, logits, gate_up, down, K, m["flags"])
            modes = {}
            if T * K * 3 * H * I * 2 <= PAIRS_MAX_BYTES:
                modes["pairs"] = m["flags"]
            if T * K >= 4 * E:
                modes["grouped"] = m["flags"] | GROUPED
            times, errs = {}, {}
            for mode, flags in modes.items():
                p.flags = flags
                times[mode] = events_ms(kiln, True)
                errs[mode] = float((out.float() - ref.float()).norm() / ref.float().norm())
            kiln_ms = min(times.values())
            err = max(errs.values())
            loop_ms = events_ms(lambda: loop_peer(x, logits, gate_up, down, K, m["flags"]),
                                False)
            grouped_ms = None
            if grouped:
                weights, ids = route(logits, K, m["flags"])
                try:
                    grouped_ms = events_ms(lambda: grouped(shim, x, ids, weights.to(x.dtype)),
                                           False)
                except Exception as error:
                    print(f"  grouped peer failed: {type(error).__name__}: {error}"[:200])
                    grouped = None
            distinct = int(torch.unique(route(logits, K, m["flags"])[1]).numel())
            bytes_ = distinct * 3 * H * I * 2 + 2 * T * H * 2
            row = {"model": name, "tokens": T, "distinct_experts": distinct,
                   "kiln_ms": kiln_ms, "kiln_modes_ms": times, "kiln_best_mode":
                   min(times, key=times.get), "loop_ms": loop_ms, "grouped_ms": grouped_ms,
                   "kiln_TBps": bytes_ / (kiln_ms * 1e-3) / 1e12,
                   "kiln_pct_ceiling": 100 * bytes_ / (kiln_ms * 1e-3) / ceiling,
                   "kiln_vs_loop": loop_ms / kiln_ms,
                   "kiln_vs_grouped": grouped_ms / kiln_ms if grouped_ms else None,
                   "rel_err_vs_loop": err}
            rows.append(row)
            modes_text = " ".join(f"{k} {v:.3f}" for k, v in times.items())
            print(f"{name} T={T:5d} experts hit {distinct:3d}: kiln [{modes_text}] best "
                  f"{kiln_ms:8.3f} ms "
                  f"{row['kiln_TBps']:.2f} TB/s ({row['kiln_pct_ceiling']:.0f}%), "
                  f"loop {loop_ms:8.3f} ms ({row['kiln_vs_loop']:.2f}x)"
                  + (f", grouped {grouped_ms:8.3f} ms ({row['kiln_vs_grouped']:.2f}x)"
                     if grouped_ms else "") + f"; rel err vs loop {err:.1e}", flush=True)
        del gate, up, down, gate_up, shim
        torch.cuda.empty_cache()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "bench-moe.json").write_text(
        json.dumps({"ceiling_TBps": ceiling / 1e12, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
