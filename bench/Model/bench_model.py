#!/usr/bin/env python3
"""Whole-model benchmark on the H200: Kiln against transformers and against the bounds.

A random-weight model with Llama-3.1-8B's shapes (examples/models/llama-3.1-8b-instruct.json,
32 layers, 16 GB of bf16 weights). In one run it measures:
  ceilings     a reduction over 4 GiB (bytes read per second; a copy's read + write
               rate is printed beside it) and a bf16 8192^3 matmul (TFLOP/s), both
               through torch;
  transformers sdpa, `generate` with a static cache, eager (no torch.compile):
               decode tokens/s at batch 1, 16, 64 and 256 (128-token prompts, 128 new
               tokens: the time of generating N tokens minus the time of generating 1,
               so the prefill drops out), prompt-lookup speculation at batch 1 (its
               only batch in transformers), and prefill tokens/s of one 4096-token
               prompt;
  Kiln         the same through kiln-run --json (decode_tokens_per_s,
               prefill_tokens_per_s), with the same weights written as safetensors,
               and every decode batch again with n-gram speculation (--spec ngram:K,
               the model compiled with it; acceptance and tokens per step printed).
Bounds: decode = batch / ((weight bytes read per step + KV bytes read per step) / read
rate), the KV at the mean context; prefill = tokens / (model FLOPs / matmul rate), the
FLOPs of the linear layers plus causal attention (the lm_head of the last token only).
Speculative rows are measured against the bound without speculation: above 100% means
the accepted drafts paid for their verification. Each decode row also runs a second
Kiln variant (--second): eager launches
(--cuda-graphs 0, the default), cuBLASLt's heuristic GEMM algorithms
(--gemm-policy heuristic: what batch invariance costs), the model compiled with
--pair-linears=false (unpaired: k/v and gate/up as two GEMM launches each, where the
default pairs them), the row-invariant GEMM algorithms picked for 256 rows (pin256:
KILN_GEMM_PIN_ROWS=256), or the step graphs with cuBLASLt's memset nodes kept as
captured (memsets: KILN_GRAPH_KEEP_MEMSETS=1; the runtime rewrites them as kernels), the
model compiled with --pair-ropes (ropes: q and k rotated in one launch), or every GEMM
of at most the invariant rows on the skinny GEMM (skinny: KILN_GEMM_SKINNY=1, its
tensor-core form, what the runtime does for models of max_batch 1; skinnyfma: its
CUDA-core form; skinnyring / skinnydeep: the tensor-core form through its cp.async ring /
with 8 K steps a warp in flight), or the small kernels chained to the kernel before
them on every model (pdl: KILN_PDL=1; by default only the batch-1 models, whose GEMMs are
the skinny GEMM, chain them), or the model
compiled with --fuse-pair-swiglu (glu: the SwiGLU as the gate/up pair GEMM's epilogue;
--batches 1 only, compile.sh builds it at batch 1); batch 1 runs
on a model of max_batch 1, which takes the tensor-core form by default, the larger
batches on models of batch 64 or 256; rows go in groups of 8-16, so use --batches 1 or
1,16).
Prints one table (achieved tok/s, % of bound, ratio to transformers) and writes
OUT/bench-model.json.

Usage (GPU machine, repo root):
  python3 bench/Model/bench_model.py --kiln-run BUILD/bin/kiln-run \
      --kiln-dir .carry/models --lib-dir BUILD/lib
(the shared objects of bench/Model/compile.sh: one per speculation and batch range).
"""
import argparse
import copy
import json
import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
DECODE_BATCHES = [1, 16, 64, 256]
DECODE_PROMPT, DECODE_NEW = 128, 128
PREFILL_LEN = 4096
# bench/Model/compile.sh's shared objects: batch 1 has its own of max_batch 1 (what a
# batch-1 deployment compiles, so the row shows the runtime's batch-1 default: the skinny
# GEMM's tensor-core form); batches up to 64 share one with 4608 positions (the 4k prefill
# fits it); batch 256 has its own with 256 positions, since 256 sequences of 4608 would
# plan 144 GiB of KV.
SMALL_BATCH_LIMIT = 64


