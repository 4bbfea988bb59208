#!/usr/bin/env python3
"""Build the random-weight tiny models of the parity test (GPU machine).

For every family (a `<family>-tiny.json` in --configs) this writes, under --out:
  <family>/          the target model: config.json + model.safetensors (save_pretrained)
  <family>/prompts.txt   the prompts, one a line, space-separated token ids
  <family>-draft/    the 1-layer draft model of `<family>-tiny-draft.json`
  <family>-mtp/      with a `<family>-tiny-mtp.json` (DeepSeek): the target plus one MTP
                     module (layer N = num_hidden_layers) in one model.safetensors; its
                     decoder layer is a copy of layer N - 1 (the parity test's reference
                     module reuses that layer), enorm/hnorm/eh_proj are drawn here, the
                     shared head is the target's final norm and lm_head (docs/mtp.md)
  <family>-kiln/, <family>-draft-kiln/
                     with a config whose `quantization_config` is MXFP4 (gpt-oss-mxfp4):
                     the checkpoints Kiln reads, as the published gpt-oss ones are laid
                     out (see quantize_experts)
  manifest.json      what was built, with the library versions; a family whose Kiln
                     checkpoints differ from the reference's maps each model directory
                     to Kiln's in its entry's "kiln_weights" (parity.py's kiln_weights)

Weights are drawn here with one seeded generator rather than left to transformers'
_init_weights, because the defaults leave RMSNorm weights at 1 and biases at 0: a
runtime that skipped a norm weight or Qwen2's q/k/v biases would still match. Linear
and embedding weights use the config's initializer_range (0.1: at the usual 0.02 the
logits are so flat that bf16 rounding flips many greedy steps; shared/DESIGN.md).

The draft model is the target cut down to its first layer (same embedding, layer 0,
final norm and lm_head), so its guesses are related to the target's.

An MXFP4 family (`"quantization_config": {"quant_method": "mxfp4", ...}` in its config)
is built as the others in bf16, without the quantization_config, then its experts'
weights are quantized to MXFP4 here (quantize_mxfp4) and replaced by their dequantized
values, so that the reference (bf16, in <family>/) and Kiln (MXFP4, in <family>-kiln/)
hold the same numbers. Nothing is drawn for it: the random streams are the others'.

Usage: python3 test/Parity/make_models.py --configs test/Parity/configs --out DIR
"""
import argparse
import json
import random
import sys
import zlib
from pathlib import Path

import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM

# Prompt lengths: 1 (a one-token prefill), short ones, exactly one KV page (64) so the
# first decoded token opens a new page, and one spanning three pages.
RANDOM_PROMPT_LENGTHS = [1, 5, 17, 64, 130]
REPEAT_PATTERN_LEN, REPEAT_TIMES = 8, 6   # a pattern repeated: n-gram drafts find it
SELF_SEED_LEN, SELF_GREEDY_LEN = 8, 88    # the model's own greedy text: random models
                                          # fall into loops, which n-gram drafts accept
NORM_JITTER = 0.1   # RMSNorm weights are 1 + N(0, this)
BIAS_STD = 0.5      # biases (Qwen2 q/k/v) are N(0, this): large enough to matter
ROUTER_BIAS_STD = 0.1  # DeepSeek-style e_score_correction_bias: moves some choices
SINK_STD = 1.0         # gpt-oss's per-head attention-sink logits


def load_config(path):
    """A transformers config from one of our JSON files (AutoConfig by model_type)."""
    fields = json.loads(Path(path).read_text())
    model_type = fields.pop("model_type")
    fields.pop("quantization_config", None)  # the reference is bf16 (mxfp4_config)
    return AutoConfig.for_model(model_type, **fields)


def reference_attention(config):
    """sdpa, or eager for a model transformers runs only eagerly (gpt-oss: its attention
    sinks are not in torch's sdpa)."""
    return "eager" if getattr(config, "model_type", "") == "gpt_oss" else "sdpa"


