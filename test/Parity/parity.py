#!/usr/bin/env python3
"""The truth test: Kiln's compiled models generate Hugging Face transformers' greedy tokens.

For every family built by make_models.py:
  reference   transformers, one prompt at a time, no padding: a greedy loop of plain
              forward calls with a KV cache (what greedy `generate` does; it is
              cross-checked against `generate` itself). Per prompt and not batched,
              because a left-padded batch changes the reference's own numerics (masked
              rows, shifted positions) while Kiln's batch is ragged and unpadded.
              Recorded: the tokens, the logits of every step, and so the top-1/top-2
              margin of every step.
  kiln-run    every prompt in one batch, in these modes:
              nospec     <family>-nospec.so: tokens, prefill logits, memory
              eager      <family>-nospec.so --cuda-graphs 0: every decode step launched
                         eagerly, against nospec's replayed CUDA graphs
              tf         <family>-nospec.so --teacher-forced (the reference's tokens)
              ngram      <family>-ngram.so --spec ngram:4
              replayngram, replaydraft  (Mamba2, GDN families) the same with --ssm-mode replay:
                         <family>-replayngram.so / -replaydraft.so (docs/replay.md)
              mtp        (DeepSeek, with configs/<family>-tiny-mtp.json) <family>-mtp.so
                         --spec mtp:1 on <family>-mtp/ (the target plus an MTP module):
                         lossless, and every guess of the module equals a PyTorch
                         reference of it written here (transformers does not run MTP
                         modules; docs/mtp.md)
              draft      <family>-draft.so + the 1-layer draft model --spec draft:4
              selfdraft  <family>-draft.so + the target itself as draft (nearly every
                         draft accepted: the full-accept path, where `draft` mostly
                         rejects)
              fp8        <family>-fp8nospec.so (--kv-dtype fp8): an e4m3 KV cache
              fp8tf      the same, teacher-forced on the reference's tokens
              fp8ngram   <family>-fp8ngram.so --spec ngram:4
              f16        <family>-f16nospec.so (--kv-dtype f16): an f16 KV cache next to
                         the bf16 activations, held to nospec's checks
              f16ngram   <family>-f16ngram.so --spec ngram:4, held to ngram's checks
                         (lossless against f16)
              ring       (sliding-window families) <family>-ringnospec.so: the windowed
                         layers' KV in rings of pages per slot (--kv-ring-window, pages
                         of 16, steps of 64, so the longer prompts wrap their rings):
                         tokens, logits and memory like nospec
              ringngram  <family>-ringngram.so --spec ngram:4, lossless against ring
              ropes      (families with RoPE) <family>-ropesnospec.so (--pair-ropes: a
                         layer's q and k rotated in one launch): the same tokens and
                         prefill logits' bits as nospec
              ropesngram <family>-ropesngram.so --spec ngram:4, lossless against nospec
              skinny     <family>-nospec.so with the skinny GEMM on every handle
                         (KILN_GEMM_SKINNY=mma, a batch-1 model's GEMM): tokens and
                         logits like nospec
              glu        (families with a gated MLP) <family>-glunospec.so
                         (--fuse-pair-swiglu: the gate/up pair's SwiGLU as its skinny
                         GEMM's epilogue), skinny GEMMs: the same tokens and prefill
                         logits' bits as skinny
              glungram   <family>-glungram.so --spec ngram:4, skinny GEMMs: lossless
                         against skinny
              nccl       <family>-collectives.so (--tp-collectives) as one NCCL rank
                         (--nccl-one-rank): tokens and prefill logits bitwise nospec's,
                         the communicator within its planned reserve
              tp2        <family>-tp2.so (--tp 2) on two GPUs (kiln-run --ranks 2):
                         nospec's greedy tokens, prefill logits within 2e-2 (relative
                         L2) of nospec's, memory per rank as planned; skipped, saying
                         so, on a machine with fewer than 2 GPUs
Checks (one line per family and mode, PASS or FAIL with the numbers):
  tokens     identical to the reference for --max-new-tokens on every prompt; a first
             difference at a step whose reference top-1/top-2 margin is under the bf16
             tolerance, with Kiln's token within that tolerance of the reference's top
             logit, is a near-tie: counted and reported, and that prompt's comparison
             stops there (the texts diverge after it). The tolerance of a step is the
             larger of a fixed one (--tie-floor, --tie-ulps) and a measured one: twice
             the reference's own bf16 error on its top margins, against the same weights
             in fp32 teacher-forced on the same tokens (measured_tolerance).
             MoE models add routing near-ties: a first difference at a step whose
             token has, in some MoE layer, a router k-th/(k+1)-th logit gap of at most
             --router-tie-ulps bf16 ulps on the reference's path (router_gaps): another
             correct GEMM may pick the other expert there. DeepSeek-style routers
             (sigmoid keys plus a bias, expert groups) measure their key and group gaps
             as the logit change that closes them. Counted and reported apart.
  logits     prefill logits at each prompt's last token: ||k - r|| / ||r|| <= --logit-rtol,
             or, where transformers' bf16 logits are themselves far from the same weights
             in fp32 (short prompts of random models), Kiln's distance to the fp32 logits
             at most --logit-fp32-factor times transformers' (reported by prompt).
  tf         teacher-forced argmax: every disagreement must be at a near-tie step (or a
             routing near-tie), or Kiln's token there must be the argmax of the same
             weights in fp32 teacher-forced on the same tokens (the bf16 reference is
             the one off; counted and reported).
  lossless   speculative outputs == the nospec outputs exactly (Kiln against Kiln).
  graphs     eager outputs == the nospec outputs exactly, nospec replayed CUDA graphs and
             eager replayed none.
  memory     used device bytes within --mem-rtol of the planned bytes.
  fp8        An FP8 KV cache is lossy, so its decode tokens are not held to the reference:
             fp8 gates on the prefill logits (--logit-rtol: a prompt's own attention reads
             the step's bf16 K/V) and memory, and reports its token agreement with the
             reference (tokens before each prompt's first difference), with the bf16
             run (nospec's tokens, when nospec ran: what the FP8 cache alone costs; the
             MLA families' FP8 latent cache too) and fp8tf's
             teacher-forced agreement; fp8ngram must be lossless against fp8 (Kiln
             against Kiln, the same quantized cache).
  f16        An f16 KV cache holds the bf16 K/V exactly wherever they are in fp16's normal
             range, so it is held to the bf16 criteria: f16 as nospec (tokens identical
             to the reference up to near-ties, prefill logits, memory), f16ngram as
             ngram (those tokens, lossless against f16, memory).
A kiln-run failure is a FAIL with its stderr shown; the other cases still run. The
summary goes to OUT/parity.json; the exit status is 1 if anything failed.

Usage: python3 test/Parity/parity.py --models DIR --so-dir .carry/models \
           --kiln-run BUILD/bin/kiln-run --lib-dir BUILD/lib --out OUT
"""
import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_models import (build_model, keep_rope_in_float32,  # noqa: E402  (same folder)
                         reference_attention, use_eager_experts)

ALL_MODES = ["nospec", "eager", "tf", "ngram", "draft", "selfdraft", "fp8", "fp8tf",
             "fp8ngram", "f16", "f16ngram", "replayngram", "replaydraft", "mtp", "ring",
             "ringngram", "nccl", "tp2", "ropes", "ropesngram", "skinny", "glu", "glungram"]
# Modes a family cannot run, with the reason (reported as skipped, never as passed).
_NO_F16_MLA = ("the MLA kernels read a bf16 or FP8 latent cache (kiln-compile refuses "
               "--kv-dtype f16 for mla_attention layers)")