def kiln_model_path(directory, batch, ngram):
    """The compiled model for a decode batch, with or without n-gram speculation."""
    spec = "-ngram" if ngram else ""
    size = "-b1" if batch == 1 else "-b256" if batch > SMALL_BATCH_LIMIT else ""
    return Path(directory) / f"llama-3.1-8b-bench{spec}{size}.so"


# ----------------------------------------------------------------------------------------
# Ceilings
# ----------------------------------------------------------------------------------------

def cuda_ms(fn, warmup=3, iters=10):
    """Median milliseconds of fn on the GPU (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def copy_bandwidth():
    """Bytes moved (read + written) per second by a 4 GiB device-to-device copy."""
    n = 2 << 30  # bf16 elements: 4 GiB
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    ms = cuda_ms(lambda: dst.copy_(src))
    del src, dst
    return 2 * n * 2 / (ms * 1e-3)


def read_bandwidth():
    """Bytes read per second by a reduction over 4 GiB (what a decode step does: read)."""
    n = 2 << 30
    src = torch.empty(n, dtype=torch.bfloat16, device="cuda").fill_(1)
    ms = cuda_ms(lambda: src.sum(dtype=torch.float32))
    del src
    return n * 2 / (ms * 1e-3)


def matmul_flops():
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = cuda_ms(lambda: torch.matmul(a, b))
    return 2 * n ** 3 / (ms * 1e-3)


# ----------------------------------------------------------------------------------------
# The model, its weights and its costs
# ----------------------------------------------------------------------------------------

def build_hf_model(config_path):
    """Llama-3.1-8B shapes, random weights (transformers' own init), bf16, on the GPU."""
    from transformers import AutoConfig, AutoModelForCausalLM
    fields = json.loads(Path(config_path).read_text())
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(
                config, dtype=torch.bfloat16, attn_implementation="sdpa")
        except TypeError:  # transformers 4.x spelling
            model = AutoModelForCausalLM.from_config(
                config, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model = model.to(device="cuda", dtype=torch.bfloat16).eval()
    model.generation_config.eos_token_id = None  # random weights: never stop early
    model.generation_config.pad_token_id = 0
    return model, config


def write_safetensors(tensors, path):
    """A safetensors file written tensor by tensor (never 16 GB on the host at once)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, t in tensors.items():
        size = t.numel() * t.element_size()
        header[name] = {"dtype": "BF16", "shape": list(t.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for t in tensors.values():
            f.write(t.detach().contiguous().view(torch.uint8).cpu().numpy())


def model_costs(config, state):
    """Bytes and FLOPs the bounds need, from the real tensors and the config."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    total = sum(t.numel() * t.element_size() for t in state.values())
    embed = state["model.embed_tokens.weight"]
    lm_head = state.get("lm_head.weight", embed)
    linear_params = sum(t.numel() for n, t in state.items()
                        if ".layers." in n and t.dim() == 2)
    return {
        "layers": config.num_hidden_layers,
        "hidden": config.hidden_size,
        "heads": config.num_attention_heads,
        "head_dim": head_dim,
        # a decode step reads every weight but the embedding table (a few rows of it)
        "decode_weight_bytes": total - embed.numel() * embed.element_size(),
        # K and V, every layer, per token of context
        "kv_bytes_per_token": 2 * config.num_hidden_layers * config.num_key_value_heads
        * head_dim * 2,
        "linear_params": linear_params,
        "lm_head_params": lm_head.numel(),
        "weight_bytes": total,
    }


def decode_bound(costs, batch, read_rate):
    context = DECODE_PROMPT + DECODE_NEW / 2  # mean context over the decode
    step_bytes = costs["decode_weight_bytes"] + batch * context * costs["kv_bytes_per_token"]
    return batch / (step_bytes / read_rate)


def prefill_bound(costs, tokens, flop_rate):
    linear = 2 * tokens * costs["linear_params"] + 2 * costs["lm_head_params"]
    # QK^T and PV, causal (half the square), every layer
    attention = 2 * 2 * costs["layers"] * costs["heads"] * costs["head_dim"] * tokens ** 2 / 2
    return tokens / ((linear + attention) / flop_rate)


# ----------------------------------------------------------------------------------------
# transformers
# ----------------------------------------------------------------------------------------

def random_ids(batch, length, vocab, seed):
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(length)] for _ in range(batch)]


