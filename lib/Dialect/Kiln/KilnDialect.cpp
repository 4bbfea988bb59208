//===- KilnDialect.cpp - dialect registration, module config, bytes -------===//
#include "kiln/Dialect/Kiln/Kiln.h"
#include "kiln/Runtime/Layout.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/LoopLikeInterface.h"

#include <algorithm>
#include <iterator>

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/Format.h"

using namespace mlir;
using namespace kiln;

#include "kiln/Dialect/Kiln/KilnDialect.cpp.inc"
#include "kiln/Dialect/Kiln/KilnEnums.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "kiln/Dialect/Kiln/KilnTypes.cpp.inc"

void KilnDialect::initialize() {
  registerAttributes();
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "kiln/Dialect/Kiln/KilnOps.cpp.inc"
      >();
}

void KilnDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "kiln/Dialect/Kiln/KilnTypes.cpp.inc"
      >();
}

/// Checks the module configuration attributes wherever they appear.
LogicalResult KilnDialect::verifyOperationAttribute(Operation *op, NamedAttribute attribute) {
  StringRef name = attribute.getName().strref();
  Attribute value = attribute.getValue();
  auto expect = [&](bool ok, StringRef what) -> LogicalResult {
    if (!ok)
      return op->emitError() << "'" << name << "' must be a " << what << " attribute, got "
                             << value;
    if (!isa<ModuleOp>(op))
      return op->emitError() << "'" << name
                             << "' configures a compilation and belongs on a builtin.module";
    return success();
  };
  if (name == kTargetAttrName)
    return expect(isa<TargetAttr>(value), "#kiln.target");
  if (name == kSpecAttrName)
    return expect(isa<SpecAttr>(value), "#kiln.spec");
  if (name == kRuntimeAttrName)
    return expect(isa<RuntimeAttr>(value), "#kiln.runtime");
  if (name == kModelAttrName)
    return expect(isa<ModelAttr>(value), "#kiln.model");
  if (name == kPlanAttrName)
    return expect(isa<PlanAttr>(value), "#kiln.plan");
  if (name == kDeviceMemoryAttrName)
    return expect(isa<DeviceMemoryAttr>(value), "#kiln.device_memory");
  if (name == kEntryAttrName) {
    if (!isa<UnitAttr>(value) || !isa<FunctionOpInterface>(op))
      return op->emitError() << "'" << name << "' is a unit attribute of the model function";
    return success();
  }
  if (name == kLayerAttrName) {
    auto layer = dyn_cast<IntegerAttr>(value);
    if (!layer || !layer.getType().isInteger(64) || layer.getInt() < 0 ||
        op->getNumRegions() != 0)
      return op->emitError() << "'" << name
                             << "' is the non-negative i64 decoder layer of a runtime call";
    return success();
  }
  if (name == kLayersAttrName) {
    // The passes read the layer from the induction variable and the count from the
    // constant bounds (kiln-plan-memory, kiln-expand-layers).
    auto loop = dyn_cast<LoopLikeOpInterface>(op);
    if (!isa<UnitAttr>(value) || !loop || !loop.getSingleInductionVar())
      return op->emitError() << "'" << name
                             << "' is a unit attribute of a loop over the decoder layers "
                                "(one induction variable, the layer index)";
    return success();
  }
  return op->emitError() << "unknown kiln attribute '" << name
                         << "'; expected one of kiln.target, kiln.spec, kiln.runtime, "
                            "kiln.model, kiln.plan, kiln.device_memory, kiln.entry, "
                            "kiln.layer, kiln.layers";
}

LogicalResult KilnDialect::verifyRegionArgAttribute(Operation *op, unsigned, unsigned argIndex,
                                                    NamedAttribute attribute) {
  StringRef name = attribute.getName().strref();
  if (name == kInputAttrName) {
    if (!isa<InputKindAttr>(attribute.getValue()))
      return op->emitError() << "argument " << argIndex << ": '" << name
                             << "' must be #kiln<input token_ids|positions|logit_rows>";
    return success();
  }
  if (name == kContextAttrName) {
    if (!isa<UnitAttr>(attribute.getValue()))
      return op->emitError() << "argument " << argIndex << ": '" << name
                             << "' is a unit attribute";
    return success();
  }
  return op->emitError() << "argument " << argIndex << ": unknown kiln argument attribute '"
                         << name << "'; expected kiln.input or kiln.context";
}

