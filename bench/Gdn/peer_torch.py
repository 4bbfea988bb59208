"""Peers of gdn_chunk_prefill on GdnBench.cu's shapes: the chunked gated delta rule in
PyTorch, written here from the math of transformers' torch_chunk_gated_delta_rule
(Qwen3NextGatedDeltaNet's prompt path: l2norm of q and k, q scaled by 1/sqrt(k_dim),
chunks of 64, the decay-masked k k^T system inverted by forward substitution, the state
carried across chunks), eager and under torch.compile, and fla's Triton
chunk_gated_delta_rule when it imports. Each peer is first checked against a
token-by-token PyTorch recurrence on a short prompt (fp32); one that disagrees is
reported and not timed. Reads kiln's JSON (argv[1]), prints ms, TFLOP/s, TB/s, % of the
ceilings kiln measured and kiln's speedup over each peer; writes the merged JSON
(argv[2]).

usage: python3 peer_torch.py gdn_kiln.json [out.json]
"""
import json
import sys
import time

import torch
import torch.nn.functional as F

dev = "cuda"
CHUNK = 64


def bench(fn, iters=10, warm=2):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]  # ms


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def prepare(q, k, v, g, beta, v_heads):
    """Layer inputs (q, k [T, Hk, K] bf16; v [T, H, V] bf16; g, beta [T, H] fp32) as the
    chunked rule takes them: fp32 [H, T, *], keys normalized and repeated per value
    head, q scaled."""
    group = v_heads // q.shape[1]
    q = l2norm(q.float()).repeat_interleave(group, dim=1) * q.shape[-1] ** -0.5
    k = l2norm(k.float()).repeat_interleave(group, dim=1)
    return (q.transpose(0, 1), k.transpose(0, 1), v.float().transpose(0, 1), g.t(), beta.t())


def chunk_prep(q, k, v, g, beta):
    """Everything before the inter-chunk recurrence, for all chunks at once: the decays,
    the inverted (I + A) applied to beta v and to beta exp(gamma) k."""
    H, T, K = k.shape
    pad = (-T) % CHUNK
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    n = (T + pad) // CHUNK
    q, k, v = (x.reshape(H, n, CHUNK, -1) for x in (q, k, v))
    g, beta = g.reshape(H, n, CHUNK), beta.reshape(H, n, CHUNK)
    kb, vb = k * beta[..., None], v * beta[..., None]
    gam = g.cumsum(-1)
    decay = (gam[..., :, None] - gam[..., None, :]).tril().exp().tril()
    upper = torch.triu(torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device))
    a = -((kb @ k.transpose(-1, -2)) * decay).masked_fill(upper, 0)
    for i in range(1, CHUNK):  # (I + A)^-1 row by row (forward substitution)
        row = a[..., i, :i].clone()
        a[..., i, :i] = row + (row[..., None] * a[..., :i, :i]).sum(-2)
    a = a + torch.eye(CHUNK, device=q.device)
    u = a @ vb
    w = a @ (kb * gam.exp()[..., None])
    return q, k, u, w, gam, decay


def chunk_step(q, k, u, w, gam, decay, state):
    """One chunk of the recurrence: [H, L, *] operands, state [H, K, V]."""
    strict = torch.triu(torch.ones(CHUNK, CHUNK, dtype=torch.bool, device=q.device), 1)
    attn = ((q @ k.transpose(-1, -2)) * decay).masked_fill(strict, 0)
    v_new = u - w @ state
    out = (q * gam[..., None].exp()) @ state + attn @ v_new
    last = gam[:, -1]
    state = state * last.exp()[:, None, None] + \
        (k * (last[:, None] - gam).exp()[..., None]).transpose(-1, -2) @ v_new
    return out, state


def torch_chunked(q, k, v, g, beta, state, prep=chunk_prep, step=chunk_step):
    H, T, _ = k.shape
    q, k, u, w, gam, decay = prep(q, k, v, g, beta)
    outs = []
    for c in range(q.shape[1]):
        o, state = step(q[:, c], k[:, c], u[:, c], w[:, c], gam[:, c], decay[:, c], state)
        outs.append(o)
    return torch.cat(outs, 1)[:, :T], state


def torch_recurrent(q, k, v, g, beta, state):
    """The token-by-token rule (the check of the peers)."""
    outs = []
    for t in range(k.shape[1]):
        state = state * g[:, t].exp()[:, None, None]
        mem = (state * k[:, t, :, None]).sum(1)
        delta = (v[:, t] - mem) * beta[:, t, None]
        state = state + k[:, t, :, None] * delta[:, None, :]
        outs.append((state * q[:, t, :, None]).sum(1))
    return torch.stack(outs, 1), state


