//===- DenseDecoder.cpp - the whole decoder graph of dense models ------===//
//
// Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen2-MoE, Qwen3-MoE and Nemotron-H as
// transformers runs them, one `@forward` from the token ids to the logits:
//
//   kiln.weight @"model.embed_tokens.weight" : tensor<V x H>   (every tensor, by its
//   ...                                                        Hugging Face name, in
//                                                              the order of first use)
//   func.func @forward(%ids {token_ids}, %pos {positions}, %rows {logit_rows})
//       -> logits [rows, V] attributes {kiln.entry}
//     h = embedding(ids, embed_tokens)
//     per layer i (model.layers.i):
//       x = rms_norm(h, input_layernorm)
//       q = expand(linear(x, q_proj[, bias]))   [T, heads, D]   (qwen3: rms_norm(q, q_norm))
//       k = expand(linear(x, k_proj[, bias]))   [T, kv_heads, D] (qwen3: rms_norm(k, k_norm))
//       v = expand(linear(x, v_proj[, bias]))   [T, kv_heads, D]
//       q, k = rope(q, pos), rope(k, pos)
//       a = kiln.attention layer i q, k, v
//       h = add(h, linear(collapse(a), o_proj[, bias]))
//       x = rms_norm(h, post_attention_layernorm)
//       h = add(h, linear(swiglu(linear(x, gate_proj), linear(x, up_proj)), down_proj))
//         or, in a sparse MoE layer (mixtral, qwen2_moe, qwen3_moe):
//       h = add(h, moe(x, linear(x, router), experts.*.{gate,up,down})
//                  [+ sigmoid_gate(x, shared_expert_gate, mlp(x, shared_expert))])
//     logits = linear(rms_norm(gather_rows(h, rows), model.norm), lm_head)
//
// Nemotron-H (backbone.layers.i, one mixer a block, norm -> mixer -> residual add):
//   Mamba2   proj = linear(x, in_proj) = [z | xBC | dt] (column views, no copies)
//            xBC = causal_conv(xBC, conv1d) (silu); x, B, C = column views of it
//            y = ssm(x, dt, B, C; A_log, D, dt_bias f32, dt >= time_step_min)
//            out = linear(gated_rms_norm(y, z, norm, groups of H*P / n_groups), out_proj)
//   *        attention with q/k/v/o_proj and no RoPE
//   -        linear(activation(linear(x, up_proj)), down_proj), relu2 (or silu)
//   E        moe(x, linear_f32(x, gate), experts.*.{up,down}, e_score_correction_bias;
//                sigmoid scores, n_group/topk_group, routed_scaling_factor, relu2
//                experts, fp32 combine) + the shared_experts MLP
// and the final norm `backbone.norm_f`.
//
// The rows are gathered before the final norm: the norm is row-wise, so the lm_head
// (the largest GEMM of a decode step) runs only on the rows the runtime asks for.
// With tie_word_embeddings the lm_head reads model.embed_tokens.weight. Every op
// writes a `tensor.empty` sized by the token count (`tensor.dim %ids, 0`) or the row
// count (`tensor.dim %rows, 0`). Ops are located at their Hugging Face module path
// (`model.layers.3.self_attn.q_proj`), so diagnostics name the layer.
//
// An Eagle3 head (ImportOptions::eagle3Head) is not part of the graph yet: it is a
// separate function `@eagle3_head` holding the draft layer's attention on its own
// tensor arguments, which is what cache planning needs.
//
//===----------------------------------------------------------------------===//
#include "ImportDetail.h"

#include "kiln/Runtime/Layout.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace kiln;
using namespace kiln::import_detail;

namespace {

class DenseDecoderBuilder {
public:
  DenseDecoderBuilder(const ModelSpec &m, StringRef file, MLIRContext *ctx, ModuleOp module,
                      const ImportOptions &options)
      : m(m), options(options), ctx(ctx), module(module), b(ctx),
        fileLoc(FileLineColLoc::get(ctx, file, 1, 1)) {}

  /// Builds `@forward` (and `@eagle3_head` for an Eagle3 draft layer). Failure: diagnosed.
  LogicalResult build();

  /// Bytes of all declared weights (saturating).
  uint64_t weightBytes();
  /// Tensor parallelism (docs/tensor-parallel.md). Ranks of the graph being built: the
  /// options' tp when this family gets a per-rank graph, else 1 (the whole model).
  unsigned ranks() const { return perRank ? options.tp : 1; }

private:
  Location loc(const Twine &path) {
    return NameLoc::get(StringAttr::get(ctx, path), fileLoc);
  }
  /// `tensor<?x dims x dtype>`.
  RankedTensorType activation(ArrayRef<int64_t> dims) {
    SmallVector<int64_t> shape = {ShapedType::kDynamic};
    shape.append(dims.begin(), dims.end());
    return RankedTensorType::get(shape, m.dtype);
  }
  /// The value of weight `name` (declared as a `kiln.weight` on first use), of the
  /// model's dtype unless `element` says otherwise.
  Value weight(const Twine &name, ArrayRef<int64_t> shape, Location at, Type element = {},
               ArrayRef<int64_t> rowGroups = {}, ShardAttr shard = {});
  /// How the checkpoint stores a weight the loader rearranges (kiln.weight's checkpoint
  /// layout): its shape when not the weight's, each matrix of its last two dimensions
  /// transposed, MXFP4 blocks.
  struct CheckpointLayout {
    ArrayRef<int64_t> shape;
    bool transpose = false;
    bool mxfp4 = false;
  };
  /// A weight loaded from `layout`, then regrouped by `rowGroups`.
  Value rearrangedWeight(const Twine &name, ArrayRef<int64_t> shape, CheckpointLayout layout,
                         Location at, ArrayRef<int64_t> rowGroups = {});
  /// Part `index` of the leading dimension of `whole` (a view of a weight; no copy).
  Value leadingPart(Value whole, int64_t index, Location at);
  /// `tensor.empty(count) : tensor<?x dims x dtype>`.
  Value empty(ArrayRef<int64_t> dims, Value count, Location at) {
    return tensor::EmptyOp::create(b, at, activation(dims), ValueRange{count});
  }

  /// RMSNorm with the model's rms_norm_eps, or `eps` when given.
  Value rmsNorm(Value x, const Twine &weightName, Value count, Location at,
                std::optional<double> eps = std::nullopt);
  /// `module.weight` [out, in] (and `module.bias` [out]) applied to x [count, in]; the
  /// weight's rows regrouped by `rowGroups` (kiln.weight's row_groups) when given.
  Value linear(Value x, const Twine &module, int64_t out, int64_t in, bool bias, Value count,
               ArrayRef<int64_t> rowGroups = {}, ShardAttr shard = {});

  /// Whether this model gets one rank's graph at tp > 1: the dense decoder families,
  /// whose every block is attention or a SwiGLU MLP, with no bias on a row-parallel
  /// projection (each rank would add it).
  bool supportsPerRankGraph() const;
  /// The per-rank graph's divisibility: heads and the intermediate size by the ranks,
  /// KV heads by them or they by the KV heads. Failure: diagnosed.
  LogicalResult checkPerRankShapes();
  /// A weight split `parts` ways along `dim` (null with one rank or one part: whole).
  ShardAttr shardOf(unsigned dim, unsigned parts) const {
    return ranks() > 1 && parts > 1 ? ShardAttr::get(ctx, dim, parts) : ShardAttr();
  }
  /// KV heads a rank holds: the heads divided among the ranks, or, with fewer heads than
  /// ranks, one head replicated; `kvParts` blocks of the checkpoint's projections.
  int64_t rankKvHeads() const { return m.kvHeads >= ranks() ? m.kvHeads / ranks() : 1; }
  unsigned kvParts() const { return static_cast<unsigned>(std::min<int64_t>(m.kvHeads, ranks())); }
  /// The sum over the ranks of a row-parallel projection's partial sums (x itself in a
  /// whole graph).
  Value allReduce(Value partial, Location at);
  /// Vocabulary rows a rank holds of the embedding and the lm_head (all with one rank).
  int64_t rankVocab() const { return m.vocab / ranks(); }
  /// The token embedding of `ids` from weight `name` ([vocab, hidden]); in the per-rank
  /// graph vocabulary-parallel: the rank's rows, zeros for other ranks' ids, then the sum.
  Value embedding(const std::string &name, Value ids, Value tokens, Location at);
  /// The logits [rows, vocab] of `x` from weight `name` ([vocab, hidden]); in the
  /// per-rank graph the rank's vocabulary columns, then the ranks' columns gathered.
  Value lmHead(Value x, const std::string &name, Value rows, Location at);
  /// [count, heads * d] -> [count, heads, d].
  Value splitHeads(Value x, int64_t heads, Value count, Location at);
  Value rope(Value x, Value positions, Value count, Location at);