def build_model(config, device):
    """An untrained bf16 model with sdpa attention (reference_attention) on `device`.

    transformers 5 calls the dtype argument `dtype`; 4.x called it `torch_dtype`.
    """
    attention = reference_attention(config)
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(
                config, dtype=torch.bfloat16, attn_implementation=attention)
        except TypeError:
            model = AutoModelForCausalLM.from_config(
                config, torch_dtype=torch.bfloat16, attn_implementation=attention)
    # Parameters only: Module.to(dtype) would cast RoPE's inv_freq buffer to bf16 as well.
    for param in model.parameters():
        param.data = param.data.to(device=device, dtype=torch.bfloat16)
    model = model.to(device=device)
    keep_rope_in_float32(model)
    use_eager_experts(model)
    model.eval()
    return model


def use_eager_experts(model):
    """MoE models: transformers' eager experts loop (one index_add_ per expert, in expert
    order), the semantics kiln.moe reproduces; transformers 5 may pick a grouped-GEMM
    implementation by default, whose sums are ordered differently."""
    config = model.config
    if hasattr(config, "_experts_implementation"):
        previous = config._experts_implementation
        config._experts_implementation = "eager"
        if previous not in (None, "eager"):
            print(f"experts implementation {previous} -> eager")


def keep_rope_in_float32(model):
    """RoPE's inverse frequencies as transformers computes them: float32.

    A model cast with `.to(torch.bfloat16)` rounds the inv_freq buffer to bf16 too, which
    transformers' from_pretrained never does: every angle is then off by up to 2^-9 of
    itself, so the reference's rotated q/k drift from the model's with the position
    (3.5e-2 relative at positions 64-129 of the llama parity model, where bf16 rounding
    alone is 2e-3; test/Parity/trace_compare.py, 2026-12-03). Recomputed here if a
    transformers version builds the buffer in the model's dtype.
    """
    for name, module in model.named_modules():
        inv = getattr(module, "inv_freq", None)
        if not torch.is_tensor(inv) or inv.dtype == torch.float32:
            continue
        init = getattr(module, "rope_init_fn", None)
        if init is None:
            from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
            rope_type = getattr(module, "rope_type", "default")
            init = ROPE_INIT_FUNCTIONS.get(rope_type) or \
                getattr(module, "compute_default_rope_parameters")
        fresh, _ = init(module.config, inv.device)
        module.inv_freq = fresh.to(torch.float32)
        if torch.is_tensor(getattr(module, "original_inv_freq", None)):
            module.original_inv_freq = module.inv_freq.clone()
        print(f"{name}.inv_freq was {inv.dtype}: recomputed in float32")


