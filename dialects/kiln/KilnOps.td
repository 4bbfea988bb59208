//===- KilnOps.td - kiln operations ------------------------*- tablegen -*-===//
#ifndef KILN_OPS_TD
#define KILN_OPS_TD

include "KilnBase.td"
include "KilnAttrs.td"
include "KilnTypes.td"
include "KilnInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

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
    OptionalAttr<I64Attr>:$bytes
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
defvar SsmAttrs = (ins
    I64Attr:$layer,
    I64Attr:$num_heads,
    I64Attr:$head_dim,
    I64Attr:$state_size,
    I64Attr:$n_groups,
    OptionalAttr<Kiln_DraftKindAttr>:$draft);
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
    `sliding_window` bounds the keys each query sees. `draft` marks the layer of an MTP
    module, an Eagle3 head or a draft model.
  }];
  let arguments = !con((ins AnyRankedTensor:$q, AnyRankedTensor:$k, AnyRankedTensor:$v),
                       AttentionAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    `layer` $layer $q `,` $k `,` $v attr-dict `:` type($q) `,` type($k) `,` type($v)
    `->` type($out)
  }];
  let hasVerifier = 1;
}

def Kiln_MlaAttentionOp : Kiln_LayerOp<"mla_attention", [
    DeclareOpInterfaceMethods<Kiln_ModelOpInterface>]> {
  let summary = "multi-head latent attention of one layer (DeepSeek MLA, absorbed form)";
  let description = [{
    `q: [tokens, num_heads, kv_lora_rank + qk_rope_head_dim]` (absorbed query),
    `latent: [tokens, kv_lora_rank + qk_rope_head_dim]` (compressed KV + rope key),
    result `[tokens, num_heads, kv_lora_rank]`. The cache holds
    `kv_lora_rank + qk_rope_head_dim` values per token whatever the head count.
  }];
  let arguments = !con((ins AnyRankedTensor:$q, AnyRankedTensor:$latent), MlaAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    `layer` $layer $q `,` $latent attr-dict `:` type($q) `,` type($latent) `->` type($out)
  }];
  let hasVerifier = 1;
}

def Kiln_SsmOp : Kiln_LayerOp<"ssm", [
    DeclareOpInterfaceMethods<Kiln_ModelOpInterface>]> {
  let summary = "Mamba2 selective state-space mixer of one layer";
  let description = [{
    `x: [tokens, num_heads, head_dim]`, `dt: [tokens, num_heads]`,
    `b`, `c: [tokens, n_groups, state_size]`, optional gate `z` like `x`; result like
    `x`. `num_heads` must be a multiple of `n_groups`.
  }];
  let arguments = !con((ins AnyRankedTensor:$x, AnyRankedTensor:$dt, AnyRankedTensor:$b,
                            AnyRankedTensor:$c, Optional<AnyRankedTensor>:$z), SsmAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    `layer` $layer $x `,` $dt `,` $b `,` $c (`gate` $z^ `:` type($z))? attr-dict `:`
    type($x) `,` type($dt) `,` type($b) `,` type($c) `->` type($out)
  }];
  let hasVerifier = 1;
}

