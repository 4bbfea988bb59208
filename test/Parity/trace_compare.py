#!/usr/bin/env python3
"""Kiln's prefill, op by op, against transformers' (GPU machine, a diagnostic).

`kiln-run --trace DIR` writes the output of every op of every step (runtime:
kiln_rt_set_trace). This script runs one prompt through Kiln with the trace on, and the
same prompt through transformers in bf16 (sdpa) and in float32 with hooks on every
module, on the rotary embedding's outputs, and on the inputs of o_proj (the attention
output) and down_proj (the SwiGLU output). Each Kiln op is matched to the transformers
tensor of the same size, in execution order, that it is closest to, and one line per op
prints
  kiln-vs-bf16   Kiln against transformers bf16 (0 = the same bits)
  bf16-vs-fp32   transformers bf16 against float32: rounding noise of a correct bf16 path
  kiln-vs-fp32   Kiln against float32
so the first op where kiln-vs-fp32 exceeds bf16-vs-fp32 by far is where Kiln's numbers
part from the model's.

Usage: python3 test/Parity/trace_compare.py --models DIR --so-dir DIR --kiln-run BIN
           [--lib-dir DIR] --family llama [--prompt-index N] --out OUT
"""
import argparse
import contextlib
import importlib
import json
import subprocess
from pathlib import Path

import torch

from parity import kiln_env, load_reference_model

MATCH_WINDOW = 12     # transformers tensors considered after the last match
UNMATCHED_ABOVE = 0.5  # relative distance beyond which a Kiln op matches nothing


def flat(t):
    return t.detach().reshape(-1).float().cpu()


def rel(a, b):
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


@contextlib.contextmanager
def captured(model):
    """Records (name, flat float tensor) in execution order while a forward runs."""
    records = []
    seen = {}

    def keep(name, tensor):
        if not torch.is_tensor(tensor) or tensor.dim() < 2:
            return
        if name.startswith("rope("):  # one name per layer, as the modules' names are
            seen[name] = seen.get(name, -1) + 1
            name = f"{name}#{seen[name]}"
        records.append((name, flat(tensor)))
        if tensor.dim() == 3 and tensor.shape[1] > 1:  # [1, T, C]: also the last row
            records.append((name + "[last]", flat(tensor[:, -1])))

    handles = []
    for name, module in model.named_modules():
        if name.endswith("rotary_emb"):  # (cos, sin), [1, T, D] each: kept whole
            handles.append(module.register_forward_hook(
                lambda m, args, out: records.append(("rotary(cos,sin)", out))))
            continue
        if name.endswith("o_proj") or name.endswith("down_proj"):
            handles.append(module.register_forward_pre_hook(
                lambda m, args, n=name: keep(n + ".input", args[0])))
        if name.endswith("post_attention_layernorm"):
            handles.append(module.register_forward_pre_hook(
                lambda m, args, n=name: keep(n + ".input(residual)", args[0])))
        if not list(module.children()):
            handles.append(module.register_forward_hook(
                lambda m, args, out, n=name: keep(n, out)))
        elif name.count(".") == 2 and name.startswith("model.layers."):
            handles.append(module.register_forward_hook(
                lambda m, args, out, n=name: keep(n + ".output(residual)",
                                                  out[0] if isinstance(out, tuple) else out)))
    # RoPE is a function of the model's module, not a module: wrap it there.
    family_module = importlib.import_module(type(model).__module__)
    original = family_module.apply_rotary_pos_emb

    def rotary(q, k, *rest, **kwargs):
        q_out, k_out = original(q, k, *rest, **kwargs)
        for name, t in (("rope(q)", q_out), ("rope(k)", k_out)):  # [1, H, T, D]
            keep(name, t.transpose(1, 2).reshape(t.shape[0], t.shape[2], -1))
        return q_out, k_out

    family_module.apply_rotary_pos_emb = rotary
    try:
        yield records
    finally:
        family_module.apply_rotary_pos_emb = original
        for handle in handles:
            handle.remove()


@torch.no_grad()
def reference_records(model, prompt, device):
    with captured(model) as records:
        model(input_ids=torch.tensor([prompt], device=device))
    return records


def kiln_records(args, prompt, work):
    """Kiln's ops of the prefill step: (function, layer, flat float tensor)."""
    trace = work / "trace"
    prompts_file = work / "prompt.txt"
    prompts_file.write_text(" ".join(map(str, prompt)) + "\n")
    cmd = [str(args.kiln_run), str(args.so_dir / f"{args.family}-nospec.so"), "--weights",
           str(args.models / args.family), "--prompts", str(prompts_file),
           "--max-new-tokens", "1", "--trace", str(trace)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=kiln_env(args.lib_dir),
                          timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"kiln-run exit {proc.returncode}: {proc.stderr[-800:]}")
    rows = [line.split("\t") for line in (trace / "trace.tsv").read_text().splitlines()]
    first_step = min(int(r[0]) for r in rows)
    out = []
    for step, op, fn, layer, _, _, file in rows:
        if int(step) != first_step:
            continue
        raw = bytearray((trace / file).read_bytes())
        data = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16).float()
        out.append((int(op), fn.replace("kiln_rt_", ""), int(layer), data))
    return sorted(out, key=lambda r: r[0])


