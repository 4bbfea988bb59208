//===- HFConfig.cpp - Hugging Face config.json -> kiln IR --------------===//
//
// See include/kiln/Import/HFConfig.h and docs/kiln-compile.md ("Importer").
//
// This file reads a config into a `ModelSpec` and builds the module: the dense
// families (llama, mistral, qwen2, qwen3) through DenseDecoder.cpp (the whole decoder
// graph, RoPE from Rope.cpp), DeepSeek and Nemotron-H as a skeleton of their cached
// ops here.
//
// Weight estimate of the skeleton models (`#kiln.model<weight_bytes>`), in parameters times bytes:
//   embedding      vocab * hidden                      (model dtype)
//   lm_head        vocab * hidden unless tied          (model dtype)
//   norms          hidden per norm                     (model dtype)
//   attention      hidden*H*D (q) + 2*hidden*KV*D (k,v) + H*D*hidden (o)
//   MLA            q: hidden*q_lora + q_lora*H*(nope+rope)  (or hidden*H*(nope+rope)),
//                  kv_a: hidden*(kv_lora+rope), kv_b: kv_lora*H*(nope+v), o: H*v*hidden
//   gated MLP      3*hidden*intermediate (llama, mistral, qwen, DeepSeek dense layers)
//   Nemotron MLP   2*hidden*intermediate (relu2, not gated)
//   MoE            experts * 3*hidden*moe_intermediate + shared experts likewise
//                  + router hidden*experts (Nemotron "E": 2*... per expert, not gated)
//   Mamba2         in_proj hidden*(2*d_inner + 2*G*N + heads), conv conv_dim*(K+1),
//                  out_proj d_inner*hidden, A/D/dt_bias 3*heads, norm d_inner
// Linear layers count 1 byte per parameter under `quantization_config.quant_method ==
// "fp8"`, else the model dtype's size. Draft layers (MTP modules, an Eagle3 head) are
// not counted: they are loaded only when speculation uses them. The dense models'
// `weight_bytes` is instead the exact sum of their `kiln.weight`s.
//
//===----------------------------------------------------------------------===//
#include "kiln/Import/HFConfig.h"
#include "ImportDetail.h"
#include "kiln/Kernels/Moe.h"
#include "kiln/Dialect/Kiln/Kiln.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

using namespace mlir;
using namespace kiln;
using namespace kiln::import_detail;
namespace json = llvm::json;

llvm::ArrayRef<llvm::StringRef> kiln::supportedModelTypes() {
  static const llvm::StringRef types[] = {
      "llama",     "mistral",     "mixtral",     "qwen2",      "qwen2_moe", "qwen3",
      "qwen3_moe", "deepseek_v2", "deepseek_v3", "nemotron_h", "qwen3_next", "gpt_oss"};
  return types;
}

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

Reader::Reader(StringRef text, StringRef file, MLIRContext *ctx, const json::Object &object)
    : text(text), file(file), ctx(ctx), object(object) {}

Reader Reader::nested(StringRef key, const json::Object &child, StringRef childRequiredFor) {
  Reader r(text, file, ctx, child);
  r.parent = this;
  r.prefix = fieldName(key) + ".";
  r.requiredFor = childRequiredFor.str();
  std::string quoted = ("\"" + key + "\"").str();
  size_t pos = text.find(quoted, searchFrom);
  if (pos != StringRef::npos) {
    r.searchFrom = pos + quoted.size();
    r.ownPos = pos;
  } else {
    r.searchFrom = searchFrom;
    r.ownPos = ownPos;
  }
  return r;
}

Location Reader::fileLoc(unsigned line, unsigned col) const {
  return FileLineColLoc::get(ctx, file, line, col);
}

Location Reader::locAt(size_t pos) const {
  unsigned line = 1, col = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return fileLoc(line, col);
}

Location Reader::keyLoc(StringRef key) const {
  std::string quoted = ("\"" + key + "\"").str();
  size_t pos = text.find(quoted, searchFrom);
  if (pos != StringRef::npos)
    return locAt(pos);
  return ownPos ? locAt(*ownPos) : fileLoc();
}

void Reader::fail() {
  failed = true;
  if (parent)
    parent->fail();
}

bool Reader::has(StringRef key) const {
  const json::Value *v = object.get(key);
  return v && v->kind() != json::Value::Null;
}

InFlightDiagnostic Reader::error(StringRef key) {
  fail();
  return emitError(keyLoc(key));
}

void Reader::missing(StringRef key) {
  fail();
  emitError(ownPos ? locAt(*ownPos) : fileLoc())
      << "missing field '" << fieldName(key) << "' (required for " << requiredFor << ")";
}

std::optional<int64_t> Reader::getInt(StringRef key, bool required, int64_t minValue) {
  const json::Value *v = object.get(key);
  if (!v || v->kind() == json::Value::Null) {
    if (required)
      missing(key);
    return std::nullopt;
  }
  std::optional<int64_t> i = v->getAsInteger();
  if (!i) {
    error(key) << "field '" << fieldName(key) << "' must be an integer, got " << describe(*v);
    return std::nullopt;
  }
  if (*i < minValue) {
    error(key) << "field '" << fieldName(key) << "' must be >= " << minValue << ", got " << *i;
    return std::nullopt;
  }
  if (*i > kMaxConfigInt) {
    error(key) << "field '" << fieldName(key) << "' = " << *i
               << " is implausibly large (more than 2^31)";
    return std::nullopt;
  }
  return i;
}

int64_t Reader::getIntOr(StringRef key, int64_t fallback, int64_t minValue) {
  if (!has(key))
    return fallback;
  return getInt(key, true, minValue).value_or(fallback);
}

std::optional<int64_t> Reader::getIntAny(ArrayRef<StringRef> keys, bool required) {
  for (StringRef key : keys)
    if (has(key))
      return getInt(key);
  if (required) {
    fail();
    std::string names;
    for (StringRef key : keys)
      names += (names.empty() ? "'" : ", '") + fieldName(key) + "'";
    emitError(ownPos ? locAt(*ownPos) : fileLoc())
        << "missing field " << names << " (one of these is required for " << requiredFor
        << ")";
  }
  return std::nullopt;
}

std::optional<double> Reader::getNumber(StringRef key, bool required, bool positive) {
  const json::Value *v = object.get(key);
  if (!v || v->kind() == json::Value::Null) {
    if (required)
      missing(key);
    return std::nullopt;
  }
  std::optional<double> d = v->getAsNumber();
  if (!d) {
    error(key) << "field '" << fieldName(key) << "' must be a number, got " << describe(*v);
    return std::nullopt;
  }
  if (positive && !(std::isfinite(*d) && *d > 0)) {
    error(key) << "field '" << fieldName(key) << "' must be a positive number, got "
               << formatNumber(*d);
    return std::nullopt;
  }
  return d;
}

std::optional<StringRef> Reader::getString(StringRef key, bool required) {
  const json::Value *v = object.get(key);
  if (!v || v->kind() == json::Value::Null) {
    if (required)
      missing(key);
    return std::nullopt;
  }
  std::optional<StringRef> s = v->getAsString();
  if (!s)
    error(key) << "field '" << fieldName(key) << "' must be a string, got " << describe(*v);
  return s;
}

std::optional<bool> Reader::getBool(StringRef key) {
  const json::Value *v = object.get(key);
  if (!v || v->kind() == json::Value::Null)
    return std::nullopt;
  std::optional<bool> b = v->getAsBoolean();
  if (!b)
    error(key) << "field '" << fieldName(key) << "' must be a boolean, got " << describe(*v);
  return b;
}

const json::Object *Reader::getObject(StringRef key) {
  const json::Value *v = object.get(key);
  if (!v || v->kind() == json::Value::Null)
    return nullptr;
  const json::Object *o = v->getAsObject();
  if (!o)
    error(key) << "field '" << fieldName(key) << "' must be an object, got " << describe(*v);
  return o;
}

std::string Reader::formatNumber(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  // The shortest of %g's precisions that reads back as the same double.
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value)
      break;
  }
  return buffer;
}

StringRef Reader::describe(const json::Value &v) {
  switch (v.kind()) {
  case json::Value::Null: return "null";
  case json::Value::Boolean: return "a boolean";
  case json::Value::Number: return "a non-integer number";
  case json::Value::String: return "a string";
  case json::Value::Array: return "an array";
  case json::Value::Object: return "an object";
  }
  return "a value";
}

