#!/usr/bin/env python3
"""Kiln's numbers against transformers', op by op or layer by layer (GPU machine, a diagnostic).

`kiln-run --trace DIR` writes the output of every op of every step (runtime:
kiln_rt_set_trace; DIR/trace.tsv: step, op, function, layer, rows, cols, file).

Dense families (llama, mistral, qwen2, qwen3): one prompt's prefill through Kiln with
the trace on, and the same prompt through transformers in bf16 (sdpa) and in float32
with hooks on every module, on the rotary embedding's outputs, and on the inputs of
o_proj (the attention output) and down_proj (the SwiGLU output). Each Kiln op is
matched to the transformers tensor of the same size, in execution order, that it is
closest to, and one line per op prints
  kiln-vs-bf16   Kiln against transformers bf16 (0 = the same bits)
  bf16-vs-fp32   transformers bf16 against float32: rounding noise of a correct bf16 path
  kiln-vs-fp32   Kiln against float32
so the first op where kiln-vs-fp32 exceeds bf16-vs-fp32 by far is where Kiln's numbers
part from the model's.

DeepSeek-V2/V3 (per layer, at one token): the prompt, optionally followed by a
continuation (--step N: the reference's own first N greedy tokens; --continuation:
given ids), so that the step that predicts token N is traced. Kiln runs the prompt
teacher-forced on that continuation (kiln-run --teacher-forced: a prefill, then one
decode step per token, the path of parity.py's nospec and tf modes) and the last decode
step's trace is read; transformers runs the same steps with a KV cache (parity.py's
greedy loop), in bf16 and in float32, with forward hooks on every decoder layer. One
row per point of each layer at the traced token: the MLA output (o_proj's input), the
residual after attention, the routed experts' combined output (MoE layers), the MLP
output and the layer output, then the final norm and the logits, with kiln-vs-bf16,
bf16-vs-fp32, kiln-vs-fp32 and, on MoE layers, the router's smallest gap in bf16 ulps
(parity.py's router_key_gaps measure: the logit change that flips the last chosen
expert or the last kept group). The first point where kiln-vs-bf16 exceeds
--jump-factor times bf16-vs-fp32 is named. Per MoE layer: the reference's chosen
experts and top-k weights and its closest decisions, the same gap on the teacher-forced
forward over the whole sequence (the path parity.py's router_gaps measures), the
experts transformers' rule picks from Kiln's own MoE input, and which expert set
explains Kiln's traced routed output best (the trace has no expert ids: each candidate
set's weighted sum of transformers' experts on Kiln's input is compared with it).
--mode prefill traces one prefill of prompt + continuation instead (last row).

Usage: python3 test/Parity/trace_compare.py --models DIR --so-dir DIR --kiln-run BIN
           [--lib-dir DIR] --family llama [--prompt-index N] --out OUT
       python3 test/Parity/trace_compare.py ... --family deepseek-v3 --prompt-index 2
           --step 25 [--mode decode|prefill] [--continuation "ID ID ..."]
"""
import argparse
import contextlib
import importlib
import itertools
import json
import math
import shutil
import subprocess
from pathlib import Path

import torch

from parity import (bf16_ulp, greedy_with_logits, kiln_env, kiln_weights,
                    load_reference_model)

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
           str(kiln_weights(args.models, args.family)), "--prompts", str(prompts_file),
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


# ----------------------------------------------------------------------------------------
# Per layer at one token: DeepSeek-V2/V3 (MLA, MoE with routers)
# ----------------------------------------------------------------------------------------

PER_LAYER_FAMILIES = ("deepseek-v2", "deepseek-v3")
MAX_EXPERT_SETS = 4096  # candidate expert sets tried against Kiln's routed output
EXPLAINED_BELOW = 0.1   # a set explains Kiln's routed output if within this distance


def last_row(t):
    """The last token's row of an activation ([1, T, C], [T, C] or a module's tuple
    output, whose first element is the activation), as float on the CPU."""
    if isinstance(t, (tuple, list)):
        t = t[0] if t else None
    if not torch.is_tensor(t) or t.dim() == 0:
        return None
    return t.detach().reshape(-1, t.shape[-1])[-1].float().cpu()


def decoder_layers(model):
    return list(model.model.layers)


def is_moe(mlp):
    return hasattr(mlp, "experts") and hasattr(mlp, "gate")


def router_of(mlp):
    """The MoE block's router: a child whose class name has 'Router' in it, else `gate`
    (DeepSeek-V2's is a plain nn.Linear called gate)."""
    for child in mlp.children():
        if "router" in type(child).__name__.lower():
            return child
    return mlp.gate


