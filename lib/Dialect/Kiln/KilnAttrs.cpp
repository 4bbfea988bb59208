//===- KilnAttrs.cpp - module configuration attributes --------------------===//
#include "kiln/Dialect/Kiln/Kiln.h"
#include "kiln/Runtime/Layout.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace kiln;

#define GET_ATTRDEF_CLASSES
#include "kiln/Dialect/Kiln/KilnAttrs.cpp.inc"

void KilnDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "kiln/Dialect/Kiln/KilnAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// TargetAttr
//===----------------------------------------------------------------------===//

namespace {
std::string supportedSmList() {
  std::string list;
  for (const SmTraits &traits : supportedSms())
    list += (list.empty() ? "sm_" : ", sm_") + std::to_string(traits.sm);
  return list;
}

std::string presetList() {
  std::string list;
  for (const TargetPreset &preset : targetPresets())
    list += (list.empty() ? "" : ", ") + preset.name.str();
  return list;
}
} // namespace

TargetAttr TargetAttr::getPreset(MLIRContext *context, StringRef name) {
  if (std::optional<TargetPreset> preset = lookupTargetPreset(name)) {
    SmTraits traits = *lookupSmTraits(preset->sm);
    return TargetAttr::get(context, preset->name, preset->sm, preset->numSms,
                           preset->memoryBytes, traits.smemPerBlockOptin,
                           traits.featureBits);
  }
  std::optional<unsigned> sm = parseSmName(name);
  if (!sm || !name.starts_with("sm"))
    return {};
  std::optional<SmTraits> traits = lookupSmTraits(*sm);
  if (!traits)
    return {};
  return TargetAttr::get(context, ("sm_" + Twine(*sm)).str(), *sm, /*numSms=*/0,
                         /*memoryBytes=*/0, traits->smemPerBlockOptin,
                         traits->featureBits);
}

LogicalResult TargetAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 StringRef name, unsigned sm, unsigned numSms,
                                 uint64_t memoryBytes, uint64_t smemPerBlock,
                                 uint32_t featureBits) {
  if (name.empty())
    return emitError() << "#kiln.target needs a non-empty name";
  std::optional<SmTraits> traits = lookupSmTraits(sm);
  if (!traits)
    return emitError() << "#kiln.target '" << name << "': unsupported SM " << sm
                       << "; Kiln supports " << supportedSmList();
  if (smemPerBlock == 0 || smemPerBlock > traits->smemPerBlockOptin)
    return emitError() << "#kiln.target '" << name << "': smem_per_block = "
                       << smemPerBlock << " is outside (0, " << traits->smemPerBlockOptin
                       << "], the opt-in shared memory per block of sm_" << sm;
  for (TargetFeature feature : allTargetFeatures()) {
    uint32_t flag = static_cast<uint32_t>(feature);
    if ((featureBits & flag) && !(traits->featureBits & flag))
      return emitError() << "#kiln.target '" << name << "': feature '"
                         << stringifyTargetFeature(feature) << "' is not available on sm_"
                         << sm;
  }
  if (featureBits & ~((1u << allTargetFeatures().size()) - 1))
    return emitError() << "#kiln.target '" << name << "': unknown feature bits";
  return success();
}

Attribute TargetAttr::parse(AsmParser &parser, Type) {
  MLIRContext *context = parser.getContext();
  SMLoc loc = parser.getCurrentLocation();
  std::string name;
  if (parser.parseLess() || parser.parseString(&name))
    return {};

  // Start from the preset (or the SM's defaults), then apply explicit keys.
  std::optional<TargetPreset> preset = lookupTargetPreset(name);
  std::optional<unsigned> sm = preset ? std::optional<unsigned>(preset->sm) : std::nullopt;
  // "sm_90" names a target by its compute capability alone.
  if (!preset && StringRef(name).starts_with("sm"))
    sm = parseSmName(name);
  unsigned numSms = preset ? preset->numSms : 0;
  uint64_t memory = preset ? preset->memoryBytes : 0;
  std::optional<uint64_t> smem;
  std::optional<uint32_t> features;
  if (preset)
    name = preset->name.str();

  while (succeeded(parser.parseOptionalComma())) {
    StringRef key;
    SMLoc keyLoc = parser.getCurrentLocation();
    if (parser.parseKeyword(&key) || parser.parseEqual())
      return {};
    if (key == "sm") {
      unsigned value;
      if (parser.parseInteger(value))
        return {};
      sm = value;
    } else if (key == "sms") {
      if (parser.parseInteger(numSms))
        return {};
    } else if (key == "memory") {
      if (parser.parseInteger(memory))
        return {};
    } else if (key == "smem_per_block") {
      uint64_t value;
      if (parser.parseInteger(value))
        return {};
      smem = value;
    } else if (key == "features") {
      uint32_t bits = 0;
      if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
            StringRef featureName;
            SMLoc featureLoc = parser.getCurrentLocation();
            if (parser.parseKeyword(&featureName))
              return failure();
            std::optional<TargetFeature> feature = symbolizeTargetFeature(featureName);
            if (!feature)
              return parser.emitError(featureLoc)
                     << "unknown target feature '" << featureName
                     << "'; known: tma, wgmma, tcgen05, fp8, clusters";
            bits |= static_cast<uint32_t>(*feature);
            return success();
          }))
        return {};
      features = bits;
    } else {
      parser.emitError(keyLoc) << "unknown #kiln.target key '" << key
                               << "'; expected sm, sms, memory, smem_per_block or features";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  if (!sm) {
    parser.emitError(loc) << "unknown target preset '" << name << "' (known: "
                          << presetList() << ", or sm_XY); a custom target needs 'sm = N'";
    return {};
  }
  std::optional<SmTraits> traits = lookupSmTraits(*sm);
  uint64_t smemValue = smem ? *smem : (traits ? traits->smemPerBlockOptin : 0);
  uint32_t featureValue = features ? *features : (traits ? traits->featureBits : 0);
  return TargetAttr::getChecked([&] { return parser.emitError(loc); }, context, name, *sm,
                                numSms, memory, smemValue, featureValue);
}