  void buildLayer(const LayerSpec &layer, Value &h, Value positions, Value tokens);
  /// Whether every layer of the model is a `buildLayer` layer like the first (the same
  /// kind, window and MLP), so that one body stands for all of them.
  bool layersRoll() const;
  /// Every layer as one `scf.for %layer` marked `kiln.layers` over a body built by
  /// `buildLayer` (the residual stream carried), its weights as families.
  void buildRolledLayers(Value &h, Value zero, Value positions, Value tokens);
  /// Module path of layer `layer` ("model.layers.3"), or of the layer loop's body
  /// ("model.layers.{}"), whose weights are then families.
  std::string layerPrefix(const LayerSpec &layer) const {
    return "model.layers." + (layerIndex ? std::string("{}") : std::to_string(layer.index));
  }
  /// Self-attention of `module` (q/k/v/o_proj) on x; RoPE on q and k unless `noRope`.
  Value attention(Value x, const std::string &module, const LayerSpec &layer, Value positions,
                  Value tokens, bool bias, bool noRope, Value sinks = {});
  /// gpt-oss's MoE block `mlp`: the biased router and the biased experts with the clamped
  /// SwiGLU, their fused gate_up weights split while loading.
  Value gptOssMoe(Value x, const std::string &mlp, Value tokens);
  /// One Nemotron-H block: norm, then its mixer (Mamba2, attention, MLP), then the
  /// residual add.
  void buildNemotronBlock(const LayerSpec &layer, Value &h, Value positions, Value tokens);
  /// The Mamba2 mixer of `module` on x: in_proj, conv over xBC, the scan, the gated norm,
  /// out_proj.
  Value mamba2Mixer(Value x, const std::string &module, int64_t layer, Value tokens);
  /// Columns [first, first + width) of x [count, *] (a view: no copy).
  Value columns(Value x, int64_t first, int64_t width, Value count, Location at);
  /// kiln.moe's scratch for `count` tokens of experts of `inter` (tensor.empty, i8).
  Value moeScratch(int64_t inter, Value count, Location at);
  /// One Qwen3-Next decoder layer: its token mixer (Gated DeltaNet or gated attention),
  /// then the sparse MoE block or dense MLP, each behind a zero-centered RMSNorm.
  void buildQwen3NextLayer(const LayerSpec &layer, Value &h, Value positions, Value tokens);
  /// Qwen3-Next's attention of `attn` on x: q_proj yields each head's query and output
  /// gate, q and k get per-head norms and partial RoPE, the output is gated before o_proj.
  Value gatedAttention(Value x, const std::string &attn, const LayerSpec &layer, Value positions,
                       Value tokens);
  /// Qwen3-Next's Gated DeltaNet of `mixer` on x: the grouped in_proj_qkvz/in_proj_ba,
  /// the conv over q, k and v, the gated delta rule, the gated norm, out_proj.
  Value gatedDeltaNet(Value x, const std::string &mixer, int64_t layer, Value tokens);
  /// The sparse MoE block of layer `prefix` (Mixtral's block_sparse_moe, Qwen3-MoE's
  /// mlp): the router linear and kiln.moe over the stacked expert weights.
  Value sparseMoe(Value x, const std::string &prefix, Value tokens);
  /// Nemotron-H's MoE mixer: the fp32 router, DeepSeek-style routing over plain experts,
  /// and the shared expert.
  Value nemotronMoe(Value x, const std::string &mixer, Value tokens);
  /// The routed experts of a DeepSeek-style MoE block (an fp32 router `prefix.gate`,
  /// sigmoid scores with a correction bias or softmax ones per m, experts stacked from
  /// `prefix.experts.*`), without the shared experts.
  Value fp32RoutedExperts(Value x, const std::string &prefix, Value tokens, bool gated,
                          ActivationKind activationKind, bool accumulateF32);
  /// One DeepSeek decoder layer: MLA, then the dense SwiGLU MLP or the MoE block. A
  /// draft layer (an MTP module's) keeps its latents in the draft KV.
  void buildDeepSeekLayer(const LayerSpec &layer, bool moe, Value &h, Value positions,
                          Value tokens);
  /// DeepSeek's multi-head latent attention of `attn` on x, up to o_proj.
  Value mlaAttention(Value x, const std::string &attn, int64_t layer, Value positions,
                     Value tokens, std::optional<DraftKind> draft);
  /// DeepSeek's MTP module `layer` after the target (docs/mtp.md): the embedding of each
  /// token's next token and the target's final hidden state, normed, concatenated and
  /// projected, one decoder layer, the shared head at the logit rows, their argmax.
  Value mtpModule(const LayerSpec &layer, Value next, Value finalHidden, Value positions,
                  Value tokens, Value rows, Value rowCount);
  /// DeepSeek's MoE block `mlp`: the fp32 router, the routed SwiGLU experts and the
  /// shared experts.
  Value deepSeekMoe(Value x, const std::string &mlp, Value tokens);
  /// The MLA draft layers (MTP modules, an Eagle3 head) as a cache-planning skeleton
  /// (`@mla_drafts`): their graph is not built yet, their caches are planned.
  void buildMlaDraftSkeleton(ArrayRef<const LayerSpec *> layers);
  /// `module`'s up_proj/down_proj MLP of `inter` on x (Nemotron-H's relu2 or silu). In
  /// the per-rank graph the rank's inter / N features, summed over the ranks unless
  /// `!reduce` (a shared expert, summed with the routed experts' partial sum).
  Value plainMlp(Value x, const std::string &module, int64_t inter, Value tokens,
                 bool reduce = true);
  /// `module`'s gate_proj/up_proj/down_proj SwiGLU MLP of `inter` on x (per rank as
  /// plainMlp).
  Value swigluMlp(Value x, const std::string &module, int64_t inter, Value tokens,
                  bool reduce = true);
  /// The experts' intermediate features a rank holds (each expert's inter / N), and the
  /// shards of the stacked gate/up ([E, inter, hidden]: rows) and down ([E, hidden,
  /// inter]: columns) weights.
  int64_t rankMoeInter() const { return m.moeIntermediate / ranks(); }
  void buildEagle3Head(const LayerSpec &layer);
  /// The MTP module to run after the target (`--spec mtp:N` on DeepSeek), or null.
  const LayerSpec *mtpLayer() const;

  const ModelSpec &m;
  const ImportOptions &options;
  MLIRContext *ctx;
  ModuleOp module;
  OpBuilder b;
  Location fileLoc;
  /// Weights go before the functions, in the order of first use.
  Operation *firstFunction = nullptr;
  /// The graph is one rank's of options.tp (build() decides).
  bool perRank = false;
  llvm::StringMap<RankedTensorType> declared;
  SmallVector<WeightOp> weights;
  /// The induction variable of the layer loop whose body is being built (null outside).
  Value layerIndex;
  SmallVector<WeightFamilyOp> families;
};

Value DenseDecoderBuilder::weight(const Twine &name, ArrayRef<int64_t> shape, Location at,
                                  Type element, ArrayRef<int64_t> rowGroups, ShardAttr shard) {
  std::string key = name.str();
  auto type = RankedTensorType::get(shape, element ? element : m.dtype);
  // In a layer loop's body a layer's weight is its family's member at the loop index.
  if (layerIndex && StringRef(key).contains("{}")) {
    if (!declared.count(key)) {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPoint(firstFunction);
      auto count =
          cast<arith::ConstantIndexOp>(cast<scf::ForOp>(layerIndex.getParentBlock()->getParentOp())
                                           .getUpperBound()
                                           .getDefiningOp());
      families.push_back(WeightFamilyOp::create(
          b, loc(key), key, count.value(), type, IntegerAttr(), IntegerAttr(),
          rowGroups.empty() ? DenseI64ArrayAttr() : b.getDenseI64ArrayAttr(rowGroups),
          DenseI64ArrayAttr(), /*transpose_checkpoint=*/false, /*mxfp4_checkpoint=*/false, shard));
      declared[key] = type;
    }
    return WeightMemberOp::create(b, at, type, key, layerIndex);
  }
  if (!declared.count(key)) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(firstFunction);
    weights.push_back(WeightOp::create(b, loc(key), key, type, IntegerAttr(),
                                       rowGroups.empty() ? DenseI64ArrayAttr()
                                                         : b.getDenseI64ArrayAttr(rowGroups),
                                       DenseI64ArrayAttr(), /*transpose_checkpoint=*/false,
                                       /*mxfp4_checkpoint=*/false, shard));
    declared[key] = type;
  }
  return WeightRefOp::create(b, at, type, key);
}

Value DenseDecoderBuilder::rearrangedWeight(const Twine &name, ArrayRef<int64_t> shape,
                                            CheckpointLayout layout, Location at,
                                            ArrayRef<int64_t> rowGroups) {
  std::string key = name.str();
  bool fresh = !declared.count(key);
  Value value = weight(name, shape, at, Type(), rowGroups);
  if (fresh) {
    WeightOp declaredWeight = weights.back();
    if (!layout.shape.empty())
      declaredWeight.setCheckpointShapeAttr(b.getDenseI64ArrayAttr(layout.shape));
    declaredWeight.setTransposeCheckpoint(layout.transpose);
    declaredWeight.setMxfp4Checkpoint(layout.mxfp4);
  }
  return value;
}

Value DenseDecoderBuilder::leadingPart(Value whole, int64_t index, Location at) {
  auto type = cast<RankedTensorType>(whole.getType());
  ArrayRef<int64_t> shape = type.getShape();
  SmallVector<OpFoldResult> offsets(shape.size(), b.getIndexAttr(0));
  offsets[0] = b.getIndexAttr(index);
  SmallVector<OpFoldResult> sizes = {b.getIndexAttr(1)};
  for (int64_t dim : shape.drop_front())
    sizes.push_back(b.getIndexAttr(dim));
  SmallVector<OpFoldResult> strides(shape.size(), b.getIndexAttr(1));
  auto part = RankedTensorType::get(shape.drop_front(), type.getElementType());
  return tensor::ExtractSliceOp::create(b, at, part, whole, offsets, sizes, strides).getResult();
}