def routing_rule(config, mlp):
    """How transformers' DeepSeek MoE block picks experts, from the config: sigmoid
    scores plus e_score_correction_bias as keys, groups ranked by the sum of their two
    best keys (V3, noaux_tc); or softmax scores, groups ranked by their best
    (V2 group_limited_greedy) or no groups (V2 greedy)."""
    router = router_of(mlp)
    bias = getattr(router, "e_score_correction_bias", None)
    if bias is None:
        bias = getattr(mlp, "e_score_correction_bias", None)
    scoring = getattr(config, "scoring_func", None) or \
        ("sigmoid" if config.model_type == "deepseek_v3" else "softmax")
    sigmoid = scoring == "sigmoid"
    method = getattr(config, "topk_method", None)
    grouped = sigmoid or method == "group_limited_greedy"
    return {
        "experts": int(config.n_routed_experts),
        "top_k": int(config.num_experts_per_tok),
        "sigmoid": sigmoid,
        "bias": bias.detach().float().cpu() if torch.is_tensor(bias) and sigmoid else None,
        "groups": int(getattr(config, "n_group", None) or 1) if grouped else 1,
        "topk_group": int(getattr(config, "topk_group", None) or 1) if grouped else 1,
        "norm": bool(getattr(config, "norm_topk_prob", False)),
        "scale": float(getattr(config, "routed_scaling_factor", 1.0) or 1.0),
        "weight": router.weight,
    }


def router_scores(rule, logits):
    return logits.sigmoid() if rule["sigmoid"] else logits.softmax(dim=-1)


def route(rule, logits):
    """One token's routing from its fp32 router logits [experts]: the chosen experts
    (best key first), their weights, and the gaps of the two decisions that could flip:
    the last chosen expert against the best unchosen one of the kept groups, and the
    last kept group against the best dropped one. A gap is the key gap divided by the
    largest slope d key / d logit of the experts involved (the smallest single-logit
    change that closes it), in bf16 ulps of the last chosen expert's logit: parity.py's
    router_key_gaps, one token at a time, decision by decision."""
    logits = logits.float().cpu()
    scores = router_scores(rule, logits)
    keys = scores + rule["bias"] if rule["bias"] is not None else scores.clone()
    slope = scores * (1 - scores)
    experts, k = keys.numel(), rule["top_k"]
    groups, kept = rule["groups"], rule["topk_group"]
    allowed = keys
    group_gap = group_pair = None
    if 1 < groups and kept < groups and experts % groups == 0:
        per = experts // groups
        best = keys.view(groups, per).topk(2 if rule["sigmoid"] else 1, dim=-1)
        group_key = best.values.sum(-1)
        group_slope = slope.view(groups, per).gather(1, best.indices).amax(-1)
        order = torch.argsort(group_key, descending=True)
        last, first_out = int(order[kept - 1]), int(order[kept])
        worst = max(float(group_slope[last]), float(group_slope[first_out]), 1e-30)
        group_gap = float(group_key[last] - group_key[first_out]) / worst
        group_pair = (last, first_out)
        keep = torch.zeros(groups, dtype=torch.bool)
        keep[order[:kept]] = True
        allowed = keys.masked_fill(~keep.repeat_interleave(per), float("-inf"))
    order = torch.argsort(allowed, descending=True)
    chosen = [int(e) for e in order[:k]]
    last = chosen[-1]
    expert_gap, expert_pair = math.inf, None
    if k < experts and math.isfinite(float(allowed[order[k]])):
        first_out = int(order[k])
        worst = max(float(slope[last]), float(slope[first_out]), 1e-30)
        expert_gap = float(allowed[last] - allowed[first_out]) / worst
        expert_pair = (last, first_out)
    ulp = bf16_ulp(float(logits[last]))
    weights = scores[chosen]
    if rule["norm"]:
        weights = weights / (weights.sum() + 1e-20)
    weights = weights * rule["scale"]
    gaps = {"expert": expert_gap / ulp}
    if group_gap is not None:
        gaps["group"] = group_gap / ulp
    return {"experts": chosen, "weights": [round(float(w), 5) for w in weights],
            "gaps_ulps": gaps, "min_gap_ulps": min(gaps.values()),
            "expert_pair": expert_pair, "group_pair": group_pair}