void TargetAttr::print(AsmPrinter &printer) const {
  printer << "<\"" << getName() << "\", sm = " << getSm() << ", sms = " << getNumSms()
          << ", memory = " << getMemoryBytes() << ", smem_per_block = " << getSmemPerBlock()
          << ", features = [";
  bool first = true;
  for (TargetFeature feature : allTargetFeatures()) {
    if (!hasFeature(feature))
      continue;
    printer << (first ? "" : ", ") << stringifyTargetFeature(feature);
    first = false;
  }
  printer << "]>";
}

//===----------------------------------------------------------------------===//
// SpecAttr, RuntimeAttr
//===----------------------------------------------------------------------===//

LogicalResult SpecAttr::verify(function_ref<InFlightDiagnostic()> emitError, SpecMode mode,
                               unsigned maxDraftLen, SsmSpecMode) {
  if (maxDraftLen < 1)
    return emitError() << "#kiln.spec: max_draft_len must be >= 1 (got " << maxDraftLen
                       << "); to turn speculation off remove the 'kiln.spec' attribute";
  if (maxDraftLen > SpecAttr::kMaxDraftLen)
    return emitError() << "#kiln.spec: max_draft_len = " << maxDraftLen << " exceeds "
                       << SpecAttr::kMaxDraftLen;
  return success();
}

static bool isSupportedCacheElementType(Type type) {
  return isa<BFloat16Type, Float16Type, Float32Type, Float8E4M3FNType, Float8E5M2Type>(
      type);
}

LogicalResult RuntimeAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                  unsigned maxBatch, unsigned maxSeqLen, unsigned pageSize,
                                  Type kvDtype, unsigned tp, Type stateDtype,
                                  unsigned maxStepTokens, unsigned cudaGraphs,
                                  DenseI32ArrayAttr cudaGraphBatches, unsigned kvRingWindow) {
  if (maxBatch < 1)
    return emitError() << "#kiln.runtime: max_batch must be >= 1";
  if (maxSeqLen < 1)
    return emitError() << "#kiln.runtime: max_seq_len must be >= 1";
  if (!llvm::isPowerOf2_32(pageSize) || pageSize < 8 || pageSize > 256)
    return emitError() << "#kiln.runtime: page_size = " << pageSize
                       << " must be a power of two in [8, 256]";
  if (!llvm::isPowerOf2_32(tp))
    return emitError() << "#kiln.runtime: tp = " << tp << " must be a power of two";
  if (!kvDtype || !isSupportedCacheElementType(kvDtype))
    return emitError() << "#kiln.runtime: kv_dtype " << kvDtype
                       << " is not one of bf16, f16, f32, f8E4M3FN, f8E5M2";
  if (stateDtype && !isa<BFloat16Type, Float16Type, Float32Type>(stateDtype))
    return emitError() << "#kiln.runtime: state_dtype " << stateDtype
                       << " is not one of bf16, f16, f32";
  if (kvRingWindow > 0 && maxStepTokens == 0)
    return emitError() << "#kiln.runtime: kv_ring_window = " << kvRingWindow
                       << " needs an explicit max_step_tokens (it bounds the ring)";
  if (cudaGraphs > KILN_RT_MAX_GRAPHS)
    return emitError() << "#kiln.runtime: cuda_graphs = " << cudaGraphs << " > "
                       << KILN_RT_MAX_GRAPHS << " step shapes";
  if (cudaGraphBatches) {
    ArrayRef<int32_t> batches = cudaGraphBatches.asArrayRef();
    if (batches.empty())
      return emitError() << "#kiln.runtime: cuda_graph_batches is empty (leave it out to "
                            "capture every batch, or set cuda_graphs = 0 for none)";
    for (size_t i = 0; i < batches.size(); ++i) {
      if (batches[i] < 1 || static_cast<unsigned>(batches[i]) > maxBatch)
        return emitError() << "#kiln.runtime: cuda_graph_batches[" << i << "] = " << batches[i]
                           << " outside [1, max_batch " << maxBatch << "]";
      if (i > 0 && batches[i] <= batches[i - 1])
        return emitError() << "#kiln.runtime: cuda_graph_batches must be ascending without "
                              "repeats (" << batches[i - 1] << " then " << batches[i] << ")";
    }
  }
  return success();
}

