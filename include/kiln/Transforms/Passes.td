//===- Passes.td - Kiln passes ------------------------------*- tablegen -*-===//
#ifndef KILN_TRANSFORMS_PASSES_TD
#define KILN_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def KilnConfigure : Pass<"kiln-configure", "mlir::ModuleOp"> {
  let dependentDialects = ["::kiln::KilnDialect"];
  let summary = "Set the module's kiln.target/spec/runtime from options";
  let description = [{
    Overrides the module configuration attributes with the options given (the ones
    left out keep what the module says). `spec=none` removes `kiln.spec`.
  }];
  let options = [
    Option<"target", "target", "std::string", "\"\"", "Preset (h200, l40s, ...) or sm_XY">,
    Option<"spec", "spec", "std::string", "\"\"",
           "none, mtp:N, eagle3:N, draft:N or ngram:N">,
    Option<"ssmMode", "ssm-mode", "std::string", "\"\"", "rewind or replay">,
    Option<"maxBatch", "max-batch", "unsigned", "0", "Sequences (state slots); 0: keep">,
    Option<"maxSeqLen", "max-seq-len", "unsigned", "0", "Tokens per sequence; 0: keep">,
    Option<"pageSize", "page-size", "unsigned", "0", "KV page size; 0: keep">,
    Option<"tp", "tp", "unsigned", "0", "Tensor-parallel ranks; 0: keep">,
    Option<"maxStepTokens", "max-step-tokens", "unsigned", "0",
           "Tokens of one forward step (sizes the activation arena); 0: keep">,
    Option<"kvDtype", "kv-dtype", "std::string", "\"\"", "bf16, f16, f32, fp8">,
    Option<"kvRingWindow", "kv-ring-window", "unsigned", "0",
           "Sliding window whose KV pools are rings of pages per slot; 0: keep">,
    Option<"cudaGraphs", "cuda-graphs", "int", "-1",
           "Decode step shapes captured in CUDA graphs (0: none); -1: keep">,
    Option<"cudaGraphBatches", "cuda-graph-batches", "std::string", "\"\"",
           "Batch sizes whose decode steps are captured, e.g. 1,2,4,8 (all: every "
           "batch); empty: keep">
  ];
}

def KilnInsertCaches : Pass<"kiln-insert-caches", "mlir::ModuleOp"> {
  // Cached ops get `tensor.empty` destinations sized with `tensor.dim`.
  let dependentDialects = ["::kiln::KilnDialect", "::mlir::tensor::TensorDialect",
                           "::mlir::arith::ArithDialect"];
  let summary = "Create the cache resources every model op needs and rewrite it to its cached form";
  let description = [{
    For every op implementing `ModelOpInterface`, asks it for its resources under the
    module's `kiln.spec` and `kiln.runtime`, declares them with `kiln.cache_resource`
    at the start of the function and replaces the op with its cached form. With no
    `kiln.spec` no speculative-only resource is created: the speculative slots stay
    empty.
  }];
  let statistics = [
    Statistic<"numResources", "resources", "Cache resources created">,
    Statistic<"numSpeculative", "speculative-resources",
              "Speculative-only resources created">,
    Statistic<"numOpsCached", "ops-cached", "Model ops rewritten to their cached form">
  ];
}

