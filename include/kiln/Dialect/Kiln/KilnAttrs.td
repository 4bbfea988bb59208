//===- KilnAttrs.td - module configuration attributes ------*- tablegen -*-===//
#ifndef KILN_ATTRS_TD
#define KILN_ATTRS_TD

include "KilnBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

class Kiln_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Kiln_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Kiln_TargetAttr : Kiln_Attr<"Target", "target"> {
  let summary = "the GPU a module is compiled for";
  let description = [{
    GPU facts the passes need. A preset name alone expands to the published numbers
    of that product:

    ```mlir
    #kiln.target<"h200">
    // prints as
    #kiln.target<"h200", sm = 90, sms = 132, memory = 150109880320,
                 smem_per_block = 232448, features = [tma, wgmma, fp8, clusters]>
    ```

    Keys left out default from the SM: `smem_per_block` and `features` from the
    compute capability table, `sms` and `memory` to 0 (unknown: no budget check).
    `features` may only name features the SM has. Known SMs: 80, 86, 89, 90, 100, 103,
    120, 121.
  }];
  let parameters = (ins
    StringRefParameter<"product or preset name">:$name,
    "unsigned":$sm,
    "unsigned":$numSms,
    "uint64_t":$memoryBytes,
    "uint64_t":$smemPerBlock,
    "uint32_t":$featureBits
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    bool hasFeature(::kiln::TargetFeature feature) const {
      return (getFeatureBits() & static_cast<uint32_t>(feature)) != 0;
    }
    /// Expands a preset ("h200", "l40s", ...) or "sm_XY"; null if unknown.
    static TargetAttr getPreset(::mlir::MLIRContext *context, ::llvm::StringRef name);
  }];
}

def Kiln_SpecAttr : Kiln_Attr<"Spec", "spec"> {
  let summary = "speculative decoding configuration (absent: speculation off)";
  let description = [{
    ```mlir
    #kiln.spec<mode = mtp, max_draft_len = 3, ssm = rewind>
    ```
    `mode`: `mtp` and `eagle3` are one-model setups (draft layers inside the model),
    `draft_target` is two-model, `ngram` needs no draft layers. `ssm`: how Mamba
    layers recover the state of the accepted prefix (`rewind` keeps intermediate
    states, `replay` keeps the inputs and recomputes). `max_draft_len` in
    [1, kMaxDraftLen]: the bound keeps every size derived from it (tokens per step,
    logit rows, intermediate states) far from overflow; the kernels' own, smaller
    limit is checked by kiln-verify-config.
  }];
  let parameters = (ins
    EnumParameter<Kiln_SpecMode>:$mode,
    "unsigned":$max_draft_len,
    DefaultValuedParameter<"::kiln::SsmSpecMode", "::kiln::SsmSpecMode::rewind">:$ssm
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// One-model setups verify draft tokens with the target's own decode kernel.
    bool isOneModel() const {
      return getMode() == ::kiln::SpecMode::mtp || getMode() == ::kiln::SpecMode::eagle3;
    }
    /// Tokens a decode step processes per sequence: the accepted one plus drafts.
    unsigned getTokensPerStep() const { return getMaxDraftLen() + 1; }
    /// The largest max_draft_len the attribute accepts.
    static constexpr unsigned kMaxDraftLen = 1024;
  }];
}

