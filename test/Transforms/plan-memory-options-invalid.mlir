// Option errors of kiln-plan-memory.
// RUN: not kiln-opt %s -kiln-plan-memory="usable-fraction=1.5" 2>&1 | FileCheck %s --check-prefix=FRACTION
// RUN: not kiln-opt %s -kiln-plan-memory="usable-fraction=nan" 2>&1 | FileCheck %s --check-prefix=NAN
// RUN: not kiln-opt %s -kiln-plan-memory="reserve-bytes=18446744073709551615" 2>&1 | FileCheck %s --check-prefix=RESERVE
// RUN: sed -e 's/"h200"/"sm_90"/' %s | not kiln-opt -kiln-plan-memory="fill-kv=true" 2>&1 | FileCheck %s --check-prefix=NOMEM
// RUN: not kiln-opt %s -kiln-plan-memory="fill-kv=true usable-fraction=0.000001" 2>&1 | FileCheck %s --check-prefix=NOROOM
// FRACTION: error: kiln-plan-memory: usable-fraction = 1.5 must be in (0, 1]
// NAN: error: kiln-plan-memory: usable-fraction = nan must be in (0, 1]
// RESERVE: error: model weights (0 B per rank + reserve) exceed the usable 125.82 GiB of 'h200'
// NOMEM: error: kiln-plan-memory: fill-kv needs a target with a known memory size
// RUN: sed -e 's/unit \[2, 8, 128\] of bf16/unit [2, 8, 1099511627776] of bf16/' -e '/ssm_state/d' %s | not kiln-opt -kiln-plan-memory="fill-kv=true" 2>&1 | FileCheck %s --check-prefix=NOPAGE
// NOPAGE: error: kiln-plan-memory: fill-kv: one KV page of every layer (2.00 PiB) does not fit in the 125.82 GiB the states leave
// NOROOM: error: kiln-plan-memory: fill-kv leaves no memory for KV pages: states take 4.00 MiB of a 146.59 KiB budget
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @f() {
    %0 = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    %1 = kiln.cache_resource layer 1 unit [16, 64, 128] of f32 : !kiln.cache<ssm_state>
    return
  }
}
