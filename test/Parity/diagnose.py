#!/usr/bin/env python3
"""Where does Kiln's first-step logit error come from? (GPU machine, a diagnostic.)

For each family built by make_models.py, the same compiled `<family>-nospec.so` runs on
weight variants that switch parts of the model off (weights set to zero, so the graph
and the .so are unchanged):
  full        the model as built
  attn0       only layer 0's attention reaches the output: every MLP's down_proj and
              every other layer's o_proj are zero
  no_attn     every o_proj is zero: embedding, norms and MLPs only (position-free)
and prints, per prompt length, the relative error of the prompt's last-token logits of
  kiln-vs-sdpa    Kiln against transformers bf16 (sdpa), the parity reference
  eager-vs-sdpa   transformers bf16 eager attention against sdpa: two correct bf16
                  implementations, i.e. the size of rounding noise
  kiln-vs-fp32 / sdpa-vs-fp32   each against the same weights in float32
If Kiln is as far from fp32 as transformers' bf16 is, the difference is rounding noise;
if attn0 shows Kiln far beyond it, the attention path has a defect.

Usage: python3 test/Parity/diagnose.py --models DIR --so-dir DIR --kiln-run BIN
           [--lib-dir DIR] [--families llama ...] --out OUT
"""
import argparse
import json
import shutil
import subprocess
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from parity import kiln_env, load_reference_model, use_attention

VARIANTS = ["full", "attn0", "no_attn"]


def variant_state(state, variant):
    """The weights of one variant: zeros where the variant switches a part off."""
    out = dict(state)
    for name, tensor in state.items():
        layer = int(name.split(".")[2]) if name.startswith("model.layers.") else None
        off = (variant == "attn0" and (name.endswith("mlp.down_proj.weight") or
                                       (name.endswith("o_proj.weight") and layer != 0))) or \
              (variant == "no_attn" and name.endswith("o_proj.weight"))
        if off:
            out[name] = torch.zeros_like(tensor)
    return out


def write_variant(model_dir, variant, work):
    target = work / variant
    target.mkdir(parents=True, exist_ok=True)
    state = {}
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        state.update(load_file(str(path)))
    save_file(variant_state(state, variant), str(target / "model.safetensors"),
              metadata={"format": "pt"})
    shutil.copyfile(Path(model_dir) / "config.json", target / "config.json")
    return target


@torch.no_grad()
def last_logits(model, prompts, device):
    return [model(input_ids=torch.tensor([p], device=device)).logits[0, -1].float().cpu()
            for p in prompts]


def rel(a, b):
    return float((a - b).norm() / b.norm())


def kiln_logits(so, weights, prompts_file, work, args, count):
    logits_path = work / "kiln.logits.bin"
    cmd = [str(args.kiln_run), str(so), "--weights", str(weights), "--prompts",
           str(prompts_file), "--max-new-tokens", "1", "--json", str(work / "kiln.json"),
           "--logits", str(logits_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=kiln_env(args.lib_dir),
                          timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"kiln-run exit {proc.returncode}: {proc.stderr[-800:]}")
    data = torch.frombuffer(bytearray(logits_path.read_bytes()), dtype=torch.float32)
    return list(data.view(count, -1))


def diagnose(family, args):
    model_dir = args.models / family
    prompts = [[int(t) for t in line.split()]
               for line in (model_dir / "prompts.txt").read_text().splitlines() if line.strip()]
    work = args.out / "diagnose" / family
    work.mkdir(parents=True, exist_ok=True)
    prompts_file = work / "prompts.txt"
    prompts_file.write_text("".join(" ".join(map(str, p)) + "\n" for p in prompts))
    rows = {}
    for variant in VARIANTS:
        weights = write_variant(model_dir, variant, work)
        model = load_reference_model(weights, args.device)
        sdpa = last_logits(model, prompts, args.device)
        use_attention(model, "eager")
        eager = last_logits(model, prompts, args.device)
        use_attention(model, "sdpa")
        model = model.float()
        exact = last_logits(model, prompts, args.device)
        del model
        torch.cuda.empty_cache()
        kiln = kiln_logits(args.so_dir / f"{family}-nospec.so", weights, prompts_file,
                           work / variant, args, len(prompts))
        rows[variant] = {
            "kiln-vs-sdpa": [rel(k, s) for k, s in zip(kiln, sdpa)],
            "eager-vs-sdpa": [rel(e, s) for e, s in zip(eager, sdpa)],
            "kiln-vs-fp32": [rel(k, x) for k, x in zip(kiln, exact)],
            "sdpa-vs-fp32": [rel(s, x) for s, x in zip(sdpa, exact)],
        }
    lengths = [len(p) for p in prompts]
    print(f"{family}: prompt lengths {lengths}")
    for variant, metrics in rows.items():
        for name, values in metrics.items():
            print(f"  {variant:8s} {name:14s} " + " ".join(f"{v:8.1e}" for v in values))
    return {"lengths": lengths, "variants": rows}


def add_run_arguments(parser):
    """The arguments every diagnostic needs to run Kiln's parity models."""
    parser.add_argument("--models", type=Path, required=True, help="make_models.py --out")
    parser.add_argument("--so-dir", type=Path, required=True, help="the compiled .so's")
    parser.add_argument("--kiln-run", type=Path, required=True)
    parser.add_argument("--lib-dir", type=Path, action="append", default=[])
    parser.add_argument("--out", type=Path, required=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(parser)
    parser.add_argument("--families", nargs="*", default=["llama", "mistral", "qwen2", "qwen3"])
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    results = {}
    for family in args.families:
        try:
            results[family] = diagnose(family, args)
        except Exception as error:  # one family failing must not hide the others
            print(f"{family}: diagnose failed: {type(error).__name__}: {error}")
            results[family] = {"error": str(error)}
    (args.out / "diagnose.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