@contextlib.contextmanager
def layer_hooks(model):
    """While a forward runs: the last token's row at each point of each decoder layer
    (points: "embed", "L<i>.mla" o_proj's input, "L<i>.attn" the residual after
    attention, "L<i>.mlp_in" post_attention_layernorm's output, "L<i>.experts" the routed
    experts' combined output, "L<i>.mlp", "L<i>.out", "norm") and, per MoE layer, the
    router's input, fp32 logits, and transformers' own chosen experts and weights."""
    record = {"points": {}, "router": {}}
    points, router = record["points"], record["router"]
    handles, patched = [], []

    def put(key, value):
        row = last_row(value)
        if row is not None:
            points[key] = row

    def pre(key):
        return lambda module, args: put(key, args[0] if args else None)

    def post(key):
        return lambda module, args, out: put(key, out)

    def keep_route(i, logits, out):
        """Router logits only where their meaning is known (route_tokens_to_experts'
        input); chosen ids (the integer tensor) and their weights (a float tensor of the
        same shape) from whatever tuple a router or route_tokens_to_experts returns."""
        entry = router.setdefault(i, {})
        if torch.is_tensor(logits) and logits.is_floating_point():
            entry["logits"] = last_row(logits)
        items = [t for t in (out if isinstance(out, (tuple, list)) else [out])
                 if torch.is_tensor(t) and t.dim() > 0]
        ids = next((t for t in items if not t.is_floating_point()), None)
        if ids is None:
            return
        entry["experts"] = [int(e) for e in ids.reshape(-1, ids.shape[-1])[-1]]
        weights = next((t for t in items if t.is_floating_point() and t.shape == ids.shape),
                       None)
        if weights is not None:
            entry["weights"] = [round(float(w), 5)
                                for w in weights.reshape(-1, weights.shape[-1])[-1]]

    inner = model.model
    handles.append(inner.embed_tokens.register_forward_hook(post("embed")))
    for i, layer in enumerate(decoder_layers(model)):
        o_proj = getattr(layer.self_attn, "o_proj", None)
        if o_proj is not None:
            handles.append(o_proj.register_forward_pre_hook(pre(f"L{i}.mla")))
        norm = layer.post_attention_layernorm
        handles.append(norm.register_forward_pre_hook(pre(f"L{i}.attn")))
        handles.append(norm.register_forward_hook(post(f"L{i}.mlp_in")))
        handles.append(layer.mlp.register_forward_hook(post(f"L{i}.mlp")))
        handles.append(layer.register_forward_hook(post(f"L{i}.out")))
        mlp = layer.mlp
        if not is_moe(mlp):
            continue
        handles.append(mlp.register_forward_pre_hook(
            lambda module, args, i=i: router.setdefault(i, {}).update(
                x=last_row(args[0]) if args else None)))
        # Routers that choose themselves return (ids, weights[, logits]) or the like.
        handles.append(router_of(mlp).register_forward_hook(
            lambda module, args, out, i=i: keep_route(i, None, out)))
        if callable(getattr(mlp, "route_tokens_to_experts", None)):
            # transformers 5: the router hands back logits, the block routes them.
            def routed(*args, _original=mlp.route_tokens_to_experts, _i=i, **kwargs):
                out = _original(*args, **kwargs)
                keep_route(_i, args[0] if args else next(iter(kwargs.values()), None), out)
                return out
            mlp.route_tokens_to_experts = routed
            patched.append(mlp)
        experts = mlp.experts
        if not isinstance(experts, torch.nn.ModuleList):
            handles.append(experts.register_forward_hook(post(f"L{i}.experts")))
        elif callable(getattr(mlp, "moe", None)):  # a loop over a ModuleList in `moe`
            def combined(*args, _original=mlp.moe, _key=f"L{i}.experts", **kwargs):
                out = _original(*args, **kwargs)
                put(_key, out)
                return out
            mlp.moe = combined
            patched.append(mlp)
    handles.append(inner.norm.register_forward_hook(post("norm")))
    try:
        yield record
    finally:
        for handle in handles:
            handle.remove()
        for mlp in patched:  # the instance attributes shadowing the class's methods
            for name in ("route_tokens_to_experts", "moe"):
                mlp.__dict__.pop(name, None)


@torch.no_grad()
def reference_step(model, prompt, continuation, device, mode):
    """The per-layer records of the token that predicts continuation token N = len(
    continuation): decode mode runs the prompt, then each continuation token with the
    KV cache (parity.py's greedy loop) and records the last call only; prefill mode
    runs prompt + continuation in one forward and records its last row."""
    if mode == "prefill" or not continuation:
        with layer_hooks(model) as record:
            out = model(input_ids=torch.tensor([prompt + continuation], device=device))
    else:
        out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True)
        for token in continuation[:-1]:
            out = model(input_ids=torch.tensor([[token]], device=device),
                        past_key_values=out.past_key_values, use_cache=True)
        with layer_hooks(model) as record:
            out = model(input_ids=torch.tensor([[continuation[-1]]], device=device),
                        past_key_values=out.past_key_values, use_cache=True)
    record["points"]["logits"] = out.logits[0, -1].float().cpu()
    for i, entry in record["router"].items():  # logits of versions that hide them
        if "logits" not in entry and entry.get("x") is not None:
            mlp = decoder_layers(model)[i].mlp
            weight = router_of(mlp).weight
            entry["logits"] = torch.nn.functional.linear(
                entry["x"].to(weight.device), weight.float()).float().cpu()
    return record


