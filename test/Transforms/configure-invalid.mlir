// RUN: kiln-opt %s -split-input-file -kiln-configure="target=t4" -verify-diagnostics
// RUN: not kiln-opt %s -kiln-configure="spec=none ssm-mode=replay" 2>&1 | FileCheck %s --check-prefix=REPLAY
// RUN: not kiln-opt %s -kiln-configure="spec=medusa:2" 2>&1 | FileCheck %s --check-prefix=SPEC
// RUN: not kiln-opt %s -kiln-configure="kv-dtype=int4" 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: not kiln-opt %s -kiln-configure="page-size=24" 2>&1 | FileCheck %s --check-prefix=PAGE

// REPLAY: error: SSM replay mode requires speculation: ssm-mode = replay needs a spec setup (e.g. spec = mtp:3)
// SPEC: error: bad spec 'medusa:2'; expected none, mtp:N, eagle3:N, draft:N or ngram:N
// DTYPE: error: unknown kv dtype 'int4'; expected bf16, f16, f32 or fp8
// PAGE: error: #kiln.runtime: page_size = 24 must be a power of two in [8, 256]

// expected-error @below {{unknown target 't4'; expected one of a100, a10g, l4, l40s, h100, h200, b200, b300, rtx5090, rtx-pro-6000, dgx-spark, or sm_XY with XY a supported SM}}
module {}
// RUN: not kiln-opt %s -kiln-configure="ssm-mode=rewinds" 2>&1 | FileCheck %s --check-prefix=SSM
// SSM: error: unknown SSM spec mode 'rewinds'; expected rewind or replay