@torch.no_grad()
def hf_generate_seconds(model, ids, new_tokens, static, lookup=0):
    config = copy.deepcopy(model.generation_config)
    config.do_sample, config.max_new_tokens, config.min_new_tokens = False, new_tokens, None
    if lookup:  # prompt-lookup decoding: transformers' n-gram speculation (batch 1 only)
        config.prompt_lookup_num_tokens = lookup
    config.cache_implementation = "static" if static else None
    # With a static cache, generate would torch.compile the forward on its own, and
    # recompile for every cache length: minutes that the timing would count. Eager.
    config.disable_compile = True
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def hf_decode(model, vocab, batch, lookup=0):
    """Decode tokens/s: (N - 1) decode steps are the difference of N and 1 new tokens."""
    ids = torch.tensor(random_ids(batch, DECODE_PROMPT, vocab, batch), device="cuda")
    for static in (True, False):
        try:
            hf_generate_seconds(model, ids, 4, static, lookup)  # warm-up (allocations, kernels)
            one = hf_generate_seconds(model, ids, 1, static, lookup)
            full = hf_generate_seconds(model, ids, DECODE_NEW, static, lookup)
            return batch * (DECODE_NEW - 1) / (full - one), "static" if static else "dynamic"
        except Exception as error:  # static cache unsupported: say so, use the default
            print(f"  transformers static cache failed ({type(error).__name__}: {error}); "
                  "retrying with the default cache", flush=True)
    return None, "failed"


@torch.no_grad()
def hf_prefill(model, vocab):
    ids = torch.tensor(random_ids(1, PREFILL_LEN, vocab, 7), device="cuda")

    def forward():
        try:
            return model(input_ids=ids, use_cache=True, logits_to_keep=1)
        except TypeError:
            return model(input_ids=ids, use_cache=True)

    ms = cuda_ms(forward, warmup=1, iters=3)
    return PREFILL_LEN / (ms * 1e-3)


# ----------------------------------------------------------------------------------------
# Kiln
# ----------------------------------------------------------------------------------------

