#!/usr/bin/env python3
"""Kiln's kernels against PyTorch's on identical inputs (GPU machine, a diagnostic).

The whole-model parity test finds Kiln's first-step logits bitwise equal to
transformers' when attention is switched off, and farther from fp32 than
transformers' own bf16 when it is on (test/Parity/diagnose.py). This script measures
the pieces on their own, through the C ABI of libkiln_runtime.so (ctypes):
  attention  kiln_prefill_fmha (each variant) and torch SDPA (flash, bf16) against
             fp32 math SDPA, causal, GQA, per sequence length; one sequence alone
             and the same sequence packed among others (varlen);
  rope       kiln_rope_bf16 against transformers' LlamaRotaryEmbedding +
             apply_rotary_pos_emb (llama3 scaling), bitwise, positions 0..4095;
  gemm       kiln_gemm_bf16 against torch.nn.functional.linear, bitwise, per row count.
Prints one line per case and writes OUT/kernel-parity.json.

Usage: python3 test/Parity/kernel_parity.py --lib BUILD/lib/libkiln_runtime.so --out OUT
"""
import argparse
import ctypes
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

BF16 = 0  # KILN_DTYPE_BF16


class PrefillParams(ctypes.Structure):
    """kiln_prefill_fmha_params_t (include/kiln/Kernels/Prefill.h)."""
    _fields_ = [("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                ("out", ctypes.c_void_p), ("cu_seqlens_q", ctypes.c_void_p),
                ("cu_seqlens_k", ctypes.c_void_p)] + \
               [(name, ctypes.c_int64) for name in (
                   "q_token_stride", "q_head_stride", "k_token_stride", "k_head_stride",
                   "v_token_stride", "v_head_stride", "out_token_stride", "out_head_stride")] + \
               [(name, ctypes.c_int32) for name in (
                   "batch", "total_q", "total_k", "max_seqlen_q", "q_heads", "kv_heads",
                   "head_dim", "dtype")] + \
               [("softmax_scale", ctypes.c_float), ("causal", ctypes.c_int32),
                ("stream", ctypes.c_void_p), ("window", ctypes.c_int32),
                ("sinks", ctypes.c_void_p), ("v_head_dim", ctypes.c_int32)]


class RopeParams(ctypes.Structure):
    """kiln_rope_params_t (include/kiln/Kernels/Graph.h)."""
    _fields_ = [("type", ctypes.c_int32), ("theta", ctypes.c_float),
                ("factor", ctypes.c_float), ("low", ctypes.c_float), ("high", ctypes.c_float),
                ("original_max_position", ctypes.c_int64),
                ("attention_factor", ctypes.c_float)]


def check(lib, status, what):
    if status != 0:
        raise RuntimeError(f"{what}: status {status}: {lib.kiln_last_error().decode()}")


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def kiln_attention(lib, q, k, v, lens, variant):
    """Packed varlen causal attention of sequences of `lens` tokens."""
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32,
                      device="cuda")
    out = torch.full_like(q, float("nan"))
    p = PrefillParams()
    p.q, p.k, p.v, p.out = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
    p.cu_seqlens_q = p.cu_seqlens_k = cu.data_ptr()
    p.batch, p.total_q, p.total_k = len(lens), q.shape[0], k.shape[0]
    p.max_seqlen_q = max(lens)
    p.q_heads, p.kv_heads, p.head_dim = q.shape[1], k.shape[1], q.shape[2]
    p.dtype = BF16
    p.softmax_scale = 1.0 / math.sqrt(q.shape[2])
    p.causal = 1
    check(lib, lib.kiln_prefill_fmha_variant(ctypes.byref(p), variant), "kiln_prefill_fmha")
    torch.cuda.synchronize()
    return out


