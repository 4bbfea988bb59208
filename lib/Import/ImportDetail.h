//===- ImportDetail.h - internals shared by the importer's files -------===//
//
// The config reader (`Reader`: typed field access with diagnostics at the field's
// position), what is read from a config (`ModelSpec`), and the stages that the
// importer's files implement: RoPE parameters (Rope.cpp), the whole decoder graph
// of the dense families (DenseDecoder.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_LIB_IMPORT_IMPORTDETAIL_H
#define KILN_LIB_IMPORT_IMPORTDETAIL_H

#include "kiln/Dialect/Kiln/Kiln.h"
#include "kiln/Import/HFConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <set>
#include <string>

namespace kiln {
namespace import_detail {

/// Reads fields of one JSON object of a config (the top level, or a nested object
/// such as `rope_scaling`), reporting errors as MLIR diagnostics at the field's
/// position in the text. Fields of a nested object are named `parent.field` in
/// messages. A failure anywhere marks the whole read as failed.
class Reader {
public:
  Reader(llvm::StringRef text, llvm::StringRef file, mlir::MLIRContext *ctx,
         const llvm::json::Object &object);

  /// A reader of the nested object `object` found at field `key` of this one;
  /// `requiredFor` ends "missing field" messages ("rope_type 'yarn'").
  Reader nested(llvm::StringRef key, const llvm::json::Object &object,
                llvm::StringRef requiredFor);

  mlir::Location fileLoc(unsigned line = 1, unsigned col = 1) const;
  /// Position of `"key"` in the text (first occurrence after this object's own key),
  /// else the object's position.
  mlir::Location keyLoc(llvm::StringRef key) const;
  /// The location of byte `pos` of the text.
  mlir::Location locAt(size_t pos) const;
  /// The name of `key` in messages: `key`, or `parent.key` in a nested object.
  std::string fieldName(llvm::StringRef key) const { return prefix + key.str(); }

  bool failedAny() const { return failed; }
  void fail();

  /// Present and not null.
  bool has(llvm::StringRef key) const;
  const llvm::json::Value *get(llvm::StringRef key) const { return object.get(key); }

  /// An error at `key`'s position; marks the read as failed.
  mlir::InFlightDiagnostic error(llvm::StringRef key);
  /// "missing field 'key' (required for ...)".
  void missing(llvm::StringRef key);

  /// Integers are sizes, counts or positions: above kMaxConfigInt (2^31, what the
  /// kernels index) is an error, so that no product of two of them overflows int64.
  static constexpr int64_t kMaxConfigInt = int64_t(1) << 31;
  std::optional<int64_t> getInt(llvm::StringRef key, bool required = true,
                                int64_t minValue = 1);
  int64_t getIntOr(llvm::StringRef key, int64_t fallback, int64_t minValue = 0);
  /// The first of `keys` that is present (for keys spelled differently by model).
  std::optional<int64_t> getIntAny(llvm::ArrayRef<llvm::StringRef> keys,
                                   bool required = true);
  /// A number (integer or not). With `positive`, it must be > 0 and finite.
  std::optional<double> getNumber(llvm::StringRef key, bool required = true,
                                  bool positive = true);
  std::optional<llvm::StringRef> getString(llvm::StringRef key, bool required = true);
  std::optional<bool> getBool(llvm::StringRef key);
  /// A nested object; null or absent gives nullptr without an error.
  const llvm::json::Object *getObject(llvm::StringRef key);

  static llvm::StringRef describe(const llvm::json::Value &v);
  /// A number as a config would spell it ("0.5", "8", "1e-06").
  static std::string formatNumber(double value);

