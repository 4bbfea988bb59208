//===- Manifest.cpp - the text a compiled model describes itself with -----===//
//
// docs/abi.md defines the format; lib/Runtime/Weights/Manifest.cpp parses it. The
// numbers come from the module's plans (`kiln.plan`, `kiln.device_memory`) and its
// `kiln.weight`s, so the runtime allocates exactly what the report shows.
//
//===----------------------------------------------------------------------===//
#include "kiln/Dialect/Kiln/Kiln.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace kiln {

namespace {
/// Kiln's dtype name (ABI.def) of a weight element type; empty if unsupported.
StringRef dtypeName(Type type) {
  if (type.isBF16())
    return "bf16";
  if (type.isF16())
    return "f16";
  if (type.isF32())
    return "f32";
  if (type.isInteger(32))
    return "i32";
  return "";
}

/// One `weight` line of the manifest: a `kiln.weight` or a member of a family.
struct WeightLine {
  Operation *op;
  std::string name;
  RankedTensorType type;
  std::optional<uint64_t> offset;
  uint64_t bytes;
  bool mxfp4;
  std::optional<ArrayRef<int64_t>> checkpointShape;
  bool transpose;
  std::optional<ArrayRef<int64_t>> rowGroups;
  ShardAttr shard;
};

LogicalResult printWeight(raw_ostream &os, const WeightLine &weight) {
  StringRef weightName = weight.name;
  if (llvm::any_of(weightName, [](char c) { return c <= ' '; }))
    return weight.op->emitError() << "weight name '" << weightName
                                  << "' contains whitespace or control characters";
  StringRef dtype = dtypeName(weight.type.getElementType());
  if (dtype.empty())
    return weight.op->emitError() << "weight '" << weightName << "' has element type "
                                  << weight.type.getElementType()
                                  << "; the runtime loads bf16, f16, f32 and i32";
  if (!weight.offset)
    return weight.op->emitError() << "weight '" << weightName
                                  << "' has no planned offset; run kiln-plan-memory";
  os << "weight " << weightName << " " << dtype << " ";
  llvm::interleave(weight.type.getShape(), os, "x");
  os << " " << *weight.offset << " " << weight.bytes;
  if (weight.mxfp4)
    os << " mxfp4";
  if (weight.checkpointShape) {
    os << " from=";
    llvm::interleave(*weight.checkpointShape, os, "x");
  }
  if (weight.transpose)
    os << " transpose";
  if (weight.rowGroups) {
    os << " rows=" << weight.rowGroups->front() << ":";
    llvm::interleave(weight.rowGroups->drop_front(), os, ",");
  }
  if (weight.shard) {
    os << " shard=" << weight.shard.getDim() << "/" << weight.shard.getParts();
    if (DenseI64ArrayAttr segments = weight.shard.getSegments()) {
      os << ":";
      llvm::interleave(segments.asArrayRef(), os, ",");
    }
  }
  os << "\n";
  return success();
}

/// Vocabulary size (the logits' columns) and hidden size (the embedding's columns).
std::pair<int64_t, int64_t> modelWidths(ModuleOp module) {
  int64_t vocab = 0, hidden = 0;
  module.walk([&](Operation *op) {
    if (auto output = dyn_cast<OutputOp>(op); output && output.getKind() == OutputKind::logits)
      vocab = cast<ShapedType>(output.getBuffer().getType()).getDimSize(1);
    if (auto embedding = dyn_cast<EmbeddingOp>(op))
      hidden = cast<ShapedType>(embedding.getTable().getType()).getDimSize(1);
  });
  return {vocab, hidden};
}
} // namespace

