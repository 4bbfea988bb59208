//===- KilnBase.td - the kiln dialect and its enums --------*- tablegen -*-===//
#ifndef KILN_BASE_TD
#define KILN_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def Kiln_Dialect : Dialect {
  let name = "kiln";
  let cppNamespace = "::kiln";
  let summary = "Cache resources, speculative gating and kernel selection for LLM decoders";
  let description = [{
    The `kiln` dialect models the parts of an LLM decoder graph that need cache
    resources (attention KV, MLA latents, Mamba2 SSM and conv states, and the
    speculative-decoding-only buffers), the configuration that decides which of them
    exist (`kiln.target`, `kiln.spec`, `kiln.runtime`, `kiln.model` on the module), the
    memory plan, and the kernel chosen for every layer.

    Model-level ops (`kiln.attention`, `kiln.mla_attention`, `kiln.ssm`,
    `kiln.causal_conv`) are what an importer emits. `kiln-insert-caches` turns them into
    cached forms (`kiln.cached_*`) that take their `kiln.cache_resource`s through
    optional operands: an erased speculative-only resource leaves its slot empty.
  }];
  // Cached forms get `tensor.empty` destinations sized with `tensor.dim`.
  let dependentDialects = ["::mlir::tensor::TensorDialect", "::mlir::arith::ArithDialect"];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Names of the module attributes that configure a compilation.
    static constexpr ::llvm::StringLiteral kTargetAttrName = "kiln.target";
    static constexpr ::llvm::StringLiteral kSpecAttrName = "kiln.spec";
    static constexpr ::llvm::StringLiteral kRuntimeAttrName = "kiln.runtime";
    static constexpr ::llvm::StringLiteral kModelAttrName = "kiln.model";
    static constexpr ::llvm::StringLiteral kPlanAttrName = "kiln.plan";
    static constexpr ::llvm::StringLiteral kDeviceMemoryAttrName = "kiln.device_memory";
    /// The model function (on func.func), its inputs and outputs (argument and
    /// result attributes), and the runtime context argument of a compiled step.
    static constexpr ::llvm::StringLiteral kEntryAttrName = "kiln.entry";
    static constexpr ::llvm::StringLiteral kInputAttrName = "kiln.input";
    static constexpr ::llvm::StringLiteral kOutputAttrName = "kiln.output";
    static constexpr ::llvm::StringLiteral kContextAttrName = "kiln.context";
    /// The decoder layer of a runtime call lowered from a cached op (on func.call):
    /// the anchor `kiln-roll-layers` splits the step's layers at.
    static constexpr ::llvm::StringLiteral kLayerAttrName = "kiln.layer";
    /// A layer loop (on scf.for): its induction variable is the layer index, its body one
    /// decoder layer whose weights are `kiln.weight_family` members (kiln-expand-layers).
    static constexpr ::llvm::StringLiteral kLayersAttrName = "kiln.layers";

  private:
    void registerAttributes();
    void registerTypes();
  public:
  }];
}

class Kiln_I32Enum<string name, string summary, list<I32EnumAttrCase> cases>
    : I32EnumAttr<name, summary, cases> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}

def Kiln_PoolCategory : Kiln_I32Enum<"PoolCategory", "memory pool category of the plan", [
  I32EnumAttrCase<"kv", 0>,        // paged per-token caches, one pool per (window, head dim, dtype)
  I32EnumAttrCase<"state", 1>,     // per-slot states
  I32EnumAttrCase<"unmanaged", 2>  // allocated outside Kiln's pools (warned about)
]>;

def Kiln_ResourceKind : Kiln_I32Enum<"ResourceKind", "kind of a cache resource", [
  I32EnumAttrCase<"kv", 0>,
  I32EnumAttrCase<"mla_latent", 1>,
  I32EnumAttrCase<"ssm_state", 2>,
  I32EnumAttrCase<"conv_state", 3>,
  I32EnumAttrCase<"intermediate_ssm_state", 4>,
  I32EnumAttrCase<"intermediate_conv_state", 5>,
  I32EnumAttrCase<"replay_x", 6>,
  I32EnumAttrCase<"replay_b", 7>,
  I32EnumAttrCase<"replay_dt", 8>,
  // 9 and 10 were replay_dacs and replay_index: replay recomputes the prefix token by
  // token from dt (bitwise the non-speculative recurrence), and the pending count and
  // buffer of a sequence are per-step inputs (docs/replay.md).
  I32EnumAttrCase<"draft_kv", 11>,
  // Gated DeltaNet (Qwen3-Next linear attention): the recurrent state, its per-draft
  // copies (rewind), and the inputs replay recomputes the accepted prefix from.
  I32EnumAttrCase<"gdn_state", 12>,
  I32EnumAttrCase<"intermediate_gdn_state", 13>,
  I32EnumAttrCase<"gdn_replay_k", 14>,
  I32EnumAttrCase<"gdn_replay_v", 15>,
  I32EnumAttrCase<"gdn_replay_gb", 16>
]>;
def Kiln_ResourceKindAttr : EnumAttr<Kiln_Dialect, Kiln_ResourceKind, "resource_kind">;

def Kiln_SpecMode : Kiln_I32Enum<"SpecMode", "speculative decoding mode", [
  I32EnumAttrCase<"mtp", 0>,           // one-model: MTP layers of the target model
  I32EnumAttrCase<"eagle3", 1>,        // one-model: an Eagle3 head layer
  I32EnumAttrCase<"draft_target", 2>,  // two-model: a separate draft model
  I32EnumAttrCase<"ngram", 3>          // no draft layers at all
]>;

