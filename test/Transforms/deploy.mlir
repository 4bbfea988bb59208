// The whole pipeline on the hybrid example: no speculative-only bytes without spec,
// intermediate states (rewind) or replay buffers (replay) with it.
// RUN: kiln-opt %S/../../examples/hybrid.mlir --kiln-deploy | FileCheck %s --check-prefix=NOSPEC
// RUN: kiln-opt %S/../../examples/hybrid.mlir --kiln-deploy="spec=mtp:3" | FileCheck %s --check-prefix=REWIND
// RUN: kiln-opt %S/../../examples/hybrid.mlir --kiln-deploy="spec=mtp:3 ssm-mode=replay" | FileCheck %s --check-prefix=REPLAY
// RUN: kiln-opt %S/../../examples/hybrid.mlir --kiln-deploy="target=rtx5090 spec=mtp:3 max-batch=8" | FileCheck %s --check-prefix=SM120

// NOSPEC: speculative_bytes = 0
// NOSPEC-NOT: speculative_only
// NOSPEC: kiln.cached_attention layer 4 %{{[^ ]*}}, %{{[^ ]*}}, %{{[^ ]*}} outs(%{{[^ ]*}} : tensor<?x40x128xbf16>) {draft = #kiln<draft mtp>
// NOSPEC-NOT: speculative_only

// REWIND: speculative_bytes = 9770631168
// REWIND-COUNT-2: speculative_only {{.*}}!kiln.cache<intermediate_conv_state>
// REWIND: kiln.cached_ssm layer 0 {{.*}}intermediate({{.*}}decode_kernel = "ssm_update_spec"
// REWIND: kiln.cached_attention layer 1 {{.*}}decode_kernel = "gqa_decode"{{.*}}spec_dec_mode = #kiln<spec_dec_mode multi_token>

// REPLAY-NOT: intermediate_ssm_state
// REPLAY: !kiln.cache<replay_x>
// REPLAY: kiln.cached_ssm layer 0 {{.*}}decode_kernel = "ssm_update_replay"

// SM120: kiln.target = #kiln.target<"rtx5090"
// SM120: kiln.cached_attention layer 1 {{.*}}spec_dec_mode = #kiln<spec_dec_mode multi_token>