uint64_t RuntimeAttr::getGraphBatchCount() const {
  DenseI32ArrayAttr batches = getCudaGraphBatches();
  return batches ? batches.size() : getMaxBatch();
}

uint64_t RuntimeAttr::getDecodeKeyChunks() const {
  return static_cast<uint64_t>(kiln_rt_decode_key_chunks(getMaxSeqLen()));
}

uint64_t RuntimeAttr::getDecodeStepShapes(unsigned maxDraftLen) const {
  return getGraphBatchCount() * (1 + uint64_t(maxDraftLen)) * getDecodeKeyChunks();
}

uint64_t RuntimeAttr::getCapturableShapes(unsigned maxDraftLen) const {
  return std::min<uint64_t>(getCudaGraphs(), getDecodeStepShapes(maxDraftLen));
}

uint64_t RuntimeAttr::getMaxPagesPerSequence() const {
  return (uint64_t(getMaxSeqLen()) + getPageSize() - 1) / getPageSize();
}

LogicalResult RopeAttr::verify(function_ref<InFlightDiagnostic()> emitError, RopeType type,
                               FloatAttr theta, FloatAttr factor, FloatAttr low, FloatAttr high,
                               int64_t originalMaxPosition, FloatAttr attentionFactor) {
  auto positiveFinite = [](FloatAttr attr) {
    double value = attr.getValueAsDouble();
    return std::isfinite(value) && value > 0;
  };
  if (!theta || !positiveFinite(theta))
    return emitError() << "#kiln.rope: theta must be a positive finite number";
  for (auto [name, attr] : {std::pair<const char *, FloatAttr>{"factor", factor},
                            {"attention_factor", attentionFactor}})
    if (attr && !positiveFinite(attr))
      return emitError() << "#kiln.rope: " << name << " must be a positive finite number";
  for (auto [name, attr] :
       {std::pair<const char *, FloatAttr>{"low", low}, {"high", high}})
    if (attr && !std::isfinite(attr.getValueAsDouble()))
      return emitError() << "#kiln.rope: " << name << " must be finite";
  bool scaled = type != RopeType::default_;
  if (scaled && !factor)
    return emitError() << "#kiln.rope: type " << stringifyRopeType(type) << " needs 'factor'";
  if (type == RopeType::llama3 || type == RopeType::yarn) {
    if (!low || !high)
      return emitError() << "#kiln.rope: type " << stringifyRopeType(type)
                         << " needs 'low' and 'high'";
    if (originalMaxPosition < 1)
      return emitError() << "#kiln.rope: type " << stringifyRopeType(type)
                         << " needs original_max_position >= 1";
  }
  if (type == RopeType::llama3 && !(high.getValueAsDouble() > low.getValueAsDouble()))
    return emitError() << "#kiln.rope: llama3 needs high > low";
  return success();
}

std::optional<uint64_t> DeviceMemoryAttr::getTotal() const {
  uint64_t total = 0;
  for (uint64_t part : {getWeights(), getCaches(), getActivations(), getWorkspace(), getIo()})
    if (__builtin_add_overflow(total, part, &total))
      return std::nullopt;
  return total;
}

std::optional<uint64_t> DeviceMemoryAttr::getDeviceTotal() const {
  std::optional<uint64_t> total = getTotal();
  if (!total || __builtin_add_overflow(*total, getCudaGraphs(), &*total) ||
      __builtin_add_overflow(*total, getCollectives(), &*total))
    return std::nullopt;
  return total;
}

Type RuntimeAttr::getSsmStateType() const {
  if (Type type = getStateDtype())
    return type;
  return Float32Type::get(getContext());
}

LogicalResult ShardAttr::verify(function_ref<InFlightDiagnostic()> emitError, unsigned,
                                unsigned parts, DenseI64ArrayAttr segments) {
  if (parts < 1 || parts > 1024)
    return emitError() << "#kiln.shard: parts = " << parts << " must be in [1, 1024]";
  if (segments) {
    if (segments.empty())
      return emitError() << "#kiln.shard: 'segments' lists at least one size";
    for (int64_t size : segments.asArrayRef())
      if (size < 1)
        return emitError() << "#kiln.shard: segment size " << size << " must be >= 1";
  }
  return success();
}

LogicalResult PlanAttr::verify(function_ref<InFlightDiagnostic()> emitError, uint64_t,
                               uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                               bool, ArrayAttr pools) {
  if (!pools || !llvm::all_of(pools, [](Attribute a) { return isa<PoolAttr>(a); }))
    return emitError() << "#kiln.plan: 'pools' must be a list of #kiln.pool";
  return success();
}
