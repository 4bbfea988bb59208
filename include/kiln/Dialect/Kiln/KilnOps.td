//===- KilnOps.td - kiln operations ------------------------*- tablegen -*-===//
#ifndef KILN_OPS_TD
#define KILN_OPS_TD

include "KilnBase.td"
include "KilnAttrs.td"
include "KilnTypes.td"
include "KilnInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/DestinationStyleOpInterface.td"
include "mlir/IR/SymbolInterfaces.td"

def Kiln_LLVMPointer : Type<CPred<"::llvm::isa<::mlir::LLVM::LLVMPointerType>($_self)">,
                             "LLVM pointer", "::mlir::LLVM::LLVMPointerType">;

class Kiln_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kiln_Dialect, mnemonic, traits>;

//===----------------------------------------------------------------------===//
// Cache resources
//===----------------------------------------------------------------------===//

def Kiln_CacheResourceOp : Kiln_Op<"cache_resource", [
    DeclareOpInterfaceMethods<Kiln_CacheResourceInterface>]> {
  let summary = "a cache resource: KV pages, MLA latents, SSM/conv state, spec buffers";
  let description = [{
    Declares one cache resource of a layer. The kind is in the result type. `unit`
    is the shape of one allocation unit for the whole model (one token for KV kinds,
    one sequence slot for states); `shard` names the dimension divided across tensor
    parallel ranks. `speculative_only` must be present exactly for the kinds that only
    speculative decoding needs (intermediate states, replay buffers, draft-layer KV).
    `unmanaged` marks a resource its producer allocates outside Kiln's pools; the
    planner reports it loudly. `kiln-plan-memory` adds `pool`, `offset` and `bytes`.

    Inside the body of a layer loop (`scf.for` marked `kiln.layers`) the op declares
    one resource per iteration: `layer` is the loop's first layer, and the plan adds
    `stride`, the bytes between consecutive layers' resources (layer `first + i` at
    `offset + i * stride`).

    ```mlir
    %kv = kiln.cache_resource layer 3 unit [2, 8, 128] of bf16 shard 1 : !kiln.cache<kv>
    %i = kiln.cache_resource layer 0 unit [4, 128, 80, 128] of f32 shard 1 speculative_only
           : !kiln.cache<intermediate_ssm_state>
    ```
  }];
  let arguments = (ins
    I64Attr:$layer,
    DenseI64ArrayAttr:$unit,
    TypeAttr:$element_type,
    OptionalAttr<I64Attr>:$window,
    OptionalAttr<I64Attr>:$shard,
    UnitAttr:$speculative_only,
    UnitAttr:$unmanaged,
    OptionalAttr<StrAttr>:$pool,
    OptionalAttr<I64Attr>:$offset,
    OptionalAttr<I64Attr>:$bytes,
    OptionalAttr<I64Attr>:$stride
  );
  let results = (outs Kiln_CacheType:$resource);
  let assemblyFormat = [{
    `layer` $layer `unit` $unit `of` $element_type (`window` $window^)? (`shard` $shard^)?
    (`speculative_only` $speculative_only^)? (`unmanaged` $unmanaged^)? attr-dict
    `:` qualified(type($resource))
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::kiln::ResourceKind getKind() { return getResource().getType().getKind(); }
  }];
}

//===----------------------------------------------------------------------===//
// Model-level ops (what an importer emits)
//===----------------------------------------------------------------------===//

class Kiln_LayerOp<string mnemonic, list<Trait> traits = []>
    : Kiln_Op<mnemonic, !listconcat(traits, [Pure])>;

defvar AttentionAttrs = (ins
    I64Attr:$layer,
    I64Attr:$num_heads,
    I64Attr:$num_kv_heads,
    I64Attr:$head_dim,
    OptionalAttr<I64Attr>:$sliding_window,
    OptionalAttr<Kiln_DraftKindAttr>:$draft);
defvar MlaAttrs = (ins
    I64Attr:$layer,
    I64Attr:$num_heads,
    I64Attr:$kv_lora_rank,
    I64Attr:$qk_rope_head_dim,
    OptionalAttr<Kiln_DraftKindAttr>:$draft);
// What the whole-graph form of MLA adds (all present, or none in a skeleton).
defvar MlaGraphAttrs = (ins
    OptionalAttr<I64Attr>:$qk_nope_head_dim,
    OptionalAttr<I64Attr>:$v_head_dim,
    OptionalAttr<Kiln_RopeAttr>:$rope,
    OptionalAttr<Kiln_RopeStyleAttr>:$rope_style,
    OptionalAttr<F32Attr>:$softmax_scale);
// The whole-graph form's operands after q and latent.
defvar MlaGraphOperands = (ins
    Optional<AnyRankedTensor>:$k_pe, Optional<AnyRankedTensor>:$positions,
    Optional<AnyRankedTensor>:$kv_b, Optional<AnyRankedTensor>:$scratch);
defvar SsmAttrs = (ins
    I64Attr:$layer,
    I64Attr:$num_heads,
    I64Attr:$head_dim,
    I64Attr:$state_size,
    I64Attr:$n_groups,
    OptionalAttr<Kiln_DraftKindAttr>:$draft);
defvar GdnAttrs = (ins
    I64Attr:$layer,
    I64Attr:$num_k_heads,
    I64Attr:$num_v_heads,
    I64Attr:$head_k_dim,
    I64Attr:$head_v_dim,
    OptionalAttr<Kiln_DraftKindAttr>:$draft);
// dt's clamp after the softplus (transformers' reference path clamps at time_step_min).
defvar SsmClampAttrs = (ins
    OptionalAttr<F32Attr>:$dt_min,
    OptionalAttr<F32Attr>:$dt_max);
defvar ConvAttrs = (ins
    I64Attr:$layer,
    I64Attr:$conv_dim,
    I64Attr:$kernel_size,
    UnitAttr:$silu,
    OptionalAttr<Kiln_DraftKindAttr>:$draft);
defvar SelectionAttrs = (ins
    OptionalAttr<StrAttr>:$decode_kernel,
    OptionalAttr<StrAttr>:$prefill_kernel,
    OptionalAttr<Kiln_SpecDecModeAttr>:$spec_dec_mode);

def Kiln_AttentionOp : Kiln_LayerOp<"attention", [
    DeclareOpInterfaceMethods<Kiln_ModelOpInterface>]> {
  let summary = "causal self-attention of one layer (MHA, GQA or MQA)";
  let description = [{
    `q: [tokens, num_heads, head_dim]`, `k`, `v: [tokens, num_kv_heads, head_dim]`,
    result like `q`. `num_heads` must be a multiple of `num_kv_heads`. A
    `sliding_window` bounds the keys each query sees. `sinks: [num_heads] f32` (gpt-oss's
    attention sinks, in units of the scaled scores) gives each head one more logit in its
    softmax that takes probability mass but has no value. `draft` marks the layer of an
    MTP module, an Eagle3 head or a draft model.
  }];
  let arguments = !con((ins AnyRankedTensor:$q, AnyRankedTensor:$k, AnyRankedTensor:$v,
                            Optional<AnyRankedTensor>:$sinks),
                       AttentionAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    `layer` $layer $q `,` $k `,` $v (`sinks` `(` $sinks^ `:` type($sinks) `)`)? attr-dict
    `:` type($q) `,` type($k) `,` type($v) `->` type($out)
  }];
  let hasVerifier = 1;
}