@torch.no_grad()
def randomize(model, std, seed, device):
    """Draw every parameter from one seeded generator (see the module docstring)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    for name, param in sorted(model.named_parameters()):
        if name.endswith((".bias", ".gate_up_proj_bias", ".down_proj_bias")):
            param.normal_(0.0, BIAS_STD, generator=gen)
        elif name.endswith(".sinks"):
            # gpt-oss's attention sinks: logits of the size of the scores, so that each
            # head's sink takes a visible share of its softmax.
            param.normal_(0.0, SINK_STD, generator=gen)
        elif param.dim() == 1:  # every 1-D weight of these models is an RMSNorm's
            param.normal_(0.0, NORM_JITTER, generator=gen).add_(1.0)
        else:
            param.normal_(0.0, std, generator=gen)
    # The routers' correction bias (a parameter or a buffer by version) starts at 0, which
    # would leave the runtime's use of it untested.
    for name, tensor in sorted(list(model.named_parameters()) + list(model.named_buffers())):
        if name.endswith("e_score_correction_bias"):
            tensor.normal_(0.0, ROUTER_BIAS_STD, generator=gen)


FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # FP4 E2M1 codes 0..7; 8..15 negated
MXFP4_BLOCK = 32                                       # values per E8M0 scale


def mxfp4_config(path):
    """The quantization_config of an MXFP4 config file, or None (load_config leaves it
    out: the model is built in bf16 and its experts quantized by quantize_experts)."""
    quantization = json.loads(Path(path).read_text()).get("quantization_config")
    if quantization and quantization.get("quant_method") == "mxfp4":
        return quantization
    return None


def powers_of_two(exponents):
    """2^e as float32 for an int32 tensor of exponents in [-126, 127], built from the bits
    (exact, unlike pow or exp2 may be)."""
    return ((exponents + 127) << 23).view(torch.float32)


@torch.no_grad()
def quantize_mxfp4(weight):
    """`weight` [..., n] (n a multiple of 32) in OCP MXFP4 along its last dimension.

    Per block of 32 values the scale is the smallest power of two 2^k (k in [-126, 126])
    with max |value| / 2^k <= 6.0, and each value / 2^k is rounded to the nearest FP4
    E2M1 value (ties to the even code). Returns (blocks, scales, values): blocks uint8
    [..., n / 32, 16], element 2j of a block in the low nibble of its byte j and 2j + 1 in
    the high one; scales uint8 [..., n / 32], the E8M0 byte k + 127; values, the
    dequantized tensor (code x 2^k) in weight's shape and dtype, exact in bf16.
    """
    x = weight.float().reshape(*weight.shape[:-1], weight.shape[-1] // MXFP4_BLOCK,
                               MXFP4_BLOCK)
    # amax = m x 2^e with m in [0.5, 1) (frexp, exact): amax / 2^(e-3) = 8m fits 6 iff
    # m <= 0.75, else amax / 2^(e-2) = 4m < 4 does (an all-zero block gets 2^-3).
    mantissa, exponent = torch.frexp(x.abs().amax(dim=-1))
    k = torch.where(mantissa <= 0.75, exponent - 3, exponent - 2).to(torch.int32)
    k = k.clamp(-126, 126)
    scaled = x * powers_of_two(-k).unsqueeze(-1)          # exact: a power of two
    grid = torch.tensor(FP4_VALUES, dtype=torch.float32, device=x.device)
    distance = (scaled.abs().unsqueeze(-1) - grid).abs()  # [..., blocks, 32, 8]
    nearest = distance == distance.amin(dim=-1, keepdim=True)
    even = torch.arange(len(FP4_VALUES), device=x.device) % 2 == 0
    # The nearest code; of two equally near ones (adjacent), the even one.
    magnitude = torch.argmax(nearest.float() * 2 + (nearest & even).float(), dim=-1)
    negative = scaled < 0
    codes = (magnitude + 8 * negative.to(magnitude.dtype)).to(torch.int32)
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
    scales = (k + 127).to(torch.uint8)
    values = torch.where(negative, -grid[magnitude], grid[magnitude])
    values = (values * powers_of_two(k).unsqueeze(-1)).reshape(weight.shape)
    return blocks, scales, values.to(weight.dtype)


def dequantize_mxfp4(blocks, scales):
    """The float32 values of MXFP4 `blocks` [..., g, 16] and `scales` [..., g] ([..., 32 g]),
    as Kiln's loader and transformers' read them: a check of quantize_mxfp4's packing."""
    grid = torch.tensor(FP4_VALUES + tuple(-v for v in FP4_VALUES), device=blocks.device)
    codes = torch.stack((blocks & 15, blocks >> 4), dim=-1).reshape(*blocks.shape[:-1], 32)
    values = grid[codes.long()] * powers_of_two(scales.to(torch.int32) - 127).unsqueeze(-1)
    return values.reshape(*scales.shape[:-1], -1)


MXFP4_EXPERTS = (".experts.gate_up_proj", ".experts.down_proj")


