#!/usr/bin/env python3
"""Checks a Qwen3-Next-80B-A3B report (h200, tp 4, 64 slots, max_seq_len 8192) against
the resource formulas: which layers hold what, and the bytes of each.

Usage: check_qwen3_next.py REPORT.json rewind|replay|none
"""
import json
import sys

report = json.load(open(sys.argv[1]))
mode = sys.argv[2]
SLOTS, TP, STEPS = 64, 4, 4                    # max_batch, ranks, 1 + max_draft_len 3
HK, HV, DK, DV, CONV, WIDTH = 16, 32, 128, 128, 8192, 3
F32, BF16 = 4, 2
full = {i for i in range(48) if (i + 1) % 4 == 0}  # full_attention_interval 4
gdn = set(range(48)) - full

expected = {  # kind -> bytes of one layer's resource (per rank)
    "gdn_state": SLOTS * (HV // TP) * DK * DV * F32,
    "conv_state": SLOTS * (CONV // TP) * WIDTH * BF16,
    "kv": SLOTS * 8192 * 2 * 1 * 256 * BF16,    # 2 KV heads over 4 ranks: one each
}
if mode != "none":
    expected["intermediate_conv_state"] = STEPS * expected["conv_state"]
if mode == "rewind":
    expected["intermediate_gdn_state"] = STEPS * expected["gdn_state"]
if mode == "replay":
    # The inputs of the last two steps, 1 + max_draft_len tokens each.
    expected["gdn_replay_k"] = SLOTS * 2 * STEPS * (HK // TP) * DK * BF16
    expected["gdn_replay_v"] = SLOTS * 2 * STEPS * (HV // TP) * DV * BF16
    expected["gdn_replay_gb"] = SLOTS * 2 * (HV // TP) * STEPS * 2 * F32

by_kind = {}
for r in report["resources"]:
    by_kind.setdefault(r["kind"], []).append(r)
assert set(by_kind) == set(expected), (sorted(by_kind), sorted(expected))
for kind, resources in by_kind.items():
    layers = {r["layer"] for r in resources}
    want_layers = full if kind == "kv" else gdn
    assert layers == want_layers, (kind, sorted(layers ^ want_layers))
    for r in resources:
        assert r["bytes"] == expected[kind], (kind, r["bytes"], expected[kind])
        assert r["speculative_only"] == (kind not in ("gdn_state", "conv_state", "kv")), r
speculative = sum(r["bytes"] for r in report["resources"] if r["speculative_only"])
assert report["memory"]["speculative_bytes"] == speculative, report["memory"]
assert report["memory"]["total_bytes"] == sum(r["bytes"] for r in report["resources"])
if mode == "none":
    assert speculative == 0
assert report["memory"]["fits"] is True
print(f"{mode}: {len(report['resources'])} resources, {speculative} speculative-only bytes: ok")