def Kiln_MlaAttentionOp : Kiln_LayerOp<"mla_attention", [AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<Kiln_ModelOpInterface>]> {
  let summary = "multi-head latent attention of one layer (DeepSeek MLA)";
  let description = [{
    Two forms. The cache-planning skeleton (no `kv_b`) takes the absorbed query
    `q: [tokens, num_heads, kv_lora_rank + qk_rope_head_dim]` and
    `latent: [tokens, kv_lora_rank + qk_rope_head_dim]`, result
    `[tokens, num_heads, kv_lora_rank]`; it plans caches but does not lower.

    The whole-graph form is the layer as transformers computes it from its projections:
    `q: [tokens, num_heads, qk_nope_head_dim + qk_rope_head_dim]` (q_proj or q_b_proj,
    before RoPE), `latent: [tokens, kv_lora_rank]` (kv_a_layernorm of the compressed KV),
    `k_pe: [tokens, qk_rope_head_dim]` (the rope columns of kv_a_proj_with_mqa, before
    RoPE; may be a column slice), `positions: [tokens] i32`,
    `kv_b: [num_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank]` (kv_b_proj's
    weight), `scratch: [tokens, bytes] i8` (working memory the op overwrites; see
    `kiln::mlaScratchBytesPerToken`); result `[tokens, num_heads, v_head_dim]`. `rope`
    and `rope_style` rotate q's and k_pe's rope parts; scores are scaled by
    `softmax_scale`. The cache holds `kv_lora_rank + qk_rope_head_dim` values per token
    (the latent and the rotated k_pe) whatever the head count: decode runs the absorbed
    form (kv_b's key rows folded into q, its value rows applied to the attended latent),
    prefill the expanded one.
  }];
  let arguments = !con((ins AnyRankedTensor:$q, AnyRankedTensor:$latent), MlaGraphOperands,
                       MlaAttrs, MlaGraphAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    `layer` $layer $q `,` $latent (`k_pe` `(` $k_pe^ `:` type($k_pe) `)`)?
    (`positions` `(` $positions^ `:` type($positions) `)`)?
    (`kv_b` `(` $kv_b^ `:` type($kv_b) `)`)? (`scratch` `(` $scratch^ `:` type($scratch) `)`)?
    attr-dict `:` type($q) `,` type($latent) `->` type($out)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The whole-graph form (kv_b given), which lowers; else the cache skeleton.
    bool isWholeGraph() { return static_cast<bool>(getKvB()); }
  }];
}

def Kiln_SsmOp : Kiln_LayerOp<"ssm", [AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<Kiln_ModelOpInterface>]> {
  let summary = "Mamba2 selective state-space mixer of one layer";
  let description = [{
    `x: [tokens, num_heads, head_dim]`, `dt: [tokens, num_heads]`,
    `b`, `c: [tokens, n_groups, state_size]`, optional gate `z` like `x`; result like
    `x`. `num_heads` must be a multiple of `n_groups`.

    The layer's parameters, `a_log`, `d`, `dt_bias: [num_heads] f32` (the
    checkpoint's `A_log`, `D`, `dt_bias`; the decay is `-exp(A_log)`), are optional so
    that a cache-planning skeleton can omit them; lowering needs `a_log`. `dt` gets
    `dt_bias` added and a softplus, then the optional `dt_min`/`dt_max` clamp.
    The `x`, `dt`, `b`, `c` operands may be column slices of one projection (a strided
    token dimension, contiguous rows): Mamba2's are slices of the conv output.
  }];
  let arguments = !con((ins AnyRankedTensor:$x, AnyRankedTensor:$dt, AnyRankedTensor:$b,
                            AnyRankedTensor:$c, Optional<AnyRankedTensor>:$z,
                            Optional<AnyRankedTensor>:$a_log, Optional<AnyRankedTensor>:$d,
                            Optional<AnyRankedTensor>:$dt_bias), SsmAttrs, SsmClampAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    `layer` $layer $x `,` $dt `,` $b `,` $c (`gate` $z^ `:` type($z))?
    (`a_log` `(` $a_log^ `:` type($a_log) `)`)? (`d` `(` $d^ `:` type($d) `)`)?
    (`dt_bias` `(` $dt_bias^ `:` type($dt_bias) `)`)? attr-dict `:`
    type($x) `,` type($dt) `,` type($b) `,` type($c) `->` type($out)
  }];
  let hasVerifier = 1;
}

def Kiln_CausalConvOp : Kiln_LayerOp<"causal_conv", [AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<Kiln_ModelOpInterface>]> {
  let summary = "depthwise causal conv1d of a Mamba2 or Gated DeltaNet layer";
  let description = [{
    `x: [tokens, conv_dim]`, result like `x`; `kernel_size` in [2, 4] (the decode
    kernels support up to 4); `silu` applies SiLU to the output. `weight:
    [conv_dim, kernel_size]` and `bias: [conv_dim]` are optional so that a
    cache-planning skeleton can omit them; lowering needs `weight`. `x` may be a
    column slice of a projection (a strided token dimension).
  }];
  let arguments = !con((ins AnyRankedTensor:$x, Optional<AnyRankedTensor>:$weight,
                            Optional<AnyRankedTensor>:$bias), ConvAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    `layer` $layer $x (`weight` `(` $weight^ `:` type($weight) `)`)?
    (`bias` `(` $bias^ `:` type($bias) `)`)? attr-dict `:` type($x) `->` type($out)
  }];
  let hasVerifier = 1;
}