UNSUPPORTED_MODES = {
    "nemotron-h": {
        "selfdraft": "the target as its own draft model is a Mamba2 model, whose recurrent "
                     "state a draft model cannot rewind (kiln_model_truncate refuses it)",
    },
    "qwen3-next": {
        "selfdraft": "the target as its own draft model has Gated DeltaNet layers, whose "
                     "recurrent state a draft model cannot rewind (kiln_model_truncate "
                     "refuses it)",
    },
    "deepseek-v2": {mode: _NO_F16_MLA for mode in ("f16", "f16ngram")},
    "deepseek-v3": {mode: _NO_F16_MLA for mode in ("f16", "f16ngram")},
}
SPEC_MODES = {"ngram", "draft", "selfdraft", "fp8ngram", "f16ngram", "replayngram",
              "replaydraft", "mtp", "ringngram", "ropesngram", "glungram"}
# q and k rotated in one launch (kiln-compile --pair-ropes); families without RoPE layers
# (gpu-prepare.sh compiles these for the others) skip them.
ROPE_PAIR_MODES = {"ropes", "ropesngram"}
# The skinny GEMM on every handle (KILN_GEMM_SKINNY=mma; a batch-1 model's default), and
# with it each gated MLP's gate/up pair and SwiGLU in one launch (kiln-compile
# --fuse-pair-swiglu: the SwiGLU as the pair GEMM's epilogue), which runs only there.
SKINNY_MODES = {"skinny", "glu", "glungram"}
GLU_MODES = {"glu", "glungram"}
# The recurrent layers' replay mode (--ssm-mode replay); families without Mamba2 or Gated
# DeltaNet layers skip it.
REPLAY_MODES = {"replayngram", "replaydraft"}
FP8_MODES = {"fp8", "fp8tf", "fp8ngram"}
# tp2 against the one-GPU run: the bound on the prefill logits (relative L2).
TP_LOGIT_RTOL = 2e-2
# An f16 KV cache (--kv-dtype f16): the bf16 modes' checks, f16ngram lossless against f16.
F16_MODES = {"f16", "f16ngram"}
# Sliding-window KV rings (--kv-ring-window, pages of 16, steps of 64: rings of a few
# pages that the longer prompts wrap around); families without windows skip them.
RING_MODES = {"ring", "ringngram"}
DRAFT_LEN = 4
# The run each mode's checks compare with, besides nospec (which every mode's are).
BASELINE_MODES = {"fp8tf": "fp8", "fp8ngram": "fp8", "f16ngram": "f16", "ringngram": "ring",
                  "glu": "skinny", "glungram": "skinny"}


def with_baselines(modes):
    """The modes, each preceded by the runs its checks compare with where those were not
    asked for first: without them a lossless or graphs check has nothing to compare and
    fails ("unchecked")."""
    ordered = []
    for mode in modes:
        for base in ("nospec", BASELINE_MODES.get(mode)):
            if base and base != mode and base not in ordered:
                ordered.append(base)
        if mode not in ordered:
            ordered.append(mode)
    return ordered


# ----------------------------------------------------------------------------------------
# Reference
# ----------------------------------------------------------------------------------------

def bf16_ulp(x):
    """The spacing of bf16 numbers (8 significant bits) at magnitude x."""
    x = abs(x)
    return 2.0 ** (math.floor(math.log2(x)) - 7) if x > 0 else 2.0 ** -133


def use_attention(model, implementation):
    """Switch a loaded transformers model's attention implementation in place."""
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(implementation)
    else:
        model.config._attn_implementation = implementation


def load_reference_model(model_dir, device):
    from transformers import AutoConfig
    config = AutoConfig.from_pretrained(str(model_dir))
    model = build_model(config, device)
    from safetensors.torch import load_file
    state = {}
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        state.update(load_file(str(path), device=device))
    if set(state) == set(model.state_dict()):
        model.load_state_dict(state, strict=True)
        return model
    # MoE models: the checkpoint keeps one tensor per expert, the model stacks them;
    # transformers' loader converts.
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=torch.bfloat16,
        attn_implementation=reference_attention(config)).to(device)
    keep_rope_in_float32(model)
    use_eager_experts(model)
    model.eval()
    return model


@torch.no_grad()
def greedy_with_logits(model, prompt, count, device, after_forward=None):
    """Greedy tokens and the float32 logits of every step (step i predicts token i);
    after_forward() runs after each forward (the prompt's, then one a step)."""
    out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True)
    tokens, logits = [], []
    for i in range(count):
        if after_forward:
            after_forward()
        step = out.logits[0, -1].float()
        logits.append(step)
        tokens.append(int(torch.argmax(step)))
        if i + 1 < count:
            out = model(input_ids=torch.tensor([[tokens[-1]]], device=device),
                        past_key_values=out.past_key_values, use_cache=True)
    return tokens, torch.stack(logits)


@torch.no_grad()
def generate_tokens(model, prompt, count, device):
    """transformers' own greedy generate, to check that the loop above is the same."""
    import copy
    config = copy.deepcopy(model.generation_config)
    config.do_sample = False
    config.max_new_tokens = count
    config.min_new_tokens = None
    config.eos_token_id = None   # random weights: never stop early
    config.pad_token_id = 0
    ids = torch.tensor([prompt], device=device)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
    return out[0, len(prompt):].tolist()


def reference(model_dir, prompts, count, args):
    """Per prompt: tokens, step logits, margins and near-tie tolerances."""
    model = load_reference_model(model_dir, args.device)
    result = {"tokens": [], "logits": [], "margin": [], "tol": [], "generate_check": "ok"}
    # MoE models: the routers' gaps at the token each step predicts from, on the greedy
    # path itself (KV cache, one token a forward): where the reference's own choice sits
    # on a near-tie, as at DeepSeek-V3's prompt 2 step 25 (H200, 2026-12-06: a group
    # decision 1.0 ulp from flipping there, 2.1 on the teacher-forced forward).
    captured, path_gaps = [], []
    handles = hook_routers(model, captured.append)

    def after_forward():
        if captured:
            path_gaps[-1].append(float(min(gaps[-1] for gaps in captured)))
        captured.clear()
    for prompt in prompts:
        path_gaps.append([])
        captured.clear()  # the previous prompt's generate cross-check
        tokens, logits = greedy_with_logits(model, prompt, count, args.device, after_forward)
        top2 = torch.topk(logits, 2, dim=-1).values.cpu()
        margin = (top2[:, 0] - top2[:, 1]).tolist()
        tol = [max(args.tie_floor, args.tie_ulps * bf16_ulp(t)) for t in top2[:, 0].tolist()]
        result["tokens"].append(tokens)
        result["logits"].append(logits.cpu())
        result["margin"].append(margin)
        result["tol"].append(tol)
        if result["generate_check"] == "ok":
            try:
                generated = generate_tokens(model, prompt, count, args.device)
                if generated != tokens:
                    result["generate_check"] = (
                        f"differs on a {len(prompt)}-token prompt at step "
                        f"{first_difference(generated, tokens)}")
            except Exception as error:  # only a cross-check: report, don't stop
                result["generate_check"] = f"skipped: {type(error).__name__}: {error}"[:200]
    for handle in handles:
        handle.remove()
    # A second correct bf16 implementation (eager attention instead of sdpa): how far two
    # transformers paths are from each other, the scale of rounding noise in these models.
    use_attention(model, "eager")
    result["eager_first"] = [
        model(input_ids=torch.tensor([prompt], device=args.device)).logits[0, -1].float().cpu()
        for prompt in prompts]
    use_attention(model, reference_attention(model.config))
    # The closer of the two paths counts: either one being a rounding away from another
    # expert set means the reference's token there is not a decision it can make.
    bf16_layers = router_gap_layers(model, prompts, result["tokens"], args.device)
    forward_gaps = None if bf16_layers is None else [
        g.min(dim=0).values[len(prompt) - 1:].tolist() for prompt, g in zip(prompts, bf16_layers)]
    if forward_gaps is not None:
        result["router_gap_forward"] = forward_gaps
        result["router_gap_path"] = path_gaps
        result["router_gap"] = [[min(a, b) for a, b in zip(f, g)]
                                for f, g in zip(forward_gaps, path_gaps)]
    else:
        result["router_gap"] = None
    # The same weights in float32, teacher-forced on the reference's own continuation: how
    # far transformers' bf16 logits are from exact arithmetic at every step. That error is
    # the reference's own uncertainty: a step whose bf16 top-1/top-2 margin is within it
    # is a near-tie that the reference itself does not resolve (measured_tolerance).
    model = model.float()
    if bf16_layers is not None:
        fp32_layers = router_gap_layers(model, prompts, result["tokens"], args.device)
        result["router_tie_measured"] = measured_routing_ties(bf16_layers, fp32_layers,
                                                              prompts, args)
    result["fp32_first"], result["fp32_steps"] = [], []
    for prompt, tokens in zip(prompts, result["tokens"]):
        ids = torch.tensor([prompt + tokens[:-1]], device=args.device)
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:].float().cpu()
        result["fp32_steps"].append(logits)
        result["fp32_first"].append(logits[0])
    result["fp32_argmax"] = [steps.argmax(dim=-1).tolist() for steps in result["fp32_steps"]]
    result["tol_fixed"] = [list(t) for t in result["tol"]]
    for p, steps in enumerate(result["fp32_steps"]):
        for i, exact in enumerate(steps):
            measured = measured_tolerance(result["logits"][p][i].cpu(), exact, args)
            result["tol"][p][i] = max(result["tol"][p][i], measured)
    del model
    torch.cuda.empty_cache()
    return result