def KilnExpandLayers : Pass<"kiln-expand-layers", "mlir::ModuleOp"> {
  let dependentDialects = ["::kiln::KilnDialect", "::mlir::arith::ArithDialect"];
  let summary = "Copy each layer loop's body once a layer: the module an unrolled import makes";
  let description = [{
    The importer builds a run of alike decoder layers as one `scf.for %layer` marked
    `kiln.layers` whose weights are `kiln.weight_family` members, and the deploy passes
    work on that one body. This pass makes the module an unrolled import and the same
    deploy passes would have made, op for op: each run of families becomes its members
    as `kiln.weight`s, member-major (at `offset + i * stride` when planned), and the
    body is copied once a layer in place of the loop, with `kiln.weight_member`s as
    `kiln.weight_ref`s of the layer's members, each layer op moved to its layer
    (`setLayerIndex`), module paths `model.layers.{}` named by the layer, and the
    body's cache resources declared with the function's (at `offset + i * stride`).
    Layer loops are looked for at the top of functions; a module without them is left
    as it is.

    With `unsupported-only` (the lowering pipelines) the loops stay when the lowering
    can take them as loops (docs/overview.md, "Rolled layers"): constant bounds and
    step 1, no nested region, buffers carried as ranked tensors, every cached op's
    runtime call per layer (`hasPerLayerRuntimeCall`) and, with `fuse-residual-norm`,
    no residual add ending the body whose sum the next iteration normalizes first
    unless `kiln-rotate-layers` can rotate the loop (the unrolled step fuses that pair
    across layers). Otherwise every loop is expanded and a remark says why.

    Weight members are read at a layer the loop's index gives (the index, a constant,
    or a sum of them, as a rotated loop's next norm reads); members left outside loops
    at a constant layer (a rotated loop's first norm and last layer) become
    `kiln.weight_ref`s of that member too.
  }];
  let options = [
    Option<"unsupportedOnly", "unsupported-only", "bool", /*default=*/"false",
           "Expand only what the rolled lowering cannot take (with a remark why)">,
    Option<"fuseResidualNorm", "fuse-residual-norm", "bool", /*default=*/"false",
           "kiln-fuse-residual-norm runs after this pass (unsupported-only)">,
    Option<"emitRemarks", "remarks", "bool", /*default=*/"false",
           "With unsupported-only, a remark on each loop expanded, saying why">
  ];
  let statistics = [
    Statistic<"numLoops", "loops", "Layer loops expanded">,
    Statistic<"numLayers", "layers", "Layers copied from loop bodies">
  ];
}

def KilnRotateLayers : Pass<"kiln-rotate-layers", "mlir::ModuleOp"> {
  let dependentDialects = ["::kiln::KilnDialect", "::mlir::arith::ArithDialect",
                           "::mlir::scf::SCFDialect"];
  let summary = "Rotate layer loops so that a layer's last add and the next layer's norm "
                "are in one iteration";
  let description = [{
    The unrolled step fuses the residual add that ends layer `i` with the first norm
    of layer `i + 1` (`kiln-fuse-residual-norm`); in a layer loop the two sit on either
    side of the back edge. For a loop that ends its body with a `kiln.add` whose sum the
    next iteration's first `kiln.rms_norm` reads (its weight and destination given by
    the induction variable and values from outside the loop; constant bounds, step 1
    and at least three trips, so that the rotated loop keeps two), this pass

    - computes the first layer's norm before the loop,
    - carries the norm as one more iteration argument, the body ending with the next
      layer's norm (its weight member at `%layer + 1`) of the value it yields,
    - runs the loop over every layer but the last, and
    - copies the body after the loop for the last layer (cache resources declared
      with the function's at `offset + ordinal * stride`, layer ops moved to the layer,
      weight members at the layer).

    `kiln-fuse-residual-norm` then fuses the pair inside the body, and the step makes
    the unrolled step's calls. Other loops are left as they are.
  }];
  let statistics = [
    Statistic<"numRotated", "rotated", "Layer loops rotated">
  ];
}

def KilnDropSpeculativeResources
    : Pass<"kiln-drop-speculative-resources", "mlir::ModuleOp"> {
  let dependentDialects = ["::kiln::KilnDialect"];
  let summary = "Without kiln.spec, erase speculative-only resources and empty their slots";
  let description = [{
    For IR that already carries resources (from another producer or an older
    pipeline). With no `kiln.spec` on the module, every resource whose
    `CacheResourceInterface::isSpeculativeOnly()` holds is detached from its users
    (their slot becomes empty) and erased, with a remark naming layer, kind and bytes.
    With a spec config nothing changes. Idempotent.
  }];
  let options = [
    Option<"emitRemarks", "remarks", "bool", "true", "Emit a remark per dropped resource">
  ];
  let statistics = [
    Statistic<"numDropped", "dropped", "Speculative-only resources dropped">,
    Statistic<"bytesDropped", "bytes-dropped",
              "Bytes the dropped resources would have taken (0 without kiln.runtime)">
  ];
}

