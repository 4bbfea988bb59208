// Lowering to Kiln runtime calls: the right kernel per target and spec-dec mode, the
// planned arena offsets, and no spec-variant launches for empty speculative slots.
// RUN: kiln-opt %S/../../examples/hybrid.mlir --kiln-deploy --convert-kiln-to-cuda | FileCheck %s --check-prefix=NOSPEC
// RUN: kiln-opt %S/../../examples/hybrid.mlir --kiln-deploy="spec=mtp:3" --convert-kiln-to-cuda | FileCheck %s --check-prefix=SPEC
// RUN: kiln-opt %s --kiln-deploy="spec=mtp:1" --convert-kiln-to-cuda | FileCheck %s --check-prefix=MLA90
// RUN: kiln-opt %s --kiln-deploy="target=rtx5090 spec=mtp:1" --convert-kiln-to-cuda | FileCheck %s --check-prefix=MLA120

// Without spec: no intermediate offsets (-1), single-token kernels (ssm_update = 5,
// conv_update = 7, gqa_decode = 1 in single_token mode = 0), no draft step.
// NOSPEC-LABEL: func.func @kiln_model_prefill_step(%{{.*}}: !llvm.ptr) -> i32
// NOSPEC: call @kiln_rt_conv(%{{.*}}, %[[ONE:.*]], %{{.*}}, %[[CONV0:.*]], %[[NONE:.*]], %{{.*}}, %{{.*}}, %{{.*}}, %[[CONVPRE:.*]])
// NOSPEC-LABEL: func.func @kiln_model_decode_step
// NOSPEC-DAG: %[[M1:.*]] = arith.constant -1 : i64
// NOSPEC-DAG: %[[SSMK:.*]] = arith.constant 5 : i32
// NOSPEC-DAG: %[[OFF:.*]] = arith.constant 8603303936 : i64
// NOSPEC: call @kiln_rt_ssm(%{{.*}}, %{{.*}}, %{{.*}}, %[[OFF]], %[[M1]], {{.*}}, %[[SSMK]])
// NOSPEC-NOT: kiln_model_draft_step
// NOSPEC: func.func @kiln_model_arena_bytes() -> i64
// NOSPEC: arith.constant 9958850560 : i64
// NOSPEC: func.func @kiln_model_speculative_bytes() -> i64
// NOSPEC-NEXT: %{{.*}} = arith.constant 0 : i64

// With mtp:3: spec variants with their intermediate offsets, multi-token attention,
// and a draft step for the MTP layer.
// SPEC-LABEL: func.func @kiln_model_decode_step
// SPEC-DAG: %[[SSMSPEC:.*]] = arith.constant 6 : i32
// SPEC-DAG: %[[INTER:.*]] = arith.constant 13622837248 : i64
// SPEC: call @kiln_rt_ssm(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[INTER]], {{.*}}, %[[SSMSPEC]])
// SPEC: func.func @kiln_model_draft_step
// SPEC: call @kiln_rt_attention
// SPEC-NOT: call @kiln_rt_ssm
// SPEC: return

// MLA on sm_90: mla_decode (3) in multi-token mode (1).
// MLA90-LABEL: func.func @kiln_model_decode_step
// MLA90: %[[K:.*]] = arith.constant 3 : i32
// MLA90: call @kiln_rt_mla({{.*}}, %[[K]], %[[K1:[^ )]*]])
// On sm_120: mla_decode_small_smem (4), extend-context (2).
// MLA120-LABEL: func.func @kiln_model_decode_step
// MLA120-DAG: %[[K:.*]] = arith.constant 4 : i32
// MLA120-DAG: %[[MODE:.*]] = arith.constant 2 : i32
// MLA120: call @kiln_rt_mla({{.*}}, %[[K]], %[[MODE]])
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 256, kv_dtype = bf16>} {
  func.func @forward(%q: tensor<?x16x576xbf16>, %l: tensor<?x576xbf16>) -> tensor<?x16x512xbf16> {
    %0 = kiln.mla_attention layer 0 %q, %l {num_heads = 16, kv_lora_rank = 512, qk_rope_head_dim = 64}
      : tensor<?x16x576xbf16>, tensor<?x576xbf16> -> tensor<?x16x512xbf16>
    %1 = kiln.mla_attention layer 1 %q, %l {num_heads = 16, kv_lora_rank = 512, qk_rope_head_dim = 64, draft = #kiln<draft mtp>}
      : tensor<?x16x576xbf16>, tensor<?x576xbf16> -> tensor<?x16x512xbf16>
    return %0 : tensor<?x16x512xbf16>
  }
}
