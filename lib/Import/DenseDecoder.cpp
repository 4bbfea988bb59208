//===- DenseDecoder.cpp - the whole decoder graph of dense models ------===//
//
// Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen2-MoE and Qwen3-MoE as transformers runs them, one `@forward` from the
// token ids to the logits:
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

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
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
  DenseDecoderBuilder(const ModelSpec &m, StringRef file, MLIRContext *ctx, ModuleOp module)
      : m(m), ctx(ctx), module(module), b(ctx), fileLoc(FileLineColLoc::get(ctx, file, 1, 1)) {}

  /// Builds `@forward` (and `@eagle3_head` for an Eagle3 draft layer).
  void build();

  /// Bytes of all declared weights (saturating).
  uint64_t weightBytes();

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
  /// The value of weight `name` (declared as a `kiln.weight` on first use).
  Value weight(const Twine &name, ArrayRef<int64_t> shape, Location at);
  /// `tensor.empty(count) : tensor<?x dims x dtype>`.
  Value empty(ArrayRef<int64_t> dims, Value count, Location at) {
    return tensor::EmptyOp::create(b, at, activation(dims), ValueRange{count});
  }

  Value rmsNorm(Value x, const Twine &weightName, Value count, Location at);
  /// `module.weight` [out, in] (and `module.bias` [out]) applied to x [count, in].
  Value linear(Value x, const Twine &module, int64_t out, int64_t in, bool bias, Value count);
  /// [count, heads * d] -> [count, heads, d].
  Value splitHeads(Value x, int64_t heads, Value count, Location at);
  Value rope(Value x, Value positions, Value count, Location at);

  void buildLayer(const LayerSpec &layer, Value &h, Value positions, Value tokens);
  /// The sparse MoE block of layer `prefix` (Mixtral's block_sparse_moe, Qwen3-MoE's
  /// mlp): the router linear and kiln.moe over the stacked expert weights.
  Value sparseMoe(Value x, const std::string &prefix, Value tokens);
  /// `module`'s gate_proj/up_proj/down_proj SwiGLU MLP of `inter` on x.
  Value swigluMlp(Value x, const std::string &module, int64_t inter, Value tokens);
  void buildEagle3Head(const LayerSpec &layer);

  const ModelSpec &m;
  MLIRContext *ctx;
  ModuleOp module;
  OpBuilder b;
  Location fileLoc;
  /// Weights go before the functions, in the order of first use.
  Operation *firstFunction = nullptr;
  llvm::StringMap<RankedTensorType> declared;
  SmallVector<WeightOp> weights;
};

Value DenseDecoderBuilder::weight(const Twine &name, ArrayRef<int64_t> shape, Location at) {
  std::string key = name.str();
  auto type = RankedTensorType::get(shape, m.dtype);
  if (!declared.count(key)) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(firstFunction);
    weights.push_back(WeightOp::create(b, loc(key), key, type, IntegerAttr()));
    declared[key] = type;
  }
  return WeightRefOp::create(b, at, type, key);
}

Value DenseDecoderBuilder::rmsNorm(Value x, const Twine &weightName, Value count, Location at) {
  auto type = cast<RankedTensorType>(x.getType());
  int64_t dim = type.getShape().back();
  Value w = weight(weightName, {dim}, at);
  Value init = empty(type.getShape().drop_front(), count, at);
  return RmsNormOp::create(b, at, type, x, w, init,
                           b.getF32FloatAttr(static_cast<float>(m.rmsNormEps)))
      .getResult();
}

Value DenseDecoderBuilder::linear(Value x, const Twine &modulePath, int64_t out, int64_t in,
                                  bool bias, Value count) {
  std::string path = modulePath.str();
  Location at = loc(path);
  Value w = weight(path + ".weight", {out, in}, at);
  Value biasValue = bias ? weight(path + ".bias", {out}, at) : Value();
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
  return RopeOp::create(b, at, type, x, positions, init, m.rope).getResult();
}