def KilnVerifyConfig : Pass<"kiln-verify-config", "mlir::ModuleOp"> {
  let dependentDialects = ["::kiln::KilnDialect"];
  let summary = "Check that the configuration and the model agree";
  let description = [{
    Cross-attribute and model-dependent checks the attribute verifiers cannot make:
    speculative-only resources or replay buffers without `kiln.spec`; SSM replay needs
    sm_80 or newer; MTP/Eagle3 one-model speculation needs draft layers of that kind;
    `max_draft_len` within what Kiln's multi-token decode kernels verify in one step; a
    graph imported for N tensor-parallel ranks (`#kiln.model`'s tp_ranks) deployed with
    `kiln.runtime`'s tp = N.
  }];
}

def KilnPlanMemory : Pass<"kiln-plan-memory", "mlir::ModuleOp"> {
  let dependentDialects = ["::kiln::KilnDialect"];
  let summary = "Size every resource, group them into pools, lay out the arena, check the budget";
  let description = [{
    Bytes per resource from its unit shape, element type and `kiln.runtime` (state
    kinds: one unit per slot, `max_batch` slots; KV kinds: one unit per token, pages
    of `page_size` tokens for `max_batch` sequences of `max_seq_len` tokens, or with
    `fill-kv` as many pages as the budget leaves). Pools: one KV pool per (window,
    head dim, dtype), one state pool, and `unmanaged` for resources allocated outside
    the pools (each one warned about). Heads are divided by `tp`. Each resource gets
    `pool`, `offset` (in one arena, 256-byte aligned) and `bytes`; the module gets
    `kiln.plan`. A plan larger than the budget (target memory x usable fraction minus
    weights) is an error naming the budget, the total and the largest consumers; the
    `kiln.plan` attribute (`fits = false`) is still set so drivers can report it.
    The module's `kiln.weight`s are laid out in one weight allocation (each gets
    `offset`), and their exact total replaces the importer's estimate in the budget.
  }];
  let options = [
    Option<"usableFraction", "usable-fraction", "double", "kiln::kDefaultUsableFraction",
           "Share of the target's memory the plan may use">,
    Option<"fillKv", "fill-kv", "bool", "false",
           "Give the KV pools all memory the budget leaves">,
    Option<"reserveBytes", "reserve-bytes", "uint64_t", "0",
           "Bytes kept free for activations and workspaces">
  ];
  let statistics = [
    Statistic<"totalBytes", "total-bytes", "Bytes planned">,
    Statistic<"kvBytes", "kv-bytes", "Bytes in KV pools">,
    Statistic<"stateBytes", "state-bytes", "Bytes in the state pool">,
    Statistic<"speculativeBytes", "speculative-bytes", "Bytes of speculative-only resources">,
    Statistic<"unmanagedBytes", "unmanaged-bytes", "Bytes outside Kiln's pools">
  ];
}

def KilnSelectKernels : Pass<"kiln-select-kernels", "mlir::ModuleOp"> {
  let dependentDialects = ["::kiln::KilnDialect"];
  let summary = "Pick the decode and prefill kernel of every cached op and its spec-dec mode";
  let description = [{
    Queries the kernel registry with each cached op's shapes, the target and the
    speculation setup; picks the highest-priority implemented variant whose
    requirements hold; sets `decode_kernel`, `prefill_kernel` and, for attention,
    `spec_dec_mode` (`multi_token` when a decode variant verifies all draft tokens,
    `extend_context` when none does, `single_token` without speculation and for draft
    layers). With `remarks`, every rejected candidate is explained. No fitting
    variant is an error naming op, layer and the unmet requirements.
  }];
  let options = [
    ListOption<"force", "force", "std::string",
               "Kernel overrides: `variant` or `family=variant` (family: attention, "
               "mla_attention, ssm, causal_conv)">,
    Option<"emitRemarks", "remarks", "bool", "false",
           "Explain each rejected candidate with a remark">
  ];
  let statistics = [
    Statistic<"numSelected", "selected", "Kernel choices made">,
    Statistic<"numMultiToken", "multi-token", "Decode attention ops in multi-token mode">,
    Statistic<"numExtendContext", "extend-context",
              "Decode attention ops whose draft tokens go through the context path">
  ];
}