def Kiln_GatedDeltaNetOp : Kiln_LayerOp<"gated_delta_net", [AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<Kiln_ModelOpInterface>]> {
  let summary = "Gated DeltaNet linear attention of one layer (Qwen3-Next)";
  let description = [{
    The gated delta rule over a recurrent state `S: [num_v_heads, head_k_dim,
    head_v_dim]` per sequence: for each token, `S = exp(g) * S`, then
    `S += beta * k (v - S^T k)^T`, and the output is `S^T q / sqrt(head_k_dim)`. Value
    heads share key heads in groups (`num_v_heads` a multiple of `num_k_heads`).
    `q`, `k: [tokens, num_k_heads, head_k_dim]` (convolved; the op L2-normalizes them,
    as Qwen3-Next's `use_qk_l2norm_in_kernel`), `v: [tokens, num_v_heads, head_v_dim]`;
    each may be a column slice of the conv output (a strided token dimension).
    `a`, `b: [tokens, num_v_heads]` are the checkpoint's `in_proj_ba` outputs: the log
    decay is `g = -exp(a_log) * softplus(a + dt_bias)` and the write strength
    `beta = sigmoid(b)`, with `a_log`, `dt_bias: [num_v_heads] f32` (the layer's `A_log`
    and `dt_bias`). Result `[tokens, num_v_heads, head_v_dim]`. The layer's causal conv
    is a separate `kiln.causal_conv` over the concatenated q/k/v projections.

    `a_log`, `dt_bias` and `scratch` (`[tokens, bytes] i8`, working memory the op
    overwrites: `kiln_rt_gdn_scratch_bytes_per_token`) are optional so that a
    cache-planning skeleton can omit them; lowering needs all three.
  }];
  let arguments = !con((ins AnyRankedTensor:$q, AnyRankedTensor:$k, AnyRankedTensor:$v,
                            AnyRankedTensor:$a, AnyRankedTensor:$b,
                            Optional<AnyRankedTensor>:$a_log,
                            Optional<AnyRankedTensor>:$dt_bias,
                            Optional<AnyRankedTensor>:$scratch), GdnAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    `layer` $layer $q `,` $k `,` $v `,` $a `,` $b
    (`a_log` `(` $a_log^ `:` type($a_log) `)`)? (`dt_bias` `(` $dt_bias^ `:` type($dt_bias) `)`)?
    (`scratch` `(` $scratch^ `:` type($scratch) `)`)? attr-dict `:` type($q) `,` type($k)
    `,` type($v) `,` type($a) `,` type($b) `->` type($out)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Cached forms: the model ops with their resources in (maybe empty) slots
//===----------------------------------------------------------------------===//

// Cached ops are in destination-passing style: `outs(%init)` is the buffer the
// result is written to. On tensors they yield the result; after bufferization they
// work on memrefs, yield nothing, and lower in place to one runtime call.
// `runtimeMethods` and `cachedMethods`: the RuntimeCallOpInterface and
// CachedOpInterface methods with a default that the op overrides.
class Kiln_CachedOp<string mnemonic, list<Trait> traits = [],
                    list<string> runtimeMethods = [], list<string> cachedMethods = []>
    : Kiln_Op<mnemonic, !listconcat(traits, [
        DeclareOpInterfaceMethods<Kiln_CachedOpInterface,
                                  !listconcat(["getResourceRequestsUnder"], cachedMethods)>,
        DeclareOpInterfaceMethods<Kiln_RuntimeCallOpInterface, runtimeMethods>,
        DestinationStyleOpInterface,
        MemoryEffects<[MemRead, MemWrite]>])> {
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::MutableOperandRange getDpsInitsMutable() { return getInitMutable(); }
  }];
}

def Kiln_CachedAttentionOp : Kiln_CachedOp<"cached_attention", [AttrSizedOperandSegments],
                                            [], ["hasPerLayerRuntimeCall"]> {
  let summary = "attention reading and appending its paged KV cache";
  let description = [{
    Like `kiln.attention`, with the layer's KV resource in slot `kv`: a `kv` resource
    for a model layer, a speculative-only `draft_kv` resource for a draft layer. An
    empty slot means the layer is not run (a draft layer with speculation off).
    `kiln-select-kernels` adds `decode_kernel`, `prefill_kernel`, `spec_dec_mode`.
  }];
  let arguments = !con((ins AnyShaped:$q, AnyShaped:$k, AnyShaped:$v,
                            Optional<AnyShaped>:$sinks, Optional<Kiln_CacheType>:$kv,
                            AnyShaped:$init),
                       AttentionAttrs, SelectionAttrs);
  let results = (outs Optional<AnyRankedTensor>:$out);
  let assemblyFormat = [{
    `layer` $layer $q `,` $k `,` $v (`sinks` `(` $sinks^ `:` type($sinks) `)`)?
    (`kv` `(` $kv^ `:` qualified(type($kv)) `)`)?
    `outs` `(` $init `:` type($init) `)` attr-dict
    `:` type($q) `,` type($k) `,` type($v) (`->` type($out)^)?
  }];
}

def Kiln_CachedMlaAttentionOp : Kiln_CachedOp<"cached_mla_attention",
    [AttrSizedOperandSegments], ["getMaxDecodeLaunches"]> {
  let summary = "MLA reading and appending its latent cache";
  let description = [{
    Like `kiln.mla_attention`, with the latent resource in slot `cache` (`mla_latent`,
    or a speculative-only `draft_kv` for an MTP layer). The whole-graph form lowers to
    `kiln_rt_mla_attention`.
  }];
  let arguments = !con((ins AnyShaped:$q, AnyShaped:$latent),
                       (ins Optional<AnyShaped>:$k_pe, Optional<AnyShaped>:$positions,
                            Optional<AnyShaped>:$kv_b, Optional<AnyShaped>:$scratch),
                       (ins Optional<Kiln_CacheType>:$cache, AnyShaped:$init),
                       MlaAttrs, MlaGraphAttrs, SelectionAttrs);
  let results = (outs Optional<AnyRankedTensor>:$out);
  let assemblyFormat = [{
    `layer` $layer $q `,` $latent (`k_pe` `(` $k_pe^ `:` type($k_pe) `)`)?
    (`positions` `(` $positions^ `:` type($positions) `)`)?
    (`kv_b` `(` $kv_b^ `:` type($kv_b) `)`)? (`scratch` `(` $scratch^ `:` type($scratch) `)`)?
    (`cache` `(` $cache^ `:` qualified(type($cache)) `)`)?
    `outs` `(` $init `:` type($init) `)`
    attr-dict `:` type($q) `,` type($latent) (`->` type($out)^)?
  }];
  let extraClassDeclaration = [{
    ::mlir::MutableOperandRange getDpsInitsMutable() { return getInitMutable(); }
    bool isWholeGraph() { return static_cast<bool>(getKvB()); }
  }];
}

def Kiln_CachedSsmOp : Kiln_CachedOp<"cached_ssm", [AttrSizedOperandSegments]> {
  let summary = "Mamba2 mixer updating its SSM state";
  let description = [{
    Like `kiln.ssm`, with the `state` resource and the speculative slots:
    `intermediate` (rewind mode) or the three replay buffers (replay mode:
    x, B and dt of the last two speculative steps, docs/replay.md). With
    speculation off all speculative slots are empty.
  }];
  let arguments = !con((ins AnyShaped:$x, AnyShaped:$dt, AnyShaped:$b,
                            AnyShaped:$c, Optional<AnyShaped>:$z,
                            Optional<AnyShaped>:$a_log, Optional<AnyShaped>:$d,
                            Optional<AnyShaped>:$dt_bias,
                            Kiln_CacheType:$state,
                            Optional<Kiln_CacheType>:$intermediate,
                            Optional<Kiln_CacheType>:$replay_x,
                            Optional<Kiln_CacheType>:$replay_b,
                            Optional<Kiln_CacheType>:$replay_dt, AnyShaped:$init),
                       SsmAttrs, SsmClampAttrs, SelectionAttrs);
  let results = (outs Optional<AnyRankedTensor>:$out);
  let assemblyFormat = [{
    `layer` $layer $x `,` $dt `,` $b `,` $c (`gate` $z^ `:` type($z))?
    (`a_log` `(` $a_log^ `:` type($a_log) `)`)? (`d` `(` $d^ `:` type($d) `)`)?
    (`dt_bias` `(` $dt_bias^ `:` type($dt_bias) `)`)?
    `state` `(` $state `:` qualified(type($state)) `)`
    (`intermediate` `(` $intermediate^ `:` qualified(type($intermediate)) `)`)?
    (`replay_x` `(` $replay_x^ `:` qualified(type($replay_x)) `)`)?
    (`replay_b` `(` $replay_b^ `:` qualified(type($replay_b)) `)`)?
    (`replay_dt` `(` $replay_dt^ `:` qualified(type($replay_dt)) `)`)?
    `outs` `(` $init `:` type($init) `)`
    attr-dict `:` type($x) `,` type($dt) `,` type($b) `,` type($c) (`->` type($out)^)?
  }];
}

def Kiln_CachedGatedDeltaNetOp : Kiln_CachedOp<"cached_gated_delta_net",
                                                [AttrSizedOperandSegments]> {
  let summary = "Gated DeltaNet updating its recurrent state";
  let description = [{
    Like `kiln.gated_delta_net`, with the `state` resource (`gdn_state`) and the
    speculative slots: `intermediate` (rewind mode: the state after each verified
    token) or the replay buffers `replay_k`, `replay_v`, `replay_gb` (replay mode:
    the last two steps' inputs). With speculation off all speculative
    slots are empty. Lowers to `kiln_rt_gated_delta_net` (rewind mode).
  }];
  let arguments = !con((ins AnyShaped:$q, AnyShaped:$k, AnyShaped:$v, AnyShaped:$a,
                            AnyShaped:$b, Optional<AnyShaped>:$a_log,
                            Optional<AnyShaped>:$dt_bias, Optional<AnyShaped>:$scratch,
                            Kiln_CacheType:$state,
                            Optional<Kiln_CacheType>:$intermediate,
                            Optional<Kiln_CacheType>:$replay_k,
                            Optional<Kiln_CacheType>:$replay_v,
                            Optional<Kiln_CacheType>:$replay_gb, AnyShaped:$init),
                       GdnAttrs, SelectionAttrs);
  let results = (outs Optional<AnyRankedTensor>:$out);
  let assemblyFormat = [{
    `layer` $layer $q `,` $k `,` $v `,` $a `,` $b
    (`a_log` `(` $a_log^ `:` type($a_log) `)`)? (`dt_bias` `(` $dt_bias^ `:` type($dt_bias) `)`)?
    (`scratch` `(` $scratch^ `:` type($scratch) `)`)?
    `state` `(` $state `:` qualified(type($state)) `)`
    (`intermediate` `(` $intermediate^ `:` qualified(type($intermediate)) `)`)?
    (`replay_k` `(` $replay_k^ `:` qualified(type($replay_k)) `)`)?
    (`replay_v` `(` $replay_v^ `:` qualified(type($replay_v)) `)`)?
    (`replay_gb` `(` $replay_gb^ `:` qualified(type($replay_gb)) `)`)?
    `outs` `(` $init `:` type($init) `)`
    attr-dict `:` type($q) `,` type($k) `,` type($v) `,` type($a) `,` type($b)
    (`->` type($out)^)?
  }];
}

def Kiln_CachedCausalConvOp : Kiln_CachedOp<"cached_causal_conv",
                                            [AttrSizedOperandSegments]> {
  let summary = "causal conv1d updating its conv state";
  let description = [{
    Like `kiln.causal_conv`, with the `state` resource and the speculative
    `intermediate` slot (the window after each draft token).
  }];
  let arguments = !con((ins AnyShaped:$x, Optional<AnyShaped>:$weight,
                            Optional<AnyShaped>:$bias, Kiln_CacheType:$state,
                            Optional<Kiln_CacheType>:$intermediate, AnyShaped:$init),
                       ConvAttrs, SelectionAttrs);
  let results = (outs Optional<AnyRankedTensor>:$out);
  let assemblyFormat = [{
    `layer` $layer $x (`weight` `(` $weight^ `:` type($weight) `)`)?
    (`bias` `(` $bias^ `:` type($bias) `)`)? `state` `(` $state `:` qualified(type($state)) `)`
    (`intermediate` `(` $intermediate^ `:` qualified(type($intermediate)) `)`)?
    `outs` `(` $init `:` type($init) `)`
    attr-dict `:` type($x) (`->` type($out)^)?
  }];
}

//===----------------------------------------------------------------------===//
// Compute ops: the graph between the cached ops (docs/overview.md says why these
// and not linalg). Destination-passing style like linalg's named ops: `ins(...)`
// are read, `outs(%init)` is written; on tensors the op yields the result, on
// memrefs it yields nothing and lowers to one runtime call on its buffers.
//===----------------------------------------------------------------------===//

class Kiln_ComputeOp<string mnemonic, list<Trait> traits = []>
    : Kiln_Op<mnemonic, !listconcat(traits, [
        DestinationStyleOpInterface,
        DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
        DeclareOpInterfaceMethods<Kiln_RuntimeCallOpInterface>])> {
  let results = (outs Optional<AnyRankedTensor>:$result);
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::MutableOperandRange getDpsInitsMutable() { return getInitMutable(); }
  }];
}