def kiln_run(args, so, prompts, new_tokens, work, name, extra=(), extra_env=None):
    """kiln-run of `so` on one batch of prompts; its JSON, or None with the error printed."""
    if not so.exists():
        print(f"  kiln-run {name}: {so} is missing (bench/Model/compile.sh builds it)",
              flush=True)
        return None
    prompts_path = work / f"{name}.prompts"
    prompts_path.write_text("".join(" ".join(map(str, p)) + "\n" for p in prompts))
    json_path = work / f"{name}.json"
    cmd = [str(args.kiln_run), str(so), "--weights", str(work),
           "--prompts", str(prompts_path), "--max-new-tokens", str(new_tokens),
           "--json", str(json_path), *extra]
    env = dict(os.environ)
    if env.get("KILN_BENCH_GRAPH_DOT"):  # dump each captured graph (gpu-session.sh bench)
        env["KILN_GRAPH_DOT"] = f"{env['KILN_BENCH_GRAPH_DOT']}/{name}-"
    env["LD_LIBRARY_PATH"] = ":".join([str(d) for d in args.lib_dir] +
                                      [env.get("LD_LIBRARY_PATH", "")])
    env["KILN_GRAPH_LAUNCH_PROBE"] = "1"  # the bare launch of each graph, at teardown
    env.update(extra_env or {})
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                              timeout=args.timeout)
    except (subprocess.TimeoutExpired, OSError) as error:
        print(f"  kiln-run {name}: {error}", flush=True)
        return None
    (args.out / f"bench-model-{name}.log").write_text(
        f"$ {' '.join(cmd)}\nexit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    if proc.returncode != 0:
        print(f"  kiln-run {name} exit {proc.returncode}: {proc.stderr.strip()[-600:]}",
              flush=True)
        return None
    for line in proc.stderr.splitlines():
        if line.startswith("kiln graph probe"):
            print(f"  {name}: {line}", flush=True)
    return json.loads(json_path.read_text())


# ----------------------------------------------------------------------------------------

def fmt(x, spec):
    """x formatted by spec ("12.0f"), or a dash as wide."""
    return format(x, spec) if x is not None else "-".rjust(int(spec.split(".")[0]))


def ngram_case(batch, ngram):
    return f"decode b{batch} ngram:{ngram}"


def describe_step_host_time(result):
    """kiln-run's CUDA-graph and host-time statistics of one run, in words."""
    r = result or {}
    graphs = r.get("cuda_graphs", {})
    return (f"{graphs.get('captured')} graphs of {graphs.get('shapes_seen')} shapes seen, "
            f"{graphs.get('replayed_steps')} replayed steps, {graphs.get('bytes')} bytes; "
            f"host {r.get('host_us_per_decode_step')} us/step with graphs "
            f"({r.get('host_us_per_replayed_step')} us per replayed step: set_batch "
            f"{r.get('host_us_per_set_batch')} + graph launch "
            f"{r.get('host_us_per_graph_launch')}; median "
            f"{r.get('host_us_replayed_step_p50')}, p99 {r.get('host_us_replayed_step_p99')})")


# The second Kiln run of every decode row: kiln-run flags, or ("unpaired": the same model
# compiled with --pair-linears=false, bench/Model/compile.sh's -unpaired shared objects), or
# ("pin256") the row-invariant GEMM algorithms picked for 256 rows instead of 64
# (KILN_GEMM_PIN_ROWS, include/kiln/Kernels/Gemm.h), or ("memsets") the step graphs with
# cuBLASLt's memset nodes kept (KILN_GRAPH_KEEP_MEMSETS=1, docs/runtime.md), ("ropes")
# the model compiled with --pair-ropes, or ("skinny", "skinnyfma") the skinny GEMM's
# tensor-core or CUDA-core form for every step (KILN_GEMM_SKINNY, include/kiln/Kernels/Gemm.h),
# or ("skinnyring") the tensor-core form through its cp.async ring instead of registers
# (KILN_GEMM_SKINNY=1 KILN_SKINNY_MMA_STAGED=1, lib/Kernels/Graph/SkinnyGemm.h), or
# ("skinnydeep") through registers with 8 K steps in flight (KILN_SKINNY_MMA_DEPTH=8), or
# ("pdl") the small kernels between the GEMMs chained to the kernel before them on every
# model, not only on the batch-1 ones
# (KILN_PDL=1, lib/Kernels/Common/ProgrammaticLaunch.h), or ("glu") the model compiled with
# --fuse-pair-swiglu (compile.sh's -glu builds, batch 1 only).
SECOND_VARIANTS = {"eager": ("--cuda-graphs", "0"), "heuristic": ("--gemm-policy", "heuristic"),
                   "unpaired": (), "pin256": (), "memsets": (), "ropes": (), "skinny": (),
                   "skinnyfma": (), "skinnyring": (),
                   "skinnydeep": (), "pdl": (), "glu": ()}
SECOND_ENV = {"pin256": {"KILN_GEMM_PIN_ROWS": "256"}, "memsets": {"KILN_GRAPH_KEEP_MEMSETS": "1"},
              "skinny": {"KILN_GEMM_SKINNY": "1"}, "skinnyfma": {"KILN_GEMM_SKINNY": "fma"},
              "skinnyring": {"KILN_GEMM_SKINNY": "1", "KILN_SKINNY_MMA_STAGED": "1"},
              "skinnydeep": {"KILN_GEMM_SKINNY": "1", "KILN_SKINNY_MMA_DEPTH": "8"},
              "pdl": {"KILN_PDL": "1"}}


# The second runs on a model of its own (compile.sh's builds with that suffix).
SECOND_BUILDS = {"unpaired": "-unpaired", "ropes": "-ropes", "glu": "-glu"}


def second_model(so, second):
    """The shared object of the second run: the -unpaired build for --second unpaired,
    the -ropes build (q and k rotated in one launch) for --second ropes, the -glu build
    (the gate/up pair and its SwiGLU in one launch) for --second glu."""
    suffix = SECOND_BUILDS.get(second)
    return so.with_name(so.stem + suffix + ".so") if suffix else so


def print_table(rows, second):
    """kiln: CUDA graphs on, row-invariant GEMMs (kiln-run's defaults); then the second
    variant, one of SECOND_VARIANTS (--second)."""
    second_head = f"{second} tok/s"
    print(f"{'case':<22}{'kiln tok/s':>12}{second_head:>16}{'bound':>12}{'kiln %':>8}"
          f"{'hf tok/s':>12}{'hf %':>7}{'kiln/hf':>9}")
    for r in rows:
        pct = lambda v: None if v is None else 100 * v / r["bound"]  # noqa: E731
        ratio = r["kiln"] / r["hf"] if r["kiln"] and r["hf"] else None
        print(f"{r['case']:<22}{fmt(r['kiln'], '12.0f')}{fmt(r.get('second'), '16.0f')}"
              f"{r['bound']:12.0f}{fmt(pct(r['kiln']), '8.1f')}{fmt(r['hf'], '12.0f')}"
              f"{fmt(pct(r['hf']), '7.1f')}{fmt(ratio, '9.2f')}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path,
                        default=ROOT / "examples/models/llama-3.1-8b-instruct.json")
    parser.add_argument("--kiln-run", type=Path)
    parser.add_argument("--kiln-dir", type=Path, default=ROOT / ".carry/models",
                        help="bench/Model/compile.sh's llama-3.1-8b-bench*.so")
    parser.add_argument("--batches", default=",".join(map(str, DECODE_BATCHES)),
                        help="decode batches (comma-separated)")
    parser.add_argument("--ngram", type=int, choices=[0, 4], default=4,
                        help="drafts a step of the speculative rows (0: no such rows; "
                        "compile.sh compiles the speculative models for 4)")
    parser.add_argument("--lib-dir", type=Path, action="append", default=[])
    parser.add_argument("--work", type=Path, default=Path("/tmp/kiln-bench-model"),
                        help="where the 16 GB of weights are written")
    parser.add_argument("--out", type=Path,
                        default=Path(os.environ.get("OUT", "/tmp/kiln-gpu-out")))
    parser.add_argument("--skip-kiln", action="store_true")
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--prepare-only", action="store_true",
                        help="write the random weights into --work and stop")
    parser.add_argument("--timeout", type=int, default=180, help="seconds per kiln-run")
    parser.add_argument("--second", choices=sorted(SECOND_VARIANTS), default="eager",
                        help="the second Kiln variant of every decode batch")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    batches = [int(b) for b in args.batches.split(",") if b]
    if not batches or min(batches) < 1 or max(batches) > 256:
        parser.error(f"--batches {args.batches}: batches of 1 to 256 (compile.sh's models)")
    # The prefill row's model: the batch-64 one, as before the batch-1 models existed.
    base_so = kiln_model_path(args.kiln_dir, SMALL_BATCH_LIMIT, ngram=False)
    run_kiln = not args.skip_kiln and args.kiln_run and base_so.exists()
    if not args.skip_kiln and not run_kiln:
        print(f"kiln: skipped (need --kiln-run and {base_so}; "
              "see bench/Model/README.md)", flush=True)
    clock = time.perf_counter()
    stamp = lambda what: print(f"  {what} ({time.perf_counter() - clock:.0f} s)", flush=True)  # noqa: E731

    if args.prepare_only:  # the weights alone (bench/Model/kernel_profile.py)
        model, _ = build_hf_model(args.config)
        write_safetensors(model.state_dict(), args.work / "model.safetensors")
        stamp(f"weights written to {args.work}")
        return
    copy_rate, read_rate, flop_rate = copy_bandwidth(), read_bandwidth(), matmul_flops()
    stamp(f"ceilings: read {read_rate / 1e12:.2f} TB/s (copy {copy_rate / 1e12:.2f} TB/s "
          f"read+write), matmul {flop_rate / 1e12:.0f} TFLOP/s")
    model, config = build_hf_model(args.config)
    state = model.state_dict()
    costs = model_costs(config, state)
    stamp(f"model: {costs['weight_bytes'] / 1e9:.2f} GB of weights")
    if run_kiln:
        write_safetensors(state, args.work / "model.safetensors")
        stamp("weights written")
    del state

    hf = {}
    if not args.skip_hf:
        for batch in batches:
            hf[f"decode b{batch}"], cache = hf_decode(model, config.vocab_size, batch)
            stamp(f"transformers decode b{batch} ({cache} cache)")
        if args.ngram and 1 in batches:
            hf[ngram_case(1, args.ngram)], cache = hf_decode(model, config.vocab_size, 1,
                                                            lookup=args.ngram)
            stamp(f"transformers decode b1, prompt lookup {args.ngram} ({cache} cache)")
        hf["prefill 4k"] = hf_prefill(model, config.vocab_size)
        stamp("transformers prefill")
    vocab = config.vocab_size
    del model
    torch.cuda.empty_cache()

    kiln, second, speculation = {}, {}, {}
    if run_kiln:
        for batch in batches:
            prompts = random_ids(batch, DECODE_PROMPT, vocab, batch)
            for ngram in ([0, args.ngram] if args.ngram else [0]):
                case = ngram_case(batch, ngram) if ngram else f"decode b{batch}"
                so = kiln_model_path(args.kiln_dir, batch, ngram=bool(ngram))
                spec = ("--spec", f"ngram:{ngram}") if ngram else ()
                name = case.replace(" ", "-").replace(":", "")
                result = kiln_run(args, so, prompts, DECODE_NEW, args.work, name, spec)
                kiln[case] = result and result.get("decode_tokens_per_s")
                if ngram and result:  # kiln-run's tokens a step: the whole batch's
                    speculation[case] = (result.get("acceptance_rate"),
                                         result.get("mean_tokens_per_step"))
                # kiln-run refuses cuBLASLt's heuristic GEMMs under speculation (their
                # rows would depend on the batch, and verification would not be lossless).
                other = None if ngram and args.second == "heuristic" else kiln_run(
                    args, second_model(so, args.second), prompts, DECODE_NEW, args.work,
                    f"{name}-{args.second}", (*spec, *SECOND_VARIANTS[args.second]),
                    SECOND_ENV.get(args.second))
                second[case] = other and other.get("decode_tokens_per_s")
                stamp(f"kiln {case} ({describe_step_host_time(result)}; {args.second}: "
                      f"{second[case]} tok/s, host "
                      f"{(other or {}).get('host_us_per_decode_step')} us/step"
                      + (f"; acceptance {speculation[case][0]}, {speculation[case][1]} "
                         "tokens a step over the batch" if case in speculation else "") + ")")
        result = kiln_run(args, base_so, random_ids(1, PREFILL_LEN, vocab, 7), 1, args.work,
                          "prefill")
        kiln["prefill 4k"] = result and result.get("prefill_tokens_per_s")
        stamp("kiln prefill")

    rows = []
    for b in batches:
        rows.append({"case": f"decode b{b}", "bound": decode_bound(costs, b, read_rate)})
        if args.ngram:
            rows.append({"case": ngram_case(b, args.ngram), "bound": rows[-1]["bound"]})
    rows.append({"case": "prefill 4k", "bound": prefill_bound(costs, PREFILL_LEN, flop_rate)})
    for row in rows:
        row["kiln"], row["hf"] = kiln.get(row["case"]), hf.get(row["case"])
        row["second"] = second.get(row["case"])
        if row["case"] in speculation:
            row["acceptance"], row["tokens_per_step"] = speculation[row["case"]]
    print_table(rows, args.second)
    for row in rows:
        if "acceptance" in row:
            print(f"{row['case']}: acceptance {row['acceptance']}, "
                  f"{row['tokens_per_step']} tokens a step over the batch")
    summary = {"copy_bytes_per_s": copy_rate, "read_bytes_per_s": read_rate,
               "matmul_flops_per_s": flop_rate,
               "costs": costs, "rows": rows, "second_variant": args.second,
               "decode_prompt": DECODE_PROMPT, "decode_batches": batches, "ngram": args.ngram,
               "decode_new_tokens": DECODE_NEW, "prefill_tokens": PREFILL_LEN,
               "gpu": torch.cuda.get_device_name()}
    (args.out / "bench-model.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
