// kiln-configure sets the module configuration from options.
// RUN: kiln-opt %s -split-input-file -kiln-configure="target=l40s spec=mtp:2 ssm-mode=replay max-batch=16 tp=2 kv-dtype=fp8" | FileCheck %s
// RUN: kiln-opt %s -split-input-file -kiln-configure="spec=none" | FileCheck %s --check-prefix=OFF

// CHECK: kiln.runtime = #kiln.runtime<max_batch = 16, max_seq_len = 4096, kv_dtype = f8E4M3FN, tp = 2>
// CHECK-SAME: kiln.spec = #kiln.spec<mode = mtp, max_draft_len = 2, ssm = replay>
// CHECK-SAME: kiln.target = #kiln.target<"l40s"
// OFF-NOT: kiln.spec
// OFF: kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 4096, kv_dtype = bf16>
module attributes {kiln.spec = #kiln.spec<mode = ngram, max_draft_len = 3>,
                   kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 4096, kv_dtype = bf16>} {}