LogicalResult KilnDialect::verifyRegionResultAttribute(Operation *op, unsigned,
                                                       unsigned resultIndex,
                                                       NamedAttribute attribute) {
  StringRef name = attribute.getName().strref();
  if (name == kOutputAttrName && isa<OutputKindAttr>(attribute.getValue()))
    return success();
  return op->emitError() << "result " << resultIndex << ": '" << name
                         << "' is not a kiln result attribute; expected kiln.output = "
                            "#kiln<output logits>";
}

ModuleConfig kiln::getModuleConfig(ModuleOp module) {
  ModuleConfig config;
  config.target = module->getAttrOfType<TargetAttr>(KilnDialect::kTargetAttrName);
  config.spec = module->getAttrOfType<SpecAttr>(KilnDialect::kSpecAttrName);
  config.runtime = module->getAttrOfType<RuntimeAttr>(KilnDialect::kRuntimeAttrName);
  config.model = module->getAttrOfType<ModelAttr>(KilnDialect::kModelAttrName);
  return config;
}

unsigned kiln::planShardDivisor(const ModuleConfig &config) {
  if (!config.runtime)
    return 1;
  unsigned ranks = config.model ? std::max(1u, config.model.getTpRanks()) : 1;
  // verify-config refuses a runtime tp other than a per-rank graph's ranks.
  return std::max(1u, config.runtime.getTp() / ranks);
}

unsigned kiln::planShardDivisor(Operation *inModule, RuntimeAttr runtime) {
  if (!runtime)
    return 1;
  auto module = isa<ModuleOp>(inModule) ? cast<ModuleOp>(inModule)
                                        : inModule->getParentOfType<ModuleOp>();
  ModuleConfig config = module ? getModuleConfig(module) : ModuleConfig();
  config.runtime = runtime;
  return planShardDivisor(config);
}

StepLimits kiln::getStepLimits(const ModuleConfig &config) {
  StepLimits limits;
  if (!config.runtime)
    return limits;
  uint64_t batch = config.runtime.getMaxBatch();
  limits.maxDraftLen = config.spec ? config.spec.getMaxDraftLen() : 0;
  limits.maxLogitRows = batch * (1 + limits.maxDraftLen);
  uint64_t prefill = std::min<uint64_t>(config.runtime.getMaxSeqLen(), kDefaultPrefillTokens);
  limits.maxStepTokens = config.runtime.getMaxStepTokens()
                             ? config.runtime.getMaxStepTokens()
                             : std::max<uint64_t>(limits.maxLogitRows, prefill);
  return limits;
}

//===----------------------------------------------------------------------===//
// Vocabulary
//===----------------------------------------------------------------------===//

bool kiln::isSpeculativeOnlyKind(ResourceKind kind) {
  switch (kind) {
  case ResourceKind::kv:
  case ResourceKind::mla_latent:
  case ResourceKind::ssm_state:
  case ResourceKind::conv_state:
  case ResourceKind::gdn_state:
    return false;
  case ResourceKind::intermediate_ssm_state:
  case ResourceKind::intermediate_conv_state:
  case ResourceKind::replay_x:
  case ResourceKind::replay_b:
  case ResourceKind::replay_dt:
  case ResourceKind::draft_kv:
  case ResourceKind::intermediate_gdn_state:
  case ResourceKind::gdn_replay_k:
  case ResourceKind::gdn_replay_v:
  case ResourceKind::gdn_replay_gb:
    return true;
  }
  return false;
}

bool kiln::isPerTokenKind(ResourceKind kind) {
  return kind == ResourceKind::kv || kind == ResourceKind::mla_latent ||
         kind == ResourceKind::draft_kv;
}

bool kiln::isPerDraftStepKind(ResourceKind kind) {
  return kind == ResourceKind::intermediate_ssm_state ||
         kind == ResourceKind::intermediate_conv_state ||
         kind == ResourceKind::intermediate_gdn_state;
}


StringRef kiln::stringifyOpFamily(OpFamily family) {
  switch (family) {
  case OpFamily::attention:
    return "attention";
  case OpFamily::mla:
    return "mla_attention";
  case OpFamily::ssm:
    return "ssm";
  case OpFamily::conv:
    return "causal_conv";
  case OpFamily::gdn:
    return "gated_delta_net";
  }
  return "unknown";
}

//===----------------------------------------------------------------------===//
// Bytes
//===----------------------------------------------------------------------===//

std::string kiln::formatBytes(uint64_t bytes) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  unsigned unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  if (unit == 0)
    os << bytes << " B";
  else
    os << llvm::format("%.2f %s", value, units[unit]);
  return text;
}

uint64_t kiln::getElementBytes(Type type) {
  unsigned bits = type.isIntOrFloat() ? type.getIntOrFloatBitWidth() : 0;
  return (bits + 7) / 8;
}

