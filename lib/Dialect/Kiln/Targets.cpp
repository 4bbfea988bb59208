//===- Targets.cpp - compute capability table and product presets ---------===//
//
// Numbers and their sources: docs/targets.md (from shared/models/gpus.md).
//
//===----------------------------------------------------------------------===//
#include "kiln/Dialect/Kiln/Targets.h"
#include "kiln/Dialect/Kiln/KilnConcepts.h"

#include "llvm/ADT/STLExtras.h"

using namespace kiln;

namespace {
constexpr uint32_t bit(TargetFeature feature) { return static_cast<uint32_t>(feature); }

constexpr uint32_t kAmpere = 0;
constexpr uint32_t kAda = bit(TargetFeature::fp8);
constexpr uint32_t kHopper = bit(TargetFeature::tma) | bit(TargetFeature::wgmma) |
                             bit(TargetFeature::fp8) | bit(TargetFeature::clusters);
constexpr uint32_t kBlackwellDc = bit(TargetFeature::tma) | bit(TargetFeature::tcgen05) |
                                  bit(TargetFeature::fp8) | bit(TargetFeature::clusters);
constexpr uint32_t kBlackwellConsumer =
    bit(TargetFeature::tma) | bit(TargetFeature::fp8) | bit(TargetFeature::clusters);

// Opt-in shared memory per block = shared memory per SM - 1 KiB reserved per block.
const SmTraits kSmTable[] = {
    {80, 166912, 2048, kAmpere},     {86, 101376, 1536, kAmpere},
    {89, 101376, 1536, kAda},        {90, 232448, 2048, kHopper},
    {100, 232448, 2048, kBlackwellDc}, {103, 232448, 2048, kBlackwellDc},
    {120, 101376, 1536, kBlackwellConsumer}, {121, 101376, 1536, kBlackwellConsumer},
};

// Memory as seen by CUDA where measured or reported ([V]/[M] in gpus.md); see
// docs/targets.md for the few marketed values ([U]).
const TargetPreset kPresets[] = {
    {"a100", "NVIDIA A100-SXM4 80GB", 80, 108, 85899345920ull},
    {"a10g", "NVIDIA A10G (AWS)", 86, 80, 23684186112ull},
    {"l4", "NVIDIA L4", 89, 58, 23612293120ull},
    {"l40s", "NVIDIA L40S", 89, 142, 47803531264ull},
    {"h100", "NVIDIA H100-SXM5 80GB", 90, 132, 85020639232ull},
    {"h200", "NVIDIA H200-SXM 141GB", 90, 132, 150109880320ull},
    {"b200", "NVIDIA B200", 100, 148, 191502483456ull},
    {"b300", "NVIDIA B300", 103, 148, 288400343040ull},
    {"rtx5090", "NVIDIA GeForce RTX 5090", 120, 170, 34190917632ull},
    {"rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell", 120, 188, 102641958912ull},
    {"dgx-spark", "NVIDIA DGX Spark (GB10)", 121, 48, 128000000000ull},
};

struct FeatureName {
  TargetFeature feature;
  llvm::StringLiteral name;
};
const FeatureName kFeatureNames[] = {
    {TargetFeature::tma, "tma"},         {TargetFeature::wgmma, "wgmma"},
    {TargetFeature::tcgen05, "tcgen05"}, {TargetFeature::fp8, "fp8"},
    {TargetFeature::clusters, "clusters"},
};
const TargetFeature kAllFeatures[] = {TargetFeature::tma, TargetFeature::wgmma,
                                      TargetFeature::tcgen05, TargetFeature::fp8,
                                      TargetFeature::clusters};
} // namespace

std::optional<SmTraits> kiln::lookupSmTraits(unsigned sm) {
  for (const SmTraits &traits : kSmTable)
    if (traits.sm == sm)
      return traits;
  return std::nullopt;
}

llvm::ArrayRef<SmTraits> kiln::supportedSms() { return kSmTable; }

std::optional<TargetPreset> kiln::lookupTargetPreset(llvm::StringRef name) {
  for (const TargetPreset &preset : kPresets)
    if (preset.name == name.lower())
      return preset;
  return std::nullopt;
}

llvm::ArrayRef<TargetPreset> kiln::targetPresets() { return kPresets; }

std::optional<unsigned> kiln::parseSmName(llvm::StringRef name) {
  name.consume_front("sm_") || name.consume_front("sm");
  unsigned sm;
  if (name.empty() || name.getAsInteger(10, sm))
    return std::nullopt;
  return sm;
}

llvm::StringRef kiln::stringifyTargetFeature(TargetFeature feature) {
  for (const FeatureName &entry : kFeatureNames)
    if (entry.feature == feature)
      return entry.name;
  return "unknown";
}

std::optional<TargetFeature> kiln::symbolizeTargetFeature(llvm::StringRef name) {
  for (const FeatureName &entry : kFeatureNames)
    if (entry.name == name)
      return entry.feature;
  return std::nullopt;
}

llvm::ArrayRef<TargetFeature> kiln::allTargetFeatures() { return kAllFeatures; }