Value DenseDecoderBuilder::rmsNorm(Value x, const Twine &weightName, Value count, Location at,
                                   std::optional<double> eps) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t dim = type.getShape().back();
  Value w = weight(weightName, {dim}, at);
  // The result is packed whatever the input's layout (a column slice's heads).
  Value init = empty(type.getShape().drop_front(), count, at);
  auto norm = RmsNormOp::create(b, at, init.getType(), x, w, init,
                                b.getF32FloatAttr(static_cast<float>(eps.value_or(m.rmsNormEps))));
  // Every Qwen3-Next RMSNorm keeps its weight as an offset from one.
  norm.setZeroCentered(m.isQwen3Next());
  norm.setF32Weight(m.isGptOss());
  return norm.getResult();
}

Value DenseDecoderBuilder::linear(Value x, const Twine &modulePath, int64_t out, int64_t in,
                                  bool bias, Value count, ArrayRef<int64_t> rowGroups,
                                  ShardAttr shard) {
  std::string path = modulePath.str();
  Location at = loc(path);
  Value w = weight(path + ".weight", {out, in}, at, Type(), rowGroups, shard);
  // A column-parallel bias is sliced with the weight's rows (supportsPerRankGraph leaves
  // no row-parallel one).
  Value biasValue = bias ? weight(path + ".bias", {out}, at, Type(), {}, shard) : Value();
  Value init = empty({out}, count, at);
  return LinearOp::create(b, at, activation({out}), x, w, biasValue, init).getResult();
}

Value DenseDecoderBuilder::splitHeads(Value x, int64_t heads, Value count, Location at) {
  SmallVector<ReassociationIndices> groups = {{0}, {1, 2}};
  SmallVector<OpFoldResult> shape = {count, b.getIndexAttr(heads), b.getIndexAttr(m.headDim)};
  return tensor::ExpandShapeOp::create(b, at, activation({heads, m.headDim}), x, groups, shape)
      .getResult();
}

Value DenseDecoderBuilder::rope(Value x, Value positions, Value count, Location at) {
  auto type = cast<RankedTensorType>(x.getType());
  Value init = empty(type.getShape().drop_front(), count, at);
  return RopeOp::create(b, at, type, x, positions, init, m.rope,
                        m.rotaryDim ? b.getI64IntegerAttr(m.rotaryDim) : IntegerAttr())
      .getResult();
}

void DenseDecoderBuilder::buildLayer(const LayerSpec &layer, Value &h, Value positions,
                                     Value tokens) {
  std::string prefix = layerPrefix(layer);
  std::string attn = prefix + ".self_attn", mlp = prefix + ".mlp";

  Value x = rmsNorm(h, prefix + ".input_layernorm.weight", tokens,
                    loc(prefix + ".input_layernorm"));
  // gpt-oss's sinks: bf16 in the checkpoint, f32 for the kernels (widened when loading).
  Value sinks =
      m.isGptOss() ? weight(attn + ".sinks", {m.heads}, loc(attn), b.getF32Type()) : Value();
  Value o = attention(x, attn, layer, positions, tokens, m.qkvBias, /*noRope=*/false, sinks);
  Location layerLoc = loc(prefix);
  h = AddOp::create(b, layerLoc, h.getType(), h, o, empty({m.hidden}, tokens, layerLoc))
          .getResult();

  x = rmsNorm(h, prefix + ".post_attention_layernorm.weight", tokens,
              loc(prefix + ".post_attention_layernorm"));
  if (m.isMoeLayer(layer.index)) {
    Value routed = m.isGptOss() ? gptOssMoe(x, mlp, tokens) : sparseMoe(x, prefix, tokens);
    h = AddOp::create(b, layerLoc, h.getType(), h, routed, empty({m.hidden}, tokens, layerLoc))
            .getResult();
    return;
  }
  Value down = swigluMlp(x, mlp, m.intermediate, tokens);
  h = AddOp::create(b, layerLoc, h.getType(), h, down, empty({m.hidden}, tokens, layerLoc))
          .getResult();
}

Value DenseDecoderBuilder::attention(Value x, const std::string &attn, const LayerSpec &layer,
                                     Value positions, Value tokens, bool bias, bool noRope,
                                     Value sinks) {
  // One rank's heads: column-parallel q/k/v, a row-parallel o_proj, then the sum.
  int64_t heads = m.heads / ranks(), kvHeads = rankKvHeads();
  int64_t qWidth = heads * m.headDim, kvWidth = kvHeads * m.headDim;
  Location attnLoc = loc(attn);
  Value q = splitHeads(
      linear(x, attn + ".q_proj", qWidth, m.hidden, bias, tokens, {}, shardOf(0, ranks())),
      heads, tokens, attnLoc);
  if (m.qkNorm)
    q = rmsNorm(q, attn + ".q_norm.weight", tokens, loc(attn + ".q_norm"));
  ShardAttr kvShard = shardOf(0, kvParts());
  Value k = splitHeads(linear(x, attn + ".k_proj", kvWidth, m.hidden, bias, tokens, {}, kvShard),
                       kvHeads, tokens, attnLoc);
  if (m.qkNorm)
    k = rmsNorm(k, attn + ".k_norm.weight", tokens, loc(attn + ".k_norm"));
  Value v = splitHeads(linear(x, attn + ".v_proj", kvWidth, m.hidden, bias, tokens, {}, kvShard),
                       kvHeads, tokens, attnLoc);
  if (!noRope) {
    q = rope(q, positions, tokens, attnLoc);
    k = rope(k, positions, tokens, attnLoc);
  }
  auto i64 = [&](int64_t value) { return b.getI64IntegerAttr(value); };
  Value a = AttentionOp::create(b, attnLoc, activation({heads, m.headDim}), q, k, v, sinks,
                                i64(layer.index), i64(heads), i64(kvHeads), i64(m.headDim),
                                layer.window ? i64(*layer.window) : IntegerAttr(), DraftKindAttr())
                .getOut();
  SmallVector<ReassociationIndices> groups = {{0}, {1, 2}};
  Value merged = tensor::CollapseShapeOp::create(b, attnLoc, a, groups).getResult();
  Value o = linear(merged, attn + ".o_proj", m.hidden, qWidth,
                   m.isNemotronH() ? bias : m.oBias, tokens, {}, shardOf(1, ranks()));
  return allReduce(o, attnLoc);
}

Value DenseDecoderBuilder::allReduce(Value partial, Location at) {
  if (!perRank)
    return partial;
  return AllReduceOp::create(b, at, partial.getType(), partial, partial).getResult();
}

Value DenseDecoderBuilder::embedding(const std::string &name, Value ids, Value tokens,
                                     Location at) {
  Value table = weight(name, {rankVocab(), m.hidden}, at, Type(), {}, shardOf(0, ranks()));
  Value h = EmbeddingOp::create(b, at, activation({m.hidden}), ids, table,
                                empty({m.hidden}, tokens, at), /*vocab_parallel=*/perRank)
                .getResult();
  return allReduce(h, at);
}

Value DenseDecoderBuilder::lmHead(Value x, const std::string &name, Value rows, Location at) {
  // Tied embeddings read the embedding's weight: the same rows of it on a rank.
  Value w = weight(name, {rankVocab(), m.hidden}, at, Type(), {}, shardOf(0, ranks()));
  Value logits = LinearOp::create(b, at, activation({rankVocab()}), x, w, Value(),
                                  empty({rankVocab()}, rows, at))
                     .getResult();
  if (!perRank)
    return logits;
  // NCCL gathers [ranks, rows, rankVocab] blocks; kiln.all_gather places them as columns.
  auto blocks = RankedTensorType::get(
      {static_cast<int64_t>(ranks()), ShapedType::kDynamic, rankVocab()}, m.dtype);
  Value scratch = tensor::EmptyOp::create(b, at, blocks, ValueRange{rows});
  return AllGatherOp::create(b, at, TypeRange{activation({m.vocab}), blocks}, logits,
                             empty({m.vocab}, rows, at), scratch)
      .getResult(0);
}

bool DenseDecoderBuilder::supportsPerRankGraph() const {
  // Each rank would add a bias of a row-parallel projection (o_proj, down_proj, Mamba2's
  // out_proj; Nemotron-H's and DeepSeek's attention_bias covers o_proj).
  if (m.isQwen3Next() || m.isGptOss() || options.eagle3Head || m.oBias || m.mlpBias)
    return false;
  if ((m.isNemotronH() || m.isDeepSeek()) && m.attentionBias)
    return false;
  if (m.isNemotronH() && m.projBias)
    return false;
  // DeepSeek's MTP module (--spec mtp:1) has no per-rank graph yet; unused draft layers
  // are only planned (@mla_drafts).
  if (mtpLayer())
    return false;
  for (const LayerSpec &layer : m.layers) {
    if (m.isDeepSeek() || m.isNemotronH())
      continue;
    // A decoder layer is an attention entry and an MLP or MoE entry (HFConfig's layer
    // list); an Eagle3 draft layer has no per-rank graph.
    if ((layer.kind != LayerKind::attention && layer.kind != LayerKind::mlp &&
         layer.kind != LayerKind::moe) ||
        layer.draft)
      return false;
  }
  return true;
}

