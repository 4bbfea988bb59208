"""PyTorch peers on the shapes kiln_decode_bench measured, merged into one table.

usage: python3 peers.py kiln.jsonl [out_dir]
(kiln.jsonl from kiln_decode_bench [--quick] [--variants]; --variants lines get a table of
their own: every tuning variant next to the default, the ceiling and the peers.)
Peers: F.scaled_dot_product_attention with the cuDNN and flash backends on the same KV
made contiguous ([B, Hkv, L, D], enable_gqa=True; q_len=4 runs without a mask, which
only helps the peer), eager PyTorch absorbed MLA ([B, L, 576] latents); for Kiln's FP8
pool (gqa_fp8) PyTorch dequantizing float8_e4m3fn K/V to bf16 and then cuDNN SDPA (how
a framework without an FP8 attention kernel runs it; bytes = the FP8 bytes), and Kiln's
own bf16 run of the shape (tokens/s ratio = time ratio). Same bytes
formula as Kiln (K+V bytes read once). CUDA graphs of K calls (eager fallback), warm-up,
median of 15; buffers rotate so >= 2 GiB is touched per graph."""
import json, math, os, sys
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

dev = "cuda"


def timed(fns):
    """fns: list of callables (one per rotated buffer). Median seconds per call."""
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for f in fns: f()
    s.record()
    for i in range(3): fns[i % len(fns)]()
    e.record(); torch.cuda.synchronize()
    est = s.elapsed_time(e) / 3 / 1e3
    k = int(min(200, max(1, 2e-3 / max(est, 1e-7))))
    run = None
    try:
        g = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for f in fns: f()
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(g):
            for i in range(k): fns[i % len(fns)]()
        run = g.replay
    except Exception:
        def run():
            for i in range(k): fns[i % len(fns)]()
    for _ in range(3): run()
    ts = []
    for _ in range(15):
        s.record(); run(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    ts.sort()
    return ts[len(ts) // 2] / 1e3 / k


def rotations(nbytes):
    return max(1, min(256, math.ceil((2 << 30) / nbytes)))


def gqa_peers(B, L, q_len):
    Hq, Hkv, D = 32, 8, 128
    kv_bytes = 2 * B * Hkv * L * D * 2
    rot = rotations(kv_bytes)
    qs = [torch.randn(B, Hq, q_len, D, dtype=torch.bfloat16, device=dev) for _ in range(rot)]
    ks = [torch.randn(B, Hkv, L, D, dtype=torch.bfloat16, device=dev) for _ in range(rot)]
    vs = [torch.randn(B, Hkv, L, D, dtype=torch.bfloat16, device=dev) for _ in range(rot)]
    row = {}
    for name, be in [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]:
        try:
            with sdpa_kernel([be]):
                fns = [lambda i=i: F.scaled_dot_product_attention(qs[i], ks[i], vs[i], enable_gqa=True)
                       for i in range(rot)]
                row[name] = kv_bytes / timed(fns) / 1e12
        except Exception as ex:
            row[name] = None
            row[name + "_error"] = f"{type(ex).__name__}: {str(ex)[:100]}"
    del qs, ks, vs
    torch.cuda.empty_cache()
    return row


def gqa_fp8_peer(B, L, q_len):
    Hq, Hkv, D = 32, 8, 128
    kv_bytes = 2 * B * Hkv * L * D
    rot = rotations(kv_bytes)
    qs = [torch.randn(B, Hq, q_len, D, dtype=torch.bfloat16, device=dev) for _ in range(rot)]
    ks = [torch.randn(B, Hkv, L, D, device=dev).to(torch.float8_e4m3fn) for _ in range(rot)]
    vs = [torch.randn(B, Hkv, L, D, device=dev).to(torch.float8_e4m3fn) for _ in range(rot)]
    scale = torch.tensor(0.5, device=dev)

    def run(i):
        k = (ks[i].to(torch.bfloat16) * scale).to(torch.bfloat16)
        v = (vs[i].to(torch.bfloat16) * scale).to(torch.bfloat16)
        return F.scaled_dot_product_attention(qs[i], k, v, enable_gqa=True)

    try:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            res = {"dequant_cudnn": kv_bytes / timed([lambda i=i: run(i) for i in range(rot)]) / 1e12}
    except Exception as ex:
        res = {"dequant_cudnn": None, "dequant_cudnn_error": f"{type(ex).__name__}: {str(ex)[:100]}"}
    del qs, ks, vs
    torch.cuda.empty_cache()
    return res


def mla_peer(B, L, heads, q_len):
    R, P = 512, 64
    nbytes = B * L * (R + P) * 2
    rot = rotations(nbytes)
    qs = [torch.randn(B, q_len * heads, R + P, dtype=torch.bfloat16, device=dev) for _ in range(rot)]
    ckvs = [torch.randn(B, L, R + P, dtype=torch.bfloat16, device=dev) for _ in range(rot)]
    scale = 1 / math.sqrt(192)

    def run(i):
        s = torch.bmm(qs[i], ckvs[i].transpose(1, 2)) * scale
        p = torch.softmax(s.float(), -1).to(torch.bfloat16)
        return torch.bmm(p, ckvs[i][..., :R])

    try:
        t = timed([lambda i=i: run(i) for i in range(rot)])
        res = {"eager": nbytes / t / 1e12}
    except Exception as ex:
        res = {"eager": None, "eager_error": f"{type(ex).__name__}: {str(ex)[:100]}"}
    del qs, ckvs
    torch.cuda.empty_cache()
    return res


def fmt(x, spec=".2f"):
    return "n/a" if x is None else format(x, spec)


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
    out_dir = sys.argv[2] if len(sys.argv) > 2 else "."
    ceiling = next(r["TBps"] for r in rows if r["kind"] == "ceiling")
    device = next(r["name"] for r in rows if r["kind"] == "device")
    lines = [f"device: {device}, torch {torch.__version__}, read ceiling (Kiln streaming kernel, 4 GiB): {ceiling:.3f} TB/s", "",
             "| gqa decode (32q/8kv, d128, page 64, bf16) | Kiln path | Kiln TB/s | % ceiling | splits | cuDNN TB/s | flash TB/s | Kiln/cuDNN | Kiln/flash |",
             "|---|---|---|---|---|---|---|---|---|"]
    merged = []
    # gqa: the default launch (fused combine); gqa_separate: the launch before it
    # (KILN_GQA_SEPARATE_COMBINE), same shapes, compared with the same peer numbers.
    peer_cache = {}
    for r in rows:
        if r["kind"] not in ("gqa", "gqa_separate"):
            continue
        key = (r["B"], r["L"], r["q_len"])
        if key not in peer_cache:
            peer_cache[key] = gqa_peers(*key)
        p = peer_cache[key]
        r.update(p)
        merged.append(r)
        ratio = lambda k: None if not p.get(k) else r["TBps"] / p[k]
        path = "fused" if r["kind"] == "gqa" else "separate"
        lines.append(f"| B={r['B']} L={r['L']} q_len={r['q_len']} | {path} | {r['TBps']:.3f} | {100 * r['TBps'] / ceiling:.1f} | {r['splits']} | "
                     f"{fmt(p.get('cudnn'), '.3f')} | {fmt(p.get('flash'), '.3f')} | {fmt(ratio('cudnn'))} | {fmt(ratio('flash'))} |")
        print(lines[-1], flush=True)
    # Tuning variants (kiln_decode_bench --variants): side by side per shape, against the
    # default (variant 0, automatic splits) of the same run.
    var_rows = [r for r in rows if r["kind"] == "gqa_variant"]
    if var_rows:
        lines += ["", "| gqa variants (q_len 1) | variant | tile | stages | L2 pf | hoist | min blk | waves | splits | "
                  "Kiln TB/s | % ceiling | vs default | cuDNN TB/s | flash TB/s | Kiln/cuDNN |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        base = {(r["B"], r["L"]): r["TBps"] for r in var_rows if r["variant"] == 0 and r["waves"] == 1}
        for r in var_rows:
            key = (r["B"], r["L"], r["q_len"])
            if key not in peer_cache:
                peer_cache[key] = gqa_peers(*key)
            p = peer_cache[key]
            merged.append(dict(r, **p))
            b = base.get((r["B"], r["L"]))
            lines.append(f"| B={r['B']} L={r['L']} | {r['variant']} | {r['tile']} | {r['stages']} | {r['l2_prefetch']} | "
                         f"{r['hoist_page']} | {r['min_blocks']} | {r['waves']} | {r['splits']} | {r['TBps']:.3f} | "
                         f"{100 * r['TBps'] / ceiling:.1f} | {fmt(None if not b else r['TBps'] / b)} | "
                         f"{fmt(p.get('cudnn'), '.3f')} | {fmt(p.get('flash'), '.3f')} | "
                         f"{fmt(None if not p.get('cudnn') else r['TBps'] / p['cudnn'])} |")
            print(lines[-1], flush=True)
        # The layout probe: B=128 L=8k's bytes with 1 kv head (contiguous rows); compare
        # with the 8-head rows of the same variant at B=128 L=8k above.
        for r in (r for r in rows if r["kind"] == "gqa_layout_probe"):
            merged.append(r)
            b = next((x["TBps"] for x in var_rows if (x["B"], x["L"], x["variant"], x["waves"]) ==
                      (128, r["L"], r["variant"], 1)), None)
            lines.append(f"| probe B={r['B']} L={r['L']} {r['q_heads']}q/{r['kv_heads']}kv | {r['variant']} | {r['tile']} | "
                         f"{r['stages']} | {r['l2_prefetch']} | {r['hoist_page']} | {r['min_blocks']} | 1 | {r['splits']} | "
                         f"{r['TBps']:.3f} | {100 * r['TBps'] / ceiling:.1f} | {fmt(None if not b else r['TBps'] / b)} (vs 8 kv heads) | "
                         f"n/a | n/a | n/a |")
            print(lines[-1], flush=True)
        # The runtime's split_keys mode: fused (split_counters) vs the combine kernel.
        for r in (r for r in rows if r["kind"] == "gqa_split_keys"):
            merged.append(r)
            sep = next((x["TBps"] for x in rows if x["kind"] == "gqa_split_keys" and x["fused"] == 0
                        and (x["B"], x["L"]) == (r["B"], r["L"])), None)
            p = peer_cache.get((r["B"], r["L"], r["q_len"]), {})
            lines.append(f"| split_keys {r['split_keys']} B={r['B']} L={r['L']} | {'fused' if r['fused'] else 'separate'} | | | | | | 1 | "
                         f"{r['splits']} | {r['TBps']:.3f} | {100 * r['TBps'] / ceiling:.1f} | "
                         f"{fmt(None if not sep else r['TBps'] / sep)} (vs separate) | {fmt(p.get('cudnn'), '.3f')} | "
                         f"{fmt(p.get('flash'), '.3f')} | {fmt(None if not p.get('cudnn') else r['TBps'] / p['cudnn'])} |")
            print(lines[-1], flush=True)
        # The best per shape, for the decision.
        lines += ["", "| shape | best variant (waves) | TB/s | vs default |", "|---|---|---|---|"]
        for key in sorted({(r["B"], r["L"]) for r in var_rows}):
            best = max((r for r in var_rows if (r["B"], r["L"]) == key), key=lambda r: r["TBps"])
            b = base.get(key)
            lines.append(f"| B={key[0]} L={key[1]} | {best['variant']} ({best['waves']}) | {best['TBps']:.3f} | "
                         f"{fmt(None if not b else best['TBps'] / b)} |")
    bf16 = {(r["B"], r["L"], r["q_len"]): r for r in rows if r["kind"] == "gqa"}
    lines += ["", "| gqa decode, FP8 e4m3 pool (bf16 q/out) | Kiln TB/s (FP8 bytes) | % ceiling | "
              "tokens/s vs Kiln bf16 | dequant+cuDNN TB/s | Kiln/peer |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r["kind"] != "gqa_fp8":
            continue
        p = gqa_fp8_peer(r["B"], r["L"], r["q_len"])
        r.update(p)
        merged.append(r)
        base = bf16.get((r["B"], r["L"], r["q_len"]))
        speedup = None if not base else base["us"] / r["us"]
        ratio = None if not p.get("dequant_cudnn") else r["TBps"] / p["dequant_cudnn"]
        lines.append(f"| B={r['B']} L={r['L']} q_len={r['q_len']} | {r['TBps']:.3f} | {100 * r['TBps'] / ceiling:.1f} | "
                     f"{fmt(speedup)} | {fmt(p.get('dequant_cudnn'), '.3f')} | {fmt(ratio)} |")
        print(lines[-1], flush=True)
    lines += ["", "| mla decode (576/512, page 64, bf16) | variant | Kiln TB/s | % ceiling | Kiln TFLOP/s | eager TB/s | Kiln/eager |", "|---|---|---|---|---|---|---|"]
    cache = {}
    for r in rows:
        if not r["kind"].startswith("mla"):
            continue
        key = (r["B"], r["L"], r["heads"], r["q_len"])
        if key not in cache:
            cache[key] = mla_peer(*key)
        p = cache[key]
        r.update(p)
        merged.append(r)
        ratio = None if not p.get("eager") else r["TBps"] / p["eager"]
        lines.append(f"| B={r['B']} L={r['L']} heads={r['heads']} q_len={r['q_len']} | {r['kind']} | {r['TBps']:.3f} | "
                     f"{100 * r['TBps'] / ceiling:.1f} | {r['TFLOPs']:.1f} | {fmt(p.get('eager'), '.3f')} | {fmt(ratio)} |")
        print(lines[-1], flush=True)
    open(os.path.join(out_dir, "results.md"), "w").write("\n".join(lines) + "\n")
    json.dump(merged, open(os.path.join(out_dir, "results.json"), "w"), indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