void DenseDecoderBuilder::buildLayer(const LayerSpec &layer, Value &h, Value positions,
                                     Value tokens) {
  std::string prefix = "model.layers." + std::to_string(layer.index);
  std::string attn = prefix + ".self_attn", mlp = prefix + ".mlp";
  int64_t qWidth = m.heads * m.headDim, kvWidth = m.kvHeads * m.headDim;
  Location attnLoc = loc(attn);

  Value x = rmsNorm(h, prefix + ".input_layernorm.weight", tokens,
                    loc(prefix + ".input_layernorm"));
  Value q = splitHeads(linear(x, attn + ".q_proj", qWidth, m.hidden, m.qkvBias, tokens),
                       m.heads, tokens, attnLoc);
  if (m.qkNorm)
    q = rmsNorm(q, attn + ".q_norm.weight", tokens, loc(attn + ".q_norm"));
  Value k = splitHeads(linear(x, attn + ".k_proj", kvWidth, m.hidden, m.qkvBias, tokens),
                       m.kvHeads, tokens, attnLoc);
  if (m.qkNorm)
    k = rmsNorm(k, attn + ".k_norm.weight", tokens, loc(attn + ".k_norm"));
  Value v = splitHeads(linear(x, attn + ".v_proj", kvWidth, m.hidden, m.qkvBias, tokens),
                       m.kvHeads, tokens, attnLoc);
  q = rope(q, positions, tokens, attnLoc);
  k = rope(k, positions, tokens, attnLoc);
  auto i64 = [&](int64_t value) { return b.getI64IntegerAttr(value); };
  Value a = AttentionOp::create(b, attnLoc, activation({m.heads, m.headDim}), q, k, v,
                                i64(layer.index), i64(m.heads), i64(m.kvHeads), i64(m.headDim),
                                layer.window ? i64(*layer.window) : IntegerAttr(),
                                DraftKindAttr())
                .getOut();
  SmallVector<ReassociationIndices> groups = {{0}, {1, 2}};
  Value merged = tensor::CollapseShapeOp::create(b, attnLoc, a, groups).getResult();
  Value o = linear(merged, attn + ".o_proj", m.hidden, qWidth, m.oBias, tokens);
  Location layerLoc = loc(prefix);
  h = AddOp::create(b, layerLoc, h.getType(), h, o, empty({m.hidden}, tokens, layerLoc))
          .getResult();

  x = rmsNorm(h, prefix + ".post_attention_layernorm.weight", tokens,
              loc(prefix + ".post_attention_layernorm"));
  if (m.isMoeLayer(layer.index)) {
    Value routed = sparseMoe(x, prefix, tokens);
    h = AddOp::create(b, layerLoc, h.getType(), h, routed, empty({m.hidden}, tokens, layerLoc))
            .getResult();
    return;
  }
  Value down = swigluMlp(x, mlp, m.intermediate, tokens);
  h = AddOp::create(b, layerLoc, h.getType(), h, down, empty({m.hidden}, tokens, layerLoc))
          .getResult();
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
  Value logits = linear(x, block + ".gate", m.experts, m.hidden, false, tokens);
  const int64_t inter = m.moeIntermediate;
  Value gate = weight(experts + gateName + ".weight", {m.experts, inter, m.hidden}, at);
  Value up = weight(experts + upName + ".weight", {m.experts, inter, m.hidden}, at);
  Value down = weight(experts + downName + ".weight", {m.experts, m.hidden, inter}, at);
  auto scratchType = RankedTensorType::get(
      {ShapedType::kDynamic, MoeOp::scratchBytesPerToken(m.hidden, inter, m.topK)},
      b.getIntegerType(8));
  Value scratch = tensor::EmptyOp::create(b, at, scratchType, ValueRange{tokens});
  auto moe = MoeOp::create(b, at, TypeRange{activation({m.hidden}), scratchType}, x, logits,
                           gate, up, down, empty({m.hidden}, tokens, at), scratch,
                           b.getI64IntegerAttr(m.topK),
                           m.normTopK ? b.getUnitAttr() : UnitAttr(),
                           m.roundRouterWeights ? b.getUnitAttr() : UnitAttr());
  Value routed = moe.getResult(0);
  if (!m.sharedIntermediate)
    return routed;
  // Qwen2-MoE's shared expert, scaled by the sigmoid of its one-output gate, joins the
  // routed experts' sum.
  Value shared = swigluMlp(x, block + ".shared_expert", m.sharedIntermediate, tokens);
  if (m.gatedSharedExpert) {
    const std::string gateName = block + ".shared_expert_gate";
    Location gateLoc = loc(gateName);
    Value w = weight(gateName + ".weight", {1, m.hidden}, gateLoc);
    shared = SigmoidGateOp::create(b, gateLoc, shared.getType(), x, w, shared,
                                   empty({m.hidden}, tokens, gateLoc))
                 .getResult();
  }
  return AddOp::create(b, at, routed.getType(), routed, shared, empty({m.hidden}, tokens, at))
      .getResult();
}