@torch.no_grad()
def quantize_experts(model):
    """Every expert weight of `model` (gpt-oss: `...mlp.experts.gate_up_proj` and
    `down_proj`, transformers' [E, in, out]) quantized to MXFP4 along `in` and replaced in
    the model by its dequantized values. Returns {parameter name: (blocks, scales)} in the
    published checkpoints' layout, [E, out, in / 32, 16] and [E, out, in / 32] (what
    transformers' loader dequantizes and transposes into its [E, in, out])."""
    packed = {}
    for name, param in model.named_parameters():
        if not name.endswith(MXFP4_EXPERTS):
            continue
        blocks, scales, values = quantize_mxfp4(param.data.transpose(1, 2))
        param.data.copy_(values.transpose(1, 2))
        packed[name] = (blocks.cpu(), scales.cpu())
    if not packed:
        raise SystemExit(f"MXFP4 config, but no {' or '.join(MXFP4_EXPERTS)} weights in "
                         f"{type(model).__name__}")
    return packed


def save_mxfp4(model_dir, packed, quantization, out_dir):
    """Kiln's checkpoint of the saved model `model_dir`: its tensors, each expert weight
    of `packed` replaced by `NAME_blocks` and `NAME_scales`, and its config.json with the
    quantization_config (the published gpt-oss checkpoints' form)."""
    from safetensors.torch import load_file, save_file
    path = Path(model_dir) / "model.safetensors"
    tensors = load_file(str(path))
    experts = [name for name in tensors if name.endswith(MXFP4_EXPERTS)]
    if not experts or any(name not in packed for name in experts):
        raise SystemExit(f"{path}: expert weights {experts} are not the quantized ones "
                         f"{sorted(packed)} (did save_pretrained rename them?)")
    for name in experts:
        blocks, scales = packed[name]
        # The saved [E, in, out] must be what the blocks hold, transposed.
        if not torch.equal(dequantize_mxfp4(blocks, scales),
                           tensors[name].float().transpose(1, 2)):
            raise SystemExit(f"{path}: {name} {list(tensors[name].shape)} is not the "
                             f"transposed dequantization of its MXFP4 blocks")
        del tensors[name]
        tensors[name + "_blocks"] = blocks
        tensors[name + "_scales"] = scales
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out_dir / "model.safetensors"),
              metadata={"format": "pt"})
    config = json.loads((Path(model_dir) / "config.json").read_text())
    config["quantization_config"] = quantization
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")


@torch.no_grad()
def make_draft(target, draft_config, device):
    """The draft model: the target's weights, keeping only layer 0."""
    draft = build_model(draft_config, device)
    keep = {}
    for name, tensor in target.state_dict().items():
        if ".layers." in name and ".layers.0." not in name:
            continue
        keep[name] = tensor
    draft.load_state_dict(keep, strict=True)
    return draft


@torch.no_grad()
def greedy(model, prompt, count, device):
    """`count` greedy tokens after `prompt` (plain forward calls with a KV cache)."""
    ids = torch.tensor([prompt], device=device)
    out = model(input_ids=ids, use_cache=True)
    tokens = []
    for _ in range(count):
        token = int(torch.argmax(out.logits[0, -1].float()))
        tokens.append(token)
        out = model(input_ids=torch.tensor([[token]], device=device),
                    past_key_values=out.past_key_values, use_cache=True)
    return tokens