  llvm::StringRef text, file;
  mlir::MLIRContext *ctx;
  const llvm::json::Object &object;
  /// "model_type 'llama'" at the top level: what "missing field" messages name.
  std::string requiredFor;

private:
  Reader *parent = nullptr;
  std::string prefix;       // "rope_scaling." in a nested object
  size_t searchFrom = 0;    // where this object's keys start in the text
  std::optional<size_t> ownPos; // position of this object's key
  bool failed = false;
};

/// `gdn`: a Gated DeltaNet layer (Qwen3-Next linear attention) with its causal conv.
enum class LayerKind { attention, mla, mamba, mlp, moe, gdn };

struct LayerSpec {
  LayerKind kind;
  int64_t index;
  std::optional<int64_t> window;
  std::optional<DraftKind> draft;
};

/// Everything the IR and the weight estimate need, read from the config.
struct ModelSpec {
  std::string name, modelType;
  mlir::Type dtype;
  mlir::Type stateDtype; // null: runtime default (f32)
  int64_t hidden = 0, vocab = 0, numLayers = 0, maxPositions = 0;
  bool tied = false;
  unsigned linearBytes = 2, dtypeBytes = 2;
  double expertBytes = 0; // bytes a routed expert's weight when stored otherwise (MXFP4)
  bool mxfp4Experts() const { return expertBytes > 0; }
  // attention
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  // MLA
  int64_t kvLoraRank = 0, qkRope = 0, qkNope = 0, vHeadDim = 0, qLoraRank = 0;
  // Mamba2
  int64_t mHeads = 0, mHeadDim = 0, stateSize = 0, nGroups = 0, convKernel = 0;
  bool silu = true;
  // Gated DeltaNet (Qwen3-Next)
  int64_t gdnKeyHeads = 0, gdnValueHeads = 0, gdnKeyDim = 0, gdnValueDim = 0,
          gdnConvKernel = 0;
  bool gatedAttention = false; // Qwen3-Next: q_proj also yields a per-head output gate
  int64_t rotaryDim = 0;       // RoPE on the first rotaryDim values of a head (0: all)
  // MLP / MoE
  int64_t intermediate = 0, moeIntermediate = 0, experts = 0, sharedExperts = 0,
          sharedIntermediate = 0;
  // The MoE routing of the whole-graph families (mixtral, qwen3_moe): experts per token,
  // renormalized and/or rounded weights, which layers are sparse.
  int64_t topK = 0, moeEvery = 1;
  bool normTopK = false, roundRouterWeights = false;
  bool gatedSharedExpert = false; // Qwen2-MoE: shared expert x sigmoid(shared_expert_gate)
  // DeepSeek-style routing (nemotron_h, deepseek_v3): an fp32 router, sigmoid scores
  // with e_score_correction_bias, group-limited top-k and a routed scale.
  bool sigmoidRouter = false;
  int64_t routerGroups = 1, routerTopGroups = 1;
  double routedScale = 1.0;
  bool groupMaxRouting = false; // DeepSeek-V2's group_limited_greedy: a group's best score
  // DeepSeek MLA: how the rope part rotates, and the scores' scale (yarn's mscale^2).
  RopeStyle ropeStyle = RopeStyle::rotate_half;
  double mlaSoftmaxScale = 0;
  // DeepSeek's dense first layers and MoE frequency (an MTP module's layer is MoE or
  // dense by the same rule as the target's).
  int64_t firstKDense = 0, moeLayerFreq = 1;
  bool deepSeekMoeLayer(int64_t i) const {
    return experts > 0 && i >= firstKDense && i % moeLayerFreq == 0;
  }
  std::set<int64_t> mlpOnlyLayers;
  bool isMoeLayer(int64_t i) const {
    return experts > 0 && topK > 0 && !mlpOnlyLayers.count(i) && (i + 1) % moeEvery == 0;
  }
  // Nemotron-H: the dt clamp of transformers' Mamba2 reference path (time_step_min), the
  // non-gated MLP's activation, and which projections carry biases.
  double dtMin = 0;
  bool relu2Mlp = false, convBias = true, projBias = false, mlpBias = false,
       attentionBias = false;
  // Dense decoder graph (llama, mistral, qwen2, qwen3)
  double rmsNormEps = 1e-6;
  bool qkvBias = false; // q/k/v_proj have a bias
  bool oBias = false;   // o_proj has a bias
  bool qkNorm = false;  // Qwen3's per-head RMSNorm of q and k
  // gpt-oss: attention sinks, biased experts with the clamped SwiGLU (its limit; alpha is
  // transformers' constant 1.702).
  double swigluLimit = 7.0;
  RopeAttr rope;
  llvm::SmallVector<LayerSpec> layers;

  int64_t convDim() const { return mHeads * mHeadDim + 2 * nGroups * stateSize; }
  /// The Gated DeltaNet conv runs over the q, k and v projections together.
  int64_t gdnConvDim() const {
    return 2 * gdnKeyHeads * gdnKeyDim + gdnValueHeads * gdnValueDim;
  }
  /// The dense families get the whole decoder graph; the others a cache skeleton.
  bool isDense() const {
    return modelType == "llama" || modelType == "mistral" || modelType == "qwen2" ||
           modelType == "qwen3" || modelType == "mixtral" || modelType == "qwen2_moe" ||
           modelType == "qwen3_moe";
  }
  bool isNemotronH() const { return modelType == "nemotron_h"; }
  bool isQwen3Next() const { return modelType == "qwen3_next"; }
  bool isDeepSeek() const { return modelType == "deepseek_v2" || modelType == "deepseek_v3"; }
  bool isGptOss() const { return modelType == "gpt_oss"; }
  /// Whether the importer builds the whole graph: the dense families, Nemotron-H, Qwen3-Next,
  /// unquantized DeepSeek checkpoints (an FP8 one, DeepSeek-V3's as published, is planned
  /// as a cache skeleton: the runtime has no block-scaled FP8 GEMMs yet) and gpt-oss (its
  /// MXFP4 experts dequantized to bf16 when loading).
  bool hasWholeGraph() const {
    return isDense() || isNemotronH() || isQwen3Next() ||
           (isDeepSeek() && linearBytes == dtypeBytes) || isGptOss();
  }
};

/// Reads the RoPE parameters (`rope_theta` + legacy `rope_scaling`, or
/// transformers-5's `rope_parameters`) for a model whose head_dim is known.
mlir::FailureOr<RopeAttr> readRope(Reader &r, const ModelSpec &m);

/// Module attributes every import sets: `kiln.model` and a default `kiln.runtime`;
/// `tpRanks` > 1 for one rank's graph of that many tensor-parallel ranks.
void setModuleConfig(mlir::ModuleOp module, const ModelSpec &m, const ImportOptions &options,
                     uint64_t weightBytes, unsigned tpRanks = 1);

/// The whole decoder graph of a dense model or of Nemotron-H: `kiln.weight`s and
/// `@forward` (plus `@eagle3_head` when asked for). Null (with a diagnostic) on failure.
mlir::OwningOpRef<mlir::ModuleOp> buildDenseDecoder(const ModelSpec &m, llvm::StringRef file,
                                                    mlir::MLIRContext *ctx,
                                                    const ImportOptions &options);

} // namespace import_detail
} // namespace kiln

#endif