def inputs(T, k_heads, v_heads, K=128, V=128, seed=0):
    gen = torch.Generator(device=dev).manual_seed(seed)
    bf = torch.bfloat16
    q = torch.randn(T, k_heads, K, device=dev, generator=gen).to(bf)
    k = torch.randn(T, k_heads, K, device=dev, generator=gen).to(bf)
    v = torch.randn(T, v_heads, V, device=dev, generator=gen).to(bf)
    g = -0.5 * torch.rand(T, v_heads, device=dev, generator=gen)
    beta = torch.rand(T, v_heads, device=dev, generator=gen)
    state = 0.1 * torch.randn(v_heads, K, V, device=dev, generator=gen)
    return q, k, v, g, beta, state


def fla_peer():
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception as e:  # noqa: BLE001
        print(f"fla unavailable: {type(e).__name__}: {e}")
        return None

    def run(q, k, v, g, beta, state):
        group = v.shape[1] // q.shape[1]
        qq = q.repeat_interleave(group, dim=1)[None]
        kk = k.repeat_interleave(group, dim=1)[None]
        o, s = chunk_gated_delta_rule(qq, kk, v[None], g[None], beta[None],
                                      initial_state=state[None], output_final_state=True,
                                      use_qk_l2norm_in_kernel=True)
        return o[0].transpose(0, 1).float(), s[0].float()
    return run


def main():
    kiln = json.load(open(sys.argv[1]))
    copy, mma = kiln["copy_TBps"], kiln["mma_TFLOPs"]
    print(f"device {kiln['device']}: ceilings copy {copy:.2f} TB/s, bf16 mma.sync {mma:.1f} "
          "TFLOP/s (measured by kiln_bench_gdn)")

    def eager(q, k, v, g, beta, state):
        return torch_chunked(*prepare(q, k, v, g, beta, v.shape[1]), state)

    peers = {"torch eager chunked": eager}
    try:
        prep_c = torch.compile(chunk_prep)
        step_c = torch.compile(chunk_step)
        peers["torch.compile chunked"] = lambda q, k, v, g, beta, state: torch_chunked(
            *prepare(q, k, v, g, beta, v.shape[1]), state, prep=prep_c, step=step_c)
    except Exception as e:  # noqa: BLE001
        print(f"torch.compile unavailable: {e}")
    fla = fla_peer()
    if fla:
        peers["fla chunk_gated_delta_rule"] = fla

    # Check every peer against the recurrence on a short prompt (200 tokens, TP 4 heads).
    q, k, v, g, beta, state = inputs(200, 4, 8, seed=1)
    ref_o, ref_s = torch_recurrent(*prepare(q, k, v, g, beta, 8), state.clone())
    for name in list(peers):
        try:
            t0 = time.time()
            o, s = peers[name](q, k, v, g, beta, state.clone())
            o_err = ((o - ref_o).abs() / (ref_o.abs() + 0.05)).max().item()
            s_err = ((s - ref_s).abs() / (ref_s.abs() + ref_s.pow(2).mean().sqrt())).max().item()
            ok = o_err < 2e-2 and s_err < 2e-2
            print(f"check {name}: out err {o_err:.2e}, state err {s_err:.2e} "
                  f"({'ok' if ok else 'DISAGREES, not timed'}; first call {time.time() - t0:.1f} s)")
            if not ok:
                del peers[name]
        except Exception as e:  # noqa: BLE001
            print(f"check {name}: failed ({type(e).__name__}: {e}), not timed")
            del peers[name]

    rows = []
    for c in kiln["cases"]:
        q, k, v, g, beta, state = inputs(c["tokens"], c["k_heads"], c["v_heads"])
        ms = c["chunk_ms"]
        tflops = c["flops"] / ms / 1e9
        tbps = c["bytes"] / ms / 1e9
        row = dict(c, TFLOPs=tflops, TBps=tbps, pct_mma=100 * tflops / mma,
                   pct_copy=100 * tbps / copy, peers={})
        print(f"{c['name']}: {c['tokens']} tokens, heads {c['k_heads']}/{c['v_heads']}: "
              f"kiln {ms:.3f} ms, {tflops:.2f} TFLOP/s ({row['pct_mma']:.1f}% of mma.sync), "
              f"{tbps:.3f} TB/s ({row['pct_copy']:.1f}% of copy); token by token "
              f"{c['token_by_token_ms']:.2f} ms ({c['token_by_token_ms'] / ms:.1f}x)", flush=True)
        for name, fn in peers.items():
            try:
                peer_ms = bench(lambda: fn(q, k, v, g, beta, state.clone()), iters=5, warm=2)
                row["peers"][name] = peer_ms
                print(f"  {name}: {peer_ms:.3f} ms (kiln {peer_ms / ms:.2f}x faster)", flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"  {name}: failed ({type(e).__name__}: {e})")
        rows.append(row)
        del q, k, v, g, beta, state
        torch.cuda.empty_cache()
    if len(sys.argv) > 2:
        json.dump(dict(kiln, cases=rows), open(sys.argv[2], "w"), indent=1)


if __name__ == "__main__":
    main()