LogicalResult DenseDecoderBuilder::checkPerRankShapes() {
  unsigned n = options.tp;
  auto refuse = [&](StringRef what, int64_t value) {
    return emitError(fileLoc) << "--tp " << n << " must divide " << what << " (" << value
                              << ") for one rank's graph; choose a tp that divides it";
  };
  if (m.heads % n != 0)
    return refuse("num_attention_heads", m.heads);
  if (m.kvHeads % n != 0 && n % m.kvHeads != 0)
    return emitError(fileLoc) << "--tp " << n << " and num_key_value_heads (" << m.kvHeads
                              << ") must divide one another (heads are divided, or "
                                 "replicated when fewer than the ranks)";
  if (m.intermediate % n != 0)
    return refuse("intermediate_size", m.intermediate);
  // MoE experts: each expert's intermediate features divided; kiln_moe's GEMM rows are
  // 16 bytes, so a rank's features are a multiple of 8.
  if (m.experts > 0) {
    if (m.moeIntermediate % n != 0 || (m.moeIntermediate / n) % 8 != 0)
      return emitError(fileLoc) << "--tp " << n << " must divide moe_intermediate_size ("
                                << m.moeIntermediate
                                << ") into a multiple of 8 a rank (each expert's intermediate "
                                   "features are divided; kiln_moe's rows are 16 bytes)";
    if (m.sharedIntermediate % n != 0)
      return refuse(m.isNemotronH() ? "moe_shared_expert_intermediate_size"
                                    : "shared_expert_intermediate_size",
                    m.sharedIntermediate);
  }
  // Mamba2 mixers are divided by heads and groups (in_proj's z, x, B, C and dt blocks).
  if (m.isNemotronH()) {
    if (m.mHeads % n != 0)
      return refuse("mamba_num_heads", m.mHeads);
    if (m.nGroups % n != 0)
      return refuse("n_groups", m.nGroups);
  }
  // The embedding and the lm_head are divided by vocabulary rows.
  if (m.vocab % n != 0)
    return refuse("vocab_size", m.vocab);
  return success();
}

Value DenseDecoderBuilder::columns(Value x, int64_t first, int64_t width, Value count,
                                   Location at) {
  SmallVector<OpFoldResult> offsets = {b.getIndexAttr(0), b.getIndexAttr(first)};
  SmallVector<OpFoldResult> sizes = {count, b.getIndexAttr(width)};
  SmallVector<OpFoldResult> strides = {b.getIndexAttr(1), b.getIndexAttr(1)};
  return tensor::ExtractSliceOp::create(b, at, activation({width}), x, offsets, sizes, strides)
      .getResult();
}

Value DenseDecoderBuilder::moeScratch(int64_t inter, Value count, Location at) {
  auto type = RankedTensorType::get(
      {ShapedType::kDynamic, MoeOp::scratchBytesPerToken(m.hidden, inter, m.topK)},
      b.getIntegerType(8));
  return tensor::EmptyOp::create(b, at, type, ValueRange{count});
}

Value DenseDecoderBuilder::mamba2Mixer(Value x, const std::string &mixer, int64_t layer,
                                       Value tokens) {
  // One rank's heads and groups: in_proj's z, x, B, C and dt blocks (segments of one
  // shard), conv1d's x, B and C channels, A_log/D/dt_bias/norm by heads, out_proj
  // row-parallel, then the sum.
  const int64_t H = m.mHeads / ranks(), P = m.mHeadDim, N = m.stateSize, G = m.nGroups / ranks();
  const int64_t HP = H * P, GN = G * N, C = HP + 2 * GN;
  auto segmented = [&](unsigned dim, ArrayRef<int64_t> sizes) {
    return ranks() > 1 ? ShardAttr::get(ctx, dim, ranks(), b.getDenseI64ArrayAttr(sizes))
                       : ShardAttr();
  };
  ShardAttr byHeads = shardOf(0, ranks()), channels = segmented(0, {HP, GN, GN});
  Location at = loc(mixer);
  auto i64 = [&](int64_t value) { return b.getI64IntegerAttr(value); };
  auto expand = [&](Value v, int64_t outer, int64_t inner) -> Value {
    SmallVector<ReassociationIndices> groups = {{0}, {1, 2}};
    SmallVector<OpFoldResult> shape = {tokens, b.getIndexAttr(outer), b.getIndexAttr(inner)};
    return tensor::ExpandShapeOp::create(b, at, activation({outer, inner}), v, groups, shape)
        .getResult();
  };
  // in_proj yields [z | xBC | dt]; the mixer reads them as column views.
  Value proj = linear(x, mixer + ".in_proj", HP + C + H, m.hidden, m.projBias, tokens, {},
                      segmented(0, {HP, HP, GN, GN, H}));
  Value z = columns(proj, 0, HP, tokens, at);
  Value xbc = columns(proj, HP, C, tokens, at);
  Value dt = columns(proj, HP + C, H, tokens, at);

  Location convLoc = loc(mixer + ".conv1d");
  Value convWeight =
      weight(mixer + ".conv1d.weight", {C, 1, m.convKernel}, convLoc, Type(), {}, channels);
  SmallVector<ReassociationIndices> dropMiddle = {{0}, {1, 2}};
  convWeight = tensor::CollapseShapeOp::create(b, convLoc, convWeight, dropMiddle).getResult();
  Value convBias =
      m.convBias ? weight(mixer + ".conv1d.bias", {C}, convLoc, Type(), {}, channels) : Value();
  Value conv = CausalConvOp::create(b, convLoc, activation({C}), xbc, convWeight, convBias,
                                    i64(layer), i64(C), i64(m.convKernel), b.getUnitAttr(),
                                    DraftKindAttr())
                   .getOut();
  Value xs = expand(columns(conv, 0, HP, tokens, at), H, P);
  Value B = expand(columns(conv, HP, GN, tokens, at), G, N);
  Value Cm = expand(columns(conv, HP + GN, GN, tokens, at), G, N);
  Type f32 = b.getF32Type();
  Value aLog = weight(mixer + ".A_log", {H}, at, f32, {}, byHeads);
  Value D = weight(mixer + ".D", {H}, at, f32, {}, byHeads);
  Value dtBias = weight(mixer + ".dt_bias", {H}, at, f32, {}, byHeads);
  FloatAttr dtMin = m.dtMin > 0 ? b.getF32FloatAttr(static_cast<float>(m.dtMin)) : FloatAttr();
  Value y = SsmOp::create(b, at, activation({H, P}), xs, dt, B, Cm, /*z=*/Value(), aLog, D,
                          dtBias, i64(layer), i64(H), i64(P), i64(N), i64(G), DraftKindAttr(),
                          dtMin, FloatAttr())
                .getOut();
  Value flat = tensor::CollapseShapeOp::create(b, at, y, dropMiddle).getResult();
  Location normLoc = loc(mixer + ".norm");
  // The norm's groups (H * P / n_groups features each) lie within a rank's heads.
  Value normWeight = weight(mixer + ".norm.weight", {HP}, normLoc, Type(), {}, byHeads);
  Value normed = GatedRmsNormOp::create(b, normLoc, activation({HP}), flat, z, normWeight,
                                        empty({HP}, tokens, normLoc), i64(HP / G),
                                        b.getF32FloatAttr(static_cast<float>(m.rmsNormEps)))
                     .getResult();
  return allReduce(linear(normed, mixer + ".out_proj", m.hidden, HP, m.projBias, tokens, {},
                          shardOf(1, ranks())),
                   at);
}

void DenseDecoderBuilder::buildNemotronBlock(const LayerSpec &layer, Value &h, Value positions,
                                             Value tokens) {
  std::string prefix = "backbone.layers." + std::to_string(layer.index);
  std::string mixer = prefix + ".mixer";
  Value x = rmsNorm(h, prefix + ".norm.weight", tokens, loc(prefix + ".norm"));
  Value out;
  switch (layer.kind) {
  case LayerKind::mamba:
    out = mamba2Mixer(x, mixer, layer.index, tokens);
    break;
  case LayerKind::attention:
    // Nemotron-H's attention layers have no positional encoding (the Mamba layers order
    // the tokens).
    out = attention(x, mixer, layer, positions, tokens, m.attentionBias, /*noRope=*/true);
    break;
  case LayerKind::moe:
    out = nemotronMoe(x, mixer, tokens);
    break;
  default:
    out = plainMlp(x, mixer, m.intermediate, tokens);
    break;
  }
  Location blockLoc = loc(prefix);
  h = AddOp::create(b, blockLoc, h.getType(), h, out, empty({m.hidden}, tokens, blockLoc))
          .getResult();
}

void DenseDecoderBuilder::buildQwen3NextLayer(const LayerSpec &layer, Value &h, Value positions,
                                              Value tokens) {
  std::string prefix = "model.layers." + std::to_string(layer.index);
  Location layerLoc = loc(prefix);
  auto residual = [&](Value out) {
    h = AddOp::create(b, layerLoc, h.getType(), h, out, empty({m.hidden}, tokens, layerLoc))
            .getResult();
  };
  Value x =
      rmsNorm(h, prefix + ".input_layernorm.weight", tokens, loc(prefix + ".input_layernorm"));
  residual(layer.kind == LayerKind::gdn
               ? gatedDeltaNet(x, prefix + ".linear_attn", layer.index, tokens)
               : gatedAttention(x, prefix + ".self_attn", layer, positions, tokens));
  x = rmsNorm(h, prefix + ".post_attention_layernorm.weight", tokens,
              loc(prefix + ".post_attention_layernorm"));
  residual(m.isMoeLayer(layer.index) ? sparseMoe(x, prefix, tokens)
                                     : swigluMlp(x, prefix + ".mlp", m.intermediate, tokens));
}

