// kiln-configure's CUDA-graph options: how many decode step shapes are captured and of
// which batches. Defaults (64 shapes, every batch) are not printed.
// RUN: kiln-opt %s -kiln-configure="cuda-graphs=8 cuda-graph-batches=1,2,4,8" | FileCheck %s
// RUN: kiln-opt %s -kiln-configure="cuda-graphs=0" | FileCheck %s --check-prefix=NONE
// RUN: kiln-opt %s -kiln-configure="max-batch=16" | FileCheck %s --check-prefix=KEEP
// RUN: kiln-opt %s -kiln-configure="cuda-graph-batches=all" | FileCheck %s --check-prefix=ALL
// RUN: not kiln-opt %s -kiln-configure="cuda-graph-batches=1,x" 2>&1 | FileCheck %s --check-prefix=WORD
// RUN: not kiln-opt %s -kiln-configure="cuda-graph-batches=4,2" 2>&1 | FileCheck %s --check-prefix=ORDER
// RUN: not kiln-opt %s -kiln-configure="cuda-graph-batches=1,16" 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: not kiln-opt %s -kiln-configure="cuda-graphs=5000" 2>&1 | FileCheck %s --check-prefix=MANY
// RUN: not kiln-opt %s -kiln-configure="cuda-graphs=-5" 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: not kiln-opt %s -kiln-configure="max-batch=2" 2>&1 | FileCheck %s --check-prefix=SHRUNK

// CHECK: #kiln.runtime<max_batch = 8, max_seq_len = 4096, kv_dtype = bf16, cuda_graphs = 8, cuda_graph_batches = [1, 2, 4, 8]>
// NONE: #kiln.runtime<max_batch = 8, max_seq_len = 4096, kv_dtype = bf16, cuda_graphs = 0, cuda_graph_batches = [1, 4]>
// KEEP: #kiln.runtime<max_batch = 16, max_seq_len = 4096, kv_dtype = bf16, cuda_graph_batches = [1, 4]>
// ALL: #kiln.runtime<max_batch = 8, max_seq_len = 4096, kv_dtype = bf16>
// WORD: error: cuda-graph-batches: 'x' is not a batch size (expected e.g. 1,2,4,8 or all)
// ORDER: error: #kiln.runtime: cuda_graph_batches must be ascending without repeats (4 then 2)
// RANGE: error: #kiln.runtime: cuda_graph_batches[1] = 16 outside [1, max_batch 8]
// MANY: error: #kiln.runtime: cuda_graphs = 5000 > 4096 step shapes
// NEGATIVE: error: cuda-graphs = -5 must be a count of step shapes (0: no CUDA graphs)
// SHRUNK: error: #kiln.runtime: cuda_graph_batches[1] = 4 outside [1, max_batch 2]
module attributes {kiln.runtime = #kiln.runtime<max_batch = 8, max_seq_len = 4096, kv_dtype = bf16, cuda_graph_batches = [1, 4]>} {}
