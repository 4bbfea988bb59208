#!/usr/bin/env python3
"""Kiln's Gated DeltaNet kernels against transformers' Qwen3-Next ones (GPU machine).

Issue 17 asks for the kernels' correctness against transformers' Qwen3NextForCausalLM
layer on the GPU. This script checks the core of that layer. It compares transformers
5.17's own `torch_chunk_gated_delta_rule` (prefill) and `torch_recurrent_gated_delta_rule`
(decode) from `transformers.models.qwen3_next.modeling_qwen3_next` with Kiln's
`kiln_gdn_chunk_prefill` and `kiln_gdn_update` (through the C ABI of libkiln_runtime.so,
ctypes). The inputs are identical:
  - grouped heads (transformers repeats each key head over its value heads, as the layer
    does before the call);
  - l2norm of q and k in the kernel;
  - the default scale 1/sqrt(k_dim);
  - g < 0 and beta in (0, 1), as the layer computes them from A_log, dt_bias, a and b.
Cases:
  prefill  two sequences packed by cu_seqlens (200 and 77 tokens, one starting from a
           nonzero state: a continued prompt) at Qwen3-Next's per-rank shapes (TP 4:
           4 key / 8 value heads of 128), against the chunked rule per sequence;
  decode   8 sequences over shuffled slots, one token, and a verify step of 4 tokens in
           place, against the recurrent rule.
Outputs are bf16 in both (compared by relative Frobenius error); the states are fp32.
Both implementations are fp32 inside but sum in different orders, so they are compared
within tolerances, not bitwise. Prints one line a case; exit 1 when any case is beyond
its tolerance.

Usage: python3 test/Parity/gdn_transformers.py --lib BUILD/lib/libkiln_runtime.so
"""
import argparse
import ctypes
import sys

import torch

BF16 = 0  # KILN_DTYPE_BF16 (include/kiln/Kernels/Status.h)
OUT_TOLERANCE = 1e-2    # bf16 outputs: a few bf16 roundings
STATE_TOLERANCE = 1e-3  # fp32 states: sum order only


# The fields both parameter structs end with, from the head counts on.
_SHAPE_AND_TENSORS = [("k_heads", ctypes.c_int32), ("v_heads", ctypes.c_int32),
                      ("k_dim", ctypes.c_int32), ("v_dim", ctypes.c_int32),
                      ("dtype", ctypes.c_int32),
                      ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p),
                      ("g", ctypes.c_void_p), ("beta", ctypes.c_void_p),
                      ("out", ctypes.c_void_p),
                      ("l2norm_qk", ctypes.c_int32), ("scale", ctypes.c_float),
                      ("stream", ctypes.c_void_p)]


class UpdateParams(ctypes.Structure):
    """kiln_gdn_update_params_t (include/kiln/Kernels/GatedDeltaNet.h)."""
    _fields_ = [("state", ctypes.c_void_p), ("num_slots", ctypes.c_int32),
                ("state_indices", ctypes.c_void_p), ("intermediate", ctypes.c_void_p),
                ("batch", ctypes.c_int32), ("num_tokens", ctypes.c_int32),
                ("intermediate_tokens", ctypes.c_int32)] + _SHAPE_AND_TENSORS


class ChunkParams(ctypes.Structure):
    """kiln_gdn_chunk_prefill_params_t (include/kiln/Kernels/GatedDeltaNet.h)."""
    _fields_ = [("state", ctypes.c_void_p), ("num_slots", ctypes.c_int32),
                ("state_indices", ctypes.c_void_p), ("cu_seqlens", ctypes.c_void_p),
                ("batch", ctypes.c_int32)] + _SHAPE_AND_TENSORS


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def inputs(tokens, k_heads, v_heads, dim, generator):
    """q, k [tokens, k_heads, dim] and v [tokens, v_heads, dim] bf16; g, beta fp32."""
    def randn(*shape):
        return torch.randn(*shape, generator=generator, device="cuda")
    q = randn(tokens, k_heads, dim).bfloat16()
    k = randn(tokens, k_heads, dim).bfloat16()
    v = randn(tokens, v_heads, dim).bfloat16()
    # The layer's g = -exp(A_log) softplus(a + dt_bias) < 0 and beta = sigmoid(b).
    g = -torch.nn.functional.softplus(randn(tokens, v_heads)) * 0.5
    beta = torch.sigmoid(randn(tokens, v_heads))
    return q, k, v, g, beta


def transformers_rule(rule, q, k, v, g, beta, state):
    """transformers' rule on one sequence ([T, ...] inputs): (out [T, Hv, V], state)."""
    repeat = v.shape[1] // k.shape[1]
    q, k = (x.repeat_interleave(repeat, dim=1) for x in (q, k))  # as the layer does
    out, final = rule(q[None], k[None], v[None], g=g[None], beta=beta[None],
                      initial_state=None if state is None else state[None].clone(),
                      output_final_state=True, use_qk_l2norm_in_kernel=True)
    return out[0], final[0]