Value DenseDecoderBuilder::gatedAttention(Value x, const std::string &attn, const LayerSpec &layer,
                                          Value positions, Value tokens) {
  const int64_t qWidth = m.heads * m.headDim, kvWidth = m.kvHeads * m.headDim;
  Location attnLoc = loc(attn);
  // q_proj interleaves each head's query and gate; regrouped: [queries | gates].
  Value proj = linear(x, attn + ".q_proj", 2 * qWidth, m.hidden, false, tokens,
                      {m.heads, m.headDim, m.headDim});
  Value q = splitHeads(columns(proj, 0, qWidth, tokens, attnLoc), m.heads, tokens, attnLoc);
  Value gate = columns(proj, qWidth, qWidth, tokens, attnLoc);
  q = rmsNorm(q, attn + ".q_norm.weight", tokens, loc(attn + ".q_norm"));
  Value k = splitHeads(linear(x, attn + ".k_proj", kvWidth, m.hidden, false, tokens), m.kvHeads,
                       tokens, attnLoc);
  k = rmsNorm(k, attn + ".k_norm.weight", tokens, loc(attn + ".k_norm"));
  Value v = splitHeads(linear(x, attn + ".v_proj", kvWidth, m.hidden, false, tokens), m.kvHeads,
                       tokens, attnLoc);
  q = rope(q, positions, tokens, attnLoc);
  k = rope(k, positions, tokens, attnLoc);
  auto i64 = [&](int64_t value) { return b.getI64IntegerAttr(value); };
  Value a = AttentionOp::create(b, attnLoc, activation({m.heads, m.headDim}), q, k, v, Value(),
                                i64(layer.index), i64(m.heads), i64(m.kvHeads), i64(m.headDim),
                                IntegerAttr(), DraftKindAttr())
                .getOut();
  SmallVector<ReassociationIndices> groups = {{0}, {1, 2}};
  Value merged = tensor::CollapseShapeOp::create(b, attnLoc, a, groups).getResult();
  Value gated = SigmoidMulOp::create(b, attnLoc, merged.getType(), merged, gate,
                                     empty({qWidth}, tokens, attnLoc))
                    .getResult();
  return linear(gated, attn + ".o_proj", m.hidden, qWidth, false, tokens);
}

Value DenseDecoderBuilder::gatedDeltaNet(Value x, const std::string &mixer, int64_t layer,
                                         Value tokens) {
  const int64_t hk = m.gdnKeyHeads, hv = m.gdnValueHeads, dk = m.gdnKeyDim, dv = m.gdnValueDim,
                perKey = hv / hk;
  const int64_t keyWidth = hk * dk, valueWidth = hv * dv, convDim = m.gdnConvDim();
  Location at = loc(mixer);
  auto i64 = [&](int64_t value) { return b.getI64IntegerAttr(value); };
  auto heads = [&](Value v, int64_t count, int64_t dim) {
    SmallVector<ReassociationIndices> groups = {{0}, {1, 2}};
    SmallVector<OpFoldResult> shape = {tokens, b.getIndexAttr(count), b.getIndexAttr(dim)};
    return tensor::ExpandShapeOp::create(b, at, activation({count, dim}), v, groups, shape)
        .getResult();
  };
  // The checkpoint groups q, k, v, z (and b, a) per key head; regrouped, each is a
  // contiguous column range: [q | k | v | z] and [b | a].
  Value qkvz = linear(x, mixer + ".in_proj_qkvz", 2 * keyWidth + 2 * valueWidth, m.hidden, false,
                      tokens, {hk, dk, dk, perKey * dv, perKey * dv});
  Value ba =
      linear(x, mixer + ".in_proj_ba", 2 * hv, m.hidden, false, tokens, {hk, perKey, perKey});

  Location convLoc = loc(mixer + ".conv1d");
  Value convWeight = weight(mixer + ".conv1d.weight", {convDim, 1, m.gdnConvKernel}, convLoc);
  SmallVector<ReassociationIndices> dropMiddle = {{0}, {1, 2}};
  convWeight = tensor::CollapseShapeOp::create(b, convLoc, convWeight, dropMiddle).getResult();
  Value conv =
      CausalConvOp::create(b, convLoc, activation({convDim}), columns(qkvz, 0, convDim, tokens, at),
                           convWeight, Value(), i64(layer), i64(convDim), i64(m.gdnConvKernel),
                           b.getUnitAttr(), DraftKindAttr())
          .getOut();
  Value q = heads(columns(conv, 0, keyWidth, tokens, at), hk, dk);
  Value k = heads(columns(conv, keyWidth, keyWidth, tokens, at), hk, dk);
  Value v = heads(columns(conv, 2 * keyWidth, valueWidth, tokens, at), hv, dv);
  Type f32 = b.getF32Type();
  Value aLog = weight(mixer + ".A_log", {hv}, at, f32);
  Value dtBias = weight(mixer + ".dt_bias", {hv}, at, f32);
  auto scratchType = RankedTensorType::get(
      {ShapedType::kDynamic, kiln_rt_gdn_scratch_bytes_per_token(hk, hv, dk, dv)},
      b.getIntegerType(8));
  Value scratch = tensor::EmptyOp::create(b, at, scratchType, ValueRange{tokens});
  Value y =
      GatedDeltaNetOp::create(b, at, activation({hv, dv}), q, k, v, columns(ba, hv, hv, tokens, at),
                              columns(ba, 0, hv, tokens, at), aLog, dtBias, scratch, i64(layer),
                              i64(hk), i64(hv), i64(dk), i64(dv), DraftKindAttr())
          .getOut();
  Value flat = tensor::CollapseShapeOp::create(b, at, y, dropMiddle).getResult();
  Location normLoc = loc(mixer + ".norm");
  Value normWeight = weight(mixer + ".norm.weight", {dv}, normLoc);
  Value z = columns(qkvz, convDim, valueWidth, tokens, at);
  Value normed =
      GatedRmsNormOp::create(b, normLoc, activation({valueWidth}), flat, z, normWeight,
                             empty({valueWidth}, tokens, normLoc), i64(dv),
                             b.getF32FloatAttr(static_cast<float>(m.rmsNormEps)), b.getUnitAttr())
          .getResult();
  return linear(normed, mixer + ".out_proj", m.hidden, valueWidth, false, tokens);
}

Value DenseDecoderBuilder::sparseMoe(Value x, const std::string &prefix, Value tokens) {
  const bool mixtral = m.modelType == "mixtral";
  const std::string block = prefix + (mixtral ? ".block_sparse_moe" : ".mlp");
  // The checkpoint's per-expert tensors, stacked along a leading expert dimension (the
  // runtime's loader reads `experts.<e>.` for each e into `experts.*.`).
  const std::string experts = block + ".experts.*.";
  const char *gateName = mixtral ? "w1" : "gate_proj";
  const char *upName = mixtral ? "w3" : "up_proj";
  const char *downName = mixtral ? "w2" : "down_proj";
  Location at = loc(block);
  // The router is replicated: every rank routes every token over all the experts, then
  // runs its share of each chosen expert's intermediate features.
  Value logits = linear(x, block + ".gate", m.experts, m.hidden, false, tokens);
  const int64_t inter = rankMoeInter();
  Value gate = weight(experts + gateName + ".weight", {m.experts, inter, m.hidden}, at, Type(), {},
                      shardOf(1, ranks()));
  Value up = weight(experts + upName + ".weight", {m.experts, inter, m.hidden}, at, Type(), {},
                    shardOf(1, ranks()));
  Value down = weight(experts + downName + ".weight", {m.experts, m.hidden, inter}, at, Type(), {},
                      shardOf(2, ranks()));
  Value scratch = moeScratch(inter, tokens, at);
  auto moe = MoeOp::create(
      b, at, TypeRange{activation({m.hidden}), scratch.getType()}, x, logits, gate, up, down,
      /*score_bias=*/Value(), /*gate_bias=*/Value(), /*up_bias=*/Value(),
      /*down_bias=*/Value(), empty({m.hidden}, tokens, at), scratch, b.getI64IntegerAttr(m.topK),
      m.normTopK ? b.getUnitAttr() : UnitAttr(),
      m.roundRouterWeights ? b.getUnitAttr() : UnitAttr(),
      MoeScoringAttr::get(ctx, MoeScoring::softmax), b.getI64IntegerAttr(1), b.getI64IntegerAttr(1),
      b.getF32FloatAttr(1.0f), ActivationKindAttr::get(ctx, ActivationKind::silu),
      /*accumulate_f32=*/UnitAttr(),
      /*group_max=*/UnitAttr(), /*swiglu_limit=*/FloatAttr(), /*swiglu_alpha=*/FloatAttr());
  Value routed = moe.getResult(0);
  if (!m.sharedIntermediate)
    return allReduce(routed, at);
  // Qwen2-MoE's shared expert, scaled by the sigmoid of its one-output gate, joins the
  // routed experts' sum: per rank both are partial sums (the gate, a scale of each row,
  // is the whole one on every rank), added before the one all-reduce.
  Value shared =
      swigluMlp(x, block + ".shared_expert", m.sharedIntermediate, tokens, /*reduce=*/false);
  if (m.gatedSharedExpert) {
    const std::string gateName = block + ".shared_expert_gate";
    Location gateLoc = loc(gateName);
    Value w = weight(gateName + ".weight", {1, m.hidden}, gateLoc);
    shared = SigmoidGateOp::create(b, gateLoc, shared.getType(), x, w, shared,
                                   empty({m.hidden}, tokens, gateLoc))
                 .getResult();
  }
  return allReduce(
      AddOp::create(b, at, routed.getType(), routed, shared, empty({m.hidden}, tokens, at))
          .getResult(),
      at);
}