def Kiln_CausalConvOp : Kiln_LayerOp<"causal_conv", [
    DeclareOpInterfaceMethods<Kiln_ModelOpInterface>]> {
  let summary = "depthwise causal conv1d of a Mamba2 layer";
  let description = [{
    `x: [tokens, conv_dim]`, result like `x`; `kernel_size` in [2, 4] (the decode
    kernels support up to 4); `silu` applies SiLU to the output.
  }];
  let arguments = !con((ins AnyRankedTensor:$x), ConvAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    `layer` $layer $x attr-dict `:` type($x) `->` type($out)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Cached forms: the model ops with their resources in (maybe empty) slots
//===----------------------------------------------------------------------===//

class Kiln_CachedOp<string mnemonic, list<Trait> traits = []>
    : Kiln_Op<mnemonic, !listconcat(traits, [
        DeclareOpInterfaceMethods<Kiln_CachedOpInterface>,
        MemoryEffects<[MemRead, MemWrite]>])> {
  let hasVerifier = 1;
}

def Kiln_CachedAttentionOp : Kiln_CachedOp<"cached_attention"> {
  let summary = "attention reading and appending its paged KV cache";
  let description = [{
    Like `kiln.attention`, with the layer's KV resource in slot `kv`: a `kv` resource
    for a model layer, a speculative-only `draft_kv` resource for a draft layer. An
    empty slot means the layer is not run (a draft layer with speculation off).
    `kiln-select-kernels` adds `decode_kernel`, `prefill_kernel`, `spec_dec_mode`.
  }];
  let arguments = !con((ins AnyRankedTensor:$q, AnyRankedTensor:$k, AnyRankedTensor:$v,
                            Optional<Kiln_CacheType>:$kv), AttentionAttrs, SelectionAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    `layer` $layer $q `,` $k `,` $v (`kv` `(` $kv^ `:` qualified(type($kv)) `)`)? attr-dict
    `:` type($q) `,` type($k) `,` type($v) `->` type($out)
  }];
}

def Kiln_CachedMlaAttentionOp : Kiln_CachedOp<"cached_mla_attention"> {
  let summary = "MLA reading and appending its latent cache";
  let description = [{
    Like `kiln.mla_attention`, with the latent resource in slot `latent` (`mla_latent`,
    or a speculative-only `draft_kv` for an MTP layer).
  }];
  let arguments = !con((ins AnyRankedTensor:$q, AnyRankedTensor:$latent,
                            Optional<Kiln_CacheType>:$cache), MlaAttrs, SelectionAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    `layer` $layer $q `,` $latent (`cache` `(` $cache^ `:` qualified(type($cache)) `)`)?
    attr-dict `:` type($q) `,` type($latent) `->` type($out)
  }];
}

def Kiln_CachedSsmOp : Kiln_CachedOp<"cached_ssm", [AttrSizedOperandSegments]> {
  let summary = "Mamba2 mixer updating its SSM state";
  let description = [{
    Like `kiln.ssm`, with the `state` resource and the speculative slots:
    `intermediate` (rewind mode) or the five replay buffers (replay mode). With
    speculation off all speculative slots are empty.
  }];
  let arguments = !con((ins AnyRankedTensor:$x, AnyRankedTensor:$dt, AnyRankedTensor:$b,
                            AnyRankedTensor:$c, Optional<AnyRankedTensor>:$z,
                            Kiln_CacheType:$state,
                            Optional<Kiln_CacheType>:$intermediate,
                            Optional<Kiln_CacheType>:$replay_x,
                            Optional<Kiln_CacheType>:$replay_b,
                            Optional<Kiln_CacheType>:$replay_dt,
                            Optional<Kiln_CacheType>:$replay_dacs,
                            Optional<Kiln_CacheType>:$replay_index), SsmAttrs, SelectionAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    `layer` $layer $x `,` $dt `,` $b `,` $c (`gate` $z^ `:` type($z))?
    `state` `(` $state `:` qualified(type($state)) `)`
    (`intermediate` `(` $intermediate^ `:` qualified(type($intermediate)) `)`)?
    (`replay_x` `(` $replay_x^ `:` qualified(type($replay_x)) `)`)?
    (`replay_b` `(` $replay_b^ `:` qualified(type($replay_b)) `)`)?
    (`replay_dt` `(` $replay_dt^ `:` qualified(type($replay_dt)) `)`)?
    (`replay_dacs` `(` $replay_dacs^ `:` qualified(type($replay_dacs)) `)`)?
    (`replay_index` `(` $replay_index^ `:` qualified(type($replay_index)) `)`)?
    attr-dict `:` type($x) `,` type($dt) `,` type($b) `,` type($c) `->` type($out)
  }];
}

def Kiln_CachedCausalConvOp : Kiln_CachedOp<"cached_causal_conv"> {
  let summary = "causal conv1d updating its conv state";
  let description = [{
    Like `kiln.causal_conv`, with the `state` resource and the speculative
    `intermediate` slot (the window after each draft token).
  }];
  let arguments = !con((ins AnyRankedTensor:$x, Kiln_CacheType:$state,
                            Optional<Kiln_CacheType>:$intermediate), ConvAttrs, SelectionAttrs);
  let results = (outs AnyRankedTensor:$out);
  let assemblyFormat = [{
    `layer` $layer $x `state` `(` $state `:` qualified(type($state)) `)`
    (`intermediate` `(` $intermediate^ `:` qualified(type($intermediate)) `)`)?
    attr-dict `:` type($x) `->` type($out)
  }];
}

#endif // KILN_OPS_TD