@torch.no_grad()
def router_gaps(model, prompts, continuations, device):
    """MoE models: per prompt and step, the smallest gap (over the MoE layers) between the
    router's last chosen and first unchosen expert at the token that predicts that step,
    in bf16 ulps of the chosen expert's logit, teacher-forced on the reference's tokens;
    None for dense models. Router logits come from bf16 activations: within a couple of
    ulps, another correct implementation (another accumulation order upstream) may
    choose the other expert, which changes the layer's output by far more than rounding
    (a routing near-tie). Routers that choose on other keys than the logits (DeepSeek's
    sigmoid-plus-bias keys and expert groups, see router_key_gaps) have their key gaps
    turned into the logit change that closes them."""
    layers = router_gap_layers(model, prompts, continuations, device)
    if layers is None:
        return None
    return [g.min(dim=0).values[len(prompt) - 1:].tolist() for prompt, g in zip(prompts, layers)]


@torch.no_grad()
def router_gap_layers(model, prompts, continuations, device):
    """Per prompt: router_key_gaps of every MoE layer at every token of prompt +
    continuation[:-1], teacher-forced ([layers, tokens]); None for dense models."""
    captured = []
    handles = hook_routers(model, captured.append)
    if not handles:
        return None
    try:
        layers = []
        for prompt, tokens in zip(prompts, continuations):
            captured.clear()
            model(input_ids=torch.tensor([prompt + tokens[:-1]], device=device))
            layers.append(torch.stack(captured))
        return layers
    finally:
        for h in handles:
            h.remove()


def measured_routing_ties(bf16_layers, fp32_layers, prompts, args):
    """Per prompt and step: whether some MoE layer's router gap is within the reference's
    own error on it, twice |bf16 gap - fp32 gap| (the same weights in fp32, teacher-forced
    on the same tokens), as measured_tolerance does for the logits: a routing decision
    the bf16 reference cannot make reliably either."""
    ties = []
    for prompt, b, f in zip(prompts, bf16_layers, fp32_layers):
        slack = (2.0 * (b - f).abs()).clamp_min(args.router_tie_ulps)
        ties.append((b <= slack).any(dim=0)[len(prompt) - 1:].tolist())
    return ties


def hook_routers(model, keep):
    """Forward hooks on the MoE routers: keep(gaps) gets router_key_gaps of every token
    of each router call. Returns the hook handles ([] for a dense model)."""
    routers = [m for m in model.modules()
               if type(m).__name__.endswith("Router") and hasattr(m, "top_k")]

    def hook(module, inputs, output):
        logits = (output[0] if isinstance(output, tuple) else output).float()
        keep(router_key_gaps(module, logits.reshape(-1, logits.shape[-1])).cpu())
    return [r.register_forward_hook(hook) for r in routers]


def bf16_ulps_of(values):
    """bf16_ulp of every element of a tensor."""
    return torch.exp2(torch.floor(torch.log2(values.abs().clamp_min(1e-30))) - 7)