def report(name, out_err, state_err):
    ok = out_err <= OUT_TOLERANCE and state_err <= STATE_TOLERANCE
    print(f"{'PASS' if ok else 'FAIL'} {name}: out rel err {out_err:.2e} (<= {OUT_TOLERANCE}), "
          f"state rel err {state_err:.2e} (<= {STATE_TOLERANCE})", flush=True)
    return ok


def check(lib, status, what):
    if status != 0:
        raise RuntimeError(f"{what}: status {status}: {lib.kiln_last_error().decode()}")


def prefill_case(lib, chunk_rule, generator):
    k_heads, v_heads, dim = 4, 8, 128
    lens = [200, 77]
    cu = torch.tensor([0, lens[0], sum(lens)], dtype=torch.int32, device="cuda")
    q, k, v, g, beta = inputs(sum(lens), k_heads, v_heads, dim, generator)
    state = torch.zeros(2, v_heads, dim, dim, device="cuda")
    state[1] = torch.randn(v_heads, dim, dim, generator=generator, device="cuda") * 0.05
    start = state.clone()
    out = torch.empty_like(v)
    p = ChunkParams(state=state.data_ptr(), num_slots=2, state_indices=None,
                    cu_seqlens=cu.data_ptr(), batch=2, k_heads=k_heads, v_heads=v_heads,
                    k_dim=dim, v_dim=dim, dtype=BF16, q=q.data_ptr(), k=k.data_ptr(),
                    v=v.data_ptr(), g=g.data_ptr(), beta=beta.data_ptr(),
                    out=out.data_ptr(), l2norm_qk=1, scale=0.0,
                    stream=torch.cuda.current_stream().cuda_stream)
    check(lib, lib.kiln_gdn_chunk_prefill(ctypes.byref(p)), "kiln_gdn_chunk_prefill")
    torch.cuda.synchronize()
    ok = True
    for b, (lo, hi) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        want_out, want_state = transformers_rule(
            chunk_rule, q[lo:hi], k[lo:hi], v[lo:hi], g[lo:hi], beta[lo:hi],
            start[b] if b == 1 else None)
        ok &= report(f"prefill sequence {b} ({hi - lo} tokens"
                     f"{', continued' if b == 1 else ''}) vs torch_chunk_gated_delta_rule",
                     rel(out[lo:hi], want_out), rel(state[b], want_state))
    return ok


def decode_case(lib, recurrent_rule, generator, tokens):
    k_heads, v_heads, dim, batch = 4, 8, 128, 8
    slots = torch.randperm(batch, generator=generator, device="cuda").to(torch.int32)
    state = torch.randn(batch, v_heads, dim, dim, generator=generator, device="cuda") * 0.05
    start = state.clone()
    q, k, v, g, beta = inputs(batch * tokens, k_heads, v_heads, dim, generator)
    out = torch.empty_like(v)
    p = UpdateParams(state=state.data_ptr(), num_slots=batch, state_indices=slots.data_ptr(),
                     intermediate=None, batch=batch, num_tokens=tokens, k_heads=k_heads,
                     v_heads=v_heads, k_dim=dim, v_dim=dim, dtype=BF16, q=q.data_ptr(),
                     k=k.data_ptr(), v=v.data_ptr(), g=g.data_ptr(), beta=beta.data_ptr(),
                     out=out.data_ptr(), l2norm_qk=1, scale=0.0,
                     stream=torch.cuda.current_stream().cuda_stream)
    check(lib, lib.kiln_gdn_update(ctypes.byref(p)), "kiln_gdn_update")
    torch.cuda.synchronize()
    worst_out = worst_state = 0.0
    for b in range(batch):
        rows = slice(b * tokens, (b + 1) * tokens)
        s = int(slots[b])
        want_out, want_state = transformers_rule(recurrent_rule, q[rows], k[rows], v[rows],
                                                 g[rows], beta[rows], start[s])
        worst_out = max(worst_out, rel(out[rows], want_out))
        worst_state = max(worst_state, rel(state[s], want_state))
    return report(f"decode {batch} sequences x {tokens} token(s), shuffled slots, vs "
                  "torch_recurrent_gated_delta_rule (worst sequence)", worst_out, worst_state)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lib", required=True)
    args = parser.parse_args()
    try:
        from transformers.models.qwen3_next import modeling_qwen3_next as qwen3_next
    except ImportError as error:
        print(f"SKIP: transformers has no Qwen3-Next ({error})")
        return 0
    lib = ctypes.CDLL(args.lib)
    lib.kiln_last_error.restype = ctypes.c_char_p
    generator = torch.Generator(device="cuda").manual_seed(17)
    ok = prefill_case(lib, qwen3_next.torch_chunk_gated_delta_rule, generator)
    for tokens in (1, 4):
        ok &= decode_case(lib, qwen3_next.torch_recurrent_gated_delta_rule, generator, tokens)
    print("gdn vs transformers:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