def make_prompts(model, vocab, seed, device):
    """Random prompts of several lengths, a repetitive one and the model's own text."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab) for _ in range(n)] for n in RANDOM_PROMPT_LENGTHS]
    pattern = [rng.randrange(vocab) for _ in range(REPEAT_PATTERN_LEN)]
    prompts.append(pattern * REPEAT_TIMES)
    start = [rng.randrange(vocab) for _ in range(SELF_SEED_LEN)]
    prompts.append(start + greedy(model, start, SELF_GREEDY_LEN, device))
    return prompts


def save(model, directory):
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(directory), safe_serialization=True)


@torch.no_grad()
def make_mtp(target_dir, mtp_config_path, out_dir, std, seed):
    """The target's checkpoint plus MTP module N (see the module docstring)."""
    from safetensors.torch import load_file, save_file
    fields = json.loads(Path(mtp_config_path).read_text())
    n = fields["num_hidden_layers"]
    tensors = load_file(str(Path(target_dir) / "model.safetensors"))
    hidden = tensors["model.embed_tokens.weight"].shape[1]
    source = f"model.layers.{n - 1}."
    for name in [k for k in tensors if k.startswith(source)]:
        tensors[f"model.layers.{n}." + name[len(source):]] = tensors[name].clone()
    gen = torch.Generator().manual_seed(seed + 1)
    mtp = f"model.layers.{n}."
    for norm in ("enorm", "hnorm"):
        tensors[mtp + norm + ".weight"] = (
            1.0 + NORM_JITTER * torch.randn(hidden, generator=gen)).to(torch.bfloat16)
    tensors[mtp + "eh_proj.weight"] = (
        std * torch.randn(hidden, 2 * hidden, generator=gen)).to(torch.bfloat16)
    tensors[mtp + "shared_head.norm.weight"] = tensors["model.norm.weight"].clone()
    tensors[mtp + "shared_head.head.weight"] = tensors["lm_head.weight"].clone()
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out_dir / "model.safetensors"),
              metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(fields, indent=2) + "\n")


def make_family(family, configs, out, seed, device):
    target_config = load_config(configs / f"{family}-tiny.json")
    draft_path = configs / f"{family}-tiny-draft.json"
    target = build_model(target_config, device)
    randomize(target, target_config.initializer_range, seed, device)
    quantization = mxfp4_config(configs / f"{family}-tiny.json")
    packed = quantize_experts(target) if quantization else None
    save(target, out / family)

    prompts = make_prompts(target, target_config.vocab_size, seed, device)
    (out / family / "prompts.txt").write_text(
        "".join(" ".join(map(str, p)) + "\n" for p in prompts))

    entry = {"target": str(out / family), "prompts": [len(p) for p in prompts],
             "parameters": sum(p.numel() for p in target.parameters())}
    mtp_path = configs / f"{family}-tiny-mtp.json"
    if mtp_path.exists():
        make_mtp(out / family, mtp_path, out / f"{family}-mtp",
                 target_config.initializer_range, seed)
        entry["mtp"] = str(out / f"{family}-mtp")
    if draft_path.exists():
        draft = make_draft(target, load_config(draft_path), device)
        save(draft, out / f"{family}-draft")
        entry["draft"] = str(out / f"{family}-draft")
        del draft
    if quantization:
        # Kiln reads these (parity.py's kiln_weights), the reference the bf16 ones; the
        # draft's experts are the target's layer 0, so are its blocks.
        entry["kiln_weights"] = {}
        for name in [family] + ([f"{family}-draft"] if draft_path.exists() else []):
            save_mxfp4(out / name, packed, quantization, out / f"{name}-kiln")
            entry["kiln_weights"][name] = f"{name}-kiln"
    del target
    torch.cuda.empty_cache()
    return entry


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=Path,
                        default=Path(__file__).resolve().parent / "configs")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--families", default="",
                        help="comma-separated subset (default: every *-tiny.json)")
    parser.add_argument("--seed", type=int, default=20260101)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()

    families = [f for f in args.families.split(",") if f] or sorted(
        p.name[: -len("-tiny.json")] for p in args.configs.glob("*-tiny.json"))
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = {"torch": torch.__version__, "transformers": transformers.__version__,
                "seed": args.seed, "families": {}}
    for family in families:
        # A seed per family from its name, so a subset rebuilds the same weights.
        seed = args.seed + zlib.crc32(family.encode()) % 100000
        entry = make_family(family, args.configs, args.out, seed, args.device)
        manifest["families"][family] = entry
        print(f"{family}: {entry['parameters']:,} parameters, prompts {entry['prompts']}",
              flush=True)
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