def read_trace_step(trace, pick):
    """kiln-run's trace: the ops of one step (pick(sorted step numbers) chooses it), each
    {op, fn (without kiln_rt_), layer, rows, cols, data [rows, cols] float}, in order;
    and the step numbers."""
    rows = [line.split("\t") for line in (trace / "trace.tsv").read_text().splitlines()
            if line.strip()]
    steps = sorted({int(r[0]) for r in rows})
    step = pick(steps)
    ops = []
    for s, op, fn, layer, nrows, ncols, file in rows:
        if int(s) != step:
            continue
        nrows, ncols = int(nrows), int(ncols)
        raw = bytearray((trace / file).read_bytes())
        data = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16).float()
        if data.numel() != nrows * ncols:
            raise RuntimeError(f"trace {file}: {data.numel()} values, want {nrows}x{ncols}")
        ops.append({"op": int(op), "fn": fn.replace("kiln_rt_", ""), "layer": int(layer),
                    "rows": nrows, "cols": ncols, "data": data.view(nrows, ncols)})
    ops.sort(key=lambda r: r["op"])  # stable: an op's second output stays after its first
    return step, steps, ops


def kiln_layer_points(ops, hidden, vocab):
    """Kiln's rows at the points of layer_hooks, from one step's ops (last row of each),
    by the op order of DenseDecoder.cpp's DeepSeek layers after kiln-fuse-residual-norm:
      mla_attention (layer i), linear (o_proj), add_rms_norm [out, sum] (the residual
      after attention and post_attention_layernorm), then the dense MLP (linear, linear,
      swiglu, linear) or the MoE block (linear_f32out, not traced; moe: the routed
      experts; the shared experts' linear, linear, swiglu, linear; add), then
      add_rms_norm [out, sum] (the layer's output and the next layer's input norm), or
      in the last layer add, gather_rows, rms_norm (model.norm), linear (lm_head).
    A layer runs from its attention op to the next one. Returns {point: (row, "op N fn")}."""
    found = {}

    def take(key, r):
        found[key] = (r["data"][-1], f"{r['op']} {r['fn']}")

    embedding = next((r for r in ops if r["fn"] == "embedding"), None)
    if embedding is not None:
        take("embed", embedding)
    starts = [n for n, r in enumerate(ops) if r["fn"] in ("mla_attention", "attention")]
    out = None
    for n, start in enumerate(starts):
        segment = ops[start:starts[n + 1] if n + 1 < len(starts) else len(ops)]
        i = segment[0]["layer"]
        take(f"L{i}.mla", segment[0])
        wide = [r for r in segment[1:] if r["cols"] == hidden]
        residual = [r for r in wide if r["fn"] in ("add_rms_norm:sum", "add")]
        if not residual:
            continue
        attn, out = residual[0], residual[-1]
        take(f"L{i}.attn", attn)
        normed = next((r for r in wide if r["op"] == attn["op"] and r["fn"] == "add_rms_norm"),
                      None) or next((r for r in wide if r["op"] > attn["op"] and
                                     r["fn"] == "rms_norm"), None)
        if normed is not None:
            take(f"L{i}.mlp_in", normed)
        moe = next((r for r in segment if r["fn"] == "moe"), None)
        if moe is not None:
            take(f"L{i}.experts", moe)
        if out is attn:
            continue
        take(f"L{i}.out", out)
        inside = [r for r in wide if attn["op"] < r["op"] < out["op"] and
                  r["fn"] in ("linear", "add")]
        if inside:
            take(f"L{i}.mlp", inside[-1])
    if out is not None:
        tail = [r for r in ops if r["op"] > out["op"]]
        norm = [r for r in tail if r["fn"] == "rms_norm" and r["cols"] == hidden]
        if norm:
            take("norm", norm[-1])
        logits = [r for r in tail if r["cols"] == vocab]
        if logits:
            take("logits", logits[-1])
    return found