Value DenseDecoderBuilder::nemotronMoe(Value x, const std::string &mixer, Value tokens) {
  Value routed = fp32RoutedExperts(x, mixer, tokens, /*gated=*/false,
                                   m.relu2Mlp ? ActivationKind::relu2 : ActivationKind::silu,
                                   /*accumulateF32=*/true);
  Location at = loc(mixer);
  if (!m.sharedIntermediate)
    return allReduce(routed, at);
  // Routed and shared partial sums, added before the one all-reduce.
  Value shared =
      plainMlp(x, mixer + ".shared_experts", m.sharedIntermediate, tokens, /*reduce=*/false);
  return allReduce(
      AddOp::create(b, at, routed.getType(), routed, shared, empty({m.hidden}, tokens, at))
          .getResult(),
      at);
}

Value DenseDecoderBuilder::fp32RoutedExperts(Value x, const std::string &prefix, Value tokens,
                                             bool gated, ActivationKind activationKind,
                                             bool accumulateF32) {
  Location at = loc(prefix), routerLoc = loc(prefix + ".gate");
  Type f32 = b.getF32Type();
  // transformers' routers: F.linear(x.float(), weight.float()), kept in fp32.
  auto logitsType = RankedTensorType::get({ShapedType::kDynamic, m.experts}, f32);
  Value routerWeight = weight(prefix + ".gate.weight", {m.experts, m.hidden}, routerLoc);
  Value logits =
      LinearOp::create(b, routerLoc, logitsType, x, routerWeight, Value(),
                       tensor::EmptyOp::create(b, routerLoc, logitsType, ValueRange{tokens}))
          .getResult();
  Value scoreBias = m.sigmoidRouter ? weight(prefix + ".gate.e_score_correction_bias",
                                             {m.experts}, routerLoc, f32)
                                    : Value();
  const std::string experts = prefix + ".experts.*.";
  // The router (and its correction bias) replicated; each expert's features divided.
  const int64_t inter = rankMoeInter();
  ShardAttr rows = shardOf(1, ranks()), cols = shardOf(2, ranks());
  Value gate = gated ? weight(experts + "gate_proj.weight", {m.experts, inter, m.hidden}, at,
                              Type(), {}, rows)
                     : Value();
  Value up = weight(experts + "up_proj.weight", {m.experts, inter, m.hidden}, at, Type(), {}, rows);
  Value down =
      weight(experts + "down_proj.weight", {m.experts, m.hidden, inter}, at, Type(), {}, cols);
  Value scratch = moeScratch(inter, tokens, at);
  auto unit = [&](bool set) { return set ? b.getUnitAttr() : UnitAttr(); };
  auto moe = MoeOp::create(
      b, at, TypeRange{activation({m.hidden}), scratch.getType()}, x, logits, gate, up, down,
      scoreBias,
      /*gate_bias=*/Value(), /*up_bias=*/Value(), /*down_bias=*/Value(),
      empty({m.hidden}, tokens, at), scratch, b.getI64IntegerAttr(m.topK), unit(m.normTopK),
      /*round_weights=*/UnitAttr(),
      MoeScoringAttr::get(ctx, m.sigmoidRouter ? MoeScoring::sigmoid : MoeScoring::softmax),
      b.getI64IntegerAttr(m.routerGroups), b.getI64IntegerAttr(m.routerTopGroups),
      b.getF32FloatAttr(static_cast<float>(m.routedScale)),
      ActivationKindAttr::get(ctx, activationKind), unit(accumulateF32), unit(m.groupMaxRouting),
      /*swiglu_limit=*/FloatAttr(), /*swiglu_alpha=*/FloatAttr());
  return moe.getResult(0);
}

Value DenseDecoderBuilder::gptOssMoe(Value x, const std::string &mlp, Value tokens) {
  Location at = loc(mlp);
  const int64_t experts = m.experts, inter = m.moeIntermediate, hidden = m.hidden;
  Value logits = linear(x, mlp + ".router", experts, hidden, /*bias=*/true, tokens);
  // gate_up_proj is [experts, hidden, 2 x inter] ([in, out] a expert) with gate and up
  // outputs alternating; loaded transposed and split by output parity, it is
  // [gate rows of every expert; up rows of every expert].
  // The MXFP4 release stores both already [out, in] (its blocks run along `in`), and
  // the loader dequantizes them.
  const std::string prefix = mlp + ".experts.";
  const SmallVector<int64_t> split = {experts * inter, 1, 1};
  const SmallVector<int64_t> gateUpStored = {experts, hidden, 2 * inter},
                             gateUpRows = {experts, 2 * inter, hidden},
                             downStored = {experts, inter, hidden};
  const CheckpointLayout gateUpLayout =
      m.mxfp4Experts() ? CheckpointLayout{gateUpRows, false, true}
                       : CheckpointLayout{gateUpStored, true, false};
  const CheckpointLayout downLayout = m.mxfp4Experts()
                                          ? CheckpointLayout{{}, false, true}
                                          : CheckpointLayout{downStored, true, false};
  Value gateUp = rearrangedWeight(prefix + "gate_up_proj", {2, experts, inter, hidden},
                                  gateUpLayout, at, split);
  const SmallVector<int64_t> biasStored = {experts, 2 * inter};
  Value gateUpBias = rearrangedWeight(prefix + "gate_up_proj_bias", {2, experts, inter},
                                      CheckpointLayout{biasStored}, at, split);
  Value down = rearrangedWeight(prefix + "down_proj", {experts, hidden, inter}, downLayout, at);
  Value downBias = weight(prefix + "down_proj_bias", {experts, hidden}, at);
  Value scratch = moeScratch(inter, tokens, at);
  // transformers' GptOssExperts: alpha is a constant of the module, not of the config.
  constexpr float kGptOssSwigluAlpha = 1.702f;
  auto moe = MoeOp::create(
      b, at, TypeRange{activation({hidden}), scratch.getType()}, x, logits,
      leadingPart(gateUp, 0, at), leadingPart(gateUp, 1, at), down, /*score_bias=*/Value(),
      leadingPart(gateUpBias, 0, at), leadingPart(gateUpBias, 1, at), downBias,
      empty({hidden}, tokens, at), scratch, b.getI64IntegerAttr(m.topK), b.getUnitAttr(),
      b.getUnitAttr(), MoeScoringAttr::get(ctx, MoeScoring::softmax), b.getI64IntegerAttr(1),
      b.getI64IntegerAttr(1), b.getF32FloatAttr(1.0f),
      ActivationKindAttr::get(ctx, ActivationKind::silu),
      /*accumulate_f32=*/UnitAttr(),
      /*group_max=*/UnitAttr(), b.getF32FloatAttr(static_cast<float>(m.swigluLimit)),
      b.getF32FloatAttr(kGptOssSwigluAlpha));
  return moe.getResult(0);
}

Value DenseDecoderBuilder::plainMlp(Value x, const std::string &module, int64_t inter, Value tokens,
                                    bool reduce) {
  // One rank's intermediate features: column-parallel up, row-parallel down.
  Location at = loc(module);
  const int64_t rankInter = inter / ranks();
  Value up = linear(x, module + ".up_proj", rankInter, m.hidden, m.mlpBias, tokens, {},
                    shardOf(0, ranks()));
  ActivationKind kind = m.relu2Mlp ? ActivationKind::relu2 : ActivationKind::silu;
  Value act = ActivationOp::create(b, at, up.getType(), up, empty({rankInter}, tokens, at),
                                   ActivationKindAttr::get(ctx, kind))
                  .getResult();
  Value down = linear(act, module + ".down_proj", m.hidden, rankInter, m.mlpBias, tokens, {},
                      shardOf(1, ranks()));
  return reduce ? allReduce(down, at) : down;
}

Value DenseDecoderBuilder::swigluMlp(Value x, const std::string &module, int64_t inter,
                                     Value tokens, bool reduce) {
  // One rank's intermediate features: column-parallel gate/up, row-parallel down.
  int64_t rankInter = inter / ranks();
  ShardAttr columns = shardOf(0, ranks());
  Value gate = linear(x, module + ".gate_proj", rankInter, m.hidden, false, tokens, {}, columns);
  Value up = linear(x, module + ".up_proj", rankInter, m.hidden, false, tokens, {}, columns);
  Location at = loc(module);
  Value act = SwigluOp::create(b, at, gate.getType(), gate, up, empty({rankInter}, tokens, at))
                  .getResult();
  Value down = linear(act, module + ".down_proj", m.hidden, rankInter, false, tokens, {},
                      shardOf(1, ranks()));
  return reduce ? allReduce(down, at) : down;
}

void DenseDecoderBuilder::buildDeepSeekLayer(const LayerSpec &layer, bool moe, Value &h,
                                             Value positions, Value tokens) {
  std::string prefix = "model.layers." + std::to_string(layer.index);
  Location layerLoc = loc(prefix);
  Value x = rmsNorm(h, prefix + ".input_layernorm.weight", tokens,
                    loc(prefix + ".input_layernorm"));
  Value o = mlaAttention(x, prefix + ".self_attn", layer.index, positions, tokens, layer.draft);
  h = AddOp::create(b, layerLoc, h.getType(), h, o, empty({m.hidden}, tokens, layerLoc))
          .getResult();
  x = rmsNorm(h, prefix + ".post_attention_layernorm.weight", tokens,
              loc(prefix + ".post_attention_layernorm"));
  Value ffn = moe ? deepSeekMoe(x, prefix + ".mlp", tokens)
                  : swigluMlp(x, prefix + ".mlp", m.intermediate, tokens);
  h = AddOp::create(b, layerLoc, h.getType(), h, ffn, empty({m.hidden}, tokens, layerLoc))
          .getResult();
}