Value DenseDecoderBuilder::swigluMlp(Value x, const std::string &module, int64_t inter,
                                     Value tokens) {
  Value gate = linear(x, module + ".gate_proj", inter, m.hidden, false, tokens);
  Value up = linear(x, module + ".up_proj", inter, m.hidden, false, tokens);
  Location at = loc(module);
  Value act = SwigluOp::create(b, at, gate.getType(), gate, up, empty({inter}, tokens, at))
                  .getResult();
  return linear(act, module + ".down_proj", m.hidden, inter, false, tokens);
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
                                  entry->getArgument(1), i64(layer.index), i64(m.heads),
                                  i64(m.kvHeads), i64(m.headDim),
                                  layer.window ? i64(*layer.window) : IntegerAttr(),
                                  DraftKindAttr::get(ctx, DraftKind::eagle3))
                  .getOut();
  func::ReturnOp::create(b, at, out);
}

void DenseDecoderBuilder::build() {
  Type ids = RankedTensorType::get({ShapedType::kDynamic}, b.getI32Type());
  Type logits = activation({m.vocab});
  b.setInsertionPointToEnd(module.getBody());
  auto fn = func::FuncOp::create(b, fileLoc, "forward",
                                 b.getFunctionType({ids, ids, ids}, {logits}));
  firstFunction = fn;
  fn->setAttr(KilnDialect::kEntryAttrName, b.getUnitAttr());
  const InputKind inputs[] = {InputKind::token_ids, InputKind::positions,
                              InputKind::logit_rows};
  for (auto [index, kind] : llvm::enumerate(inputs))
    fn.setArgAttr(index, KilnDialect::kInputAttrName, InputKindAttr::get(ctx, kind));
  fn.setResultAttr(0, KilnDialect::kOutputAttrName,
                   OutputKindAttr::get(ctx, OutputKind::logits));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToEnd(entry);
  Value tokenIds = entry->getArgument(0), positions = entry->getArgument(1),
        rows = entry->getArgument(2);

  Value zero = arith::ConstantIndexOp::create(b, fileLoc, 0);
  Value tokens = tensor::DimOp::create(b, fileLoc, tokenIds, zero);
  Value rowCount = tensor::DimOp::create(b, fileLoc, rows, zero);

  Location embedLoc = loc("model.embed_tokens");
  Value table = weight("model.embed_tokens.weight", {m.vocab, m.hidden}, embedLoc);
  Value h = EmbeddingOp::create(b, embedLoc, activation({m.hidden}), tokenIds, table,
                                empty({m.hidden}, tokens, embedLoc))
                .getResult();
  SmallVector<const LayerSpec *> draftLayers;
  for (const LayerSpec &layer : m.layers) {
    if (layer.kind != LayerKind::attention)
      continue;
    if (layer.draft)
      draftLayers.push_back(&layer);
    else
      buildLayer(layer, h, positions, tokens);
  }

  // The rows the runtime asks for (each sequence's last token in decode), then the
  // final norm and the lm_head on those rows only.
  Location gatherLoc = loc("model");
  Value last = GatherRowsOp::create(b, gatherLoc, activation({m.hidden}), h, rows,
                                    empty({m.hidden}, rowCount, gatherLoc))
                   .getResult();
  Value normed = rmsNorm(last, "model.norm.weight", rowCount, loc("model.norm"));
  Value out;
  if (m.tied) {
    Location at = loc("lm_head");
    Value w = weight("model.embed_tokens.weight", {m.vocab, m.hidden}, at);
    out = LinearOp::create(b, at, logits, normed, w, Value(), empty({m.vocab}, rowCount, at))
              .getResult();
  } else {
    out = linear(normed, "lm_head", m.vocab, m.hidden, false, rowCount);
  }
  func::ReturnOp::create(b, fileLoc, out);

  for (const LayerSpec *layer : draftLayers)
    buildEagle3Head(*layer);
}

uint64_t DenseDecoderBuilder::weightBytes() {
  uint64_t total = 0;
  for (WeightOp w : weights) {
    std::optional<uint64_t> bytes = w.getBytes();
    if (!bytes || __builtin_add_overflow(total, *bytes, &total))
      return UINT64_MAX;
  }
  return total;
}

} // namespace

OwningOpRef<ModuleOp> kiln::import_detail::buildDenseDecoder(const ModelSpec &m, StringRef file,
                                                             MLIRContext *ctx,
                                                             const ImportOptions &options) {
  OwningOpRef<ModuleOp> module = ModuleOp::create(FileLineColLoc::get(ctx, file, 1, 1));
  DenseDecoderBuilder builder(m, file, ctx, *module);
  builder.build();
  setModuleConfig(*module, m, options, builder.weightBytes());
  if (failed(mlir::verify(*module)))
    return nullptr;
  return module;
}