def run_kiln_step(args, prompt, continuation, next_token, work):
    """kiln-run with the trace on: the ops of the step that predicts continuation token
    N, Kiln's token there, and notes. Decode mode: --teacher-forced on continuation +
    [the reference's token N] after a one-token generation; its last step is the
    decode step fed token N - 1. Prefill mode: prompt + continuation as the prompt."""
    trace = work / "trace"
    if trace.exists():  # kiln-run refuses a non-empty trace directory
        shutil.rmtree(trace)
    decode = args.mode == "decode" and bool(continuation)
    prompt_file, json_file = work / "prompt.txt", work / "kiln-run.json"
    prompt_file.write_text(" ".join(map(str, prompt if decode else prompt + continuation))
                           + "\n")
    cmd = [str(args.kiln_run), str(args.so_dir / f"{args.family}-nospec.so"), "--weights",
           str(kiln_weights(args.models, args.family)), "--prompts", str(prompt_file),
           "--max-new-tokens", "1", "--json", str(json_file), "--trace", str(trace)]
    if decode:
        forced = work / "continuation.json"
        forced.write_text(json.dumps({"continuations": [continuation + [next_token]]}) + "\n")
        cmd += ["--teacher-forced", str(forced)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=kiln_env(args.lib_dir),
                          timeout=300)
    (work / "kiln-run.log").write_text(f"$ {' '.join(cmd)}\nexit {proc.returncode}\n"
                                       f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    if proc.returncode != 0:
        raise RuntimeError(f"kiln-run exit {proc.returncode}: {proc.stderr[-800:]}")
    result = json.loads(json_file.read_text())
    step, steps, ops = read_trace_step(trace, (lambda s: s[-1]) if decode else (lambda s: s[0]))
    notes = []
    if decode:
        tf = result.get("teacher_forced") or {}
        n = len(continuation)
        token = next_token
        for (p, i), got in zip(tf.get("mismatch_positions", []),
                               tf.get("mismatch_tokens", [None] * len(tf.get(
                                   "mismatch_positions", [])))):
            if p == 0 and i == n:
                token = got
            elif p == 0 and i < n:
                notes.append(f"teacher-forced: Kiln's argmax differs at continuation step "
                             f"{i} too (token {got})")
        if len(steps) != n + 2:
            notes.append(f"trace has {len(steps)} steps, expected {n + 2} (generate's "
                         "prefill, the teacher-forced prefill, one decode step per "
                         "continuation token): the traced step may not be the intended one")
        if ops and max(r["rows"] for r in ops if r["fn"] != "gather_rows") != 1:
            notes.append(f"traced step {step} has more than one row: not a one-token "
                         "decode step")
    else:
        outputs = result.get("outputs") or [[None]]
        token = outputs[0][0] if outputs and outputs[0] else None
    return ops, {"step": step, "steps": len(steps), "token": token, "notes": notes,
                 "command": cmd}


@torch.no_grad()
def expert_outputs(mlp, x, count):
    """Each routed expert of transformers' block on one row x [1, hidden] (bf16), as
    float [experts, hidden]: ModuleList experts one by one, fused ones through their
    forward with one expert and weight 1 per call."""
    experts = mlp.experts
    if isinstance(experts, torch.nn.ModuleList):
        return torch.stack([last_row(expert(x)) for expert in experts])
    rows = []
    for e in range(count):
        index = torch.full((x.shape[0], 1), e, dtype=torch.long, device=x.device)
        weight = torch.ones((x.shape[0], 1), dtype=torch.float32, device=x.device)
        rows.append(last_row(experts(x, index, weight)))
    return torch.stack(rows)


@torch.no_grad()
def explain_kiln_routing(model, rule, layer, x, routed):
    """Kiln's trace has no expert ids. From Kiln's own MoE input x (its
    post_attention_layernorm row) this routes with transformers' rule, and ranks every
    candidate expert set by how close its weighted sum of transformers' experts on x
    (weights from x's scores as the rule makes them) is to Kiln's routed output."""
    mlp = decoder_layers(model)[layer].mlp
    weight = rule["weight"]
    logits = torch.nn.functional.linear(x.to(weight.device).float()[None], weight.float())[0]
    result = {"on_kiln_input": route(rule, logits)}
    if routed is None:
        return result
    k = rule["top_k"]
    experts = rule["experts"]
    if math.comb(experts, k) > MAX_EXPERT_SETS:
        result["nearest"] = f"{math.comb(experts, k)} expert sets: too many to try"
        return result
    try:
        dtype = next(mlp.experts.parameters()).dtype
        outputs = expert_outputs(mlp, x.to(weight.device, dtype)[None], experts)
    except Exception as error:  # an experts module this harness cannot drive alone
        result["nearest"] = f"experts not callable one by one: {type(error).__name__}: {error}"
        return result
    scores = router_scores(rule, logits.float().cpu())
    ranked = []
    for subset in itertools.combinations(range(experts), k):
        w = scores[list(subset)]
        if rule["norm"]:
            w = w / (w.sum() + 1e-20)
        combined = (w[:, None] * rule["scale"] * outputs[list(subset)]).sum(0)
        ranked.append((rel(routed, combined), list(subset)))
    ranked.sort(key=lambda r: r[0])
    result["nearest"] = [{"experts": s, "rel": d} for d, s in ranked[:2]]
    return result


def per_layer_compare(kiln, bf16, fp32, jump, floor):
    """Rows of the per-layer table in layer order; marks the points above jump x
    bf16-vs-fp32 (+ floor) and returns (rows, the first such point or None)."""
    names = ["embed"]
    layers = sorted({int(k.split(".")[0][1:]) for k in bf16 if k.startswith("L")})
    for i in layers:
        names += [f"L{i}.{p}" for p in ("mla", "attn", "experts", "mlp", "out")]
    names += ["norm", "logits"]
    rows, first = [], None
    for name in names:
        if name not in bf16:
            continue
        row = {"point": name, "kiln_op": kiln[name][1] if name in kiln else None}
        ref = bf16[name]
        exact = fp32.get(name)
        row["bf16_vs_fp32"] = rel(ref, exact) if exact is not None else None
        if name in kiln:
            data = kiln[name][0]
            if data.numel() != ref.numel():
                row["kiln_op"] += f" ({data.numel()} values, want {ref.numel()})"
            else:
                row["kiln_vs_bf16"] = rel(data, ref)
                row["kiln_vs_fp32"] = rel(data, exact) if exact is not None else None
                noise = row["bf16_vs_fp32"] or 0.0
                row["jump"] = row["kiln_vs_bf16"] > jump * noise + floor
                if row["jump"] and first is None:
                    first = row
        rows.append(row)
    return rows, first


def fmt(value, width=12):
    return f"{value:{width}.2e}" if isinstance(value, float) else f"{'-':>{width}}"


def gap_text(entry):
    if entry is None:
        return "-"
    which = min(entry["gaps_ulps"], key=entry["gaps_ulps"].get)
    return f"{entry['min_gap_ulps']:.1f} ({which[0]})"


def per_layer_main(args, model_dir, prompt, work):
    model = load_reference_model(model_dir, args.device)
    config = model.config
    reference_tokens = None
    if args.step is not None:
        # The reference's own greedy tokens, as parity.py's reference computes them.
        reference_tokens, _ = greedy_with_logits(model, prompt, args.step + 1, args.device)
        continuation = reference_tokens[:args.step]
    else:
        continuation = [int(t) for t in args.continuation.replace(",", " ").split()] \
            if args.continuation else []
    n = len(continuation)
    bf16 = reference_step(model, prompt, continuation, args.device, args.mode)
    logits = bf16["points"]["logits"]
    top = torch.topk(logits, 2)
    next_token = int(top.indices[0])
    # The teacher-forced forward over the whole sequence: parity.py's router_gaps path.
    forward = reference_step(model, prompt, continuation, args.device, "prefill") \
        if args.mode == "decode" and continuation else None

    kiln_ops, kiln_info = run_kiln_step(args, prompt, continuation, next_token, work)
    hidden, vocab = int(config.hidden_size), int(config.vocab_size)
    kiln = kiln_layer_points(kiln_ops, hidden, vocab)

    layers = decoder_layers(model)
    routing = {}
    for i, layer in enumerate(layers):
        if not is_moe(layer.mlp) or i not in bf16["router"]:
            continue
        rule = routing_rule(config, layer.mlp)
        entry = bf16["router"][i]
        info = {"reference": route(rule, entry["logits"])}
        if "experts" in entry:
            info["transformers_experts"] = entry["experts"]
            info["transformers_weights"] = entry["weights"]
            if sorted(entry["experts"]) != sorted(info["reference"]["experts"]):
                info["rule_mismatch"] = True  # this harness's rule is not transformers'
        if forward is not None and i in forward["router"]:
            info["forward"] = route(rule, forward["router"][i]["logits"])
        if f"L{i}.mlp_in" in kiln:
            routed = kiln[f"L{i}.experts"][0] if f"L{i}.experts" in kiln else None
            info.update(explain_kiln_routing(model, rule, i, kiln[f"L{i}.mlp_in"][0], routed))
        routing[i] = info

    model = model.float()
    fp32 = reference_step(model, prompt, continuation, args.device, args.mode)
    for i, info in routing.items():  # the fp32 model may route otherwise at a near-tie
        if i in fp32["router"] and "logits" in fp32["router"][i]:
            info["fp32"] = route(routing_rule(config, layers[i].mlp), fp32["router"][i]["logits"])
    del model
    torch.cuda.empty_cache()
    rows, first = per_layer_compare(kiln, bf16["points"], fp32["points"], args.jump_factor,
                                    args.jump_floor)

    # ---- report ----
    where = (f"the decode step fed continuation token {n - 1} (position "
             f"{len(prompt) + n - 1}), which predicts token {n}" if args.mode == "decode" and n
             else f"the prefill's last row (position {len(prompt) + n - 1}), which predicts "
                  f"token {n}")
    print(f"{args.family}: prompt {args.prompt_index} ({len(prompt)} tokens) + {n} "
          f"continuation tokens; traced: {where}; Kiln step s{kiln_info['step']} of "
          f"{kiln_info['steps']}")
    margin = float(top.values[0] - top.values[1])
    kiln_token = kiln_info["token"]
    line = (f"reference token {next_token} (top-2 margin {margin:.4f} to token "
            f"{int(top.indices[1])}, top logit {float(top.values[0]):.3f}, bf16 ulp "
            f"{bf16_ulp(float(top.values[0])):.4f})")
    if kiln_token is not None and kiln_token != next_token:
        line += (f"; Kiln token {kiln_token}, {float(top.values[0] - logits[kiln_token]):.4f}"
                 " below the reference's top")
    elif kiln_token is not None:
        line += "; Kiln agrees"
    print(line)
    if reference_tokens is not None and reference_tokens[n] != next_token:
        print(f"note: the greedy loop's token {n} was {reference_tokens[n]}, the traced "
              f"run's {next_token}: the same steps gave two answers (nondeterministic "
              "kernels?)")
    for note in kiln_info["notes"]:
        print(f"note: {note}")

    print(f"{'point':12} {'kiln-vs-bf16':>12} {'bf16-vs-fp32':>12} {'kiln-vs-fp32':>12} "
          f"{'router gap':>11} {'fwd gap':>9}  kiln op")
    for r in rows:
        layer = int(r["point"].split(".")[0][1:]) if r["point"].startswith("L") else None
        gap = fwd = "-"
        moe_row = "experts" if any(x["point"] == f"L{layer}.experts" for x in rows) else "mlp"
        if layer in routing and r["point"] == f"L{layer}.{moe_row}":
            gap = gap_text(routing[layer]["reference"])
            fwd = gap_text(routing[layer].get("forward"))
        flag = "  <-- first jump" if r is first else ("  <--" if r.get("jump") else "")
        print(f"{r['point']:12} {fmt(r.get('kiln_vs_bf16'))} {fmt(r.get('bf16_vs_fp32'))} "
              f"{fmt(r.get('kiln_vs_fp32'))} {gap:>11} {fwd:>9}  "
              f"{r['kiln_op'] or '(not found in the trace)'}{flag}")
    if first is None:
        print(f"no point where kiln-vs-bf16 exceeds {args.jump_factor:g} x bf16-vs-fp32 "
              f"+ {args.jump_floor:g}")
    else:
        print(f"first jump: {first['point']}: kiln-vs-bf16 {first['kiln_vs_bf16']:.2e} > "
              f"{args.jump_factor:g} x bf16-vs-fp32 {first['bf16_vs_fp32'] or 0.0:.2e} "
              f"+ {args.jump_floor:g}")

    differs, ties = [], []
    for i, info in routing.items():
        ref = info["reference"]
        chosen = info.get("transformers_experts", ref["experts"])
        weights = info.get("transformers_weights", ref["weights"])
        parts = [f"{d} {ref['expert_pair' if d == 'expert' else 'group_pair']} "
                 f"{g:.1f} ulps" for d, g in ref["gaps_ulps"].items()]
        print(f"L{i} router: reference experts {chosen} weights {weights}; closest "
              f"decisions (last kept, first out): {', '.join(parts)}")
        if info.get("rule_mismatch"):
            print(f"    note: this harness's routing rule picks {ref['experts']}, transformers "
                  f"picked {chosen}: its gaps are not transformers' decisions")
        if "forward" in info:
            print(f"    teacher-forced forward (parity.py's router_gaps path): experts "
                  f"{info['forward']['experts']}, min gap {gap_text(info['forward'])} ulps")
        if "fp32" in info and sorted(info["fp32"]["experts"]) != sorted(chosen):
            print(f"    the fp32 model routes to experts {info['fp32']['experts']} here: "
                  f"bf16-vs-fp32 from this layer on includes that flip")
        mine = info.get("on_kiln_input")
        if mine is not None:
            print(f"    transformers' rule on Kiln's MoE input: experts {mine['experts']}, "
                  f"min gap {gap_text(mine)} ulps")
        nearest = info.get("nearest")
        if isinstance(nearest, list) and nearest:
            best = nearest[0]
            second = f"; next {nearest[1]['experts']} {nearest[1]['rel']:.2e}" \
                if len(nearest) > 1 else ""
            loose = "; no set explains it closely" if best["rel"] > EXPLAINED_BELOW else ""
            print(f"    Kiln's routed output is closest to experts {best['experts']} "
                  f"(rel {best['rel']:.2e}{second}{loose})")
            if sorted(best["experts"]) != sorted(chosen):
                same_input = mine is not None and sorted(mine["experts"]) == \
                    sorted(best["experts"])
                differs.append(f"L{i} (Kiln {sorted(best['experts'])}, reference "
                               f"{sorted(chosen)}: " +
                               ("what transformers' rule picks from Kiln's input, so the "
                                "flip comes from upstream differences)" if same_input else
                                "not what transformers' rule picks from Kiln's input: "
                                "Kiln's routing or experts differ)"))
        elif nearest:
            print(f"    Kiln's expert set not inferred: {nearest}")
        if ref["min_gap_ulps"] <= args.tie_ulps:
            ties.append(i)
    if routing:
        if differs:
            print("routed expert set (inferred from Kiln's routed output): differs at "
                  + "; ".join(differs))
        else:
            print("routed expert set: Kiln's matches the reference's in every MoE layer "
                  "(inferred from the routed output where the set could be tried)")
        print(f"near-tie routing decisions of the reference (min gap <= {args.tie_ulps:g} "
              f"ulps) at the traced token: "
              + (", ".join(f"L{i} {gap_text(routing[i]['reference'])}" for i in ties)
                 if ties else "none"))

    summary = {"family": args.family, "prompt_index": args.prompt_index,
               "prompt_len": len(prompt), "continuation": continuation, "mode": args.mode,
               "reference_token": next_token, "reference_margin": margin,
               "kiln": {k: v for k, v in kiln_info.items()},
               "rows": rows, "first_jump": first["point"] if first else None,
               "routing": {str(i): {k: v for k, v in info.items()}
                           for i, info in routing.items()}}
    name = f"per-layer-p{args.prompt_index}-n{n}-{args.mode}.json"
    (work / name).write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(f"details: {work / name}")


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
    per_layer = parser.add_argument_group(
        "per layer at one token (" + ", ".join(PER_LAYER_FAMILIES) + ")")
    per_layer.add_argument("--step", type=int, default=None,
                           help="trace the step that predicts greedy token N: the prompt "
                                "plus the reference's own first N greedy tokens")
    per_layer.add_argument("--continuation", default=None,
                           help="instead of --step: the tokens after the prompt, space- or "
                                "comma-separated (the step after the last one is traced)")
    per_layer.add_argument("--mode", choices=["decode", "prefill"], default="decode",
                           help="decode: the prompt's prefill, then one decode step per "
                                "continuation token (Kiln teacher-forced, transformers with "
                                "a KV cache), as parity.py's nospec and tf modes run; "
                                "prefill: prompt + continuation as one prefill, last row")
    per_layer.add_argument("--jump-factor", type=float, default=2.0,
                           help="a point jumps where kiln-vs-bf16 > this x bf16-vs-fp32 "
                                "+ --jump-floor")
    per_layer.add_argument("--jump-floor", type=float, default=1e-3)
    per_layer.add_argument("--tie-ulps", type=float, default=4.0,
                           help="routing decisions of the reference within this many bf16 "
                                "ulps are listed as near-ties")
    args = parser.parse_args()
    model_dir = args.models / args.family
    prompts = [[int(t) for t in line.split()]
               for line in (model_dir / "prompts.txt").read_text().splitlines() if line.strip()]
    prompt = max(prompts, key=len) if args.prompt_index < 0 else prompts[args.prompt_index]
    if args.prompt_index < 0:
        args.prompt_index = prompts.index(prompt)
    work = args.out / "trace-compare" / args.family
    work.mkdir(parents=True, exist_ok=True)

    if args.family in PER_LAYER_FAMILIES:
        if args.step is not None and args.continuation:
            parser.error("--step and --continuation are alternatives")
        if args.step is not None and args.step < 0:
            parser.error("--step must be >= 0")
        per_layer_main(args, model_dir, prompt, work)
        return
    if args.step is not None or args.continuation:
        parser.error(f"--step and --continuation are for {', '.join(PER_LAYER_FAMILIES)}; "
                     f"{args.family} is traced op by op over its prompt's prefill")

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