def compare(kiln, bf16, fp32):
    """Matches each Kiln op to the nearest same-size transformers tensor, in order."""
    exact = dict(fp32)
    lines, cursor = [], 0
    for op, fn, layer, data in kiln:
        best = None
        for index in range(max(0, cursor - 3), min(len(bf16), cursor + MATCH_WINDOW)):
            name, ref = bf16[index]
            if not torch.is_tensor(ref) or ref.numel() != data.numel():
                continue
            distance = rel(data, ref)
            if best is None or distance < best[0]:
                best = (distance, index, name)
        row = {"op": op, "fn": fn, "layer": layer, "numel": data.numel()}
        if best is None or best[0] > UNMATCHED_ABOVE:
            row["match"] = None
        else:
            distance, index, name = best
            cursor = index + 1
            ref = bf16[index][1]
            row.update(match=name, kiln_vs_bf16=distance, bf16_vs_fp32=rel(ref, exact[name]),
                       kiln_vs_fp32=rel(data, exact[name]))
        lines.append(row)
    return lines


def rope_detail(kiln, bf16, model, prompt_len):
    """Layer 0's rope(q): Kiln and transformers against the rotation done in float64
    from the same bf16 q (transformers' q_proj output) and exact angles, by position
    range; and transformers' cos table against exact cosines."""
    records = dict((name, t) for name, t in bf16)
    q = records.get("model.layers.0.self_attn.q_norm",  # qwen3 normalizes q before rope
                    records["model.layers.0.self_attn.q_proj"]).double()
    hf = records["rope(q)#0"].double()
    kiln_rope = next((d for op, fn, layer, d in kiln if fn == "rope"), None)
    cos_hf = records["rotary(cos,sin)"][0][0].double().cpu()  # [T, D]
    rotary = model.model.rotary_emb
    inv = rotary.inv_freq.double().cpu()
    scaling = float(getattr(rotary, "attention_scaling", 1.0))
    pos = torch.arange(prompt_len, dtype=torch.float64)
    angle = pos[:, None] * inv[None, :]
    cos = torch.cat([angle.cos(), angle.cos()], -1) * scaling
    sin = torch.cat([angle.sin(), angle.sin()], -1) * scaling
    d = cos.shape[1]
    x = q.view(prompt_len, -1, d)
    rotated = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
    exact = (x * cos[:, None] + rotated * sin[:, None]).reshape(prompt_len, -1)
    print(f"rope detail (layer 0 q, head_dim {d}, attention_scaling {scaling:g}, "
          f"transformers' inv_freq {rotary.inv_freq.dtype}): "
          "relative error against float64 rotation of the same q, by positions")
    print(f"  {'positions':>12} {'kiln':>10} {'transformers':>13} {'hf cos table vs exact':>22}")
    for lo, hi in [(0, 1), (1, 16), (16, 64), (64, prompt_len)]:
        if lo >= prompt_len:
            break
        hi = min(hi, prompt_len)
        e = exact[lo:hi]
        k = kiln_rope.double().view(prompt_len, -1)[lo:hi] if kiln_rope is not None else None
        print(f"  {lo:5d}..{hi - 1:<5d} {rel(k, e) if k is not None else float('nan'):10.2e} "
              f"{rel(hf.view(prompt_len, -1)[lo:hi], e):13.2e} "
              f"{float((cos_hf[lo:hi] - cos[lo:hi]).abs().max()):22.2e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True, help="make_models.py --out")
    parser.add_argument("--so-dir", type=Path, required=True, help="the compiled .so's")
    parser.add_argument("--kiln-run", type=Path, required=True)
    parser.add_argument("--lib-dir", type=Path, action="append", default=[])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--family", default="llama")
    parser.add_argument("--prompt-index", type=int, default=-1,
                        help="which prompt of prompts.txt (default: the longest)")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    model_dir = args.models / args.family
    prompts = [[int(t) for t in line.split()]
               for line in (model_dir / "prompts.txt").read_text().splitlines() if line.strip()]
    prompt = max(prompts, key=len) if args.prompt_index < 0 else prompts[args.prompt_index]
    work = args.out / "trace-compare" / args.family
    work.mkdir(parents=True, exist_ok=True)

    model = load_reference_model(model_dir, args.device)
    bf16 = reference_records(model, prompt, args.device)
    kiln = kiln_records(args, prompt, work)
    rope_detail(kiln, bf16, model, len(prompt))
    fp32 = reference_records(model.float(), prompt, args.device)
    del model
    torch.cuda.empty_cache()
    rows = compare(kiln, bf16, fp32)

    print(f"{args.family}: one prompt of {len(prompt)} tokens, "
          f"{len(rows)} Kiln ops in its prefill step")
    print(f"{'op':>4} {'kiln op':12} {'layer':>5} {'transformers tensor':48} "
          f"{'kiln-vs-bf16':>12} {'bf16-vs-fp32':>12} {'kiln-vs-fp32':>12}")
    for r in rows:
        if r["match"] is None:
            print(f"{r['op']:4d} {r['fn']:12} {r['layer']:5d} (no tensor of {r['numel']} "
                  f"elements within {UNMATCHED_ABOVE})")
            continue
        flag = "  <-- " if r["kiln_vs_fp32"] > 2 * r["bf16_vs_fp32"] + 1e-3 else ""
        print(f"{r['op']:4d} {r['fn']:12} {r['layer']:5d} {r['match']:48} "
              f"{r['kiln_vs_bf16']:12.2e} {r['bf16_vs_fp32']:12.2e} "
              f"{r['kiln_vs_fp32']:12.2e}{flag}")
    (work / "trace-compare.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
