//===- Manifest.cpp - the text a compiled model describes itself with -----===//
//
// docs/abi.md defines the format; lib/Runtime/Weights/Manifest.cpp parses it. The
// numbers come from the module's plans (`kiln.plan`, `kiln.device_memory`) and its
// `kiln.weight`s, so the runtime allocates exactly what the report shows.
//
//===----------------------------------------------------------------------===//
#include "kiln/Dialect/Kiln/Kiln.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
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
  module.walk([&](CachedOpInterface op) { layers = std::max(layers, op.getLayerIndex() + 1); });

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
  for (WeightOp weight : module.getOps<WeightOp>()) {
    StringRef weightName = weight.getSymName();
    if (llvm::any_of(weightName, [](char c) { return c <= ' '; }))
      return weight.emitError() << "weight name '" << weightName
                                << "' contains whitespace or control characters";
    RankedTensorType type = weight.getTensorType();
    StringRef dtype = dtypeName(type.getElementType());
    if (dtype.empty())
      return weight.emitError() << "weight '" << weightName << "' has element type "
                                << type.getElementType()
                                << "; the runtime loads bf16, f16, f32 and i32";
    if (!weight.getOffset())
      return weight.emitError() << "weight '" << weightName
                                << "' has no planned offset; run kiln-plan-memory";
    os << "weight " << weightName << " " << dtype << " ";
    llvm::interleave(type.getShape(), os, "x");
    os << " " << *weight.getOffset() << " " << weight.getBytes().value_or(0);
    if (weight.getMxfp4Checkpoint())
      os << " mxfp4";
    if (std::optional<ArrayRef<int64_t>> shape = weight.getCheckpointShape()) {
      os << " from=";
      llvm::interleave(*shape, os, "x");
    }
    if (weight.getTransposeCheckpoint())
      os << " transpose";
    if (std::optional<ArrayRef<int64_t>> groups = weight.getRowGroups()) {
      os << " rows=" << groups->front() << ":";
      llvm::interleave(groups->drop_front(), os, ",");
    }
    if (ShardAttr shard = weight.getShardAttr()) {
      os << " shard=" << shard.getDim() << "/" << shard.getParts();
      if (DenseI64ArrayAttr segments = shard.getSegments()) {
        os << ":";
        llvm::interleave(segments.asArrayRef(), os, ",");
      }
    }
    os << "\n";
  }
  os << "end\n";
  return text;
}

} // namespace kiln