SmallVector<int64_t> kiln::shardUnitShape(ArrayRef<int64_t> unit,
                                          std::optional<int64_t> shard, unsigned tp) {
  SmallVector<int64_t> shape(unit);
  if (shard && *shard >= 0 && *shard < static_cast<int64_t>(shape.size()) && tp > 1)
    shape[*shard] = std::max<int64_t>(1, shape[*shard] / tp);
  return shape;
}

uint64_t kiln::tokensPerSequence(RuntimeAttr runtime) {
  uint64_t tokens = runtime.getMaxSeqLen();
  uint64_t page = runtime.getPageSize();
  return (tokens + page - 1) / page * page;
}

std::optional<uint64_t> kiln::computeUnitBytes(CacheResourceInterface resource,
                                               RuntimeAttr runtime) {
  return computeUnitBytes(resource.getUnitShape(runtime), resource.getResourceElementType());
}

std::optional<uint64_t> kiln::computeUnitBytes(ArrayRef<int64_t> shape, Type elementType) {
  std::optional<uint64_t> bytes = getElementBytes(elementType);
  for (int64_t dim : shape) {
    if (dim < 0)
      return std::nullopt;
    bytes = llvm::checkedMulUnsigned<uint64_t>(*bytes, static_cast<uint64_t>(dim));
    if (!bytes || *bytes > kMaxPlanBytes)
      return std::nullopt;
  }
  return bytes;
}

uint64_t kiln::ringPagesPerSlot(CacheResourceInterface resource, RuntimeAttr runtime) {
  const int64_t window = resource.getWindowTokens();
  if (resource.getAllocationUnit() != AllocationUnit::perToken || window <= 0 ||
      window != static_cast<int64_t>(runtime.getKvRingWindow()))
    return 0;
  return static_cast<uint64_t>(kiln_rt_ring_pages(
      window, runtime.getPageSize(), runtime.getMaxStepTokens(), runtime.getMaxSeqLen()));
}

/// The units (slots or tokens) of a resource, with the factors named for messages.
static std::optional<uint64_t> resourceUnits(CacheResourceInterface resource,
                                             RuntimeAttr runtime,
                                             std::optional<uint64_t> kvPagesOverride) {
  if (resource.getAllocationUnit() == AllocationUnit::perSlot)
    return runtime.getMaxBatch();
  if (uint64_t ring = ringPagesPerSlot(resource, runtime))
    return llvm::checkedMulUnsigned<uint64_t>(ring * runtime.getPageSize(), runtime.getMaxBatch());
  if (kvPagesOverride)
    return llvm::checkedMulUnsigned<uint64_t>(*kvPagesOverride, runtime.getPageSize());
  return llvm::checkedMulUnsigned<uint64_t>(
      tokensPerSequence(runtime), runtime.getMaxBatch());
}

std::optional<uint64_t> kiln::computeResourceBytes(CacheResourceInterface resource,
                                                   RuntimeAttr runtime,
                                                   std::optional<uint64_t> kvPagesOverride) {
  std::optional<uint64_t> unit = computeUnitBytes(resource, runtime);
  std::optional<uint64_t> units = resourceUnits(resource, runtime, kvPagesOverride);
  if (!unit || !units)
    return std::nullopt;
  std::optional<uint64_t> bytes = llvm::checkedMulUnsigned<uint64_t>(*unit, *units);
  if (!bytes || *bytes > kMaxPlanBytes)
    return std::nullopt;
  return bytes;
}

std::string kiln::describeResourceBytes(CacheResourceInterface resource, RuntimeAttr runtime,
                                        std::optional<uint64_t> kvPagesOverride) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "unit [";
  llvm::interleave(resource.getUnitShape(runtime), os, " x ");
  os << "] of " << getElementBytes(resource.getResourceElementType()) << " bytes x ";
  if (resource.getAllocationUnit() == AllocationUnit::perSlot)
    os << runtime.getMaxBatch() << " slots (max_batch)";
  else if (uint64_t ring = ringPagesPerSlot(resource, runtime))
    os << ring << " ring pages x " << runtime.getPageSize() << " tokens x " << runtime.getMaxBatch()
       << " slots (max_batch; kv_ring_window " << runtime.getKvRingWindow() << ")";
  else if (kvPagesOverride)
    os << *kvPagesOverride << " pages x " << runtime.getPageSize() << " tokens";
  else
    os << tokensPerSequence(runtime)
       << " tokens per sequence x " << runtime.getMaxBatch() << " sequences (max_batch)";
  return text;
}