// Two operands read, one written.
class Kiln_BinaryComputeOp<string mnemonic, string lhs, string rhs,
                           list<Trait> traits = []>
    : Kiln_ComputeOp<mnemonic, traits> {
  let assemblyFormat = "`ins` `(` $" # lhs # " `,` $" # rhs # " `:` type($" # lhs #
      ") `,` type($" # rhs # ") `)` `outs` `(` $init `:` type($init) `)` attr-dict"
      " (`->` type($result)^)?";
}

def Kiln_EmbeddingOp : Kiln_BinaryComputeOp<"embedding", "ids", "table"> {
  let summary = "token embedding lookup";
  let description = [{
    `out[t, :] = table[ids[t], :]`; `ids: [tokens] i32`, `table: [vocab, hidden]`,
    `out: [tokens, hidden]`. An id outside the table gives a zero row.

    With `vocab_parallel` the table is one tensor-parallel rank's block of the
    vocabulary (docs/tensor-parallel.md): `rows = vocab / ranks` rows, the vocabulary's
    `[rank * rows, (rank + 1) * rows)`, where the rank is the context's at run time (one
    compiled model serves every rank). An id outside the block gives a zero row, so a
    `kiln.all_reduce` after it sums the ranks' rows to the whole table's lookup. Lowers
    to `kiln_rt_embedding_rank`, otherwise to `kiln_rt_embedding`.
  }];
  let arguments = (ins AnyShaped:$ids, AnyShaped:$table, AnyShaped:$init,
                       UnitAttr:$vocab_parallel);
}