FailureOr<std::string> buildManifest(ModuleOp module) {
  ModuleConfig config = getModuleConfig(module);
  auto plan = module->getAttrOfType<PlanAttr>(KilnDialect::kPlanAttrName);
  auto memory = module->getAttrOfType<DeviceMemoryAttr>(KilnDialect::kDeviceMemoryAttrName);
  if (!config.runtime || !plan || !memory)
    return module.emitError() << "the manifest needs 'kiln.runtime', 'kiln.plan' and "
                                 "'kiln.device_memory'; run kiln-plan-memory and "
                                 "kiln-plan-activations first";
  auto [vocab, hidden] = modelWidths(module);
  if (vocab <= 0 || hidden <= 0)
    return module.emitError() << "the manifest needs the model's logits output "
                                 "(kiln.output) and its embedding (kiln.embedding)";
  int64_t layers = 0;
  module.walk([&](CachedOpInterface op) {
    // An op of a layer loop stands for one op a layer, from its own layer on.
    int64_t last = op.getLayerIndex();
    if (auto loop = op->getParentOfType<scf::ForOp>();
        loop && loop->hasAttr(KilnDialect::kLayersAttrName))
      if (std::optional<APInt> trips = loop.getStaticTripCount(); trips && !trips->isZero())
        last += static_cast<int64_t>(trips->getZExtValue()) - 1;
    layers = std::max(layers, last + 1);
  });

  std::string text;
  llvm::raw_string_ostream os(text);
  std::string name = config.model ? config.model.getName().str() : "model";
  std::replace_if(name.begin(), name.end(), [](char c) { return c <= ' '; }, '_');
  StepLimits limits = getStepLimits(config);
  os << "kiln-model 2\n"
     << "name " << name << "\n"
     << "vocab_size " << vocab << "\n"
     << "hidden_size " << hidden << "\n"
     << "num_layers " << layers << "\n"
     << "max_batch " << config.runtime.getMaxBatch() << "\n"
     << "max_seq_len " << config.runtime.getMaxSeqLen() << "\n"
     << "page_size " << config.runtime.getPageSize() << "\n"
     << "kv_pages " << plan.getKvPages() << "\n"
     << "max_step_tokens " << memory.getMaxStepTokens() << "\n"
     << "max_logit_rows " << memory.getMaxLogitRows() << "\n"
     << "max_draft_len " << limits.maxDraftLen << "\n"
     << "weight_bytes " << memory.getWeights() << "\n"
     << "cache_bytes " << memory.getCaches() << "\n"
     << "speculative_bytes " << plan.getSpeculativeBytes() << "\n"
     << "activation_bytes " << memory.getActivations() << "\n"
     << "workspace_bytes " << memory.getWorkspace() << "\n"
     << "io_bytes " << memory.getIo() << "\n"
     << "cuda_graphs " << config.runtime.getCapturableShapes(limits.maxDraftLen) << "\n"
     << "cuda_graph_bytes " << memory.getCudaGraphs() << "\n"
     << "cuda_graph_batches ";
  if (DenseI32ArrayAttr batches = config.runtime.getCudaGraphBatches())
    llvm::interleave(batches.asArrayRef(), os, ",");
  else
    os << "all";
  os << "\n";
  if (unsigned ring = config.runtime.getKvRingWindow())
    os << "kv_ring_window " << ring << "\n";
  if (config.model && config.model.getTpRanks() > 1)
    os << "tp_ranks " << config.model.getTpRanks() << "\n";
  if (uint64_t collectives = memory.getCollectives())
    os << "collective_bytes " << collectives << "\n";
  // A run of consecutive weight families of one count stands for its members,
  // member-major (the layout kiln-plan-memory gave them, and the lines an unrolled
  // import's weights make): layer 0's weights, then layer 1's, ...
  SmallVector<Operation *> ops;
  for (Operation &op : module.getBody()->getOperations())
    if (isa<WeightOp, WeightFamilyOp>(op))
      ops.push_back(&op);
  for (size_t i = 0; i < ops.size();) {
    if (auto weight = dyn_cast<WeightOp>(ops[i])) {
      std::optional<uint64_t> offset;
      if (weight.getOffset())
        offset = *weight.getOffset();
      WeightLine line{weight,
                      weight.getSymName().str(),
                      weight.getTensorType(),
                      offset,
                      static_cast<uint64_t>(weight.getBytes().value_or(0)),
                      weight.getMxfp4Checkpoint(),
                      weight.getCheckpointShape(),
                      weight.getTransposeCheckpoint(),
                      weight.getRowGroups(),
                      weight.getShardAttr()};
      if (failed(printWeight(os, line)))
        return failure();
      ++i;
      continue;
    }
    size_t end = i + 1;
    auto head = cast<WeightFamilyOp>(ops[i]);
    while (end < ops.size() && ops[end] == ops[end - 1]->getNextNode() &&
           isa<WeightFamilyOp>(ops[end]) &&
           cast<WeightFamilyOp>(ops[end]).getCount() == head.getCount())
      ++end;
    for (int64_t member = 0; member < head.getCount(); ++member)
      for (size_t f = i; f < end; ++f) {
        auto family = cast<WeightFamilyOp>(ops[f]);
        std::optional<uint64_t> offset;
        if (family.getOffset() && family.getStride())
          offset = *family.getOffset() + static_cast<uint64_t>(member) * *family.getStride();
        WeightLine line{family,
                        family.getMemberName(member),
                        family.getTensorType(),
                        offset,
                        family.getMemberBytes().value_or(0),
                        family.getMxfp4Checkpoint(),
                        family.getCheckpointShape(),
                        family.getTransposeCheckpoint(),
                        family.getRowGroups(),
                        family.getShardAttr()};
        if (failed(printWeight(os, line)))
          return failure();
      }
    i = end;
  }
  os << "end\n";
  return text;
}

} // namespace kiln