def KilnFuseResidualNorm : Pass<"kiln-fuse-residual-norm", "mlir::ModuleOp"> {
  let dependentDialects = ["::kiln::KilnDialect"];
  let summary = "Fuse each residual add with the RMSNorm that reads its sum";
  let description = [{
    Runs on tensors, before bufferization. A decoder layer adds a sublayer's output to
    the residual stream and normalizes the sum right away (post-attention norm, the next
    layer's input norm, the final norm). `kiln.rms_norm` of a rank-2 `kiln.add` result
    becomes one `kiln.add_rms_norm` that yields both the sum (the stream, for its later
    users) and the normed rows: one kernel instead of two, the sum read from registers
    instead of memory, with the bits of the pair. The fused op takes the norm's place,
    so an add whose sum is used before the norm is left alone.
  }];
  let statistics = [
    Statistic<"numFused", "fused", "Residual adds fused into the norm of their sum">
  ];
}

def KilnPairLinears : Pass<"kiln-pair-linears", "mlir::ModuleOp"> {
  let dependentDialects = ["::kiln::KilnDialect"];
  let summary = "Merge two projections of one input into one launch";
  let description = [{
    Runs on buffers, after `kiln-plan-activations`. A `kiln.linear` without bias (bf16
    out) and the next one of the same block that reads the same input with a weight of
    the same shape, with only memory-effect-free ops between them (views, weight
    references), become one `kiln.linear_pair` where the second one was: a layer's k
    and v projections, and its gate and up projections. One strided-batched GEMM then
    replaces two launches, which is what a decode step of a few rows is short of. Moving
    the first projection past pure ops reorders no memory access, and the activation
    plan already holds both outputs live from the first projection on, so no placement
    changes. On in the lowering pipeline (`LoweringOptions::pairLinears`;
    `kiln-compile --pair-linears=false` turns it off): the 8B step decodes 2-6% faster
    at batch 1 and 16 with it on an H100.
  }];
  let statistics = [
    Statistic<"numPaired", "paired", "Pairs of projections merged into one launch">
  ];
}

def KilnPairRopes : Pass<"kiln-pair-ropes", "mlir::ModuleOp"> {
  let dependentDialects = ["::kiln::KilnDialect"];
  let summary = "Merge two rotary embeddings at the same positions into one launch";
  let description = [{
    Runs on buffers, before `kiln-plan-activations`. A `kiln.rope` (bf16 buffers) and the
    next one of the same block at the same positions with the same `rope` parameters,
    `rotary_dim` and head dimension, with only memory-effect-free ops between them, become
    one `kiln.rope_pair` where the second one was: a layer's q and k. One launch, which
    computes a token's cos/sin table once, replaces two (32 launches fewer in the 8B
    step). One launch reads both inputs while it writes both outputs, so each output
    must be an allocation of its own, apart from the other rope's buffers: before the
    plan, views of distinct `memref.alloc`s (the plan then keeps the pair's buffers
    apart); after it, planned buffers whose bytes are apart (the 8B step's plan puts the
    second's output over the first's input, and so cannot be paired then). The runtime
    also refuses outputs that overlap the other tensor. Off by default (`LoweringOptions::pairRopes`, `kiln-compile
    --pair-ropes`): not yet measured on a GPU.
  }];
  let statistics = [
    Statistic<"numPaired", "paired", "Pairs of rotary embeddings merged into one launch">
  ];
}

def KilnFusePairSwiglu : Pass<"kiln-fuse-pair-swiglu", "mlir::ModuleOp"> {
  let dependentDialects = ["::kiln::KilnDialect"];
  let summary = "Merge a gated MLP's gate and up projections and their SwiGLU";
  let description = [{
    Runs on buffers, before `kiln-plan-activations`. A `kiln.swiglu` (bf16 `[m, n]`
    buffers of one type) whose gate and up are `memref.alloc`s, each written only by a
    `kiln.linear` of its block (no bias, bf16) of one input and one weight type and read
    only by the SwiGLU, with only allocations and memory-effect-free ops from the first
    projection to the SwiGLU, becomes one `kiln.linear_pair_swiglu` where the SwiGLU
    was. The allocations stay as the op's `gate` and `up`, so the plan places the same
    buffers (the output may still go exactly over one of them). At run time, where the
    pair runs on the tensor-core skinny GEMM (batch-1 models), the SwiGLU is its
    epilogue: one launch fewer a layer, and gate and up never reach memory; elsewhere the
    pair and the SwiGLU run as before. The bits of the paired projections
    (`kiln-pair-linears`) and the SwiGLU either way. The projections must precede the
    SwiGLU. Off by default
    (`LoweringOptions::fusePairSwiglu`, `kiln-compile --fuse-pair-swiglu`) until measured
    on a GPU.
  }];
  let statistics = [
    Statistic<"numFused", "fused", "SwiGLUs merged with the projections of their inputs">
  ];
}

