"""Checks kiln-compile JSON reports against docs/report-schema.md."""
import json
import sys

KINDS = {"kv", "mla_latent", "ssm_state", "conv_state", "intermediate_ssm_state",
         "intermediate_conv_state", "replay_x", "replay_b", "replay_dt",
         "draft_kv"}
for path in sys.argv[1:]:
    with open(path) as f:
        d = json.load(f)
    # device_memory: whole-graph models only (their activations are planned).
    keys = ["model", "target", "spec", "resources", "kernels", "memory"]
    assert list(d) in (keys, keys + ["device_memory"]), list(d)
    assert set(d["model"]) == {"name", "model_type", "num_layers"}
    assert set(d["target"]) == {"name", "sm", "memory_bytes"}
    assert d["spec"] is None or set(d["spec"]) == {"mode", "max_draft_len", "ssm_mode"}
    for r in d["resources"]:
        assert set(r) == {"name", "layer", "kind", "speculative_only", "bytes", "pool"}, r
        assert r["kind"] in KINDS, r
        assert r["pool"] in {"kv", "state", "unmanaged"}, r
        assert r["name"] == "layer%d.%s" % (r["layer"], r["kind"]), r
        assert isinstance(r["bytes"], int) and r["bytes"] >= 0
    for k in d["kernels"]:
        assert set(k) == {"layer", "op", "phase", "kernel", "spec_dec_mode", "implemented"}, k
        assert isinstance(k["implemented"], bool), k
        assert k["op"] in {"attention", "mla_attention", "ssm", "causal_conv"}, k
        assert k["phase"] in {"decode", "prefill"}, k
    m = d["memory"]
    assert set(m) == {"total_bytes", "kv_bytes", "state_bytes", "speculative_bytes",
                      "unmanaged_bytes", "budget_bytes", "fits"}, m
    assert isinstance(m["fits"], bool)
print("ok")
