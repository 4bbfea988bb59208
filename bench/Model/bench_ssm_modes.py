#!/usr/bin/env python3
"""Speculative decode of a Mamba2 hybrid in rewind and replay mode (issue 14's target:
replay >= 1.2x rewind at batch 128 with 3 drafts; docs/replay.md).

The model is the seed scenario's Nemotron-Nano-9B-v2 shape (27 Mamba2 layers with the
real state shapes, 128 heads x 80 x 128 f32 = 5 MiB a layer and sequence, small hidden
size; test/Tools/Inputs/nemotron-nano-9b-v2-seed.json) with random weights. Batch 128
where the device has the memory for rewind mode's intermediates (86 GiB of states at
batch 128: an H200), else 64 (an H100). One run:
  ceiling      a 4 GiB device copy through torch (bytes read + written per second);
  kiln         kiln-run on B prompts in one batch:
                 seed-bB-nospec.so   no speculation
                 seed-bB-rewind.so   --spec ngram:3, rewind mode
                 seed-bB-replay.so   --spec ngram:3, replay mode
               decode tokens/s, acceptance, and whether the speculative outputs equal
               the plain ones (lossless);
  peer         transformers' NemotronHForCausalLM greedy decode of the same prompts at
               batch B (eager, its own cache), decode tokens/s.
The bound of each mode is its SSM state traffic at the copy rate: a step moves 2 S a
layer and sequence without speculation or in replay mode, (3 + T) S in rewind mode
(T = 4 tokens: the spec kernel's read and T intermediate writes, then the commit's copy),
for T tokens verified (accepted + 1 emitted on average: tokens/step from the acceptance).
Prints one table and writes OUT/bench-ssm-modes.json.

Usage (GPU machine, repo root; bench/Model/compile.sh builds the three .so files):
  python3 bench/Model/bench_ssm_modes.py --kiln-run BUILD/bin/kiln-run \
      --so-dir .carry/models --lib-dir BUILD/lib
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test" / "Parity"))
from make_models import build_model, load_config, randomize, save  # noqa: E402

CONFIG = ROOT / "test" / "Tools" / "Inputs" / "nemotron-nano-9b-v2-seed.json"
PROMPT, NEW, DRAFTS = 64, 64, 3
# Batches bench/Model/compile.sh builds; the largest whose plan fits the device is used.
BATCHES = (128, 64)
PLAN_GIB = {128: 100, 64: 50}  # rewind mode's plan, rounded up (kiln-compile --report)
BATCH = 128


def copy_bandwidth():
    n = 2 << 30
    src = torch.ones(n, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    times = []
    for _ in range(10):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n * 2 / sorted(times)[len(times) // 2]


def prompts_for(vocab, seed):
    """Prompts that repeat a short pattern, so n-gram lookup finds proposals."""
    rng = random.Random(seed)
    out = []
    for _ in range(BATCH):
        pattern = [rng.randrange(vocab) for _ in range(rng.randrange(4, 9))]
        out.append((pattern * (PROMPT // len(pattern) + 1))[:PROMPT])
    return out


def run_kiln(args, so, spec, work, env):
    out = work / f"{so}{'' if spec else '-plain'}.json"
    cmd = [str(args.kiln_run), str(args.so_dir / f"{so}.so"), "--weights", str(work / "model"),
           "--prompts", str(work / "prompts.txt"), "--max-new-tokens", str(NEW),
           "--json", str(out)]
    if spec:
        cmd += ["--spec", spec]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    (work / out.with_suffix(".log").name).write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        print(f"{so}: kiln-run failed: {proc.stderr[-1500:]}", flush=True)
        return None
    return json.loads(out.read_text())


def transformers_decode(model, prompts):
    """(greedy decode tokens/s, batch): time(NEW tokens) - time(1 token) over the batch,
    halving the batch while transformers' reference Mamba2 path runs out of memory (its
    prompt-time chunk scan materializes [batch, chunks, L, L, heads, state] products:
    64 GiB at batch 64 on an H100); the rate is then the largest batch that fits."""
    while True:
        try:
            return decode_rate(model, prompts), len(prompts)
        except torch.OutOfMemoryError:
            if len(prompts) == 1:
                raise
            prompts = prompts[:len(prompts) // 2]
            torch.cuda.empty_cache()


def decode_rate(model, prompts):
    ids = torch.tensor(prompts, device="cuda")

    def generate(count):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, max_new_tokens=count, min_new_tokens=count, do_sample=False)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    generate(2)
    return len(prompts) * (NEW - 1) / (generate(NEW) - generate(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kiln-run", type=Path, required=True)
    parser.add_argument("--so-dir", type=Path, required=True)
    parser.add_argument("--lib-dir", type=Path, action="append", default=[])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/kiln-bench-out")))
    args = parser.parse_args()
    work = args.out
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join([str(d) for d in args.lib_dir] +
                                      [env.get("LD_LIBRARY_PATH", "")])

    global BATCH
    free = torch.cuda.mem_get_info()[1] / 2**30
    BATCH = next((b for b in BATCHES if PLAN_GIB[b] < free), BATCHES[-1])
    copy_rate = copy_bandwidth()
    config = load_config(CONFIG)
    model = build_model(config, "cuda")
    randomize(model, 0.1, 14, "cuda")
    save(model, work / "model")
    prompts = prompts_for(config.vocab_size, 14)
    (work / "prompts.txt").write_text("".join(" ".join(map(str, p)) + "\n" for p in prompts))
    model.cpu()  # Kiln's plan needs the device memory first
    torch.cuda.empty_cache()

    layers = config.hybrid_override_pattern.count("M")
    state = config.mamba_num_heads * config.mamba_head_dim * config.ssm_state_size * 4
    runs = {}
    names = {mode: f"seed-b{BATCH}-{mode}" for mode in ("nospec", "rewind", "replay")}
    for mode, spec in (("nospec", None), ("rewind", f"ngram:{DRAFTS}"),
                       ("replay", f"ngram:{DRAFTS}")):
        runs[names[mode]] = run_kiln(args, names[mode], spec, work, env)
    # Lossless means: the tokens the same compiled model gives without drafts. A model
    # compiled for speculation runs its GEMMs with the algorithm chosen for its largest
    # verify step (max_batch x (1 + drafts) rows, docs/runtime.md), the nospec model with
    # the one for max_batch rows, so their bits (and near-tie tokens) may differ.
    plains = {names[m]: run_kiln(args, names[m], None, work, env) for m in ("rewind", "replay")}
    model.cuda()
    peer, peer_batch = transformers_decode(model, prompts)
    del model
    torch.cuda.empty_cache()
    print(f"copy ceiling {copy_rate / 1e12:.2f} TB/s; {layers} Mamba2 layers, state "
          f"{state / 2**20:.1f} MiB a layer and sequence; transformers {peer:.0f} tok/s "
          f"(batch {peer_batch})")
    print(f"{'mode':<18} {'tok/s':>8} {'accept':>7} {'tok/step':>8} {'bound tok/s':>11} "
          f"{'% bound':>7} {'x transformers':>14} {'lossless':>8} {'= nospec.so':>11}")
    plain = runs.get(names["nospec"])
    rows = {}
    for so, result in runs.items():
        if not result:
            continue
        rate = result.get("decode_tokens_per_s") or 0.0
        acceptance = result.get("acceptance_rate") or 0.0
        per_step = 1 + acceptance * DRAFTS if "nospec" not in so else 1.0
        moved = 2 if "rewind" not in so else 3 + 1 + DRAFTS
        bound = BATCH * per_step * copy_rate / (layers * BATCH * state * moved)
        same = plains.get(so)
        lossless = (same is not None and result["outputs"] == same["outputs"]) \
            if "nospec" not in so else None
        # Sequences whose tokens equal the separately compiled nospec model's.
        agree = (sum(a == b for a, b in zip(result["outputs"], plain["outputs"]))
                 if plain is not None else 0)
        rows[so] = dict(tokens_per_s=rate, acceptance=acceptance, tokens_per_step=per_step,
                        bound_tokens_per_s=bound, pct_bound=100 * rate / bound,
                        x_transformers=rate / peer, lossless=lossless,
                        sequences_equal_to_nospec_so=agree)
        print(f"{so:<18} {rate:8.0f} {acceptance:7.2f} {per_step:8.2f} {bound:11.0f} "
              f"{100 * rate / bound:7.1f} {rate / peer:14.2f} {str(lossless):>8} "
              f"{agree:>5}/{BATCH}", flush=True)
    if names["rewind"] in rows and names["replay"] in rows:
        ratio = rows[names["replay"]]["tokens_per_s"] / rows[names["rewind"]]["tokens_per_s"]
        print(f"replay / rewind decode throughput at batch {BATCH}, {DRAFTS} drafts: "
              f"{ratio:.2f}x (target >= 1.2x)")
        rows["replay_over_rewind"] = ratio
    (work / "bench-ssm-modes.json").write_text(json.dumps(
        dict(device=torch.cuda.get_device_name(), batch=BATCH, copy_TBps=copy_rate / 1e12,
             transformers_tokens_per_s=peer, transformers_batch=peer_batch, runs=rows),
        indent=1))
    failed = any(r.get("lossless") is False for r in rows.values() if isinstance(r, dict))
    return 1 if failed or len(rows) < 3 else 0


if __name__ == "__main__":
    sys.exit(main())