// transformers' DeepseekV2/V3 attention builds q_a_layernorm and kv_a_layernorm with
// the RMSNorm default, not the config's rms_norm_eps.
constexpr double kMlaLatentNormEps = 1e-6;

Value DenseDecoderBuilder::mlaAttention(Value x, const std::string &attn, int64_t layer,
                                        Value positions, Value tokens,
                                        std::optional<DraftKind> draft) {
  // One rank's heads: q_proj / q_b_proj and kv_b_proj column-parallel by heads, o_proj
  // row-parallel, then the sum. The latent path (q_a_proj, q_a_layernorm,
  // kv_a_proj_with_mqa, kv_a_layernorm) is replicated, and so is the latent cache.
  const int64_t heads = m.heads / ranks(), nope = m.qkNope, rope = m.qkRope, rank = m.kvLoraRank,
                v = m.vHeadDim, qWidth = heads * (nope + rope);
  ShardAttr byHeads = shardOf(0, ranks());
  Location at = loc(attn);
  Value q;
  if (m.qLoraRank > 0) {
    Value qa = linear(x, attn + ".q_a_proj", m.qLoraRank, m.hidden, m.attentionBias, tokens);
    qa = rmsNorm(qa, attn + ".q_a_layernorm.weight", tokens, loc(attn + ".q_a_layernorm"),
                 kMlaLatentNormEps);
    q = linear(qa, attn + ".q_b_proj", qWidth, m.qLoraRank, false, tokens, {}, byHeads);
  } else {
    q = linear(x, attn + ".q_proj", qWidth, m.hidden, false, tokens, {}, byHeads);
  }
  SmallVector<ReassociationIndices> groups = {{0}, {1, 2}};
  SmallVector<OpFoldResult> qShape = {tokens, b.getIndexAttr(heads), b.getIndexAttr(nope + rope)};
  q = tensor::ExpandShapeOp::create(b, at, activation({heads, nope + rope}), q, groups, qShape)
          .getResult();
  // kv_a_proj_with_mqa yields [compressed KV | k_pe]; both are read as column views.
  Value compressed =
      linear(x, attn + ".kv_a_proj_with_mqa", rank + rope, m.hidden, m.attentionBias, tokens);
  Value latent =
      rmsNorm(columns(compressed, 0, rank, tokens, at), attn + ".kv_a_layernorm.weight", tokens,
              loc(attn + ".kv_a_layernorm"), kMlaLatentNormEps);
  Value kPe = columns(compressed, rank, rope, tokens, at);
  Location kvbLoc = loc(attn + ".kv_b_proj");
  Value kvB =
      weight(attn + ".kv_b_proj.weight", {heads * (nope + v), rank}, kvbLoc, Type(), {}, byHeads);
  auto scratchType = RankedTensorType::get(
      {ShapedType::kDynamic, kiln_rt_mla_scratch_bytes_per_token(heads, rank, rope, nope, v)},
      b.getIntegerType(8));
  Value scratch = tensor::EmptyOp::create(b, at, scratchType, ValueRange{tokens});
  auto i64 = [&](int64_t value) { return b.getI64IntegerAttr(value); };
  Value out =
      MlaAttentionOp::create(b, at, activation({heads, v}), q, latent, kPe, positions, kvB,
                             scratch, i64(layer), i64(heads), i64(rank), i64(rope),
                             draft ? DraftKindAttr::get(ctx, *draft) : DraftKindAttr(),
                             i64(nope), i64(v), m.rope,
                             RopeStyleAttr::get(ctx, m.ropeStyle),
                             b.getF32FloatAttr(static_cast<float>(m.mlaSoftmaxScale)))
          .getOut();
  Value merged = tensor::CollapseShapeOp::create(b, at, out, groups).getResult();
  return allReduce(linear(merged, attn + ".o_proj", m.hidden, heads * v, m.attentionBias, tokens,
                          {}, shardOf(1, ranks())),
                   at);
}

Value DenseDecoderBuilder::deepSeekMoe(Value x, const std::string &mlp, Value tokens) {
  // transformers 5.17's DeepseekV2/V3 experts both add each expert's weighted output,
  // rounded to bf16, into a bf16 tensor (Nemotron-H's into an fp32 one).
  Value routed = fp32RoutedExperts(x, mlp, tokens, /*gated=*/true, ActivationKind::silu,
                                   /*accumulateF32=*/false);
  Location at = loc(mlp);
  if (m.sharedExperts == 0)
    return allReduce(routed, at);
  // Routed and shared partial sums, added before the one all-reduce.
  Value shared = swigluMlp(x, mlp + ".shared_experts", m.moeIntermediate * m.sharedExperts, tokens,
                           /*reduce=*/false);
  return allReduce(
      AddOp::create(b, at, routed.getType(), routed, shared, empty({m.hidden}, tokens, at))
          .getResult(),
      at);
}