def Kiln_RmsNormOp : Kiln_BinaryComputeOp<"rms_norm", "input", "weight"> {
  let summary = "RMSNorm over the innermost dimension";
  let description = [{
    `out = weight * x / sqrt(mean(x^2) + epsilon)` over the last dimension of `x`
    (rank 2, or rank 3 for per-head norms such as Qwen3's q/k norms); `weight` has
    the size of that dimension. Statistics in fp32, roundings as Hugging Face's
    RMSNorm (the normalized value rounded to bf16, then its product with the weight).
    With `zero_centered` the weight is stored as an offset from one and the product
    stays in fp32 until one final rounding: `out = bf16(x / sqrt(mean(x^2) + epsilon) *
    (1 + weight))` (Qwen3-Next's and Gemma's RMSNorm). With `f32_weight` the weight
    multiplies the fp32 normalized value, one rounding: `out = bf16(weight * (x /
    sqrt(mean(x^2) + epsilon)))` (gpt-oss's RMSNorm). The two exclude each other. The
    rank-3 form's input may be a strided view (heads of an interleaved projection)
    whose last dimension is contiguous.
  }];
  let arguments = (ins AnyShaped:$input, AnyShaped:$weight, AnyShaped:$init,
                       F32Attr:$epsilon, UnitAttr:$zero_centered, UnitAttr:$f32_weight);
}

def Kiln_AddRmsNormOp : Kiln_Op<"add_rms_norm", [
    DestinationStyleOpInterface,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
    DeclareOpInterfaceMethods<Kiln_RuntimeCallOpInterface>,
    DeclareOpInterfaceMethods<Kiln_OverwritesInputsOpInterface>]> {
  let summary = "a residual add and the RMSNorm of its sum, in one pass";
  let description = [{
    `sum = lhs + rhs` (written to `sum_init`: the residual stream) and
    `norm = rms_norm(sum, weight, epsilon)` (written to `norm_init`), both
    `[tokens, hidden]`: exactly `kiln.add` followed by `kiln.rms_norm` of its result,
    with the same roundings, in one kernel that reads the row once.
    `kiln-fuse-residual-norm` forms it. On tensors it yields `(sum, norm)`; on memrefs
    it yields nothing and lowers to `kiln_rt_add_rms_norm` (`kiln_rt_add_rms_norm_offset`
    with `zero_centered` or `f32_weight`). Each thread of the kernel
    reads a chunk of `lhs` and `rhs` before it writes the same chunk of either output,
    so the activation plan may put the outputs over the inputs that die here.
    `zero_centered` and `f32_weight` are `kiln.rms_norm`'s.
  }];
  let arguments = (ins AnyShaped:$lhs, AnyShaped:$rhs, AnyShaped:$weight,
                       AnyShaped:$sum_init, AnyShaped:$norm_init, F32Attr:$epsilon,
                       UnitAttr:$zero_centered, UnitAttr:$f32_weight);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let hasVerifier = 1;
  let assemblyFormat = [{
    `ins` `(` $lhs `,` $rhs `,` $weight `:` type($lhs) `,` type($rhs) `,` type($weight) `)`
    `outs` `(` $sum_init `,` $norm_init `:` type($sum_init) `,` type($norm_init) `)`
    attr-dict (`->` type($results)^)?
  }];
  let extraClassDeclaration = [{
    ::mlir::MutableOperandRange getDpsInitsMutable() {
      return ::mlir::MutableOperandRange(getOperation(), /*start=*/3, /*length=*/2);
    }
  }];
}

def Kiln_LinearOp : Kiln_ComputeOp<"linear"> {
  let summary = "x times the transposed weight, plus an optional bias (nn.Linear)";
  let description = [{
    `out[m, n] = sum_k x[m, k] * weight[n, k] + bias[n]` with `weight` in PyTorch's
    `[out_features, in_features]` layout. fp32 accumulation. Lowers to cuBLASLt.
    A bf16 input with an f32 `init` (no bias) keeps the fp32 sums: DeepSeek's and
    Nemotron-H's routers compute `F.linear(x.float(), w.float())`, whose bf16 products
    are exact in fp32.
  }];
  let arguments = (ins AnyShaped:$input, AnyShaped:$weight, Optional<AnyShaped>:$bias,
                       AnyShaped:$init);
  let assemblyFormat = [{
    `ins` `(` $input `,` $weight `:` type($input) `,` type($weight) `)`
    (`bias` `(` $bias^ `:` type($bias) `)`)?
    `outs` `(` $init `:` type($init) `)` attr-dict (`->` type($result)^)?
  }];
}

def Kiln_LinearPairOp : Kiln_Op<"linear_pair", [
    DestinationStyleOpInterface,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
    DeclareOpInterfaceMethods<Kiln_RuntimeCallOpInterface, ["getMaxDecodeLaunches"]>]> {
  let summary = "two projections of one input in one launch (buffers only)";
  let description = [{
    `init0 = input * weight0^T` and `init1 = input * weight1^T`: the two `kiln.linear`s
    without bias of one input and one weight shape (a layer's k and v projections, or
    its gate and up projections) that `kiln-pair-linears` merges after the activation
    plan. Lowers to `kiln_rt_linear_pair`, one strided-batched cuBLASLt GEMM over the
    two weights (their distance in the weight region is the batch stride) and the two
    outputs (likewise), the input shared, so a decode step launches one GEMM instead of
    two. Each output has the bits it would have from its own `kiln.linear` under the
    same algorithm choice, not necessarily the same algorithm. Memrefs only: the op is
    made after bufferization.
  }];
  let arguments = (ins AnyMemRef:$input, AnyMemRef:$weight0, AnyMemRef:$weight1,
                       AnyMemRef:$init0, AnyMemRef:$init1);
  let assemblyFormat = [{
    `ins` `(` $input `,` $weight0 `,` $weight1 `:` type($input) `,` type($weight0) `,`
    type($weight1) `)` `outs` `(` $init0 `,` $init1 `:` type($init0) `,` type($init1) `)`
    attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::MutableOperandRange getDpsInitsMutable() {
      return ::mlir::MutableOperandRange(getOperation(), /*start=*/3, /*length=*/2);
    }
  }];
}

def Kiln_LinearPairSwigluOp : Kiln_Op<"linear_pair_swiglu", [
    DestinationStyleOpInterface,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
    DeclareOpInterfaceMethods<Kiln_RuntimeCallOpInterface, ["getMaxDecodeLaunches"]>,
    DeclareOpInterfaceMethods<Kiln_OverwritesInputsOpInterface>]> {
  let summary = "a gated MLP's gate and up projections and their SwiGLU in one launch "
                "(buffers only)";
  let description = [{
    `init = swiglu(input * weight0^T, input * weight1^T)` (no bias): the two `kiln.linear`s
    of one input and one weight shape whose outputs only a `kiln.swiglu` reads (a gated
    MLP's gate and up projections and its activation), merged by
    `kiln-fuse-pair-swiglu` before the activation plan. `gate` and `up` are the
    projections' buffers, `[m, n]` like `init`; their contents afterwards are
    unspecified. `init` may be placed exactly over `gate` or `up`, as the SwiGLU's output
    could. Lowers to `kiln_rt_linear_pair_swiglu`: where the pair runs on the
    tensor-core skinny GEMM (a batch-1 model), the SwiGLU is the GEMM's epilogue and
    `gate` and `up` are not written; elsewhere `kiln_rt_linear_pair` and the SwiGLU run
    through them. `init` has the bits of `kiln.linear_pair` (what `kiln-pair-linears`
    makes of the two projections, on by default) and the SwiGLU either way. Memrefs
    only: the op is made after bufferization.
  }];
  let arguments = (ins AnyMemRef:$input, AnyMemRef:$weight0, AnyMemRef:$weight1,
                       AnyMemRef:$gate, AnyMemRef:$up, AnyMemRef:$init);
  let assemblyFormat = [{
    `ins` `(` $input `,` $weight0 `,` $weight1 `:` type($input) `,` type($weight0) `,`
    type($weight1) `)` `outs` `(` $gate `,` $up `,` $init `:` type($gate) `,` type($up)
    `,` type($init) `)` attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::MutableOperandRange getDpsInitsMutable() {
      return ::mlir::MutableOperandRange(getOperation(), /*start=*/3, /*length=*/3);
    }
  }];
}

def Kiln_MoeOp : Kiln_Op<"moe", [
    AttrSizedOperandSegments,
    DestinationStyleOpInterface,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
    DeclareOpInterfaceMethods<Kiln_RuntimeCallOpInterface, ["getMaxDecodeLaunches"]>]> {
  let summary = "the routed experts of a mixture-of-experts layer";
  let description = [{
    From the router's logits `[tokens, experts]` (a `kiln.linear` before it; bf16, or
    f32 for DeepSeek's fp32 router): the scores (`scoring`: softmax over the experts, or
    each expert's sigmoid), the choice keys (scores plus `score_bias`, DeepSeek-V3's
    `e_score_correction_bias`, when given), with `groups` > 1 the group-limited routing
    (each group's key is the sum of its two largest keys, DeepSeek-V3's, or with
    `group_max` its largest key, DeepSeek-V2's group_limited_greedy; outside the
    `top_groups` best groups no expert is chosen), the `top_k` largest keys, their scores as weights,
    normalized to sum 1 when `normalize_top_k` is set, times `routed_scale`, and rounded
    to the activation dtype when `round_weights` is (transformers' Qwen-MoE routers round
    them, Mixtral's keeps them in fp32).

    Each chosen expert's MLP runs on the token: `down(silu(gate(x)) * up(x))` with a
    `gate`, else `down(activation(up(x)))` (Nemotron-H's relu2 experts). `init`
    receives the weighted sum of the experts' outputs in ascending expert order: by
    default every product and partial sum rounded (transformers' eager loop into a bf16
    tensor); with `accumulate_f32` in fp32, rounded once (Nemotron-H's
    loop into an fp32 tensor). `gate`, `up`: `[experts, inter, hidden]`; `down`:
    `[experts, hidden, inter]`, each stacked from the per-expert tensors of the
    checkpoint (`kiln.weight`s whose name holds `*`) or a fused tensor rearranged when
    loading. gpt-oss's experts add `gate_bias`, `up_bias` (`[experts, inter]`) and
    `down_bias` (`[experts, hidden]`), each added to its GEMM's bf16 output, and with
    `swiglu_limit` and `swiglu_alpha` run its clamped SwiGLU:
    `(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha * g)` with `g = min(gate, limit)`,
    every step rounded to bf16 as transformers' eager loop does. `scratch` (`[tokens, bytes] i8`,
    bytes = `kiln_moe_scratch_bytes_per_token`) holds the routing, the GEMMs' pointer
    arrays and the experts' intermediate rows. Lowers to `kiln_rt_moe`.
  }];
  let arguments = (ins AnyShaped:$input, AnyShaped:$logits, Optional<AnyShaped>:$gate,
                       AnyShaped:$up, AnyShaped:$down, Optional<AnyShaped>:$score_bias,
                       Optional<AnyShaped>:$gate_bias, Optional<AnyShaped>:$up_bias,
                       Optional<AnyShaped>:$down_bias,
                       AnyShaped:$init, AnyShaped:$scratch,
                       ConfinedAttr<I64Attr, [IntMinValue<1>]>:$top_k,
                       UnitAttr:$normalize_top_k, UnitAttr:$round_weights,
                       DefaultValuedAttr<Kiln_MoeScoringAttr, "MoeScoring::softmax">:$scoring,
                       DefaultValuedAttr<ConfinedAttr<I64Attr, [IntMinValue<1>]>, "1">:$groups,
                       DefaultValuedAttr<ConfinedAttr<I64Attr, [IntMinValue<1>]>, "1">:$top_groups,
                       DefaultValuedAttr<F32Attr, "1.0f">:$routed_scale,
                       DefaultValuedAttr<Kiln_ActivationKindAttr,
                                         "ActivationKind::silu">:$activation,
                       UnitAttr:$accumulate_f32, UnitAttr:$group_max,
                       OptionalAttr<F32Attr>:$swiglu_limit,
                       OptionalAttr<F32Attr>:$swiglu_alpha);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let hasVerifier = 1;
  let assemblyFormat = [{
    `ins` `(` $input `,` $logits `:` type($input) `,` type($logits) `)`
    (`gate` `(` $gate^ `:` type($gate) `)`)?
    `up` `(` $up `:` type($up) `)` `down` `(` $down `:` type($down) `)`
    (`score_bias` `(` $score_bias^ `:` type($score_bias) `)`)?
    (`gate_bias` `(` $gate_bias^ `:` type($gate_bias) `)`)?
    (`up_bias` `(` $up_bias^ `:` type($up_bias) `)`)?
    (`down_bias` `(` $down_bias^ `:` type($down_bias) `)`)?
    `outs` `(` $init `,` $scratch `:` type($init) `,` type($scratch) `)`
    attr-dict (`->` type($results)^)?
  }];
  let extraClassDeclaration = [{
    ::mlir::MutableOperandRange getDpsInitsMutable() {
      // init and scratch are the last two operands.
      return ::mlir::MutableOperandRange(getOperation(),
                                         getOperation()->getNumOperands() - 2, 2);
    }
    /// Scratch bytes a token needs for this op's shapes (kiln_moe's layout).
    static int64_t scratchBytesPerToken(int64_t hidden, int64_t inter, int64_t topK);
    /// gpt-oss's per-expert biases: shapes and element type.
    ::mlir::LogicalResult verifyExpertBiases(int64_t experts, int64_t hidden, int64_t inter,
                                             ::mlir::Type element);
    /// `swiglu_limit` and `swiglu_alpha`: together, on gated experts, finite.
    ::mlir::LogicalResult verifyClampedSwiglu();
  }];
}

def Kiln_RopeOp : Kiln_BinaryComputeOp<"rope", "input", "positions"> {
  let summary = "rotary position embedding (rotate-half convention)";
  let description = [{
    `x: [tokens, heads, head_dim]`, `positions: [tokens] i32`; the frequencies and
    their scaling come from `rope` (`#kiln.rope`). `rotary_dim` (even, at most
    `head_dim`; absent: the whole head) rotates only the first `rotary_dim` values of
    each head, with frequencies over `rotary_dim`, and passes the rest through
    (transformers' `partial_rotary_factor`).
  }];
  let arguments = (ins AnyShaped:$input, AnyShaped:$positions, AnyShaped:$init,
                       Kiln_RopeAttr:$rope, OptionalAttr<I64Attr>:$rotary_dim);
}

// Element-wise: each thread reads an element of both inputs before it writes that
// element of the output, so the output may be placed over an input that dies here.
def Kiln_RopePairOp : Kiln_Op<"rope_pair", [
    DestinationStyleOpInterface,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
    DeclareOpInterfaceMethods<Kiln_RuntimeCallOpInterface>]> {
  let summary = "two rotary embeddings at one set of positions in one launch (buffers only)";
  let description = [{
    `init0 = rope(input0)` and `init1 = rope(input1)`, each exactly as `kiln.rope` with
    the same `positions`, `rope` and `rotary_dim` would compute it: a layer's q and k,
    which `kiln-pair-ropes` merges after the activation plan. `input0: [tokens, heads0,
    head_dim]`, `input1: [tokens, heads1, head_dim]`. Lowers to `kiln_rt_rope_pair`, one
    launch whose blocks compute a token's cos/sin table once for both tensors, so a
    decode step launches one kernel instead of two. Each output may be its own input;
    the runtime refuses an output over the other tensor. Memrefs only: the op is made
    after bufferization.
  }];
  let arguments = (ins AnyMemRef:$input0, AnyMemRef:$input1, AnyMemRef:$positions,
                       AnyMemRef:$init0, AnyMemRef:$init1, Kiln_RopeAttr:$rope,
                       OptionalAttr<I64Attr>:$rotary_dim);
  let assemblyFormat = [{
    `ins` `(` $input0 `,` $input1 `,` $positions `:` type($input0) `,` type($input1) `,`
    type($positions) `)` `outs` `(` $init0 `,` $init1 `:` type($init0) `,` type($init1) `)`
    attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::MutableOperandRange getDpsInitsMutable() {
      return ::mlir::MutableOperandRange(getOperation(), /*start=*/3, /*length=*/2);
    }
  }];
}

def Kiln_AddOp : Kiln_BinaryComputeOp<"add", "lhs", "rhs",
    [DeclareOpInterfaceMethods<Kiln_OverwritesInputsOpInterface>]> {
  let summary = "element-wise sum (the residual connection)";
  let arguments = (ins AnyShaped:$lhs, AnyShaped:$rhs, AnyShaped:$init);
}

def Kiln_AllReduceOp : Kiln_ComputeOp<"all_reduce",
    [DeclareOpInterfaceMethods<Kiln_OverwritesInputsOpInterface>]> {
  let summary = "the sum of a tensor over the tensor-parallel ranks";
  let description = [{
    `out = sum over ranks r of input_r`, bf16 (NCCL's bf16 sum), after a row-parallel
    projection (`o_proj`, `down_proj`) whose rank holds a slice of the input features and
    so a partial sum of every output. Lowers to `kiln_rt_all_reduce`, an `ncclAllReduce`
    on the context's stream; with one rank it is the identity. The output may be placed
    over the input.
  }];
  let arguments = (ins AnyShaped:$input, AnyShaped:$init);
  let assemblyFormat = [{
    `ins` `(` $input `:` type($input) `)` `outs` `(` $init `:` type($init) `)` attr-dict
    (`->` type($result)^)?
  }];
}

def Kiln_AllGatherOp : Kiln_Op<"all_gather", [
    DestinationStyleOpInterface,
    DeclareOpInterfaceMethods<MemoryEffectsOpInterface>,
    DeclareOpInterfaceMethods<Kiln_RuntimeCallOpInterface, ["getMaxDecodeLaunches"]>]> {
  let summary = "the tensor-parallel ranks' column blocks side by side";
  let description = [{
    `out[r, k * cols + j] = input_k[r, j]` over the ranks `k` of the communicator:
    `input: [rows, cols]`, `init: [rows, ranks * cols]`, bf16. A vocabulary-parallel
    lm_head's rank computes its `vocab / ranks` logit columns; this returns the whole
    logits to every rank.

    NCCL's all-gather places each rank's buffer as one contiguous block, so it fills
    `blocks: [ranks, rows, cols]` (the block of rank `k` is its `[rows, cols]`
    matrix), and each block is then copied into its columns of `init` (a strided copy a
    rank). `blocks` is an output only as scratch: its contents after the op are
    unspecified. Lowers to `kiln_rt_all_gather`, an `ncclAllGather` on the context's
    stream (CUDA-graph capturable); with one rank and no communicator it is a copy.
  }];
  let arguments = (ins AnyShaped:$input, AnyShaped:$init, AnyShaped:$blocks);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let hasVerifier = 1;
  let assemblyFormat = [{
    `ins` `(` $input `:` type($input) `)`
    `outs` `(` $init `,` $blocks `:` type($init) `,` type($blocks) `)`
    attr-dict (`->` type($results)^)?
  }];
  let extraClassDeclaration = [{
    ::mlir::MutableOperandRange getDpsInitsMutable() {
      // init and blocks are the last two operands.
      return ::mlir::MutableOperandRange(getOperation(), 1, 2);
    }
  }];
}

def Kiln_SwigluOp : Kiln_BinaryComputeOp<"swiglu", "gate", "up",
    [DeclareOpInterfaceMethods<Kiln_OverwritesInputsOpInterface>]> {
  let summary = "silu(gate) * up, the gated MLP activation";
  let arguments = (ins AnyShaped:$gate, AnyShaped:$up, AnyShaped:$init);
}

def Kiln_SigmoidGateOp : Kiln_ComputeOp<"sigmoid_gate",
    [DeclareOpInterfaceMethods<Kiln_OverwritesInputsOpInterface>]> {
  let summary = "rows scaled by the sigmoid of a one-output gate (a gated shared expert)";
  let description = [{
    `out[r, :] = sigmoid(x[r, :] . w) * value[r, :]` with `x: [rows, dim]`,
    `w: [1, dim]` (the gate's `nn.Linear(dim, 1)` weight), `value`, `out: [rows, cols]`.
    The gate is rounded to the activation dtype as a linear's output would be, and so is
    its sigmoid before the product (PyTorch's bf16 `F.sigmoid(gate(x)) * value`,
    Qwen2-MoE's `shared_expert_gate`). The dot product runs in the op's own kernel (a
    one-output GEMM has no row-invariant cuBLASLt algorithm). The output may be placed
    over `value`.
  }];
  let arguments = (ins AnyShaped:$input, AnyShaped:$gate_weight, AnyShaped:$value,
                       AnyShaped:$init);
  let assemblyFormat = [{
    `ins` `(` $input `,` $gate_weight `,` $value `:` type($input) `,` type($gate_weight) `,`
    type($value) `)` `outs` `(` $init `:` type($init) `)` attr-dict (`->` type($result)^)?
  }];
}

def Kiln_SigmoidMulOp : Kiln_BinaryComputeOp<"sigmoid_mul", "input", "gate",
    [DeclareOpInterfaceMethods<Kiln_OverwritesInputsOpInterface>]> {
  let summary = "x times the sigmoid of a gate (Qwen3-Next's attention output gate)";
  let description = [{
    `out = x * sigmoid(gate)` on `[rows, cols]`, PyTorch's bf16 roundings: the sigmoid
    is rounded to the activation dtype, then the product. `gate` may be a column slice
    of a projection (a strided row dimension); `x` and `out` are dense, and the output
    may be placed over `x`.
  }];
  let arguments = (ins AnyShaped:$input, AnyShaped:$gate, AnyShaped:$init);
}

def Kiln_GatedRmsNormOp : Kiln_ComputeOp<"gated_rms_norm"> {
  let summary = "RMSNorm of x * silu(gate) over groups of columns (Mamba2's output norm)";
  let description = [{
    `y = x * silu(gate)` in fp32, then per row and per group of `group_size` columns
    `out = weight * bf16(y / sqrt(mean(y^2) + epsilon))` (transformers'
    `MambaRMSNormGated` / `Zamba2RMSNormGated` with `norm_before_gate=False`: the gate
    is applied before the norm, the normalized value is rounded to the activation dtype
    before the weight). `x`, `gate`, `out: [rows, width]`, `weight: [width]`;
    `group_size` divides `width` (`width / n_groups`). `gate` may be a column slice of a
    projection (a strided row dimension).

    With `norm_before_gate` the order is Qwen3-Next's `Qwen3NextRMSNormGated`: per
    group, `n = bf16(x / sqrt(mean(x^2) + epsilon))`, `y = bf16(weight * n)`, then
    `out = bf16(y * silu(gate))` with the gate in fp32; `weight: [group_size]`, shared
    by every group (the per-head norm of the value heads).
  }];
  let arguments = (ins AnyShaped:$input, AnyShaped:$gate, AnyShaped:$weight,
                       AnyShaped:$init, I64Attr:$group_size, F32Attr:$epsilon,
                       UnitAttr:$norm_before_gate);
  let assemblyFormat = [{
    `ins` `(` $input `,` $gate `,` $weight `:` type($input) `,` type($gate) `,`
    type($weight) `)` `outs` `(` $init `:` type($init) `)` attr-dict (`->` type($result)^)?
  }];
}

def Kiln_ActivationOp : Kiln_ComputeOp<"activation",
    [DeclareOpInterfaceMethods<Kiln_OverwritesInputsOpInterface>]> {
  let summary = "an elementwise activation of a non-gated MLP";
  let description = [{
    `out = f(x)` elementwise in fp32, rounded once to the activation dtype:
    `relu2` is `relu(x)^2` (Nemotron-H's MLP), `silu` is `x * sigmoid(x)`. The output
    may be placed over the input.
  }];
  let arguments = (ins AnyShaped:$input, AnyShaped:$init, Kiln_ActivationKindAttr:$kind);
  let assemblyFormat = [{
    $kind `ins` `(` $input `:` type($input) `)` `outs` `(` $init `:` type($init) `)`
    attr-dict (`->` type($result)^)?
  }];
}

def Kiln_GatherRowsOp : Kiln_BinaryComputeOp<"gather_rows", "input", "rows"> {
  let summary = "selects rows (e.g. each sequence's last token before the lm_head)";
  let description = [{
    `out[r, :] = x[rows[r], :]`; `rows: [num_rows] i32`.
  }];
  let arguments = (ins AnyShaped:$input, AnyShaped:$rows, AnyShaped:$init);
}

def Kiln_ConcatOp : Kiln_BinaryComputeOp<"concat", "lhs", "rhs"> {
  let summary = "rows joined side by side (an MTP module's [embedding | hidden])";
  let description = [{
    `out[r, :] = [lhs[r, :] | rhs[r, :]]`: `lhs: [rows, a]`, `rhs: [rows, b]`,
    `out: [rows, a + b]`, one element type.
  }];
  let arguments = (ins AnyShaped:$lhs, AnyShaped:$rhs, AnyShaped:$init);
}

def Kiln_ArgmaxOp : Kiln_ComputeOp<"argmax"> {
  let summary = "each row's greedy token (inside the step, for an MTP module's input)";
  let description = [{
    `out[r, 0] = argmax(logits[r, :])` with torch.argmax's ties (the smallest index):
    the token the runtime's own argmax of the logits gives. `out: [rows, 1] i32`.
  }];
  let arguments = (ins AnyShaped:$logits, AnyShaped:$init);
  let assemblyFormat = [{
    `ins` `(` $logits `:` type($logits) `)` `outs` `(` $init `:` type($init) `)`
    attr-dict (`->` type($result)^)?
  }];
}

def Kiln_NextTokensOp : Kiln_ComputeOp<"next_tokens"> {
  let summary = "the token after each token of the step (an MTP module's input tokens)";
  let description = [{
    `out[t] = ids[t + 1]` (the step's next token, the next sequence's first one for a
    sequence's last), then `out[rows[r]] = picks[r, 0]` for every logit row: where the
    model predicts the next token, the prediction wins (every token of a decode or
    verify step; a prompt's last token). `ids, out: [tokens] i32`, `picks: [rows, 1]
    i32` (kiln.argmax of the logits), `rows: [rows] i32`.
  }];
  let arguments = (ins AnyShaped:$ids, AnyShaped:$picks, AnyShaped:$rows, AnyShaped:$init);
  let assemblyFormat = [{
    `ins` `(` $ids `,` $picks `,` $rows `:` type($ids) `,` type($picks) `,` type($rows) `)`
    `outs` `(` $init `:` type($init) `)` attr-dict (`->` type($result)^)?
  }];
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

def Kiln_WeightOp : Kiln_Op<"weight", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "a model parameter, by its Hugging Face name";
  let description = [{
    Declares one tensor the model needs, e.g.
    `kiln.weight @"model.layers.0.self_attn.q_proj.weight" : tensor<4096x4096xbf16>`.
    The symbol name is the tensor's name in the safetensors files; the type gives its
    shape and dtype. `kiln-plan-memory` adds `offset` (bytes into the one weight
    allocation).

    The loader can rearrange a checkpoint tensor into the declared layout, in this order:
    - `mxfp4_checkpoint`: the checkpoint holds the tensor in MXFP4 (gpt-oss's experts:
      `<name>_blocks`, 32 FP4 E2M1 values a block, and `<name>_scales`, an E8M0 scale a
      block, along the last dimension); the loader dequantizes it to bf16, exactly;
    - `checkpoint_shape = array<i64: ...>`: the checkpoint's shape (dequantized), when it
      differs from the type's (the same element count);
    - `transpose_checkpoint`: the checkpoint holds each matrix of its last two
      dimensions transposed (PyTorch `[in, out]` parameters such as gpt-oss's experts);
      each `[a, b]` matrix is loaded as `[b, a]`;
    - `row_groups = array<i64: G, p0, p1, ...>`: the tensor is `G` groups of
      `p0 + p1 + ...` equal units (rows of the leading dimension when `G x sum(p)` is
      that dimension), and the model keeps part 0 of every group, then part 1 of every
      group, and so on. Qwen3-Next's fused projections interleave their outputs per head
      group (`in_proj_qkvz`: q, k, v, z of each key head; `q_proj`: the query and the
      gate of each head); regrouped, each output is a contiguous column range of the
      projection. gpt-oss interleaves gate and up outputs one by one
      (`G = experts x inter`, parts `1, 1`).

    `shard = #kiln.shard<dim = d, parts = p>` (a tensor-parallel graph's weight): the
    type is one rank's block; the checkpoint tensor holds `p` of them along `d`. With
    `segments`, the rank's block of each segment of a fused tensor, concatenated along
    `d`. A stacked weight (`*`) is sharded along a dimension `d >= 1` of every stacked
    tensor (MoE experts, each divided by its intermediate features).
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<AnyStaticShapeTensor>:$type,
                       OptionalAttr<I64Attr>:$offset,
                       OptionalAttr<DenseI64ArrayAttr>:$row_groups,
                       OptionalAttr<DenseI64ArrayAttr>:$checkpoint_shape,
                       UnitAttr:$transpose_checkpoint, UnitAttr:$mxfp4_checkpoint,
                       OptionalAttr<Kiln_ShardAttr>:$shard);
  let assemblyFormat = "$sym_name attr-dict `:` $type";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::mlir::cast<::mlir::RankedTensorType>(getType());
    }
    /// Bytes of the tensor; nullopt on overflow.
    std::optional<uint64_t> getBytes();
    /// `row_groups` names its groups and parts, and they cover the tensor in equal units.
    ::mlir::LogicalResult verifyRowGroups();
    /// `checkpoint_shape` and `transpose_checkpoint` describe a tensor of this one's size.
    ::mlir::LogicalResult verifyCheckpointLayout();
    /// `shard` names a dimension and no other checkpoint layout.
    ::mlir::LogicalResult verifyShard();
  }];
}

def Kiln_WeightRefOp : Kiln_Op<"weight_ref", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "reads a model parameter";
  let description = [{
    The value of `kiln.weight @name`: a tensor of its type, or after bufferization a
    read-only memref of the same shape.
  }];
  let arguments = (ins FlatSymbolRefAttr:$weight);
  let results = (outs AnyTypeOf<[AnyStaticShapeTensor, AnyStaticShapeMemRef]>:$result);
  let assemblyFormat = "$weight attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Buffers of a compiled step (after bufferization)
//===----------------------------------------------------------------------===//

def Kiln_WeightFamilyOp : Kiln_Op<"weight_family", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "one weight of each layer of a layer loop, named by the layer index";
  let description = [{
    Declares `count` tensors of one type, member `i` named by substituting `i` for the
    one `{}` of the symbol name:
    `kiln.weight_family @"model.layers.{}.mlp.up_proj.weight" count 32 : tensor<...>`
    stands for `kiln.weight @"model.layers.0.mlp.up_proj.weight"` to `...31...`. The
    importer declares one per weight of a layer loop's body (`scf.for` marked
    `kiln.layers`), which reads member `%layer` with `kiln.weight_member`.

    Layout: a run of consecutive families of one `count` is laid out member-major, as
    the unrolled layers declare their weights (layer 0's weights in the order of first
    use, then layer 1's, ...). `kiln-plan-memory` adds `offset` (member 0) and `stride`
    (bytes between consecutive members, the same for every family of the run), so
    member `i` sits at `offset + i * stride`. The checkpoint-layout attributes apply to
    every member as they do to a `kiln.weight`.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, ConfinedAttr<I64Attr, [IntPositive]>:$count,
                       TypeAttrOf<AnyStaticShapeTensor>:$type,
                       OptionalAttr<I64Attr>:$offset,
                       OptionalAttr<I64Attr>:$stride,
                       OptionalAttr<DenseI64ArrayAttr>:$row_groups,
                       OptionalAttr<DenseI64ArrayAttr>:$checkpoint_shape,
                       UnitAttr:$transpose_checkpoint, UnitAttr:$mxfp4_checkpoint,
                       OptionalAttr<Kiln_ShardAttr>:$shard);
  let assemblyFormat = "$sym_name `count` $count attr-dict `:` $type";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::mlir::cast<::mlir::RankedTensorType>(getType());
    }
    /// Bytes of one member; nullopt on overflow.
    std::optional<uint64_t> getMemberBytes();
    /// The name of member `index`.
    std::string getMemberName(int64_t index);
  }];
}

def Kiln_WeightMemberOp : Kiln_Op<"weight_member", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "reads the member of a weight family at a layer index";
  let description = [{
    `kiln.weight_member @family[%layer] : tensor<...>` is the value of the family's
    member `%layer` (an index in `[0, count)`), of the family's type; after
    bufferization a read-only memref of the same shape, which
    `convert-kiln-to-runtime-calls` points at `offset + %layer * stride` of the weights.
  }];
  let arguments = (ins FlatSymbolRefAttr:$family, Index:$index);
  let results = (outs AnyTypeOf<[AnyStaticShapeTensor, AnyStaticShapeMemRef]>:$result);
  let assemblyFormat = "$family `[` $index `]` attr-dict `:` type($result)";
}

def Kiln_InputOp : Kiln_Op<"input", [Pure]> {
  let summary = "a per-step input the runtime provides (token ids, positions, rows)";
  let description = [{
    `kiln-bind-entry` replaces the model function's tensor arguments with these.
    A 1-D i32 memref whose size is the step's token (or logit-row) count.
  }];
  let arguments = (ins Kiln_InputKindAttr:$kind);
  let results = (outs MemRefRankOf<[I32], [1]>:$buffer);
  let assemblyFormat = "$kind attr-dict `:` type($buffer)";
}

// Handing a buffer to the runtime is an effect the IR cannot see (the runtime reads it
// after the step), so the op also "writes": it must never be erased as dead.
def Kiln_OutputOp : Kiln_Op<"output", [
    DeclareOpInterfaceMethods<Kiln_RuntimeCallOpInterface, ["getMaxDecodeLaunches"]>,
    MemoryEffects<[MemWrite]>]> {
  let summary = "hands a result of the step (the logits, draft tokens) to the runtime";
  let description = [{
    `logits`: `[rows, vocab]`; `draft_tokens`: `[rows, 1] i32` (an MTP module's greedy
    draft at each logit row).
  }];
  let arguments = (ins Kiln_OutputKindAttr:$kind,
                       Arg<AnyMemRef, "the buffer handed over", [MemRead]>:$buffer);
  let assemblyFormat = "$kind $buffer attr-dict `:` type($buffer)";
  let hasVerifier = 1;
}

def Kiln_ActivationBufferOp : Kiln_Op<"activation_buffer", [Pure]> {
  let summary = "an intermediate buffer at a planned offset of the activation arena";
  let description = [{
    What `kiln-plan-activations` makes of every `memref.alloc` of a step: the buffer
    lives at `offset` bytes into the activation arena; buffers whose lifetimes do not
    overlap share bytes. `sizes` are the dynamic dimensions.
  }];
  let arguments = (ins I64Attr:$offset, I64Attr:$capacity, Variadic<Index>:$sizes);
  let results = (outs AnyMemRef:$buffer);
  let assemblyFormat = [{
    `offset` $offset `capacity` $capacity (`[` $sizes^ `]`)? attr-dict `:` type($buffer)
  }];
  let hasVerifier = 1;
}

def Kiln_BufferFromPointerOp : Kiln_Op<"buffer_from_pointer", [Pure]> {
  let summary = "a contiguous memref over a device pointer (lowering only)";
  let description = [{
    Made by `convert-kiln-to-runtime-calls` from the runtime's base pointers; lowered
    to a memref descriptor by `convert-kiln-to-llvm`.
  }];
  let arguments = (ins Kiln_LLVMPointer:$pointer, Variadic<Index>:$sizes);
  let results = (outs AnyMemRef:$buffer);
  let assemblyFormat = [{
    $pointer (`[` $sizes^ `]`)? attr-dict `:` qualified(type($pointer)) `->` type($buffer)
  }];
  let hasVerifier = 1;
}
#endif // KILN_OPS_TD