def Kiln_RuntimeAttr : Kiln_Attr<"Runtime", "runtime"> {
  let summary = "serving limits that size the caches";
  let description = [{
    ```mlir
    #kiln.runtime<max_batch = 64, max_seq_len = 8192, page_size = 64, kv_dtype = bf16, tp = 1>
    ```
    `max_batch` is the number of state slots and concurrent sequences, `page_size` a
    power of two in [8, 256], `tp` (tensor parallel ranks) a power of two; heads and
    caches are divided per rank. `state_dtype` (default f32) is the SSM state type.
    `max_step_tokens` bounds the tokens of one forward step (a prefill batch, or
    `max_batch` x (1 + drafts) in decode) and so sizes the activation arena; 0 means
    `max(max_batch x (1 + max_draft_len), min(max_seq_len, 2048))`.

    Decode steps run as CUDA graphs: at most `cuda_graphs` step shapes are captured
    (default 64; 0: every step launches eagerly), each with a device-memory reserve in
    the plan (`#kiln.device_memory`'s `cuda_graphs`), and only steps whose batch is in
    `cuda_graph_batches` (ascending, each in [1, max_batch]; absent: every batch) are
    captured, the others launch eagerly.

    `kv_ring_window` (default 0: none): the KV pools of the layers whose sliding window
    is this many tokens hold a ring of `kiln_rt_ring_pages` pages per slot instead of
    pages for `max_seq_len` (include/kiln/Runtime/Layout.h; docs/overview.md, "Sliding
    windows"). It needs an explicit `max_step_tokens`, which bounds the ring.
  }];
  let parameters = (ins
    "unsigned":$max_batch,
    "unsigned":$max_seq_len,
    DefaultValuedParameter<"unsigned", "64">:$page_size,
    "::mlir::Type":$kv_dtype,
    DefaultValuedParameter<"unsigned", "1">:$tp,
    OptionalParameter<"::mlir::Type">:$state_dtype,
    DefaultValuedParameter<"unsigned", "0">:$max_step_tokens,
    DefaultValuedParameter<"unsigned", "::kiln::kDefaultCudaGraphs">:$cuda_graphs,
    OptionalParameter<"::mlir::DenseI32ArrayAttr">:$cuda_graph_batches,
    DefaultValuedParameter<"unsigned", "0">:$kv_ring_window
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// SSM state element type: `state_dtype`, f32 when absent.
    ::mlir::Type getSsmStateType() const;
    /// KV pages one sequence may hold: ceil(max_seq_len / page_size).
    uint64_t getMaxPagesPerSequence() const;
    /// Batch sizes whose decode steps are captured: cuda_graph_batches, or every one.
    uint64_t getGraphBatchCount() const;
    /// Split-KV key chunks covering max_seq_len (a decode step's key bound).
    uint64_t getDecodeKeyChunks() const;
    /// Distinct shapes (CUDA-graph keys) decode steps of the captured batches can have:
    /// batches x q_lens (1 + max_draft_len) x key chunks.
    uint64_t getDecodeStepShapes(unsigned maxDraftLen) const;
    /// Step shapes the runtime may capture: cuda_graphs, at most the shapes there are.
    uint64_t getCapturableShapes(unsigned maxDraftLen) const;
  }];
}

def Kiln_ModelAttr : Kiln_Attr<"Model", "model"> {
  let summary = "what the importer knows about the model";
  let description = [{
    ```mlir
    #kiln.model<name = "NVIDIA-Nemotron-Nano-9B-v2", model_type = "nemotron_h",
                num_layers = 56, dtype = bf16, weight_bytes = 17800000000>
    ```
    `weight_bytes` (0: unknown) is subtracted from the memory budget. `tp_ranks` > 1:
    the graph is one rank's of that many tensor-parallel ranks (heads, projections and
    caches already divided, docs/tensor-parallel.md), so the plan divides nothing more
    and `weight_bytes` is one rank's.
  }];
  let parameters = (ins
    StringRefParameter<"model name">:$name,
    StringRefParameter<"Hugging Face model_type">:$model_type,
    "unsigned":$num_layers,
    "::mlir::Type":$dtype,
    DefaultValuedParameter<"uint64_t", "0">:$weight_bytes,
    DefaultValuedParameter<"unsigned", "1">:$tp_ranks
  );
  let assemblyFormat = "`<` struct(params) `>`";
}

def Kiln_ShardAttr : Kiln_Attr<"Shard", "shard"> {
  let summary = "which slice of a checkpoint tensor a tensor-parallel rank holds";
  let description = [{
    ```mlir
    #kiln.shard<dim = 0, parts = 4>
    ```
    The checkpoint tensor is `parts` equal blocks along dimension `dim`, each of the
    declared weight's size there; rank `r` of `N` holds block `r * parts / N` (block `r`
    when `parts == N`; with fewer parts than ranks, as KV heads fewer than the ranks,
    consecutive ranks share a block).

    ```mlir
    #kiln.shard<dim = 0, parts = 2, segments = [256, 256, 64, 64, 4]>
    ```
    With `segments`, the checkpoint tensor along `dim` is segments laid end to end (a
    fused projection, as Mamba2's in_proj `[z | x | B | C | dt]`), each `parts` blocks of
    its listed size; a rank holds its block of every segment, in order. The sizes are one
    rank's (each positive; they sum to the declared weight's size along `dim`, which the
    `kiln.weight` verifier checks).

    A stacked weight (`*` in its name: experts along dimension 0) is sharded along a
    dimension of each stacked tensor (`dim >= 1`): every expert's block.
  }];
  let parameters = (ins "unsigned":$dim, "unsigned":$parts,
                    OptionalParameter<"::mlir::DenseI64ArrayAttr">:$segments);
  let builders = [
    AttrBuilder<(ins "unsigned":$dim, "unsigned":$parts), [{
      return $_get($_ctxt, dim, parts, ::mlir::DenseI64ArrayAttr());
    }]>
  ];
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Kiln_PoolAttr : Kiln_Attr<"Pool", "pool"> {
  let summary = "one memory pool of the plan";
  let description = [{
    ```mlir
    #kiln.pool<"kv.w0.d128.bf16", category = kv, offset = 0, bytes = 1073741824, resources = 32>
    ```
  }];
  let parameters = (ins
    StringRefParameter<"pool name">:$name,
    EnumParameter<Kiln_PoolCategory>:$category,
    "uint64_t":$offset,
    "uint64_t":$bytes,
    "unsigned":$resources
  );
  let assemblyFormat = "`<` $name `,` struct($category, $offset, $bytes, $resources) `>`";
}