void DenseDecoderBuilder::buildMlaDraftSkeleton(ArrayRef<const LayerSpec *> layers) {
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());
  const int64_t width = m.kvLoraRank + m.qkRope, heads = m.heads / ranks();
  Type q = activation({heads, width}), latent = activation({width});
  Location at = loc("model.drafts");
  auto fn = func::FuncOp::create(b, at, "mla_drafts", b.getFunctionType({q, latent}, {}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToEnd(entry);
  auto i64 = [&](int64_t value) { return b.getI64IntegerAttr(value); };
  for (const LayerSpec *layer : layers)
    MlaAttentionOp::create(b, loc("model.layers." + std::to_string(layer->index)),
                           activation({heads, m.kvLoraRank}), entry->getArgument(0),
                           entry->getArgument(1), Value(), Value(), Value(), Value(),
                           i64(layer->index), i64(heads), i64(m.kvLoraRank), i64(m.qkRope),
                           DraftKindAttr::get(ctx, *layer->draft), IntegerAttr(), IntegerAttr(),
                           RopeAttr(), RopeStyleAttr(), FloatAttr());
  func::ReturnOp::create(b, at, ValueRange{});
}

void DenseDecoderBuilder::buildEagle3Head(const LayerSpec &layer) {
  Location at = loc("eagle3.layers." + std::to_string(layer.index));
  Type q = activation({m.heads, m.headDim}), kv = activation({m.kvHeads, m.headDim});
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(module.getBody());
  auto fn = func::FuncOp::create(b, at, "eagle3_head", b.getFunctionType({q, kv}, {q}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToEnd(entry);
  auto i64 = [&](int64_t value) { return b.getI64IntegerAttr(value); };
  Value out = AttentionOp::create(b, at, q, entry->getArgument(0), entry->getArgument(1),
                                  entry->getArgument(1), Value(), i64(layer.index), i64(m.heads),
                                  i64(m.kvHeads), i64(m.headDim),
                                  layer.window ? i64(*layer.window) : IntegerAttr(),
                                  DraftKindAttr::get(ctx, DraftKind::eagle3))
                  .getOut();
  func::ReturnOp::create(b, at, out);
}

LogicalResult DenseDecoderBuilder::build() {
  perRank = (options.tp > 1 || options.collectivesAtOneRank) && supportsPerRankGraph();
  if (perRank && failed(checkPerRankShapes()))
    return failure();
  Type ids = RankedTensorType::get({ShapedType::kDynamic}, b.getI32Type());
  Type logits = activation({m.vocab});
  const LayerSpec *mtp = mtpLayer();
  if (mtp && options.mtpDrafts != 1)
    return emitError(loc("model.layers." + std::to_string(mtp->index)))
           << "--spec mtp:" << options.mtpDrafts
           << ": DeepSeek's MTP module drafts one token a step; use --spec mtp:1";
  SmallVector<Type> results = {logits};
  if (mtp)
    results.push_back(RankedTensorType::get({ShapedType::kDynamic, 1}, b.getI32Type()));
  b.setInsertionPointToEnd(module.getBody());
  auto fn = func::FuncOp::create(b, fileLoc, "forward",
                                 b.getFunctionType({ids, ids, ids}, results));
  firstFunction = fn;
  fn->setAttr(KilnDialect::kEntryAttrName, b.getUnitAttr());
  const InputKind inputs[] = {InputKind::token_ids, InputKind::positions,
                              InputKind::logit_rows};
  for (auto [index, kind] : llvm::enumerate(inputs))
    fn.setArgAttr(index, KilnDialect::kInputAttrName, InputKindAttr::get(ctx, kind));
  fn.setResultAttr(0, KilnDialect::kOutputAttrName,
                   OutputKindAttr::get(ctx, OutputKind::logits));
  if (mtp)
    fn.setResultAttr(1, KilnDialect::kOutputAttrName,
                     OutputKindAttr::get(ctx, OutputKind::draft_tokens));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToEnd(entry);
  Value tokenIds = entry->getArgument(0), positions = entry->getArgument(1),
        rows = entry->getArgument(2);

  Value zero = arith::ConstantIndexOp::create(b, fileLoc, 0);
  Value tokens = tensor::DimOp::create(b, fileLoc, tokenIds, zero);
  Value rowCount = tensor::DimOp::create(b, fileLoc, rows, zero);

  // Nemotron-H checkpoints keep the original `backbone.` names (transformers 5 maps them
  // to `model.` when loading).
  const bool nemotron = m.isNemotronH();
  const std::string root = nemotron ? "backbone" : "model";
  const std::string embedName = nemotron ? "backbone.embeddings" : "model.embed_tokens";
  Value h = embedding(embedName + ".weight", tokenIds, tokens, loc(embedName));
  SmallVector<const LayerSpec *> draftLayers;
  const bool rolled = options.rollLayers && layersRoll();
  if (rolled)
    buildRolledLayers(h, zero, positions, tokens);
  for (auto [i, layer] : llvm::enumerate(m.layers)) {
    if (rolled) {
      if (layer.draft)
        draftLayers.push_back(&layer);
      continue;
    }
    if (nemotron) {
      buildNemotronBlock(layer, h, positions, tokens);
      continue;
    }
    if (m.isDeepSeek()) {
      // An MLA entry, then its feed-forward entry (HFConfig's readDeepSeek).
      if (layer.kind != LayerKind::mla)
        continue;
      if (layer.draft) {
        draftLayers.push_back(&layer);
        continue;
      }
      bool moe = i + 1 < m.layers.size() && m.layers[i + 1].kind == LayerKind::moe;
      buildDeepSeekLayer(layer, moe, h, positions, tokens);
      continue;
    }
    if (m.isQwen3Next()) {
      buildQwen3NextLayer(layer, h, positions, tokens);
      continue;
    }
    if (layer.kind != LayerKind::attention)
      continue;
    if (layer.draft)
      draftLayers.push_back(&layer);
    else
      buildLayer(layer, h, positions, tokens);
  }

  // The rows the runtime asks for (each sequence's last token in decode), then the
  // final norm and the lm_head on those rows only. An MTP module reads every token's
  // final hidden state: then the norm runs on all of them first (row-wise: the same
  // bits at the logit rows).
  Location gatherLoc = loc(root);
  const std::string finalNorm = nemotron ? "backbone.norm_f" : "model.norm";
  Value finalHidden = mtp ? rmsNorm(h, finalNorm + ".weight", tokens, loc(finalNorm)) : h;
  Value last = GatherRowsOp::create(b, gatherLoc, activation({m.hidden}), finalHidden, rows,
                                    empty({m.hidden}, rowCount, gatherLoc))
                   .getResult();
  Value normed = mtp ? last : rmsNorm(last, finalNorm + ".weight", rowCount, loc(finalNorm));
  Value out =
      lmHead(normed, m.tied ? embedName + ".weight" : "lm_head.weight", rowCount, loc("lm_head"));
  if (!mtp) {
    func::ReturnOp::create(b, fileLoc, out);
  } else {
    Location at = loc("model.layers." + std::to_string(mtp->index));
    auto tokenType = RankedTensorType::get({ShapedType::kDynamic, 1}, b.getI32Type());
    Value picks = ArgmaxOp::create(b, at, tokenType, out,
                                   tensor::EmptyOp::create(b, at, tokenType, ValueRange{rowCount}))
                      .getResult();
    Value next = NextTokensOp::create(b, at, ids, tokenIds, picks, rows,
                                      tensor::EmptyOp::create(b, at, ids, ValueRange{tokens}))
                     .getResult();
    Value drafts = mtpModule(*mtp, next, finalHidden, positions, tokens, rows, rowCount);
    func::ReturnOp::create(b, fileLoc, ValueRange{out, drafts});
  }

  if (m.isDeepSeek()) {
    if (!draftLayers.empty() && !mtp)
      buildMlaDraftSkeleton(draftLayers);
    return success();
  }
  for (const LayerSpec *layer : draftLayers)
    buildEagle3Head(*layer);
  return success();
}

bool DenseDecoderBuilder::layersRoll() const {
  if (!m.isDense())
    return false;
  const LayerSpec *first = nullptr;
  int64_t count = 0;
  for (const LayerSpec &layer : m.layers) {
    // A layer's MLP or MoE entry goes with its attention (buildLayer builds both).
    if (layer.draft || layer.kind == LayerKind::mlp || layer.kind == LayerKind::moe)
      continue;
    if (layer.kind != LayerKind::attention || layer.index != count)
      return false;
    if (!first)
      first = &layer;
    else if (layer.window != first->window ||
             m.isMoeLayer(layer.index) != m.isMoeLayer(first->index))
      return false;
    ++count;
  }
  return count >= 2;
}

void DenseDecoderBuilder::buildRolledLayers(Value &h, Value zero, Value positions, Value tokens) {
  auto isBody = [](const LayerSpec &layer) {
    return !layer.draft && layer.kind == LayerKind::attention;
  };
  const LayerSpec *first = llvm::find_if(m.layers, isBody);
  int64_t count = llvm::count_if(m.layers, isBody);
  Value upper = arith::ConstantIndexOp::create(b, fileLoc, count);
  Value step = arith::ConstantIndexOp::create(b, fileLoc, 1);
  auto loop = scf::ForOp::create(b, fileLoc, zero, upper, step, ValueRange{h});
  loop->setAttr(KilnDialect::kLayersAttrName, b.getUnitAttr());
  OpBuilder::InsertionGuard guard(b);
  Block *body = loop.getBody();
  b.setInsertionPointToEnd(body);
  layerIndex = loop.getInductionVar();
  Value carried = loop.getRegionIterArgs().front();
  buildLayer(*first, carried, positions, tokens);
  layerIndex = Value();
  scf::YieldOp::create(b, fileLoc, carried);
  h = loop.getResult(0);
}

const LayerSpec *DenseDecoderBuilder::mtpLayer() const {
  if (!options.mtpDrafts || !m.isDeepSeek())
    return nullptr;
  for (const LayerSpec &layer : m.layers)
    if (layer.draft == DraftKind::mtp)
      return &layer;
  return nullptr;
}

Value DenseDecoderBuilder::mtpModule(const LayerSpec &layer, Value next, Value finalHidden,
                                     Value positions, Value tokens, Value rows,
                                     Value rowCount) {
  const std::string prefix = "model.layers." + std::to_string(layer.index);
  Location at = loc(prefix);
  // The module's embedding is the target's (DeepSeek's checkpoints repeat it under the
  // module's prefix; vLLM and SGLang share it too).
  Location embedLoc = loc("model.embed_tokens");
  Value table = weight("model.embed_tokens.weight", {m.vocab, m.hidden}, embedLoc);
  Value embedded = EmbeddingOp::create(b, embedLoc, activation({m.hidden}), next, table,
                                       empty({m.hidden}, tokens, embedLoc))
                       .getResult();
  // eh_proj([enorm(embedding) | hnorm(hidden)]).
  Value en = rmsNorm(embedded, prefix + ".enorm.weight", tokens, loc(prefix + ".enorm"));
  Value hn = rmsNorm(finalHidden, prefix + ".hnorm.weight", tokens, loc(prefix + ".hnorm"));
  Value both = ConcatOp::create(b, at, activation({2 * m.hidden}), en, hn,
                                empty({2 * m.hidden}, tokens, at))
                   .getResult();
  Value h = linear(both, prefix + ".eh_proj", m.hidden, 2 * m.hidden, false, tokens);
  buildDeepSeekLayer(layer, m.deepSeekMoeLayer(layer.index), h, positions, tokens);
  Value last = GatherRowsOp::create(b, at, activation({m.hidden}), h, rows,
                                    empty({m.hidden}, rowCount, at))
                   .getResult();
  Value normed = rmsNorm(last, prefix + ".shared_head.norm.weight", rowCount,
                         loc(prefix + ".shared_head.norm"));
  Value logits = linear(normed, prefix + ".shared_head.head", m.vocab, m.hidden, false,
                        rowCount);
  auto tokenType = RankedTensorType::get({ShapedType::kDynamic, 1}, b.getI32Type());
  return ArgmaxOp::create(b, at, tokenType, logits,
                          tensor::EmptyOp::create(b, at, tokenType, ValueRange{rowCount}))
      .getResult();
}



uint64_t DenseDecoderBuilder::weightBytes() {
  uint64_t total = 0;
  for (WeightOp w : weights) {
    std::optional<uint64_t> bytes = w.getBytes();
    if (!bytes || __builtin_add_overflow(total, *bytes, &total))
      return UINT64_MAX;
  }
  for (WeightFamilyOp family : families) {
    std::optional<uint64_t> bytes = family.getMemberBytes();
    uint64_t all = 0;
    if (!bytes || __builtin_mul_overflow(*bytes, static_cast<uint64_t>(family.getCount()), &all) ||
        __builtin_add_overflow(total, all, &total))
      return UINT64_MAX;
  }
  return total;
}

} // namespace

OwningOpRef<ModuleOp> kiln::import_detail::buildDenseDecoder(const ModelSpec &m, StringRef file,
                                                             MLIRContext *ctx,
                                                             const ImportOptions &options) {
  OwningOpRef<ModuleOp> module = ModuleOp::create(FileLineColLoc::get(ctx, file, 1, 1));
  DenseDecoderBuilder builder(m, file, ctx, *module, options);
  if (failed(builder.build()))
    return nullptr;
  setModuleConfig(*module, m, options, builder.weightBytes(), builder.ranks());
  if (failed(mlir::verify(*module)))
    return nullptr;
  return module;
}