def KilnBindEntry : Pass<"kiln-bind-entry", "mlir::ModuleOp"> {
  let dependentDialects = ["::kiln::KilnDialect", "::mlir::LLVM::LLVMDialect"];
  let summary = "Make the bufferized model function the runtime's entry point";
  let description = [{
    Runs after one-shot bufferization. The function marked `kiln.entry` becomes
    `kiln_model_forward(%ctx: !llvm.ptr {kiln.context})`: each argument marked
    `kiln.input = #kiln<input ...>` becomes a `kiln.input` op (the runtime provides the
    step's token ids, positions and logit rows), and each result marked `kiln.output`
    is handed back with `kiln.output` instead of being returned.
  }];
}

def KilnPlanActivations : Pass<"kiln-plan-activations", "mlir::ModuleOp"> {
  let dependentDialects = ["::kiln::KilnDialect", "::mlir::memref::MemRefDialect"];
  let summary = "Place every intermediate buffer in one activation arena, reusing bytes by liveness";
  let description = [{
    Runs after bufferization and `kiln-bind-entry`. Every `memref.alloc` of a function
    with a `kiln.context` argument becomes a `kiln.activation_buffer` at an offset of
    the activation arena. A buffer is live from its allocation to the last use of it or
    of any view of it (`ViewLikeOpInterface`); buffers whose lifetimes do not overlap
    share bytes (linear-scan first fit in allocation order, 256-byte aligned). A buffer
    first written as the init of an op that may overwrite some of its inputs
    (`OverwritesInputsOpInterface`) goes exactly over such an input when that input's
    last use is this op and no other live buffer is in the way. Dynamic
    sizes are bounded by the step limits (`max_step_tokens` for token counts,
    `max_logit_rows` for logit rows); a size that cannot be bounded is an error. The module gets
    `kiln.device_memory`: weights, caches, activations, workspace and the runtime's
    per-step buffers (`io`), the numbers the runtime allocates. A total larger than the
    target's memory is an error listing every category, largest first, and the limit
    that shrinks the largest. A module with collectives (`kiln.all_reduce`,
    `kiln.all_gather`) or planned for tp > 1 also reserves `collective-bytes` for its
    rank's NCCL communicator (`collectives`; default 584 MiB, what a one-rank
    communicator of NCCL from PyTorch 2.11's nvidia-nccl wheel took on an H100).
  }];
  let options = [
    Option<"collectiveBytes", "collective-bytes", "uint64_t", "612368384",
           "Device bytes a tensor-parallel rank reserves for its NCCL communicator">
  ];
  let statistics = [
    Statistic<"numBuffers", "buffers", "Intermediate buffers planned">,
    Statistic<"arenaBytes", "arena-bytes", "Bytes of the activation arena">
  ];
}


def KilnRollLayers : Pass<"kiln-roll-layers", "mlir::ModuleOp"> {
  let dependentDialects = ["::mlir::scf::SCFDialect", "::mlir::arith::ArithDialect",
                           "::mlir::LLVM::LLVMDialect"];
  let summary = "Roll the repeated decoder layers of a lowered step into a loop over a table";
  let description = [{
    Runs on runtime calls (after `convert-kiln-to-runtime-calls`, before
    `convert-kiln-to-llvm`). A compiled step is unrolled: every layer repeats the same
    calls with other constants (weight and activation offsets, the layer index, KV
    offsets), so the LLVM conversion, translation and code generation would otherwise
    grow with the number of layers. The anchors are the calls marked `kiln.layer` (the
    calls of cached ops); segment i holds the ops after anchor i up to and including
    anchor i+1. Pure ops a segment uses from outside itself (views over the arenas,
    their sizes, constants) are first cloned into it, so that each segment stands on
    its own. The longest run of leading segments that match the first one op for op
    (same names, types and attributes; operands from the same position of the segment
    or the same value from before the segments; constants may differ) becomes an
    `scf.for` over a constant table (`llvm.mlir.global` of i64, one row per segment,
    one column per constant that differs: integers and indices as their value, floats
    as their bits) whose body is one segment with those constants loaded from the
    row. The calls, their arguments and their order are those of the unrolled step.
    Fewer than two matching segments, an op with regions or successors, or a value of
    a rolled segment used outside it that is not pure leave the function as it was.
  }];
  let options = [
    Option<"emitRemarks", "remarks", "bool", "false",
           "Emit a remark on each function that is rolled or not rolled, saying why">
  ];
  let statistics = [
    Statistic<"numRolled", "layers-rolled", "Segments (layers) rolled into loops">,
    Statistic<"numColumns", "table-columns", "Columns of the per-layer tables">,
    Statistic<"numOpsBefore", "ops-before", "Ops of the rolled functions before">,
    Statistic<"numOpsAfter", "ops-after", "Ops of the rolled functions after">
  ];
}

#endif