def router_key_gaps(module, logits):
    """Per token: how far (bf16 ulps of a logit) the router's logits are from choosing
    other experts. Plain top-k routers choose on the logits: the k-th minus the
    (k+1)-th. DeepSeek-V3 / Nemotron-H (sigmoid keys plus e_score_correction_bias, groups
    ranked by their two best keys) and DeepSeek-V2's group_limited_greedy (softmax keys,
    groups ranked by their best) choose on keys: each key gap (the last chosen expert
    against the best unchosen one of the kept groups, and the last kept group against the
    best dropped one) is divided by the largest slope d key / d logit of the experts
    involved, i.e. the smallest single-logit change that closes it."""
    k = module.top_k
    bias = getattr(module, "e_score_correction_bias", None)
    method = getattr(module, "topk_method", None)
    if bias is None and method != "group_limited_greedy":
        top = torch.topk(logits, k + 1, dim=-1).values
        return (top[:, k - 1] - top[:, k]) / bf16_ulps_of(top[:, k - 1])
    if bias is not None:
        scores = logits.sigmoid()
        keys = scores + bias.float()
        slope = scores * (1 - scores)
    else:
        keys = logits.softmax(dim=-1)
        slope = keys * (1 - keys)
    tokens, experts = keys.shape
    # DeepSeek-V2's routers name the group count num_group, V3's and Nemotron-H's
    # n_group; either may only be in the module's config.
    config = getattr(module, "config", None)
    groups = (getattr(module, "num_group", None) or getattr(module, "n_group", None)
              or getattr(config, "n_group", None) or 1)
    kept = getattr(module, "topk_group", None) or getattr(config, "topk_group", None) or groups
    gaps = []
    if 1 < groups and kept < groups:
        grouped = keys.view(tokens, groups, experts // groups)
        best = grouped.topk(1 if bias is None else 2, dim=-1)
        group_key = best.values.sum(-1)
        group_slope = torch.gather(slope.view(tokens, groups, -1), 2, best.indices).amax(-1)
        order = torch.sort(group_key, dim=-1, descending=True)
        last, first_out = order.indices[:, kept - 1], order.indices[:, kept]
        gap = order.values[:, kept - 1] - order.values[:, kept]
        worst_slope = torch.maximum(group_slope.gather(1, last[:, None]),
                                    group_slope.gather(1, first_out[:, None]))[:, 0]
        gaps.append(gap / worst_slope.clamp_min(1e-30))
        mask = torch.zeros(tokens, groups, dtype=torch.bool, device=keys.device)
        mask.scatter_(1, order.indices[:, :kept], True)
        keys = keys.masked_fill(~mask.repeat_interleave(experts // groups, dim=1), float("-inf"))
    order = torch.sort(keys, dim=-1, descending=True)
    last, first_out = order.indices[:, k - 1], order.indices[:, k]
    gap = order.values[:, k - 1] - order.values[:, k]
    worst_slope = torch.maximum(slope.gather(1, last[:, None]), slope.gather(1, first_out[:, None]))[:, 0]
    gaps.append(gap / worst_slope.clamp_min(1e-30))
    logit_gap = torch.stack(gaps).amin(0)
    return logit_gap / bf16_ulps_of(logits.gather(1, last[:, None])[:, 0])


def routing_tie(ref, p, i, args):
    """Step i of prompt p sits on a router near-tie (see router_gaps): within the fixed
    ulps, or within the reference's own measured error (measured_routing_ties)."""
    gaps, measured = ref.get("router_gap"), ref.get("router_tie_measured")
    return ((gaps is not None and gaps[p][i] <= args.router_tie_ulps) or
            (measured is not None and bool(measured[p][i])))


def measured_tolerance(bf16, exact, args, token=None):
    """Twice the reference's own error on the margins between its top token and each of
    its next top-k tokens (bf16 against fp32), and Kiln's token's margin when it is given
    (it may lie outside the top-k): a Kiln token inside that is a tie the reference
    cannot break."""
    top = torch.topk(bf16, args.tie_topk).indices
    if token is not None:
        top = torch.cat([top, torch.tensor([token], device=top.device)])
    margins_bf16 = bf16[top[0]] - bf16[top[1:]]
    margins_exact = exact[top[0]] - exact[top[1:]]
    return 2.0 * float((margins_bf16 - margins_exact).abs().max())


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


# ----------------------------------------------------------------------------------------
# Running kiln-run
# ----------------------------------------------------------------------------------------

def kiln_env(lib_dirs):
    env = dict(os.environ)
    paths = [str(d) for d in lib_dirs] + [env.get("LD_LIBRARY_PATH", "")]
    env["LD_LIBRARY_PATH"] = ":".join(p for p in paths if p)
    return env


def mode_so(mode):
    """The compiled model a mode runs: <family>-<this>.so."""
    return {"nospec": "nospec", "eager": "nospec", "tf": "nospec", "ngram": "ngram",
            "draft": "draft", "selfdraft": "draft", "fp8": "fp8nospec", "fp8tf": "fp8nospec",
            "fp8ngram": "fp8ngram", "f16": "f16nospec", "f16ngram": "f16ngram",
            "replayngram": "replayngram",
            "replaydraft": "replaydraft", "mtp": "mtp", "ring": "ringnospec",
            "ringngram": "ringngram", "nccl": "collectives", "tp2": "tp2",
            "ropes": "ropesnospec", "ropesngram": "ropesngram", "skinny": "nospec",
            "glu": "glunospec", "glungram": "glungram"}[mode]


def kiln_weights(models, name):
    """The checkpoint kiln-run reads for the model directory `name` under `models`: the
    one its family's entry in make_models.py's manifest.json maps it to ("kiln_weights":
    an MXFP4 family's Kiln checkpoint, while the reference reads the bf16 one of the same
    values), else the directory itself."""
    manifest = models / "manifest.json"
    if manifest.exists():
        for entry in json.loads(manifest.read_text()).get("families", {}).values():
            if name in entry.get("kiln_weights", {}):
                return models / entry["kiln_weights"][name]
    return models / name


def mode_command(mode, family, work, args):
    """kiln-run's arguments for one mode, or a reason why it cannot run."""
    model_so = args.so_dir / f"{family}-{mode_so(mode)}.so"
    weights = kiln_weights(args.models, f"{family}-mtp" if mode == "mtp" else family)
    cmd = [str(args.kiln_run), str(model_so), "--weights", str(weights),
           "--prompts", str(work / "prompts.txt"),
           "--max-new-tokens", str(args.max_new_tokens),
           "--json", str(work / f"{mode}.json")]
    needed = [model_so]
    if mode in ("nospec", "fp8", "ring", "f16", "nccl", "tp2", "ropes", "skinny", "glu"):
        cmd += ["--logits", str(work / f"{mode}.logits.bin")]
    if mode == "tp2":
        # One rank's graph (kiln-compile --tp 2) on two GPUs: kiln-run's rank threads,
        # one NCCL communicator; rank 0 writes the results.
        cmd += ["--ranks", "2"]
    elif mode == "nccl":
        # The model's per-rank form (kiln-compile --tp-collectives) as the one rank of an
        # NCCL communicator: its all-reduces run through NCCL (docs/tensor-parallel.md).
        cmd += ["--nccl-one-rank"]
    elif mode == "eager":
        cmd += ["--cuda-graphs", "0"]
    elif mode in ("tf", "fp8tf"):
        cmd += ["--teacher-forced", str(work / "continuations.json")]
    elif mode in ("ngram", "fp8ngram", "f16ngram", "replayngram", "ringngram", "ropesngram",
                  "glungram"):
        cmd += ["--spec", f"ngram:{DRAFT_LEN}"]
    elif mode == "mtp":
        cmd += ["--spec", "mtp:1"]
    elif mode in ("draft", "replaydraft"):
        draft_so = args.so_dir / f"{family}-draftmodel.so"
        needed.append(draft_so)
        cmd += ["--draft-model", str(draft_so),
                "--draft-weights", str(kiln_weights(args.models, f"{family}-draft")),
                "--spec", f"draft:{DRAFT_LEN}"]
    elif mode == "selfdraft":
        # A copy under another name: the same path would be one dlopen handle, and the
        # draft must be a model of its own even if it is the target's code.
        source = args.so_dir / f"{family}-nospec.so"
        needed.append(source)
        draft_so = work / f"{family}-selfdraft.so"
        if source.exists():
            shutil.copyfile(source, draft_so)
        cmd += ["--draft-model", str(draft_so), "--draft-weights", str(weights),
                "--spec", f"draft:{DRAFT_LEN}"]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        return None, "missing " + ", ".join(missing) + " (run scripts/gpu-prepare.sh)"
    return cmd, None


def run_kiln(cmd, env, log_path, timeout):
    """Run kiln-run; its JSON result, or an error message with the end of its stderr."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        log_path.write_text(f"$ {' '.join(cmd)}\ntimed out after {timeout} s\n"
                            f"{error.stderr or ''}")
        return None, f"timed out after {timeout} s"
    except OSError as error:
        return None, f"cannot start: {error}"
    log_path.write_text(f"$ {' '.join(cmd)}\nexit {proc.returncode}\n--- stdout\n"
                        f"{proc.stdout}\n--- stderr\n{proc.stderr}")
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-12:])
        return None, f"exit {proc.returncode}:\n{tail}"
    json_path = Path(cmd[cmd.index("--json") + 1])
    try:
        return json.loads(json_path.read_text()), None
    except (OSError, ValueError) as error:
        return None, f"exit 0 but no readable --json output: {error}"


# ----------------------------------------------------------------------------------------
# Checks: each returns (ok, summary text, details for the JSON)
# ----------------------------------------------------------------------------------------

def generated_tokens(outputs, prompts):
    """kiln-run's outputs are the new tokens; strip an echoed prompt if there is one."""
    cleaned = []
    for out, prompt in zip(outputs, prompts):
        if len(out) > len(prompt) and out[: len(prompt)] == prompt:
            out = out[len(prompt):]
        cleaned.append(out)
    return cleaned


def check_tokens(kiln, ref, count, args):
    """Greedy tokens against the reference, near-ties allowed (see the module doc)."""
    failures, near_ties, routing_ties, agreed = [], [], [], 0
    if len(kiln) != len(ref["tokens"]):
        return False, f"{len(kiln)} outputs for {len(ref['tokens'])} prompts", {}
    for p, (got, want) in enumerate(zip(kiln, ref["tokens"])):
        if len(got) < count:
            failures.append({"prompt": p, "error": f"{len(got)} tokens, want {count}"})
            continue
        i = first_difference(got[:count], want)
        agreed += i
        if i == count:
            continue
        margin, tol = ref["margin"][p][i], ref["tol"][p][i]
        step_logits = ref["logits"][p][i]
        gap = float(step_logits.max() - step_logits[got[i]]) if got[i] < len(step_logits) \
            else float("inf")
        record = {"prompt": p, "step": i, "kiln": got[i], "reference": want[i],
                  "ref_margin": round(margin, 4), "kiln_token_gap": round(gap, 4),
                  "tol": tol}
        if margin < tol and gap <= tol:
            near_ties.append(record)
        elif routing_tie(ref, p, i, args):
            record["router_gap_ulps"] = ref["router_gap"][p][i]
            routing_ties.append(record)
        else:
            failures.append(record)
    ok = not failures
    text = f"tokens {len(kiln) - len(failures)}/{len(kiln)} prompts, near-ties {len(near_ties)}"
    if routing_ties:
        text += f", routing near-ties {len(routing_ties)}"
    if failures:
        first = failures[0]
        text += (f", first bad: prompt {first['prompt']} " +
                 (first["error"] if "error" in first else
                  f"step {first['step']} kiln {first['kiln']} ref {first['reference']} "
                  f"(ref margin {first['ref_margin']}, kiln token {first['kiln_token_gap']} "
                  f"below top)"))
    return ok, text, {"near_ties": near_ties, "routing_ties": routing_ties,
                      "failures": failures, "agreed_tokens": agreed}


def check_logits(path, ref, vocab, rtol, fp32_factor):
    """Prefill logits (float32 [prompts, vocab]) against the reference's first step: within
    rtol of transformers' bf16 logits, or, where transformers' own bf16 run is far from
    the same weights in fp32, no further from fp32 than fp32_factor times it (Kiln is then
    as exact as the reference, and the two bf16 runs differ by their own rounding)."""
    prompts = len(ref["logits"])
    try:
        data = torch.frombuffer(bytearray(Path(path).read_bytes()), dtype=torch.float32)
    except OSError as error:
        return False, f"logits: {error}", {}
    if data.numel() != prompts * vocab:
        return False, f"logits: {data.numel()} floats, want {prompts}x{vocab}", {}
    kiln = data.view(prompts, vocab)
    errors, argmax_agree, kiln_exact, ref_exact, eager_sdpa = [], 0, [], [], []
    for p in range(prompts):
        want = ref["logits"][p][0]
        errors.append(float((kiln[p] - want).norm() / want.norm()))
        argmax_agree += int(torch.argmax(kiln[p]) == torch.argmax(want))
        exact = ref["fp32_first"][p]
        kiln_exact.append(float((kiln[p] - exact).norm() / exact.norm()))
        ref_exact.append(float((want - exact).norm() / exact.norm()))
        eager = ref["eager_first"][p]
        eager_sdpa.append(float((eager - want).norm() / want.norm()))
    worst = max(errors)
    by_fp32 = [p for p in range(prompts) if not errors[p] <= rtol and
               kiln_exact[p] <= max(rtol, fp32_factor * ref_exact[p])]
    ok = all(errors[p] <= rtol or p in by_fp32 for p in range(prompts)) and \
        all(math.isfinite(e) for e in errors)
    fmt = lambda values: "/".join(f"{v:.1e}" for v in values)  # noqa: E731
    within = f"; prompts {by_fp32} within {fp32_factor}x the reference's fp32 error" \
        if by_fp32 else ""
    text = (f"logits max rel err {worst:.2e} (argmax {argmax_agree}/{prompts}{within}); by prompt: "
            f"kiln-vs-sdpa {fmt(errors)}, eager-vs-sdpa {fmt(eager_sdpa)}, kiln-vs-fp32 "
            f"{fmt(kiln_exact)}, sdpa-vs-fp32 {fmt(ref_exact)}")
    return ok, text, {"rel_err": errors, "argmax_agree": argmax_agree, "by_fp32": by_fp32,
                      "kiln_vs_fp32": kiln_exact, "transformers_bf16_vs_fp32": ref_exact,
                      "transformers_eager_vs_sdpa": eager_sdpa}


def check_teacher_forced(result, ref, count, args):
    tf = result.get("teacher_forced")
    if not isinstance(tf, dict):
        return False, "no teacher_forced in kiln-run's JSON", {}
    positions, agree = tf.get("positions", 0), tf.get("agree", 0)
    prompts = len(ref["tokens"])
    bad, ties, exact = [], 0, 0
    mismatches = tf.get("mismatch_positions", [])
    tokens = tf.get("mismatch_tokens", [None] * len(mismatches))
    # pos counts in the continuation: pos i is the argmax that should be token i.
    for (p, pos), token in zip(mismatches, tokens):
        if not (0 <= p < prompts and 0 <= pos < count):
            bad.append([p, pos, "out of range"])
        elif ref["margin"][p][pos] < ref["tol"][p][pos] or routing_tie(ref, p, pos, args):
            ties += 1
        elif token is not None and token == ref["fp32_argmax"][p][pos]:
            exact += 1  # Kiln chose what the same weights choose in fp32
        else:
            gaps = ref.get("router_gap")
            bad.append([p, pos, round(ref["margin"][p][pos], 4)] +
                       ([f"router gap {gaps[p][pos]:.1f} ulps"] if gaps else []))
    enough = positions >= prompts * (count - 1)
    ok = not bad and enough
    text = f"teacher-forced {agree}/{positions} agree, near-ties {ties}"
    if exact:
        text += f", {exact} where Kiln's token is the fp32 reference's"
    if not enough:
        text += f", only {positions} positions (want {prompts * count})"
    if bad:
        text += f", {len(bad)} disagreements above tolerance (first {bad[0]})"
    return ok, text, {"positions": positions, "agree": agree, "near_ties": ties,
                      "fp32_agreeing": exact,
                      "bad": bad}


def check_lossless(kiln, nospec, count):
    diffs = [[p, first_difference(a[:count], b[:count])]
             for p, (a, b) in enumerate(zip(kiln, nospec)) if a[:count] != b[:count]]
    text = "lossless" if not diffs else f"NOT lossless: {len(diffs)} prompts differ " \
        f"from nospec (first [prompt, step] {diffs[0]})"
    return not diffs, text, {"differs": diffs}


def token_agreement(kiln, ref, count):
    """Reported, not gated (a lossy cache): tokens before each prompt's first difference
    from the reference."""
    firsts = [first_difference(got[:count], want[:count]) for got, want in zip(kiln, ref["tokens"])]
    agreed, total = sum(firsts), count * len(ref["tokens"])
    exact = sum(f == count for f in firsts)
    text = (f"token agreement {agreed}/{total} ({100 * agreed / max(total, 1):.0f}%), "
            f"{exact}/{len(firsts)} prompts identical, first differences at steps {firsts}")
    return True, text, {"agreed_tokens": agreed, "total_tokens": total, "first_difference": firsts}


def teacher_forced_agreement(result, ref, count):
    """Reported: the teacher-forced argmax agreement of a lossy cache (gated only on
    having run every position)."""
    tf = result.get("teacher_forced")
    if not isinstance(tf, dict):
        return False, "no teacher_forced in kiln-run's JSON", {}
    positions, agree = tf.get("positions", 0), tf.get("agree", 0)
    enough = positions >= len(ref["tokens"]) * (count - 1)
    text = f"teacher-forced {agree}/{positions} agree ({100 * agree / max(positions, 1):.1f}%)"
    if not enough:
        text += f", only {positions} positions"
    return enough, text, {"positions": positions, "agree": agree}


def check_graphs(tokens, result, nospec_tokens, nospec_result, count):
    """Eager launches give the tokens the replayed graphs gave."""
    if nospec_tokens is None or nospec_result is None:
        return False, "graphs unchecked: no nospec outputs", {}
    replayed = (nospec_result.get("cuda_graphs") or {}).get("replayed_steps", 0)
    eager_replayed = (result.get("cuda_graphs") or {}).get("replayed_steps", 0)
    same, text, details = check_lossless(tokens, nospec_tokens, count)
    ok = same and replayed > 0 and eager_replayed == 0
    text = ("eager == graphs" if same else "eager != graphs: " + text) + \
        f" ({replayed} steps replayed with graphs, {eager_replayed} without)"
    return ok, text, {**details, "replayed": replayed, "eager_replayed": eager_replayed}


@torch.no_grad()
def mtp_reference(model_dir, mtp_dir, sequences, args):
    """DeepSeek's MTP module in PyTorch over each whole sequence: per position p, the
    greedy guess of token p + 2 and its top-2 margin. h_p is the target's final hidden
    state (after model.norm); the input is [enorm(embed(t_(p+1))) | hnorm(h_p)] through
    eh_proj, one decoder layer (a copy of layer N - 1: make_models.make_mtp), then
    shared_head.norm and shared_head.head."""
    from safetensors.torch import load_file
    model = load_reference_model(model_dir, args.device)
    config = model.config
    n = config.num_hidden_layers
    tensors = load_file(str(Path(mtp_dir) / "model.safetensors"), device=args.device)
    prefix = f"model.layers.{n}."
    block = copy.deepcopy(model.model.layers[n - 1])
    norm_type = type(model.model.norm)

    def rms_norm(name):
        norm = norm_type(config.hidden_size, eps=config.rms_norm_eps).to(args.device,
                                                                          torch.bfloat16)
        norm.weight.data = tensors[prefix + name + ".weight"].to(torch.bfloat16)
        return norm

    enorm, hnorm, head_norm = rms_norm("enorm"), rms_norm("hnorm"), rms_norm("shared_head.norm")
    eh_proj = tensors[prefix + "eh_proj.weight"]
    head = tensors[prefix + "shared_head.head.weight"]
    # Router gaps (router_key_gaps) of the target's MoE layers at each position and of the
    # module's own layer when it is an MoE layer: a guess decided by a routing near-tie
    # (the same rule as the target's tokens) is a near-tie, not an error.
    captured = []
    handles = hook_routers(model, captured.append) + hook_routers(block, captured.append)

    def layer_gaps(length):
        """The router gaps of the calls since the last one ([routers, positions])."""
        gaps = torch.stack([g[:length] for g in captured]) if captured else None
        captured.clear()
        return gaps

    def module_logits(ids):
        """The module's logits at every position of one sequence ([positions, vocab])
        and the router gaps of the target's MoE layers and of the module's there
        ([routers, positions]; None without MoE layers)."""
        tokens = torch.tensor([ids], device=args.device)
        captured.clear()
        hidden = model.model(input_ids=tokens).last_hidden_state[:, :-1]
        target_gaps = layer_gaps(hidden.shape[1])
        embedded = model.model.embed_tokens(tokens[:, 1:])
        x = torch.nn.functional.linear(torch.cat([enorm(embedded), hnorm(hidden)], dim=-1),
                                       eh_proj)
        positions = torch.arange(x.shape[1], device=args.device)[None]
        rope = model.model.rotary_emb(x, positions)
        out = block(x, attention_mask=None, position_ids=positions, position_embeddings=rope)
        module_gaps = layer_gaps(x.shape[1])
        out = out[0] if isinstance(out, tuple) else out
        logits = torch.nn.functional.linear(head_norm(out), head)[0].float()
        gaps = [g for g in (target_gaps, module_gaps) if g is not None]
        return logits, (torch.cat(gaps) if gaps else None)

    results = []
    try:
        for ids in sequences:
            logits, gaps = module_logits(ids)
            top2 = torch.topk(logits, 2, dim=-1)
            results.append({"guess": top2.indices[:, 0].tolist(),
                            "margin": (top2.values[:, 0] - top2.values[:, 1]).tolist(),
                            "top": top2.values[:, 0].tolist(), "logits": logits.cpu(),
                            "router_gap": None if gaps is None else
                            gaps.min(dim=0).values.tolist(), "gap_layers": gaps})
        # The same target and module in fp32 on the same tokens: the bf16 reference's own
        # error on its margins at each position (measured_tolerance, as for the target's
        # steps) and on its router gaps (measured_routing_ties), and the guess exact
        # arithmetic makes.
        model.float()
        block.float()
        for module in (enorm, hnorm, head_norm):
            module.float()
        eh_proj, head = eh_proj.float(), head.float()
        for ids, r in zip(sequences, results):
            exact, exact_gaps = module_logits(ids)
            r["fp32_guess"] = exact.argmax(dim=-1).tolist()
            r["fp32_logits"] = exact.cpu()
            r["router_tie_measured"] = None if exact_gaps is None else \
                measured_routing_ties([r.pop("gap_layers")], [exact_gaps], [[0]], args)[0]
    finally:
        for h in handles:
            h.remove()
    del model
    torch.cuda.empty_cache()
    return results


def check_mtp_guesses(result, model_dir, mtp_dir, prompts, args):
    """Kiln's MTP guesses (kiln-run's mtp_guesses: position, token) against the PyTorch
    module over each prompt + its generated tokens; a disagreement passes only at a
    near-tie of the reference (top-2 margin, or Kiln's guess below the top, within the
    fixed tie tolerance or the reference's own error measured against fp32, Kiln's token's
    margin included), at a routing near-tie (fixed ulps, or within the reference's own
    error on a router's gap: measured_routing_ties), or where Kiln's guess is the fp32
    module's."""
    guesses = result.get("mtp_guesses")
    if not guesses:
        return False, "mtp: kiln-run reported no MTP guesses", {}
    sequences = [p + o for p, o in zip(prompts, result.get("outputs", []))]
    try:
        ref = mtp_reference(model_dir, mtp_dir, sequences, args)
    except Exception as error:  # a reference that cannot run is a failure, with its cause
        return False, f"mtp: reference failed: {type(error).__name__}: {error}"[:300], {}
    agree = total = ties = routing_ties = exact = 0
    bad = []
    for i, (made, r) in enumerate(zip(guesses, ref)):
        for position, token in made:
            if position >= len(r["guess"]):
                continue  # guessed past the generated text: nothing to compare
            total += 1
            if token == r["guess"][position]:
                agree += 1
                continue
            # A near-tie either way: the reference's top-2 margin, or how far below the
            # reference's top Kiln's guess is, under the tie tolerance.
            measured = measured_tolerance(r["logits"][position], r["fp32_logits"][position],
                                          args, token=token)
            tol = max(args.tie_floor, args.tie_ulps * bf16_ulp(r["top"][position]), measured)
            gap = r["top"][position] - float(r["logits"][position, token])
            router_gap = r["router_gap"][position] if r.get("router_gap") else None
            router_tie = r.get("router_tie_measured")
            if r["margin"][position] < tol or gap < tol:
                ties += 1
            elif (router_gap is not None and router_gap < args.router_tie_ulps) or \
                    (router_tie is not None and router_tie[position]):
                routing_ties += 1
            elif "fp32_guess" in r and token == r["fp32_guess"][position]:
                exact += 1  # Kiln guessed what the same weights guess in fp32
            else:
                bad.append((i, position, token, r["guess"][position], round(gap, 4),
                            round(tol, 4), None if router_gap is None else round(router_gap, 1)))
    ok = total > 0 and not bad
    text = (f"mtp guesses {agree}/{total} equal the PyTorch module's ({ties} near-ties, "
            f"{routing_ties} routing near-ties, {exact} the fp32 module's guess"
            + (f"; {len(bad)} off, first: prompt {bad[0][0]} position {bad[0][1]}: kiln "
               f"{bad[0][2]} ({bad[0][4]} below the reference's top, tolerance "
               f"{bad[0][5]}), reference {bad[0][3]}, router gap {bad[0][6]} ulps"
               if bad else "") + ")")
    return ok, text, {"agree": agree, "total": total, "near_ties": ties, "off": bad[:10]}


def check_memory(result, rtol):
    planned, used = result.get("planned_device_bytes"), result.get("used_device_bytes")
    if not planned or used is None:
        return False, "no planned/used device bytes in kiln-run's JSON", {}
    rel = abs(used - planned) / planned
    return rel <= rtol, f"mem used/planned {used}/{planned} ({100 * rel:.2f}%)", \
        {"planned": planned, "used": used, "rel": rel}


# ----------------------------------------------------------------------------------------
# One family
# ----------------------------------------------------------------------------------------

def check_bitwise_as_nospec(tokens, nospec_tokens, work, mode="nccl", base="nospec"):
    """A run that must compute what the plain run (`base`) does, bit for bit: the same
    tokens and the same prefill logits' bits. A one-rank NCCL run (issue 18: the sum over
    one rank is the value itself); the rope pair (each output has its own rope's bits);
    the gate/up pair with its SwiGLU in one launch (the skinny run's bits)."""
    if nospec_tokens is None:
        return False, f"unchecked: no {base} run", {}
    same_tokens = tokens == nospec_tokens
    ours, plain = work / f"{mode}.logits.bin", work / f"{base}.logits.bin"
    same_logits = ours.exists() and plain.exists() and ours.read_bytes() == plain.read_bytes()
    text = (f"tokens {'equal' if same_tokens else 'DIFFER'} to {base}'s, prefill logits "
            f"{'bitwise equal' if same_logits else 'DIFFER'}")
    return same_tokens and same_logits, text, {"same_tokens": same_tokens,
                                               "same_logits": same_logits}


def check_as_one_gpu(tokens, nospec_tokens, work, rtol):
    """Two ranks against one GPU (issue 18): the same greedy tokens, and each prompt's
    prefill logits within rtol (relative L2) of the one-GPU run's (the sums of partial
    products round differently)."""
    if nospec_tokens is None:
        return False, "unchecked: no nospec run", {}
    same_tokens = tokens == nospec_tokens
    ours, plain = work / "tp2.logits.bin", work / "nospec.logits.bin"
    if not (ours.exists() and plain.exists()) or ours.stat().st_size != plain.stat().st_size:
        return False, "tp2 or nospec logits missing or of other sizes", {}
    a = torch.frombuffer(bytearray(ours.read_bytes()), dtype=torch.float32)
    b = torch.frombuffer(bytearray(plain.read_bytes()), dtype=torch.float32)
    prompts = len(tokens)
    a, b = a.view(prompts, -1), b.view(prompts, -1)
    errors = [float((a[p] - b[p]).norm() / b[p].norm()) for p in range(prompts)]
    worst = max(errors)
    ok = same_tokens and all(math.isfinite(e) and e <= rtol for e in errors)
    text = (f"tokens {'equal' if same_tokens else 'DIFFER'} to the one-GPU run's, prefill "
            f"logits within {worst:.1e} of it (limit {rtol:g})")
    return ok, text, {"same_tokens": same_tokens, "logit_errors": errors}


def check_communicator(result):
    """The communicator's memory is part of the plan (issue 18): a reserve is planned and
    NCCL took no more of it (kiln_model_load_rank refuses otherwise)."""
    planned, taken = result.get("planned_collective_bytes"), result.get("collective_bytes")
    if planned is None or taken is None:
        return False, "no collective bytes in kiln-run's JSON", {}
    ok = 0 < taken <= planned
    return ok, (f"communicator {taken} of its planned {planned} bytes"
                f"{'' if ok else ' (NOT within the reserve)'}"), \
        {"planned_collective": planned, "collective": taken}


def evaluate_mode(mode, result, ref, prompts, nospec, work, vocab, args, bf16_run=None):
    """All checks of one successful kiln-run; (ok, text, details). `nospec` is the
    baseline of the mode's cache dtype (fp8's run for fp8ngram, f16's for f16ngram)."""
    checks = []
    count = args.max_new_tokens
    if mode == "fp8tf":
        checks.append(("tf", teacher_forced_agreement(result, ref, count)))
    elif mode == "fp8":
        tokens = generated_tokens(result.get("outputs", []), prompts)
        checks.append(("agreement", token_agreement(tokens, ref, count)))
        if bf16_run is not None:
            # The same model over the bf16 cache (nospec): what the FP8 cache alone costs.
            bf16_tokens = generated_tokens(bf16_run.get("outputs", []), prompts)
            ok, text, details = token_agreement(tokens, {"tokens": bf16_tokens}, count)
            checks.append(("agreement_bf16", (ok, text.replace("token agreement",
                                                               "with the bf16 run"), details)))
        checks.append(("logits", check_logits(work / f"{mode}.logits.bin", ref, vocab,
                                              args.logit_rtol, args.logit_fp32_factor)))
    elif mode == "tf":
        checks.append(("tf", check_teacher_forced(result, ref, count, args)))
    else:
        tokens = generated_tokens(result.get("outputs", []), prompts)
        nospec_tokens = generated_tokens(nospec.get("outputs", []), prompts) if nospec else None
        # A lossy cache's tokens are reported against the reference, not gated.
        checks.append(("tokens", token_agreement(tokens, ref, count) if mode in FP8_MODES
                       else check_tokens(tokens, ref, count, args)))
        if mode in ("nospec", "ring", "f16", "skinny"):
            checks.append(("logits", check_logits(work / f"{mode}.logits.bin", ref, vocab,
                                                  args.logit_rtol, args.logit_fp32_factor)))
        elif mode == "eager":
            checks.append(("graphs", check_graphs(tokens, result, nospec_tokens, nospec,
                                                  count)))
        elif mode == "nccl":
            checks.append(("nccl", check_bitwise_as_nospec(tokens, nospec_tokens, work)))
            checks.append(("communicator", check_communicator(result)))
        elif mode == "ropes":
            checks.append(("ropes", check_bitwise_as_nospec(tokens, nospec_tokens, work,
                                                           mode="ropes")))
        elif mode == "glu":
            checks.append(("glu", check_bitwise_as_nospec(tokens, nospec_tokens, work,
                                                         mode="glu", base="skinny")))
        elif mode == "tp2":
            checks.append(("tp2", check_as_one_gpu(tokens, nospec_tokens, work, TP_LOGIT_RTOL)))
            checks.append(("communicator", check_communicator(result)))
        elif nospec_tokens is not None:
            checks.append(("lossless", check_lossless(tokens, nospec_tokens, count)))
        else:
            checks.append(("lossless", (False, "lossless unchecked: no nospec outputs", {})))
    checks.append(("memory", check_memory(result, args.mem_rtol)))
    ok = all(c[1][0] for c in checks)
    text = "; ".join(c[1][1] for c in checks)
    rate = result.get("decode_tokens_per_s")
    if mode in SPEC_MODES and result.get("acceptance_rate") is not None:
        text += f"; acceptance {result['acceptance_rate']:.2f}"
    if rate:
        text += f"; decode {rate:.0f} tok/s"
    details = {name: {"ok": c[0], "text": c[1], **c[2]} for name, c in checks}
    return ok, text, details


def run_family(family, args, out, env):
    """Reference, then every mode; a list of (mode, ok, text, details)."""
    model_dir = args.models / family
    prompts = [[int(t) for t in line.split()]
               for line in (model_dir / "prompts.txt").read_text().splitlines() if line.strip()]
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    work = out / family
    work.mkdir(parents=True, exist_ok=True)
    (work / "prompts.txt").write_text("".join(" ".join(map(str, p)) + "\n" for p in prompts))

    ref = reference(model_dir, prompts, args.max_new_tokens, args)
    # kiln-run --teacher-forced reads continuations.json; reference.json keeps the rest.
    (work / "continuations.json").write_text(json.dumps({"continuations": ref["tokens"]}) + "\n")
    (work / "reference.json").write_text(json.dumps({
        "continuations": ref["tokens"], "margins": ref["margin"], "tolerances": ref["tol"],
        "generate_check": ref["generate_check"]}) + "\n")
    first_step = torch.stack([logits[0] for logits in ref["logits"]])
    (work / "reference.logits.bin").write_bytes(first_step.numpy().tobytes())
    small = sum(m < t for ms, ts in zip(ref["margin"], ref["tol"]) for m, t in zip(ms, ts))
    small_fixed = sum(m < t for ms, ts in zip(ref["margin"], ref["tol_fixed"])
                      for m, t in zip(ms, ts))
    steps = sum(len(m) for m in ref["margin"])
    print(f"  {family} reference: {len(prompts)} prompts {[len(p) for p in prompts]}, "
          f"{small}/{steps} steps under the near-tie tolerance ({small_fixed} under the "
          f"fixed part alone), generate cross-check "
          f"{ref['generate_check']}", flush=True)

    rows, nospec, fp8, f16, ring, skinny = [], None, None, None, None, None
    for mode in args.modes:
        reason = UNSUPPORTED_MODES.get(family, {}).get(mode)
        if mode in REPLAY_MODES and not (args.so_dir / f"{family}-{mode}.so").exists():
            reason = ("no recurrent layers (gpu-prepare.sh compiles replay models for the "
                      "Mamba2 and Gated DeltaNet families only)")
        if mode in RING_MODES and not (args.so_dir / f"{family}-{mode_so(mode)}.so").exists():
            reason = ("no sliding-window layers (gpu-prepare.sh compiles ring models for the "
                      "families whose config has a sliding_window)")
        if mode in GLU_MODES and not (args.so_dir / f"{family}-{mode_so(mode)}.so").exists():
            reason = ("no gated MLP (gpu-prepare.sh compiles --fuse-pair-swiglu models for "
                      "the families with kiln.swiglu)")
        if mode in ROPE_PAIR_MODES and not (args.so_dir / f"{family}-{mode_so(mode)}.so").exists():
            reason = ("no RoPE layers to pair (gpu-prepare.sh compiles --pair-ropes models "
                      "for the families with kiln.rope)")
        if mode == "nccl" and not (args.so_dir / f"{family}-collectives.so").exists():
            reason = ("no per-rank form (gpu-prepare.sh compiles one with --tp-collectives "
                      "for every family with a per-rank graph: not qwen3-next or gpt-oss)")
        if mode in ("nccl", "tp2") and not os.environ.get("KILN_NCCL_LIBRARY"):
            reason = "KILN_NCCL_LIBRARY is not set (libnccl.so.2's path)"
        if mode == "tp2" and not (args.so_dir / f"{family}-tp2.so").exists():
            reason = ("no two-rank form (gpu-prepare.sh compiles one with --tp 2 for every "
                      "family with a per-rank graph whose heads 2 divides)")
        if mode == "tp2" and torch.cuda.device_count() < 2:
            reason = (f"needs 2 GPUs; this machine has {torch.cuda.device_count()} (issue "
                      f"18's tp = 2 run)")
        if mode == "mtp" and not (args.models / f"{family}-mtp").exists():
            reason = "no MTP module (a configs/<family>-tiny-mtp.json builds one)"
        if reason:
            rows.append((mode, True, f"SKIPPED: {reason}", {"skipped": reason}))
            continue
        cmd, error = mode_command(mode, family, work, args)
        result = None
        if cmd:
            mode_env = dict(env, KILN_GEMM_SKINNY="mma") if mode in SKINNY_MODES else env
            result, error = run_kiln(cmd, mode_env, work / f"{mode}.log", args.timeout)
        if result is None:
            rows.append((mode, False, f"kiln-run failed: {error}", {"error": error}))
            continue
        if mode == "nospec":
            nospec = result
        if mode == "fp8":
            fp8 = result
        if mode == "f16":
            f16 = result
        if mode == "ring":
            ring = result
        if mode == "skinny":
            skinny = result
        baseline = (fp8 if mode in FP8_MODES else f16 if mode in F16_MODES
                    else ring if mode == "ringngram" else skinny if mode in GLU_MODES
                    else nospec)
        ok, text, details = evaluate_mode(mode, result, ref, prompts, baseline, work, vocab,
                                          args, bf16_run=nospec)
        if mode == "mtp":
            mtp_ok, mtp_text, mtp_details = check_mtp_guesses(
                result, model_dir, args.models / f"{family}-mtp", prompts, args)
            ok = ok and mtp_ok
            text = f"{text}; {mtp_text}"
            details["mtp"] = {"ok": mtp_ok, "text": mtp_text, **mtp_details}
        details["kiln_run"] = {k: v for k, v in result.items()
                               if k not in ("outputs", "mtp_guesses")}
        rows.append((mode, ok, text, details))
    return rows, {"prompts": [len(p) for p in prompts], "near_tie_steps": small,
                  "steps": steps, "generate_check": ref["generate_check"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True, help="make_models.py --out")
    parser.add_argument("--so-dir", type=Path, required=True, help="the compiled .so's")
    parser.add_argument("--kiln-run", type=Path, required=True)
    parser.add_argument("--lib-dir", type=Path, action="append", default=[],
                        help="where libkiln_runtime.so is (repeatable)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/kiln-gpu-out")))
    parser.add_argument("--families", default="", help="comma-separated (default: all built)")
    parser.add_argument("--modes", default=",".join(ALL_MODES))
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--logit-rtol", type=float, default=2e-2)
    parser.add_argument("--logit-fp32-factor", type=float, default=1.5,
                        help="a prompt beyond --logit-rtol passes when Kiln's distance to "
                             "the fp32 logits is at most this times transformers' bf16 one")
    parser.add_argument("--mem-rtol", type=float, default=0.01)
    parser.add_argument("--tie-ulps", type=float, default=2.0,
                        help="near-tie tolerance in bf16 ulps of the top logit")
    parser.add_argument("--router-tie-ulps", type=float, default=2.0,
                        help="MoE: a step whose router k-th/(k+1)-th logit gap is at most "
                             "this many bf16 ulps is a routing near-tie")
    parser.add_argument("--tie-floor", type=float, default=0.05,
                        help="near-tie tolerance floor (absolute logit units)")
    parser.add_argument("--tie-topk", type=int, default=8,
                        help="the measured near-tie tolerance looks at the margins of the "
                             "reference's top token over its next top-k - 1 tokens")
    parser.add_argument("--timeout", type=int, default=180, help="seconds per kiln-run")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    unknown = set(args.modes) - set(ALL_MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; known: {ALL_MODES}")
    asked, args.modes = args.modes, with_baselines(args.modes)
    if args.modes != asked:
        print(f"parity: modes {','.join(args.modes)} (the runs the asked modes are checked "
              f"against come first)", flush=True)
    families = [f for f in args.families.split(",") if f] or sorted(
        p.parent.name for p in args.models.glob("*/prompts.txt"))
    out = args.out / "parity"
    out.mkdir(parents=True, exist_ok=True)
    env = kiln_env(args.lib_dir)

    summary = {"max_new_tokens": args.max_new_tokens, "families": {}}
    failed = 0
    for family in families:
        try:
            rows, info = run_family(family, args, out, env)
        except Exception as error:  # the reference itself broke: report, go on
            rows, info = [("reference", False, f"{type(error).__name__}: {error}", {})], {}
        summary["families"][family] = {"reference": info, "modes": {}}
        for mode, ok, text, details in rows:
            failed += not ok
            print(f"{'PASS' if ok else 'FAIL'} {family:8} {mode:9} {text}", flush=True)
            summary["families"][family]["modes"][mode] = {"ok": ok, "text": text, **details}
    summary["failed"] = failed
    summary["pass"] = failed == 0
    (args.out / "parity.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"parity: {'PASS' if failed == 0 else f'{failed} FAIL'} "
          f"(summary {args.out / 'parity.json'})")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