def Kiln_SsmSpecMode : Kiln_I32Enum<"SsmSpecMode",
    "how SSM layers recover the state of the accepted draft prefix", [
  I32EnumAttrCase<"rewind", 0>,  // keep the state after every draft token
  I32EnumAttrCase<"replay", 1>   // keep inputs, recompute the accepted prefix
]>;

def Kiln_DraftKind : Kiln_I32Enum<"DraftKind", "what makes a layer a draft layer", [
  I32EnumAttrCase<"mtp", 0>,
  I32EnumAttrCase<"eagle3", 1>,
  I32EnumAttrCase<"draft_model", 2>
]>;
def Kiln_DraftKindAttr : EnumAttr<Kiln_Dialect, Kiln_DraftKind, "draft">;

def Kiln_SpecDecMode : Kiln_I32Enum<"SpecDecMode",
    "how a decode attention op handles draft tokens", [
  I32EnumAttrCase<"single_token", 0>,   // no speculation: one token per step
  I32EnumAttrCase<"multi_token", 1>,    // verify all draft tokens in one decode kernel
  I32EnumAttrCase<"extend_context", 2>  // draft tokens go through the context path
]>;
def Kiln_SpecDecModeAttr : EnumAttr<Kiln_Dialect, Kiln_SpecDecMode, "spec_dec_mode">;

// The values match KILN_RT_ACTIVATION_* of include/kiln/Runtime/ABI.def (passed as is).
def Kiln_ActivationKind : Kiln_I32Enum<"ActivationKind", "an elementwise activation", [
  I32EnumAttrCase<"relu2", 0>,
  I32EnumAttrCase<"silu", 1>
]>;
def Kiln_ActivationKindAttr : EnumAttr<Kiln_Dialect, Kiln_ActivationKind, "activation">;

// How kiln.moe turns a token's router logits into expert scores.
def Kiln_MoeScoring : Kiln_I32Enum<"MoeScoring", "a MoE router's score function", [
  I32EnumAttrCase<"softmax", 0>,  // Mixtral, Qwen-MoE, DeepSeek-V2
  I32EnumAttrCase<"sigmoid", 1>   // DeepSeek-V3, Nemotron-H
]>;
def Kiln_MoeScoringAttr : EnumAttr<Kiln_Dialect, Kiln_MoeScoring, "moe_scoring">;

def Kiln_Phase : Kiln_I32Enum<"Phase", "inference phase", [
  I32EnumAttrCase<"decode", 0>,
  I32EnumAttrCase<"prefill", 1>
]>;

// The values match KILN_RT_ROPE_* of include/kiln/Runtime/ABI.def (checked by a unit
// test), because the lowering passes them to the runtime unchanged.
def Kiln_RopeType : Kiln_I32Enum<"RopeType", "RoPE frequency scaling (Hugging Face rope_type)", [
  I32EnumAttrCase<"default_", 0, "default">,
  I32EnumAttrCase<"linear", 1>,
  I32EnumAttrCase<"llama3", 2>,
  I32EnumAttrCase<"yarn", 3>
]>;

// How a RoPE pairs a head's dimensions (the values are KILN_ROPE_STYLE_* of
// include/kiln/Kernels/Graph.h, passed as they are).
def Kiln_RopeStyle : Kiln_I32Enum<"RopeStyle", "how RoPE pairs the dimensions of a head", [
  // Dimension i with i + d/2 (Hugging Face's rotate_half), bf16 arithmetic on bf16
  // cos/sin as transformers runs it.
  I32EnumAttrCase<"rotate_half", 0>,
  // DeepSeek-V3's rope_interleave: the interleaved pairs (2i, 2i+1) moved to (i, i+d/2)
  // first, then rotate_half; the result keeps the moved order.
  I32EnumAttrCase<"deinterleave", 1>,
  // DeepSeek-V2's complex product: pairs (2i, 2i+1) rotated in fp32 with fp32 cos/sin,
  // rounded once; the result keeps the interleaved order.
  I32EnumAttrCase<"complex_pairs", 2>
]>;
def Kiln_RopeStyleAttr : EnumAttr<Kiln_Dialect, Kiln_RopeStyle, "rope_style">;

// The values match KILN_RT_INPUT_* of include/kiln/Runtime/ABI.def.
def Kiln_InputKind : Kiln_I32Enum<"InputKind", "a per-step input of a compiled model", [
  I32EnumAttrCase<"token_ids", 0>,
  I32EnumAttrCase<"positions", 1>,
  I32EnumAttrCase<"logit_rows", 2>
]>;
def Kiln_InputKindAttr : EnumAttr<Kiln_Dialect, Kiln_InputKind, "input">;

// The values match KILN_RT_OUTPUT_* of include/kiln/Runtime/ABI.def.
def Kiln_OutputKind : Kiln_I32Enum<"OutputKind", "what a compiled model hands back", [
  I32EnumAttrCase<"logits", 0>,
  I32EnumAttrCase<"draft_tokens", 1>  // an MTP module's greedy draft at each logit row
]>;
def Kiln_OutputKindAttr : EnumAttr<Kiln_Dialect, Kiln_OutputKind, "output">;

#endif // KILN_BASE_TD