def torch_attention(q, k, v, backend, dtype):
    """One sequence [L, H, D] through SDPA on `backend`, causal, GQA."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    qh, kh, vh = (t.transpose(0, 1).unsqueeze(0).to(dtype) for t in (q, k, v))
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, enable_gqa=True)
    return out[0].transpose(0, 1)


def attention_cases(lib, results):
    from torch.nn.attention import SDPBackend
    gen = torch.Generator(device="cuda").manual_seed(1)
    heads, kv_heads, dim = 4, 1, 128
    lengths = [5, 17, 48, 64, 96, 130, 512, 2048]
    for length, sharpness in [(n, 1.0) for n in lengths] + [(n, 4.0) for n in (96, 130, 512)]:
        q, k, v = (torch.randn(length, h, dim, generator=gen, device="cuda").to(torch.bfloat16)
                   for h in (heads, kv_heads, kv_heads))
        q = (q.float() * sharpness).to(torch.bfloat16)  # larger scores: a peakier softmax
        exact = torch_attention(q, k, v, SDPBackend.MATH, torch.float32)
        row = {"length": length, "q_scale": sharpness,
               "flash": rel(torch_attention(q, k, v, SDPBackend.FLASH_ATTENTION,
                                            torch.bfloat16), exact),
               "eager_bf16": rel(torch_attention(q, k, v, SDPBackend.MATH, torch.bfloat16),
                                 exact)}
        for name, variant in (("kiln_sm90", 2), ("kiln_sm80", 1)):
            row[name] = rel(kiln_attention(lib, q, k, v, [length], variant), exact)
        # The same sequence third of three, packed (varlen): must give the same bits.
        pad = [torch.randn(n, h, dim, generator=gen, device="cuda").to(torch.bfloat16)
               for n, h in ((7, heads), (7, kv_heads), (7, kv_heads))]
        packed = kiln_attention(lib, torch.cat([pad[0], pad[0], q]),
                                torch.cat([pad[1], pad[1], k]), torch.cat([pad[2], pad[2], v]),
                                [7, 7, length], 2)[14:]
        alone = kiln_attention(lib, q, k, v, [length], 2)
        row["packed_equals_alone"] = bool(torch.equal(packed, alone))
        results.append(row)
        print(f"attention L={length:5d} q x{sharpness:g}  rel err vs fp32: flash {row['flash']:.2e}  "
              f"eager-bf16 {row['eager_bf16']:.2e}  kiln-sm90 {row['kiln_sm90']:.2e}  "
              f"kiln-sm80 {row['kiln_sm80']:.2e}  packed==alone {row['packed_equals_alone']}",
              flush=True)


def rope_case(lib, results):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import (LlamaRotaryEmbedding,
                                                          apply_rotary_pos_emb)
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    config = LlamaConfig(hidden_size=512, num_attention_heads=4, num_key_value_heads=1,
                         head_dim=128, rope_theta=500000.0, rope_scaling=scaling,
                         max_position_embeddings=131072)
    rotary = LlamaRotaryEmbedding(config=config, device="cuda")
    tokens, heads, dim = 4096, 4, 128
    gen = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(tokens, heads, dim, generator=gen, device="cuda").to(torch.bfloat16)
    positions = torch.arange(tokens, device="cuda")
    cos, sin = rotary(x, positions[None])
    want, _ = apply_rotary_pos_emb(x.transpose(0, 1)[None], x.transpose(0, 1)[None], cos, sin)
    want = want[0].transpose(0, 1)
    p = RopeParams(2, 500000.0, 8.0, 1.0, 4.0, 8192, 1.0)
    got = torch.empty_like(x)
    pos32 = positions.to(torch.int32)
    check(lib, lib.kiln_rope_bf16(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(pos32.data_ptr()),
                                  ctypes.c_void_p(got.data_ptr()), ctypes.c_int64(tokens),
                                  ctypes.c_int64(heads), ctypes.c_int64(dim),
                                  ctypes.c_int64(0), ctypes.byref(p), None), "kiln_rope_bf16")
    torch.cuda.synchronize()
    differ = (got != want).any(dim=-1).any(dim=-1)
    first = int(differ.nonzero()[0]) if differ.any() else None
    # Who is closer to exact arithmetic: fp64 angles, cos/sin and products.
    inv64 = rotary.inv_freq.double()
    angles = positions.double()[:, None] * inv64[None, :]
    cos64 = torch.cat([angles.cos()] * 2, -1)[:, None, :]
    sin64 = torch.cat([angles.sin()] * 2, -1)[:, None, :]
    x64 = x.double()
    half = dim // 2
    rotated = torch.cat([-x64[..., half:], x64[..., :half]], -1)
    exact = x64 * cos64 + rotated * sin64
    # Where the bf16 cos/sin tables of the two differ, and by how much.
    cos_hf = cos[0].to(torch.bfloat16).float()
    angles32 = positions.float()[:, None] * rotary.inv_freq.float()[None, :]
    cos_kiln = torch.cat([angles32.cos()] * 2, -1).to(torch.bfloat16).float()
    # torch's own fp32 cos on the GPU against fp64, in fp32 ulps.
    ulp = (angles32.cos().double() - angles.cos()).abs() / \
        torch.finfo(torch.float32).eps / angles.cos().abs().clamp_min(1e-30)
    inv_cpu = LlamaRotaryEmbedding(config=config).inv_freq
    # Kiln's own bf16 cos/sin table: rotating x = (1, .., 1, 0, .., 0) gives cos in the
    # first half and sin in the second (products with 1 and 0 are exact).
    unit = torch.cat([torch.ones(half), torch.zeros(half)]).to(torch.bfloat16).cuda()
    unit = unit.expand(tokens, 1, dim).contiguous()
    table = torch.empty_like(unit)
    check(lib, lib.kiln_rope_bf16(ctypes.c_void_p(unit.data_ptr()),
                                  ctypes.c_void_p(pos32.data_ptr()),
                                  ctypes.c_void_p(table.data_ptr()), ctypes.c_int64(tokens),
                                  ctypes.c_int64(1), ctypes.c_int64(dim), ctypes.c_int64(0),
                                  ctypes.byref(p), None), "kiln_rope_bf16 (table)")
    torch.cuda.synchronize()
    kiln_cos, kiln_sin = table[:, 0, :half].float(), table[:, 0, half:].float()
    hf_cos, hf_sin = cos[0, :, :half].to(torch.bfloat16).float(), \
        sin[0, :, :half].to(torch.bfloat16).float()
    exact_cos, exact_sin = angles.cos(), angles.sin()  # fp64 at HF's fp32 inv_freq
    bad = (kiln_cos != hf_cos) | (kiln_sin != hf_sin)
    kiln_err = ((kiln_cos.double() - exact_cos).abs() + (kiln_sin.double() - exact_sin).abs())
    hf_err = ((hf_cos.double() - exact_cos).abs() + (hf_sin.double() - exact_sin).abs())
    table_row = {"entries_differing": int(bad.sum()),
                 "kiln_closer": int((kiln_err < hf_err)[bad].sum()),
                 "hf_closer": int((hf_err < kiln_err)[bad].sum()),
                 "by_frequency": [int(c) for c in bad.sum(0).tolist()],
                 "hf_fp32_cos_max_err": float((cos[0, :, :half].double() - exact_cos).abs().max()),
                 "torch_fp32_cos_max_err": float((angles32.cos().double() - exact_cos).abs().max())}
    print(f"rope tables: {table_row}", flush=True)
    row = {"positions": tokens, "positions_differing": int(differ.sum()), "first": first,
           "elements_differing": int((got != want).sum()),
           "max_abs_diff": float((got.float() - want.float()).abs().max()),
           "kiln_vs_fp64": rel(got, exact), "transformers_vs_fp64": rel(want, exact),
           "cos_table_entries_differing": int((cos_hf != cos_kiln).sum()),
           "hf_cos_vs_torch_fp32_cos_table_equal": bool(torch.equal(
               cos_hf, torch.cat([angles32.cos()] * 2, -1).to(torch.bfloat16).float())),
           "torch_cuda_cos_max_ulps": float(ulp.max()),
           "inv_freq_gpu_equals_cpu": bool(torch.equal(rotary.inv_freq.cpu(), inv_cpu.cpu())),
           "tables": table_row}
    results.append(row)
    print(f"rope llama3: {row['positions_differing']}/{tokens} positions differ from "
          f"transformers (first {first}); {row}", flush=True)


def gemm_cases(lib, results):
    handle = ctypes.c_void_p()
    check(lib, lib.kiln_gemm_create(ctypes.byref(handle)), "kiln_gemm_create")
    workspace = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(3)
    for n, k in ((512, 512), (1792, 512), (512, 1792), (4096, 512)):
        w = (torch.randn(n, k, generator=gen, device="cuda") * 0.1).to(torch.bfloat16)
        x = torch.randn(361, k, generator=gen, device="cuda").to(torch.bfloat16)
        for m in (1, 5, 17, 64, 130, 361):
            out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            check(lib, lib.kiln_gemm_bf16(handle, ctypes.c_void_p(x.data_ptr()),
                                          ctypes.c_void_p(w.data_ptr()), None,
                                          ctypes.c_void_p(out.data_ptr()), ctypes.c_int64(m),
                                          ctypes.c_int64(n), ctypes.c_int64(k),
                                          ctypes.c_void_p(workspace.data_ptr()),
                                          ctypes.c_size_t(workspace.numel()), None),
                  "kiln_gemm_bf16")
            torch.cuda.synchronize()
            want = F.linear(x[:m], w)
            row = {"m": m, "n": n, "k": k, "equal_to_torch": bool(torch.equal(out, want)),
                   "rel": rel(out, want)}
            results.append(row)
            print(f"gemm m={m:4d} n={n:5d} k={k:5d}: equal to torch {row['equal_to_torch']} "
                  f"(rel {row['rel']:.1e})", flush=True)
    lib.kiln_gemm_destroy(handle)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    lib = ctypes.CDLL(str(args.lib))
    lib.kiln_last_error.restype = ctypes.c_char_p
    results = {"attention": [], "rope": [], "gemm": []}
    for name, fn in (("attention", attention_cases), ("rope", rope_case), ("gemm", gemm_cases)):
        try:
            fn(lib, results[name])
        except Exception as error:  # one part failing must not hide the others
            print(f"{name}: failed: {type(error).__name__}: {error}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "kernel-parity.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