namespace {

std::optional<Type> parseDtype(Reader &r, StringRef key, Type fallback) {
  std::optional<StringRef> s = r.getString(key, /*required=*/false);
  if (!s)
    return r.failedAny() ? std::nullopt : std::optional<Type>(fallback);
  MLIRContext *ctx = r.ctx;
  if (*s == "bfloat16")
    return BFloat16Type::get(ctx);
  if (*s == "float16")
    return Float16Type::get(ctx);
  if (*s == "float32")
    return Float32Type::get(ctx);
  r.error(key) << "field '" << key << "' = \"" << *s
               << "\" is not a supported dtype (bfloat16, float16, float32)";
  return std::nullopt;
}

/// Window of attention layer `i` (of `n`), from `layer_types`, `use_sliding_window`,
/// `sliding_window` and Qwen's `max_window_layers`.
/// `layer_types` when the config has it (null when not): one entry per layer, or a
/// diagnostic naming the count (failure).
FailureOr<const json::Array *> readLayerTypes(Reader &r, const ModelSpec &m) {
  const json::Array *types = r.object.getArray("layer_types");
  if (types && static_cast<int64_t>(types->size()) != m.numLayers) {
    r.error("layer_types") << "field 'layer_types' has " << types->size()
                           << " entries but num_hidden_layers is " << m.numLayers;
    return failure();
  }
  return types;
}

LogicalResult readSlidingWindows(Reader &r, ModelSpec &m) {
  std::optional<int64_t> window;
  if (r.has("sliding_window"))
    window = r.getInt("sliding_window");
  if (r.failedAny())
    return failure();
  std::optional<bool> use = r.getBool("use_sliding_window");
  if (r.failedAny())
    return failure();
  FailureOr<const json::Array *> layerTypes = readLayerTypes(r, m);
  if (failed(layerTypes))
    return failure();
  if (const json::Array *types = *layerTypes) {
    for (LayerSpec &layer : m.layers) {
      std::optional<StringRef> t = (*types)[layer.index].getAsString();
      if (!t) {
        r.error("layer_types") << "field 'layer_types' must hold strings";
        return failure();
      }
      if (*t == "sliding_attention") {
        if (!window) {
          r.error("layer_types") << "'layer_types' names sliding_attention "
                                              "layers but 'sliding_window' is not set";
          return failure();
        }
        layer.window = window;
      }
    }
    return success();
  }
  if (!window || (use && !*use))
    return success();
  // Qwen2/Qwen3: with use_sliding_window, layers from max_window_layers on slide.
  int64_t first = 0;
  if (m.modelType == "qwen2" || m.modelType == "qwen2_moe" || m.modelType == "qwen3" ||
      m.modelType == "qwen3_moe") {
    if (!use)
      return success(); // Qwen defaults use_sliding_window to false
    first = r.getIntOr("max_window_layers", 0);
  }
  for (LayerSpec &layer : m.layers)
    if (layer.kind == LayerKind::attention && layer.index >= first)
      layer.window = window;
  return r.failedAny() ? failure() : success();
}

LogicalResult readCommon(Reader &r, ModelSpec &m) {
  std::optional<int64_t> hidden = r.getInt("hidden_size");
  // Nemotron-H configs saved by transformers 5 give the layer count only as the length
  // of `layers_block_type`.
  const json::Array *blockTypes =
      r.has("num_hidden_layers") || !r.has("layers_block_type")
          ? nullptr
          : r.get("layers_block_type")->getAsArray();
  std::optional<int64_t> layers = blockTypes ? std::optional<int64_t>(blockTypes->size())
                                             : r.getInt("num_hidden_layers");
  std::optional<int64_t> vocab = r.getInt("vocab_size");
  if (!hidden || !layers || !vocab)
    return failure();
  m.hidden = *hidden;
  m.numLayers = *layers;
  m.vocab = *vocab;
  if (m.numLayers > 100000) {
    r.error("num_hidden_layers") << "field 'num_hidden_layers' = " << m.numLayers
                                 << " is implausibly large";
    return failure();
  }
  m.maxPositions = r.getIntOr("max_position_embeddings", 0);
  m.tied = r.getBool("tie_word_embeddings").value_or(false);
  std::optional<Type> dtype = parseDtype(r, r.has("torch_dtype") ? "torch_dtype" : "dtype",
                                         BFloat16Type::get(r.ctx));
  if (!dtype)
    return failure();
  m.dtype = *dtype;
  m.dtypeBytes = m.dtype.getIntOrFloatBitWidth() / 8;
  m.linearBytes = m.dtypeBytes;
  if (const json::Object *q = r.object.getObject("quantization_config"))
    if (std::optional<StringRef> method = q->getString("quant_method")) {
      if (*method == "fp8")
        m.linearBytes = 1;
      // MXFP4 (gpt-oss): the experts' weights only, 4-bit values with an 8-bit scale a
      // block of 32 (the config's modules_to_not_convert keeps the rest in the dtype).
      if (*method == "mxfp4")
        m.expertBytes = 4.25 / 8;
    }
  return r.failedAny() ? failure() : success();
}

/// `defaultHeadDim` 0: hidden_size / num_attention_heads when no key gives it.
LogicalResult readAttention(Reader &r, ModelSpec &m, ArrayRef<StringRef> headDimKeys,
                            int64_t defaultHeadDim = 0) {
  std::optional<int64_t> heads = r.getInt("num_attention_heads");
  if (!heads)
    return failure();
  m.heads = *heads;
  m.kvHeads = r.getIntOr("num_key_value_heads", m.heads, 1);
  m.headDim = 0;
  for (StringRef key : headDimKeys)
    if (r.has(key)) {
      m.headDim = r.getInt(key).value_or(0);
      break;
    }
  if (r.failedAny())
    return failure();
  if (m.headDim == 0)
    m.headDim = defaultHeadDim;
  if (m.headDim == 0) {
    if (m.hidden % m.heads != 0) {
      r.error("num_attention_heads")
          << "no head_dim given and hidden_size (" << m.hidden
          << ") is not a multiple of num_attention_heads (" << m.heads << ")";
      return failure();
    }
    m.headDim = m.hidden / m.heads;
  }
  if (m.heads % m.kvHeads != 0) {
    r.error("num_key_value_heads") << "num_attention_heads (" << m.heads
                                   << ") must be a multiple of num_key_value_heads ("
                                   << m.kvHeads << ")";
    return failure();
  }
  return success();
}

/// The sparse MoE block of Mixtral, Qwen2-MoE and Qwen3-MoE, as transformers builds it:
/// a router (`gate`, no bias), softmax over the experts, the top `num_experts_per_tok`,
/// and SwiGLU experts.
///   - Mixtral: `num_local_experts` experts of `intermediate_size`, every layer; the
///     chosen weights always renormalized and kept in fp32.
///   - Qwen3-MoE: `num_experts` experts of `moe_intermediate_size`; `norm_topk_prob`
///     renormalizes; the weights are rounded to the model dtype; layer i is sparse
///     unless it is in `mlp_only_layers` or (i + 1) is not a multiple of
///     `decoder_sparse_step` (then a dense MLP of `intermediate_size`).
///   - Qwen2-MoE: as Qwen3-MoE, plus a shared expert of `shared_expert_intermediate_size`
///     scaled by the sigmoid of its gate (`shared_expert_gate`, one output).
LogicalResult readMoe(Reader &r, ModelSpec &m) {
  if (m.modelType == "mixtral") {
    std::optional<int64_t> experts = r.getInt("num_local_experts");
    std::optional<int64_t> topK = r.getInt("num_experts_per_tok");
    if (!experts || !topK)
      return failure();
    m.experts = *experts;
    m.topK = *topK;
    m.moeIntermediate = m.intermediate;
    m.normTopK = true;
    m.roundRouterWeights = false;
    m.moeEvery = 1;
  } else if (m.modelType == "qwen3_moe" || m.modelType == "qwen2_moe" ||
             m.modelType == "qwen3_next") {
    std::optional<int64_t> experts = r.getInt("num_experts");
    std::optional<int64_t> topK = r.getInt("num_experts_per_tok");
    std::optional<int64_t> inter = r.getInt("moe_intermediate_size");
    if (!experts || !topK || !inter)
      return failure();
    m.experts = *experts;
    m.topK = *topK;
    m.moeIntermediate = *inter;
    // Qwen3NextConfig defaults norm_topk_prob to true, the others to false.
    m.normTopK = r.getBool("norm_topk_prob").value_or(m.modelType == "qwen3_next");
    m.roundRouterWeights = true;
    m.moeEvery = r.getIntOr("decoder_sparse_step", 1, 1);
    if (m.modelType == "qwen2_moe" || m.modelType == "qwen3_next") {
      std::optional<int64_t> shared = r.getInt("shared_expert_intermediate_size");
      if (!shared)
        return failure();
      m.sharedIntermediate = *shared;
      m.sharedExperts = 1;
      m.gatedSharedExpert = true;
    }
    if (const json::Value *only = r.get("mlp_only_layers"); only && !only->getAsNull()) {
      const json::Array *layers = only->getAsArray();
      if (!layers) {
        r.error("mlp_only_layers") << "field 'mlp_only_layers' must be a list of layer indices";
        return failure();
      }
      for (const json::Value &v : *layers) {
        std::optional<int64_t> index = v.getAsInteger();
        if (!index || *index < 0 || *index >= m.numLayers) {
          auto diag = r.error("mlp_only_layers") << "field 'mlp_only_layers' holds ";
          if (index)
            diag << *index;
          else
            diag << Reader::describe(v);
          diag << ", not a layer index below num_hidden_layers (" << m.numLayers << ")";
          return failure();
        }
        m.mlpOnlyLayers.insert(*index);
      }
    }
  } else {
    return success();
  }
  if (r.failedAny())
    return failure();
  if (m.topK > m.experts) {
    r.error("num_experts_per_tok") << "field 'num_experts_per_tok' = " << m.topK
                                   << " exceeds the " << m.experts << " experts";
    return failure();
  }
  if (m.experts > KILN_MOE_MAX_EXPERTS || m.topK > KILN_MOE_MAX_TOP_K) {
    r.error(m.experts > KILN_MOE_MAX_EXPERTS ? (m.modelType == "mixtral" ? "num_local_experts"
                                                                           : "num_experts")
                                              : "num_experts_per_tok")
        << m.experts << " experts with " << m.topK << " per token: the MoE kernels take up to "
        << KILN_MOE_MAX_EXPERTS << " experts and " << KILN_MOE_MAX_TOP_K << " per token";
    return failure();
  }
  return success();
}

/// rms_norm_eps (a positive f32: kiln.rms_norm carries it as one) and the SwiGLU MLP the
/// dense and DeepSeek graphs build (hidden_act silu, no MLP biases).
LogicalResult readNormAndSwiglu(Reader &r, ModelSpec &m) {
  if (std::optional<double> eps = r.getNumber("rms_norm_eps", /*required=*/false)) {
    float asFloat = static_cast<float>(*eps);
    if (!(asFloat > 0) || !std::isfinite(asFloat)) {
      r.error("rms_norm_eps") << "field 'rms_norm_eps' = " << Reader::formatNumber(*eps)
                              << " is not a positive f32";
      return failure();
    }
    m.rmsNormEps = *eps;
  }
  if (std::optional<StringRef> act = r.getString("hidden_act", /*required=*/false);
      act && *act != "silu" && *act != "swish") {
    r.error("hidden_act") << "field 'hidden_act' = \"" << *act
                          << "\" is not supported; the MLP is SwiGLU (silu)";
    return failure();
  }
  if (r.getBool("mlp_bias").value_or(false)) {
    r.error("mlp_bias") << "field 'mlp_bias' is true: MLP biases (gate/up/down_proj) are "
                           "not supported";
    return failure();
  }
  return success();
}

/// Llama, Mistral, Qwen2, Qwen3: pre-norm decoder layers of GQA attention with RoPE
/// and a SwiGLU MLP, as transformers builds them:
///   - head_dim: the `head_dim` key, else hidden_size / num_attention_heads (Qwen3:
///     128, Qwen3Config's default);
///   - biases: Qwen2 always has q/k/v biases (never o); Llama and Qwen3 have q/k/v/o
///     biases under `attention_bias`; Mistral has none (`attention_bias` is ignored,
///     as transformers ignores it); `mlp_bias` is not supported;
///   - Qwen3 normalizes q and k per head (self_attn.q_norm / k_norm);
///   - the MLP activation must be SiLU (`hidden_act`), the gate of SwiGLU.
/// Mixtral and Qwen3-MoE: the same layers with a sparse MoE block in place of the MLP
/// (readMoe).
LogicalResult readDense(Reader &r, ModelSpec &m) {
  const bool qwen3 = m.modelType == "qwen3" || m.modelType == "qwen3_moe";
  const bool qwen2 = m.modelType == "qwen2" || m.modelType == "qwen2_moe";
  if (failed(readCommon(r, m)) || failed(readAttention(r, m, {"head_dim"}, qwen3 ? 128 : 0)))
    return failure();
  std::optional<int64_t> inter = r.getInt("intermediate_size");
  if (!inter)
    return failure();
  m.intermediate = *inter;
  // Every dimension is at most 2^31 (Reader::getInt); the q width too.
  if (m.heads * m.headDim > Reader::kMaxConfigInt) {
    r.error("num_attention_heads") << "num_attention_heads x head_dim (" << m.heads << " x "
                                   << m.headDim << ") is implausibly large (more than 2^31)";
    return failure();
  }
  if (m.headDim % 2 != 0) {
    r.error(r.has("head_dim") ? "head_dim" : "num_attention_heads")
        << "head_dim = " << m.headDim << " is odd; RoPE rotates pairs of dimensions";
    return failure();
  }
  if (r.has("quantization_config")) {
    r.error("quantization_config")
        << "field 'quantization_config': quantized checkpoints are not supported for "
           "model_type '"
        << m.modelType << "' (the graph reads unquantized weights of the model dtype)";
    return failure();
  }
  if (!m.dtype.isBF16()) {
    // Imported for planning and reports; the lowering rejects it.
    StringRef key = r.has("torch_dtype") ? "torch_dtype" : "dtype";
    emitWarning(r.keyLoc(key)) << "field '" << key << "' = \""
                               << r.getString(key).value_or("?")
                               << "\": the runtime runs bfloat16 models only; this model can "
                                  "be planned but not compiled to a shared object";
  }
  if (failed(readNormAndSwiglu(r, m)))
    return failure();
  bool attentionBias = r.getBool("attention_bias").value_or(false);
  if (r.failedAny())
    return failure();
  if (qwen2) {
    m.qkvBias = true;
  } else if (m.modelType == "llama" || qwen3) {
    m.qkvBias = attentionBias;
    m.oBias = attentionBias;
  }
  m.qkNorm = qwen3;
  FailureOr<RopeAttr> rope = readRope(r, m);
  if (failed(rope))
    return failure();
  m.rope = *rope;
  if (failed(readMoe(r, m)))
    return failure();
  for (int64_t i = 0; i < m.numLayers; ++i) {
    m.layers.push_back({LayerKind::attention, i, std::nullopt, std::nullopt});
    m.layers.push_back({m.isMoeLayer(i) ? LayerKind::moe : LayerKind::mlp, i, std::nullopt,
                        std::nullopt});
  }
  return readSlidingWindows(r, m);
}

/// yarn_get_mscale of transformers' DeepSeek models.
double yarnMscale(double factor, double mscale) {
  return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

/// What DeepSeek-style routers (DeepSeek, Nemotron-H) need of their top-k and scale.
LogicalResult checkDeepSeekStyleRouting(Reader &r, const ModelSpec &m) {
  if (m.topK < 1 || m.topK > m.experts) {
    r.error("num_experts_per_tok") << "num_experts_per_tok = " << m.topK
                                   << " must be in [1, n_routed_experts = " << m.experts << "]";
    return failure();
  }
  if (!(m.routedScale > 0)) {
    r.error("routed_scaling_factor") << "routed_scaling_factor must be positive";
    return failure();
  }
  return success();
}

/// DeepSeek's routing as transformers runs it. V3: sigmoid scores plus
/// e_score_correction_bias, groups keyed by their two best (n_group / topk_group),
/// norm_topk_prob, routed_scaling_factor. V2: softmax scores, topk_method
/// greedy or group_limited_greedy (groups keyed by their best), routed_scaling_factor,
/// never renormalized (transformers' DeepseekV2Moe ignores norm_topk_prob), a bf16
/// combine. Defaults are transformers' configuration classes'.
LogicalResult readDeepSeekRouting(Reader &r, ModelSpec &m) {
  const bool v3 = m.modelType == "deepseek_v3";
  std::optional<int64_t> topK = r.getInt("num_experts_per_tok");
  if (!topK)
    return failure();
  m.topK = *topK;
  m.sigmoidRouter = v3;
  m.routedScale =
      r.getNumber("routed_scaling_factor", /*required=*/false).value_or(v3 ? 2.5 : 1.0);
  if (v3) {
    m.normTopK = r.getBool("norm_topk_prob").value_or(true);
    m.routerGroups = r.getIntOr("n_group", 8, 1);
    m.routerTopGroups = r.getIntOr("topk_group", 4, 1);
  } else {
    std::optional<StringRef> method = r.getString("topk_method", /*required=*/false);
    if (method && *method != "greedy" && *method != "group_limited_greedy") {
      r.error("topk_method") << "field 'topk_method' = \"" << *method
                             << "\" is not supported (greedy or group_limited_greedy)";
      return failure();
    }
    if (method && *method == "group_limited_greedy") {
      m.groupMaxRouting = true;
      m.routerGroups = r.getIntOr("n_group", 1, 1);
      m.routerTopGroups = r.getIntOr("topk_group", 1, 1);
    }
  }
  if (r.failedAny() || failed(checkDeepSeekStyleRouting(r, m)))
    return failure();
  return success();
}

/// What the whole DeepSeek graph reads beyond the cache plan: the norm epsilon, biases,
/// the rope of the qk_rope_head_dim part (its style and yarn), the softmax scale and the
/// routing.
LogicalResult readDeepSeekGraph(Reader &r, ModelSpec &m) {
  const bool v3 = m.modelType == "deepseek_v3";
  if (failed(readNormAndSwiglu(r, m)))
    return failure();
  // The per-head GEMMs, the FMHA and the latent cache read 16-byte rows.
  for (auto [key, value] : {std::pair<StringRef, int64_t>{"kv_lora_rank", m.kvLoraRank},
                            {"qk_rope_head_dim", m.qkRope},
                            {"qk_nope_head_dim", m.qkNope},
                            {"v_head_dim", m.vHeadDim}}) {
    if (value % 8 != 0) {
      r.error(key) << key << " = " << value
                   << " is not supported: MLA's kernels read rows of multiples of 8 values";
      return failure();
    }
  }
  m.attentionBias = r.getBool("attention_bias").value_or(false);
  // transformers' DeepseekV3Config: rope_interleave defaults to true; V2 always rotates
  // interleaved pairs as complex numbers.
  m.ropeStyle = !v3 ? RopeStyle::complex_pairs
                    : (r.getBool("rope_interleave").value_or(true) ? RopeStyle::deinterleave
                                                                   : RopeStyle::rotate_half);
  if (r.failedAny())
    return failure();
  ModelSpec rotary = m;
  rotary.headDim = m.qkRope;
  FailureOr<RopeAttr> rope = readRope(r, rotary);
  if (failed(rope))
    return failure();
  m.rope = *rope;
  m.mlaSoftmaxScale = 1.0 / std::sqrt(static_cast<double>(m.qkNope + m.qkRope));
  // DeepseekV3Attention: with yarn's mscale_all_dim the scale gains mscale^2 (V2's
  // transformers attention does not).
  if (v3 && m.rope.getType() != RopeType::default_) {
    StringRef key = r.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
    if (const json::Object *params = r.getObject(key)) {
      std::optional<double> all = params->getNumber("mscale_all_dim");
      std::optional<double> factor = params->getNumber("factor");
      if (all && *all != 0 && factor)
        m.mlaSoftmaxScale *= yarnMscale(*factor, *all) * yarnMscale(*factor, *all);
    }
  }
  if (m.experts > 0 && failed(readDeepSeekRouting(r, m)))
    return failure();
  return r.failedAny() ? failure() : success();
}

LogicalResult readDeepSeek(Reader &r, ModelSpec &m) {
  if (failed(readCommon(r, m)))
    return failure();
  std::optional<int64_t> heads = r.getInt("num_attention_heads");
  std::optional<int64_t> rank = r.getInt("kv_lora_rank");
  std::optional<int64_t> rope = r.getInt("qk_rope_head_dim");
  std::optional<int64_t> inter = r.getInt("intermediate_size");
  if (!heads || !rank || !rope || !inter)
    return failure();
  m.heads = *heads;
  m.kvLoraRank = *rank;
  m.qkRope = *rope;
  m.intermediate = *inter;
  m.qkNope = r.getIntOr("qk_nope_head_dim", 128, 0);
  m.vHeadDim = r.getIntOr("v_head_dim", 128, 1);
  m.qLoraRank = r.getIntOr("q_lora_rank", 0, 0);
  m.experts = r.getIntOr("n_routed_experts", 0, 0);
  m.sharedExperts = r.getIntOr("n_shared_experts", 0, 0);
  if (m.experts > 0) {
    std::optional<int64_t> moe = r.getInt("moe_intermediate_size");
    if (!moe)
      return failure();
    m.moeIntermediate = *moe;
  }
  int64_t firstDense = r.getIntOr("first_k_dense_replace", 0, 0);
  int64_t freq = r.getIntOr("moe_layer_freq", 1, 1);
  int64_t mtp = r.getIntOr("num_nextn_predict_layers", 0, 0);
  if (r.failedAny())
    return failure();
  if (mtp > 64) {
    r.error("num_nextn_predict_layers") << "num_nextn_predict_layers = " << mtp
                                        << " is implausibly large";
    return failure();
  }
  m.firstKDense = firstDense;
  m.moeLayerFreq = freq;
  for (int64_t i = 0; i < m.numLayers; ++i) {
    m.layers.push_back({LayerKind::mla, i, std::nullopt, std::nullopt});
    bool moe = m.deepSeekMoeLayer(i);
    m.layers.push_back({moe ? LayerKind::moe : LayerKind::mlp, i, std::nullopt,
                        std::nullopt});
  }
  for (int64_t i = 0; i < mtp; ++i)
    m.layers.push_back({LayerKind::mla, m.numLayers + i, std::nullopt, DraftKind::mtp});
  return readDeepSeekGraph(r, m);
}

/// The causal conv kernels take widths 2 to 4 (Mamba2's and Gated DeltaNet's conv).
LogicalResult checkConvKernel(Reader &r, StringRef key, int64_t width) {
  if (width >= 2 && width <= 4)
    return success();
  r.error(key) << key << " = " << width << " is not supported (the conv kernels take 2 to 4)";
  return failure();
}

/// `layers_block_type` as a hybrid_override_pattern string (M, *, -, E).
FailureOr<std::string> patternFromBlockTypes(Reader &r) {
  const json::Array *types = r.get("layers_block_type")->getAsArray();
  if (!types) {
    r.error("layers_block_type") << "field 'layers_block_type' must be an array of strings";
    return failure();
  }
  std::string pattern;
  for (auto [i, value] : llvm::enumerate(*types)) {
    std::optional<StringRef> name = value.getAsString();
    char code = 0;
    if (name && (*name == "mamba" || *name == "linear_attention"))
      code = 'M';
    else if (name && (*name == "attention" || *name == "full_attention"))
      code = '*';
    else if (name && *name == "mlp")
      code = '-';
    else if (name && *name == "moe")
      code = 'E';
    if (!code) {
      r.error("layers_block_type")
          << "'layers_block_type' has " << Reader::describe(value) << " at layer " << i
          << "; expected \"mamba\"/\"linear_attention\", \"attention\"/\"full_attention\", "
             "\"mlp\" or \"moe\"";
      return failure();
    }
    pattern.push_back(code);
  }
  return pattern;
}

/// What the whole Nemotron-H graph reads beyond the cache plan: norm epsilon, the dt
/// clamp, the MLP activation and the biases.
LogicalResult readNemotronHGraph(Reader &r, ModelSpec &m) {
  if (std::optional<double> eps = r.getNumber("layer_norm_epsilon", /*required=*/false))
    m.rmsNormEps = *eps;
  else
    m.rmsNormEps = 1e-5;
  // transformers' Mamba2 reference path clamps dt below at time_step_min.
  if (std::optional<double> dtMin = r.getNumber("time_step_min", /*required=*/false))
    m.dtMin = *dtMin;
  else
    m.dtMin = 0.001;
  m.convBias = r.getBool("use_conv_bias").value_or(true);
  m.projBias = r.getBool("use_bias").value_or(false);
  m.mlpBias = r.getBool("mlp_bias").value_or(false);
  m.attentionBias = r.getBool("attention_bias").value_or(false);
  if (m.mlpBias && m.experts > 0) {
    r.error("mlp_bias") << "MoE experts with biases (mlp_bias) are not supported";
    return failure();
  }
  std::optional<StringRef> act = r.getString("mlp_hidden_act", /*required=*/false);
  m.relu2Mlp = !act || *act == "relu2";
  if (act && *act != "relu2" && *act != "silu") {
    r.error("mlp_hidden_act") << "field 'mlp_hidden_act' = \"" << *act
                              << "\" is not supported (relu2 or silu)";
    return failure();
  }
  if (!m.silu && llvm::any_of(m.layers, [](const LayerSpec &l) {
        return l.kind == LayerKind::mamba;
      })) {
    r.error("mamba_hidden_act") << "the Mamba2 conv's activation must be silu";
    return failure();
  }
  return r.failedAny() ? failure() : success();
}

/// Nemotron-H's MoE router (DeepSeek-V3's): sigmoid scores plus e_score_correction_bias,
/// group-limited top-k, renormalized weights times routed_scaling_factor; defaults are
/// transformers' NemotronHConfig's.
LogicalResult readNemotronHRouting(Reader &r, ModelSpec &m) {
  std::optional<int64_t> topK = r.getInt("num_experts_per_tok");
  if (!topK)
    return failure();
  m.topK = *topK;
  m.sigmoidRouter = true;
  m.normTopK = r.getBool("norm_topk_prob").value_or(true);
  m.routerGroups = r.getIntOr("n_group", 1, 1);
  m.routerTopGroups = r.getIntOr("topk_group", 1, 1);
  m.routedScale = r.getNumber("routed_scaling_factor", /*required=*/false).value_or(1.0);
  if (r.failedAny() || failed(checkDeepSeekStyleRouting(r, m)))
    return failure();
  // Nemotron 3 Super's latent MoE projects the tokens down before the experts.
  if (r.has("moe_latent_size") && r.getIntOr("moe_latent_size", 0, 0) > 0) {
    r.error("moe_latent_size") << "latent MoE (moe_latent_size) is not supported yet";
    return failure();
  }
  return r.failedAny() ? failure() : success();
}

LogicalResult readNemotronH(Reader &r, ModelSpec &m) {
  if (failed(readCommon(r, m)))
    return failure();
  // transformers 5 saves the pattern as `layers_block_type` (one name a layer) and
  // drops `hybrid_override_pattern`; both spell the same layers.
  std::string spelled;
  std::optional<StringRef> pattern;
  if (!r.has("hybrid_override_pattern") && r.has("layers_block_type")) {
    FailureOr<std::string> fromTypes = patternFromBlockTypes(r);
    if (failed(fromTypes))
      return failure();
    spelled = *fromTypes;
    pattern = StringRef(spelled);
  } else {
    pattern = r.getString("hybrid_override_pattern");
  }
  if (!pattern)
    return failure();
  if (static_cast<int64_t>(pattern->size()) != m.numLayers) {
    r.error("hybrid_override_pattern")
        << "'hybrid_override_pattern' has " << pattern->size()
        << " layers but num_hidden_layers is " << m.numLayers;
    return failure();
  }
  bool anyAttention = false, anyMamba = false, anyMlp = false, anyMoe = false;
  for (auto [i, c] : llvm::enumerate(*pattern)) {
    LayerKind kind;
    switch (c) {
    case 'M': kind = LayerKind::mamba; anyMamba = true; break;
    case '*': kind = LayerKind::attention; anyAttention = true; break;
    case '-': kind = LayerKind::mlp; anyMlp = true; break;
    case 'E': kind = LayerKind::moe; anyMoe = true; break;
    default:
      r.error("hybrid_override_pattern")
          << "'hybrid_override_pattern' has '" << std::string(1, c)
          << "' at layer " << i
          << "; expected M (Mamba2), * (attention), - (MLP) or E (MoE)";
      return failure();
    }
    m.layers.push_back({kind, static_cast<int64_t>(i), std::nullopt, std::nullopt});
  }
  // The attention head size is `attention_head_dim` in Nemotron-H 8B/56B and
  // `head_dim` in Nemotron Nano v2 / Nemotron 3 Nano (SOURCES.md).
  if (anyAttention && failed(readAttention(r, m, {"attention_head_dim", "head_dim"})))
    return failure();
  if (anyMamba) {
    std::optional<int64_t> h = r.getInt("mamba_num_heads");
    std::optional<int64_t> p = r.getInt("mamba_head_dim");
    std::optional<int64_t> n = r.getIntAny({"ssm_state_size", "mamba_state_dim"});
    std::optional<int64_t> g = r.getIntAny({"n_groups", "mamba_num_groups"});
    std::optional<int64_t> k = r.getInt("conv_kernel");
    if (!h || !p || !n || !g || !k)
      return failure();
    m.mHeads = *h;
    m.mHeadDim = *p;
    m.stateSize = *n;
    m.nGroups = *g;
    m.convKernel = *k;
    // Each factor is at most 2^31 (getInt); the products must stay indexable too.
    struct Product {
      StringRef key, what;
      int64_t a, b;
    } products[] = {{"mamba_num_heads", "mamba_num_heads x mamba_head_dim", m.mHeads, m.mHeadDim},
                    {"n_groups", "n_groups x ssm_state_size", m.nGroups, m.stateSize}};
    for (const Product &product : products)
      if (product.a * product.b > Reader::kMaxConfigInt) {
        r.error(product.key) << product.what << " (" << product.a << " x " << product.b
                             << ") is implausibly large (more than 2^31)";
        return failure();
      }
    if (m.convDim() > Reader::kMaxConfigInt) {
      r.error("mamba_num_heads") << "the Mamba conv dimension (mamba_num_heads x "
                                    "mamba_head_dim + 2 x n_groups x ssm_state_size = "
                                 << m.convDim() << ") is implausibly large (more than 2^31)";
      return failure();
    }
    if (m.mHeads % m.nGroups != 0) {
      r.error("mamba_num_heads") << "mamba_num_heads (" << m.mHeads
                                 << ") must be a multiple of n_groups (" << m.nGroups << ")";
      return failure();
    }
    if (failed(checkConvKernel(r, "conv_kernel", m.convKernel)))
      return failure();
    if (std::optional<StringRef> act = r.getString("mamba_hidden_act", false))
      m.silu = *act == "silu" || *act == "swish";
    if (r.has("mamba_ssm_cache_dtype")) {
      std::optional<Type> t = parseDtype(r, "mamba_ssm_cache_dtype", Type());
      if (!t)
        return failure();
      m.stateDtype = *t;
    }
  }
  if (anyMlp) {
    std::optional<int64_t> inter = r.getInt("intermediate_size");
    if (!inter)
      return failure();
    m.intermediate = *inter;
  }
  if (anyMoe) {
    std::optional<int64_t> e = r.getInt("n_routed_experts");
    std::optional<int64_t> mi = r.getInt("moe_intermediate_size");
    if (!e || !mi)
      return failure();
    m.experts = *e;
    m.moeIntermediate = *mi;
    m.sharedExperts = r.getIntOr("n_shared_experts", 0, 0);
    m.sharedIntermediate = r.getIntOr("moe_shared_expert_intermediate_size", 0, 0);
    if (failed(readNemotronHRouting(r, m)))
      return failure();
  }
  if (r.failedAny() || failed(readNemotronHGraph(r, m)))
    return failure();
  return readSlidingWindows(r, m);
}

/// Qwen3-Next: Gated DeltaNet layers with one gated full-attention layer every
/// `full_attention_interval` (or as `layer_types` says), and a MoE block with a shared
/// expert in every layer (`decoder_sparse_step` 1, no `mlp_only_layers`; others are
/// refused rather than planned wrongly).
LogicalResult readPartialRotary(Reader &r, ModelSpec &m);

LogicalResult readQwen3Next(Reader &r, ModelSpec &m) {
  if (failed(readCommon(r, m)) || failed(readAttention(r, m, {"head_dim"})) ||
      failed(readNormAndSwiglu(r, m)))
    return failure();
  m.gatedAttention = true;
  m.qkNorm = true;
  if (r.getBool("attention_bias").value_or(false)) {
    r.error("attention_bias") << "attention biases in Qwen3-Next are not supported";
    return failure();
  }
  m.intermediate = r.getIntOr("intermediate_size", 0, 0);
  for (auto [key, field] : {std::pair<StringRef, int64_t *>{"linear_num_key_heads", &m.gdnKeyHeads},
                             {"linear_num_value_heads", &m.gdnValueHeads},
                             {"linear_key_head_dim", &m.gdnKeyDim},
                             {"linear_value_head_dim", &m.gdnValueDim},
                             {"linear_conv_kernel_dim", &m.gdnConvKernel}})
    *field = r.getInt(key).value_or(0);
  if (r.failedAny())
    return failure();
  if (m.gdnValueHeads % m.gdnKeyHeads != 0) {
    r.error("linear_num_value_heads")
        << "linear_num_value_heads (" << m.gdnValueHeads
        << ") must be a multiple of linear_num_key_heads (" << m.gdnKeyHeads << ")";
    return failure();
  }
  if (failed(checkConvKernel(r, "linear_conv_kernel_dim", m.gdnConvKernel)))
    return failure();
  if (m.gdnKeyHeads * m.gdnKeyDim > Reader::kMaxConfigInt ||
      m.gdnValueHeads * m.gdnValueDim > Reader::kMaxConfigInt ||
      m.gdnConvDim() > Reader::kMaxConfigInt) {
    r.error("linear_num_value_heads")
        << "the Gated DeltaNet conv dimension (2 x linear_num_key_heads x "
           "linear_key_head_dim + linear_num_value_heads x linear_value_head_dim = "
        << m.gdnConvDim() << ") is implausibly large (more than 2^31)";
    return failure();
  }
  FailureOr<const json::Array *> layerTypes = readLayerTypes(r, m);
  if (failed(layerTypes))
    return failure();
  if (const json::Array *types = *layerTypes) {
    for (auto [i, type] : llvm::enumerate(*types)) {
      std::optional<StringRef> name = type.getAsString();
      if (!name || (*name != "linear_attention" && *name != "full_attention")) {
        r.error("layer_types") << "'layer_types' entry " << i
                               << " must be \"linear_attention\" or \"full_attention\"";
        return failure();
      }
      m.layers.push_back({*name == "full_attention" ? LayerKind::attention : LayerKind::gdn,
                          static_cast<int64_t>(i), std::nullopt, std::nullopt});
    }
  } else {
    int64_t interval = r.getIntOr("full_attention_interval", 4, 1);
    if (r.failedAny())
      return failure();
    for (int64_t i = 0; i < m.numLayers; ++i)
      m.layers.push_back({(i + 1) % interval == 0 ? LayerKind::attention : LayerKind::gdn, i,
                          std::nullopt, std::nullopt});
  }
  if (failed(readPartialRotary(r, m)))
    return failure();
  FailureOr<RopeAttr> rope = readRope(r, m);
  if (failed(rope))
    return failure();
  m.rope = *rope;
  if (failed(readMoe(r, m)))
    return failure();
  if (m.intermediate == 0 &&
      llvm::any_of(m.layers, [&](const LayerSpec &layer) { return !m.isMoeLayer(layer.index); })) {
    r.missing("intermediate_size");
    return failure();
  }
  if (std::optional<bool> slide = r.getBool("use_sliding_window"); slide && *slide) {
    r.error("use_sliding_window") << "sliding-window attention in Qwen3-Next is not supported";
    return failure();
  }
  return r.failedAny() ? failure() : success();
}

/// Qwen3-Next rotates `int(head_dim * partial_rotary_factor)` values of each head (the
/// factor from `rope_parameters`, else the top level; Qwen3NextConfig's default 0.25).
LogicalResult readPartialRotary(Reader &r, ModelSpec &m) {
  const json::Object *params = r.getObject("rope_parameters");
  std::optional<double> factor;
  if (params && params->get("partial_rotary_factor")) {
    Reader p = r.nested("rope_parameters", *params, "RoPE");
    factor = p.getNumber("partial_rotary_factor");
    if (!factor)
      return failure();
  } else {
    factor = r.getNumber("partial_rotary_factor", /*required=*/false);
    if (r.failedAny())
      return failure();
  }
  const double value = factor.value_or(0.25);
  const int64_t dim = static_cast<int64_t>(static_cast<double>(m.headDim) * value);
  if (!(value > 0 && value <= 1) || dim < 2 || dim % 2 != 0) {
    r.error(params && params->get("partial_rotary_factor") ? "rope_parameters"
                                                           : "partial_rotary_factor")
        << "partial_rotary_factor " << Reader::formatNumber(value) << " of head_dim " << m.headDim
        << " rotates " << dim
        << " values; RoPE needs an even count of at least 2, at most head_dim";
    return failure();
  }
  m.rotaryDim = dim == m.headDim ? 0 : dim;
  return success();
}

/// gpt-oss: every layer is attention (a sliding window of `sliding_window` tokens or
/// full, as `layer_types` says; q/k/v/o biases and per-head sink logits) followed by a
/// MoE block of `num_local_experts` SwiGLU experts of `intermediate_size` with biases and
/// the clamp `swiglu_limit`, `num_experts_per_tok` a token, routed by a linear router
/// with a bias (softmax over the chosen logits). The whole graph is built for bf16
/// checkpoints; the MXFP4 release plans as a cache skeleton.
LogicalResult readGptOss(Reader &r, ModelSpec &m) {
  if (failed(readCommon(r, m)) || failed(readAttention(r, m, {"head_dim"})))
    return failure();
  m.qkvBias = m.oBias = r.getBool("attention_bias").value_or(true);
  m.rmsNormEps = 1e-5; // GptOssConfig's default; the published configs leave it out
  if (failed(readNormAndSwiglu(r, m)))
    return failure();
  FailureOr<RopeAttr> rope = readRope(r, m);
  if (failed(rope))
    return failure();
  m.rope = *rope;
  std::optional<int64_t> experts = r.getInt("num_local_experts");
  std::optional<int64_t> topK = r.getInt("num_experts_per_tok");
  std::optional<int64_t> inter = r.getInt("intermediate_size");
  if (!experts || !topK || !inter)
    return failure();
  if (*topK > *experts) {
    r.error("num_experts_per_tok") << "num_experts_per_tok (" << *topK
                                   << ") exceeds num_local_experts (" << *experts << ")";
    return failure();
  }
  m.experts = *experts;
  m.topK = *topK;
  m.moeIntermediate = *inter;
  if (r.has("swiglu_limit")) {
    std::optional<double> limit = r.getNumber("swiglu_limit", /*required=*/true, /*positive=*/true);
    if (!limit)
      return failure();
    m.swigluLimit = *limit;
  }
  // transformers' GptOssTopKRouter: softmax over the top_k logits (the chosen scores
  // renormalized), in bf16.
  m.normTopK = m.roundRouterWeights = true;
  for (int64_t i = 0; i < m.numLayers; ++i)
    m.layers.push_back({LayerKind::attention, i, std::nullopt, std::nullopt});
  if (r.failedAny() || failed(readSlidingWindows(r, m)))
    return failure();
  return success();
}

uint64_t estimateWeightBytes(const ModelSpec &m) {
  // Parameters in double: sums stay exact below 2^53 and never overflow.
  double embed = double(m.vocab) * m.hidden * (m.tied ? 1 : 2);
  double norms = m.hidden; // final norm
  double linear = 0, experts = 0; // experts: weights that may be stored otherwise (MXFP4)
  bool nemotron = m.modelType == "nemotron_h";
  for (const LayerSpec &layer : m.layers) {
    if (layer.draft)
      continue;
    norms += m.hidden;
    switch (layer.kind) {
    case LayerKind::attention:
      // q (twice as wide when it carries the output gate), o, k, v.
      linear += double(m.hidden) * m.heads * m.headDim * (m.gatedAttention ? 3 : 2) +
                2.0 * m.hidden * m.kvHeads * m.headDim;
      if (m.qkNorm)
        norms += 2.0 * m.headDim;
      break;
    case LayerKind::gdn: {
      // in_proj_qkvz (q, k, v and the output gate z), in_proj_ba (beta, the decay
      // input a), out_proj; the conv weights, A_log, dt_bias and the gated norm.
      double keys = double(m.gdnKeyHeads) * m.gdnKeyDim;
      double values = double(m.gdnValueHeads) * m.gdnValueDim;
      linear += double(m.hidden) * (2 * keys + 2 * values + 2.0 * m.gdnValueHeads) +
                values * m.hidden;
      norms += double(m.gdnConvDim()) * m.gdnConvKernel + 2.0 * m.gdnValueHeads +
               m.gdnValueDim;
      break;
    }
    case LayerKind::mla: {
      double qk = double(m.qkNope + m.qkRope);
      linear += m.qLoraRank ? double(m.hidden) * m.qLoraRank + double(m.qLoraRank) * m.heads * qk
                            : double(m.hidden) * m.heads * qk;
      linear += double(m.hidden) * (m.kvLoraRank + m.qkRope) +
                double(m.kvLoraRank) * m.heads * (m.qkNope + m.vHeadDim) +
                double(m.heads) * m.vHeadDim * m.hidden;
      norms += m.kvLoraRank + m.qLoraRank; // q/kv latent norms
      break;
    }
    case LayerKind::mamba: {
      double inner = double(m.mHeads) * m.mHeadDim;
      linear += double(m.hidden) * (2 * inner + 2.0 * m.nGroups * m.stateSize + m.mHeads) +
                inner * m.hidden;
      norms += double(m.convDim()) * (m.convKernel + 1) + 3.0 * m.mHeads + inner;
      break;
    }
    case LayerKind::mlp:
      linear += (nemotron ? 2.0 : 3.0) * m.hidden * m.intermediate;
      break;
    case LayerKind::moe: {
      double perExpert = (nemotron ? 2.0 : 3.0) * m.hidden * m.moeIntermediate;
      double shared = m.sharedIntermediate
                          ? (nemotron ? 2.0 : 3.0) * m.hidden * m.sharedIntermediate
                          : perExpert;
      linear += m.experts * perExpert + m.sharedExperts * shared +
                double(m.hidden) * (m.experts + (m.gatedSharedExpert ? 1 : 0));
      break;
    }
    }
    if (m.modelType == "qwen3_next") {
      // The layer's sparse MoE block (routed experts, the shared expert and its sigmoid
      // gate, the router) or dense MLP; the post-attention norm.
      double perExpert = 3.0 * m.hidden * m.moeIntermediate;
      linear += m.isMoeLayer(layer.index)
                    ? m.experts * perExpert + 3.0 * m.hidden * m.sharedIntermediate +
                          double(m.hidden) * (m.experts + 1)
                    : 3.0 * m.hidden * m.intermediate;
      norms += m.hidden;
    }
    if (m.modelType == "gpt_oss") {
      // The attention's biases and sinks, the post-attention norm, the router with its
      // bias, and the experts (gate_up and down, MXFP4 when quantized) with their biases.
      norms += double(m.heads) * m.headDim + 2.0 * m.kvHeads * m.headDim + m.hidden +
               m.heads + m.hidden + double(m.hidden) * m.experts + m.experts +
               double(m.experts) * (2 * m.moeIntermediate + m.hidden);
      experts += 3.0 * m.experts * m.hidden * m.moeIntermediate;
    }
  }
  double bytes = (embed + norms) * m.dtypeBytes + linear * m.linearBytes +
                 experts * (m.expertBytes > 0 ? m.expertBytes : m.linearBytes);
  // Absurd configs must not overflow the conversion.
  return bytes >= 9.0e18 ? 9000000000000000000ull : static_cast<uint64_t>(bytes);
}

std::string defaultName(StringRef file) {
  StringRef stem = llvm::sys::path::filename(file);
  stem.consume_back(".json");
  stem.consume_back(".config");
  return stem.str();
}

/// Emits the cache skeleton of a model without a whole-graph builder (DeepSeek,
/// Nemotron-H): one `@forward` holding each layer's cached op, fed by function
/// arguments, with no graph between them.
OwningOpRef<ModuleOp> buildSkeleton(const ModelSpec &m, StringRef file, MLIRContext *ctx,
                                    const ImportOptions &options) {
  Location fileLoc = FileLineColLoc::get(ctx, file, 1, 1);
  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  OpBuilder b(ctx);
  setModuleConfig(*module, m, options, estimateWeightBytes(m));

  b.setInsertionPointToEnd(module->getBody());
  auto func = func::FuncOp::create(b, fileLoc, "forward", b.getFunctionType({}, {}));
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToEnd(entry);

  // Inputs are block arguments, one per distinct type.
  llvm::DenseMap<Type, Value> args;
  auto arg = [&](ArrayRef<int64_t> dims) -> Value {
    SmallVector<int64_t> shape = {ShapedType::kDynamic};
    shape.append(dims.begin(), dims.end());
    Type type = RankedTensorType::get(shape, m.dtype);
    Value &v = args[type];
    if (!v)
      v = entry->addArgument(type, fileLoc);
    return v;
  };
  auto tensor = [&](ArrayRef<int64_t> dims) -> Type {
    SmallVector<int64_t> shape = {ShapedType::kDynamic};
    shape.append(dims.begin(), dims.end());
    return RankedTensorType::get(shape, m.dtype);
  };
  auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
  SmallVector<Value> results;
  for (const LayerSpec &layer : m.layers) {
    std::string prefix = layer.draft ? (layer.draft == DraftKind::mtp ? "mtp" : "eagle3")
                                     : "model";
    Location loc = NameLoc::get(
        b.getStringAttr(prefix + ".layers." + std::to_string(layer.index)), fileLoc);
    DraftKindAttr draft = layer.draft ? DraftKindAttr::get(ctx, *layer.draft) : nullptr;
    switch (layer.kind) {
    case LayerKind::attention: {
      Value q = arg({m.heads, m.headDim}), kv = arg({m.kvHeads, m.headDim});
      auto op = AttentionOp::create(b, loc, tensor({m.heads, m.headDim}), q, kv, kv, Value(),
                                    i64(layer.index), i64(m.heads), i64(m.kvHeads), i64(m.headDim),
                                    layer.window ? i64(*layer.window) : IntegerAttr(), draft);
      results.push_back(op.getOut());
      break;
    }
    case LayerKind::mla: {
      int64_t width = m.kvLoraRank + m.qkRope;
      auto op = MlaAttentionOp::create(
          b, loc, tensor({m.heads, m.kvLoraRank}), arg({m.heads, width}), arg({width}),
          /*k_pe=*/Value(), /*positions=*/Value(), /*kv_b=*/Value(), /*scratch=*/Value(),
          i64(layer.index), i64(m.heads), i64(m.kvLoraRank), i64(m.qkRope), draft,
          IntegerAttr(), IntegerAttr(), RopeAttr(), RopeStyleAttr(), FloatAttr());
      results.push_back(op.getOut());
      break;
    }
    case LayerKind::mamba: {
      Value conv = arg({m.convDim()});
      auto convOp = CausalConvOp::create(b, loc, tensor({m.convDim()}), conv, Value(),
                                         Value(), i64(layer.index), i64(m.convDim()),
                                         i64(m.convKernel),
                                         m.silu ? b.getUnitAttr() : UnitAttr(), draft);
      Value x = arg({m.mHeads, m.mHeadDim});
      Value bc = arg({m.nGroups, m.stateSize});
      auto ssmOp = SsmOp::create(b, loc, tensor({m.mHeads, m.mHeadDim}), x, arg({m.mHeads}),
                                 bc, bc, /*z=*/x, Value(), Value(), Value(),
                                 i64(layer.index), i64(m.mHeads), i64(m.mHeadDim),
                                 i64(m.stateSize), i64(m.nGroups), draft, FloatAttr(),
                                 FloatAttr());
      results.push_back(convOp.getOut());
      results.push_back(ssmOp.getOut());
      break;
    }
    case LayerKind::gdn: {
      int64_t convDim = m.gdnConvDim();
      auto convOp = CausalConvOp::create(b, loc, tensor({convDim}), arg({convDim}), Value(),
                                         Value(), i64(layer.index), i64(convDim),
                                         i64(m.gdnConvKernel), b.getUnitAttr(), draft);
      Value qk = arg({m.gdnKeyHeads, m.gdnKeyDim});
      Value v = arg({m.gdnValueHeads, m.gdnValueDim});
      Value gb = arg({m.gdnValueHeads});
      auto gdnOp = GatedDeltaNetOp::create(
          b, loc, tensor({m.gdnValueHeads, m.gdnValueDim}), qk, qk, v, gb, gb,
          /*a_log=*/Value(), /*dt_bias=*/Value(), /*scratch=*/Value(), i64(layer.index),
          i64(m.gdnKeyHeads), i64(m.gdnValueHeads), i64(m.gdnKeyDim), i64(m.gdnValueDim), draft);
      results.push_back(convOp.getOut());
      results.push_back(gdnOp.getOut());
      break;
    }
    case LayerKind::mlp:
    case LayerKind::moe:
      break;
    }
  }
  func::ReturnOp::create(b, fileLoc, results);
  func.setFunctionType(b.getFunctionType(entry->getArgumentTypes(), ValueRange(results).getTypes()));
  if (failed(mlir::verify(*module)))
    return nullptr;
  return module;
}

} // namespace

void kiln::import_detail::setModuleConfig(ModuleOp module, const ModelSpec &m,
                                          const ImportOptions &options, uint64_t weightBytes,
                                          unsigned tpRanks) {
  MLIRContext *ctx = module.getContext();
  unsigned maxSeq = options.maxSeqLen;
  if (m.maxPositions > 0 && m.maxPositions < maxSeq)
    maxSeq = static_cast<unsigned>(m.maxPositions);
  module->setAttr(KilnDialect::kModelAttrName,
                  ModelAttr::get(ctx, m.name, m.modelType, static_cast<unsigned>(m.numLayers),
                                 m.dtype, weightBytes, tpRanks));
  module->setAttr(KilnDialect::kRuntimeAttrName,
                  RuntimeAttr::get(ctx, options.maxBatch, maxSeq, options.pageSize, m.dtype,
                                   tpRanks,
                                   m.stateDtype, /*max_step_tokens=*/0,
                                   /*cuda_graphs=*/kDefaultCudaGraphs,
                                   /*cuda_graph_batches=*/DenseI32ArrayAttr(),
                                   /*kv_ring_window=*/0));
}

/// llvm::json::parse recurses once per nesting level, so a hostile file of 50,000 '['
/// would exhaust the stack. A config is a few levels deep: find the first position
/// nested deeper than `limit` (outside strings) before parsing.
std::optional<std::pair<unsigned, unsigned>> kiln::findExcessiveJsonNesting(StringRef text,
                                                                          unsigned limit) {
  unsigned depth = 0, line = 1, col = 0;
  bool inString = false, escaped = false;
  for (char c : text) {
    ++col;
    if (c == '\n') {
      ++line;
      col = 0;
    }
    if (inString) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        inString = false;
      continue;
    }
    if (c == '"')
      inString = true;
    else if (c == '[' || c == '{') {
      if (++depth > limit)
        return std::make_pair(line, col);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

namespace {

/// Parses config.json text into `m` (with the Eagle3 head layer when asked); every
/// error is a diagnostic.
LogicalResult readModelSpec(StringRef text, StringRef file, MLIRContext *ctx,
                            const ImportOptions &options, ModelSpec &m) {
  Location fileLoc = FileLineColLoc::get(ctx, file, 1, 1);
  if (auto deep = findExcessiveJsonNesting(text, kMaxJsonNesting)) {
    emitError(FileLineColLoc::get(ctx, file, deep->first, deep->second))
        << "malformed JSON: nested deeper than " << kMaxJsonNesting
        << " levels (a config.json is a few levels deep)";
    return failure();
  }
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed) {
    // json::ParseError logs as "[line:col, byte=N]: message".
    std::string message = llvm::toString(parsed.takeError());
    unsigned line = 1, col = 1, byte = 0;
    char rest[256] = {0};
    Location loc = fileLoc;
    if (std::sscanf(message.c_str(), "[%u:%u, byte=%u]: %255[^\n]", &line, &col, &byte,
                    rest) == 4) {
      loc = FileLineColLoc::get(ctx, file, line, col);
      message = rest;
    }
    emitError(loc) << "malformed JSON: " << message;
    return failure();
  }
  const json::Object *root = parsed->getAsObject();
  if (!root) {
    emitError(fileLoc) << "a config.json must hold a JSON object at top level";
    return failure();
  }
  Reader r(text, file, ctx, *root);
  r.requiredFor = "every config";
  std::optional<StringRef> modelType = r.getString("model_type");
  if (!modelType)
    return failure();
  r.requiredFor = ("model_type '" + *modelType + "'").str();
  m.modelType = modelType->str();
  m.name = options.modelName.empty() ? defaultName(file) : options.modelName;
  LogicalResult read = failure();
  if (*modelType == "llama" || *modelType == "mistral" || *modelType == "qwen2" ||
      *modelType == "qwen3" || *modelType == "mixtral" || *modelType == "qwen2_moe" ||
      *modelType == "qwen3_moe") {
    read = readDense(r, m);
  } else if (*modelType == "deepseek_v2" || *modelType == "deepseek_v3") {
    read = readDeepSeek(r, m);
  } else if (*modelType == "nemotron_h") {
    read = readNemotronH(r, m);
  } else if (*modelType == "qwen3_next") {
    read = readQwen3Next(r, m);
  } else if (*modelType == "gpt_oss") {
    read = readGptOss(r, m);
  } else {
    r.error("model_type") << "unsupported model_type '" << *modelType
                          << "'; supported: " << llvm::join(supportedModelTypes(), ", ");
    return failure();
  }
  if (failed(read) || r.failedAny())
    return failure();
  if (options.eagle3Head) {
    bool mla = m.modelType == "deepseek_v2" || m.modelType == "deepseek_v3";
    if (!mla && m.heads == 0) {
      emitError(fileLoc) << "an Eagle3 head needs the target's attention shapes, "
                                    "but the model has no attention layer";
      return failure();
    }
    int64_t index = m.numLayers;
    for (const LayerSpec &layer : m.layers)
      index = std::max(index, layer.index + 1);
    m.layers.push_back({mla ? LayerKind::mla : LayerKind::attention, index, std::nullopt,
                        DraftKind::eagle3});
  }
  return success();
}

} // namespace

std::optional<ConfigEstimate> kiln::estimateHFConfig(StringRef text, StringRef file,
                                                     MLIRContext *ctx) {
  ModelSpec m;
  if (failed(readModelSpec(text, file, ctx, ImportOptions{}, m)))
    return std::nullopt;
  return ConfigEstimate{m.numLayers, estimateWeightBytes(m)};
}

OwningOpRef<ModuleOp> kiln::importHFConfig(StringRef text, StringRef file,
                                          MLIRContext *ctx, const ImportOptions &options) {
  // scf: the rolled import's layer loop (a context without it would build a null op).
  ctx->loadDialect<KilnDialect, func::FuncDialect, arith::ArithDialect, scf::SCFDialect,
                   tensor::TensorDialect>();
  ModelSpec m;
  if (failed(readModelSpec(text, file, ctx, options, m)))
    return nullptr;
  if (m.hasWholeGraph())
    return buildDenseDecoder(m, file, ctx, options);
  return buildSkeleton(m, file, ctx, options);
}

OwningOpRef<ModuleOp> kiln::importHFConfigFile(StringRef path, MLIRContext *ctx,
                                              const ImportOptions &options) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer) {
    emitError(UnknownLoc::get(ctx)) << "cannot read '" << path
                                    << "': " << buffer.getError().message();
    return nullptr;
  }
  return importHFConfig((*buffer)->getBuffer(), path, ctx, options);
}