def Kiln_PlanAttr : Kiln_Attr<"Plan", "plan"> {
  let summary = "memory plan summary of a module (set by kiln-plan-memory)";
  let description = [{
    Totals by category in bytes, the budget it was checked against (0: no budget),
    the KV pages planned per pool, and the pools (`#kiln.pool`) with their arena
    offsets.
  }];
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    auto getPoolList() const { return getPools().getAsRange<::kiln::PoolAttr>(); }
  }];
  let parameters = (ins
    "uint64_t":$total_bytes,
    "uint64_t":$kv_bytes,
    "uint64_t":$state_bytes,
    "uint64_t":$speculative_bytes,
    "uint64_t":$unmanaged_bytes,
    "uint64_t":$budget_bytes,
    "uint64_t":$kv_pages,
    "bool":$fits,
    "::mlir::ArrayAttr":$pools
  );
  let assemblyFormat = "`<` struct(params) `>`";
}

def Kiln_RopeAttr : Kiln_Attr<"Rope", "rope"> {
  let summary = "rotary position embedding parameters of a model";
  let description = [{
    ```mlir
    #kiln.rope<type = llama3, theta = 500000.0, factor = 8.0, low = 1.0, high = 4.0,
               original_max_position = 8192>
    ```
    `low`/`high` are llama3's low/high frequency factors, or yarn's correction range in
    dimensions (computed by the importer from beta_fast/beta_slow). `attention_factor`
    multiplies cos and sin (yarn's mscale). Defaults: `factor` 1, `attention_factor` 1.
  }];
  let parameters = (ins
    EnumParameter<Kiln_RopeType>:$type,
    "::mlir::FloatAttr":$theta,
    OptionalParameter<"::mlir::FloatAttr">:$factor,
    OptionalParameter<"::mlir::FloatAttr">:$low,
    OptionalParameter<"::mlir::FloatAttr">:$high,
    DefaultValuedParameter<"int64_t", "0">:$original_max_position,
    OptionalParameter<"::mlir::FloatAttr">:$attention_factor
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    double getThetaValue() const { return getTheta().getValueAsDouble(); }
    double getFactorValue() const { return getFactor() ? getFactor().getValueAsDouble() : 1.0; }
    double getLowValue() const { return getLow() ? getLow().getValueAsDouble() : 0.0; }
    double getHighValue() const { return getHigh() ? getHigh().getValueAsDouble() : 0.0; }
    double getAttentionFactorValue() const {
      return getAttentionFactor() ? getAttentionFactor().getValueAsDouble() : 1.0;
    }
  }];
}

def Kiln_DeviceMemoryAttr : Kiln_Attr<"DeviceMemory", "device_memory"> {
  let summary = "every device byte a compiled model needs, by category";
  let description = [{
    Set by `kiln-plan-activations`: the weight allocation, the cache arena (`kiln.plan`),
    the activation arena (every intermediate buffer of a step, reused by liveness), the
    kernels' workspace and the runtime's per-step buffers (`io`). The runtime allocates
    exactly `total` bytes. `cuda_graphs` is the driver memory the decode steps' CUDA
    graphs may take on top (`#kiln.runtime`'s `cuda_graphs` shapes, each reserved by its
    launch count); the runtime stops capturing before it exceeds it. `collectives` is
    the device memory a tensor-parallel rank reserves for its NCCL communicator
    (NCCL's own buffers, made when the context joins; `kiln-plan-activations`'
    `collective-bytes`, 0 for a model without collectives); loading refuses a
    communicator that took more.

    ```mlir
    #kiln.device_memory<weights = 1048576, caches = 2097152, activations = 524288,
                        workspace = 33554432, io = 65536, max_step_tokens = 2048,
                        max_logit_rows = 64, activation_buffers = 12>
    ```
  }];
  let parameters = (ins
    "uint64_t":$weights,
    "uint64_t":$caches,
    "uint64_t":$activations,
    "uint64_t":$workspace,
    "uint64_t":$io,
    "uint64_t":$max_step_tokens,
    "uint64_t":$max_logit_rows,
    "uint64_t":$activation_buffers,
    DefaultValuedParameter<"uint64_t", "0">:$cuda_graphs,
    DefaultValuedParameter<"uint64_t", "0">:$collectives
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let extraClassDeclaration = [{
    /// The one allocation: weights, caches, activations, workspace and io; nullopt on
    /// overflow.
    std::optional<uint64_t> getTotal() const;
    /// Everything the model takes of the device: the allocation plus the CUDA graphs'
    /// and the communicator's reserves; nullopt on overflow.
    std::optional<uint64_t> getDeviceTotal() const;
  }];
}

#endif // KILN_ATTRS_TD
