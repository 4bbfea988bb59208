//===- Targets.h - GPU facts: compute capabilities and product presets ----===//
//
// Sources: NVIDIA CUDA Programming Guide, "Technical Specifications per Compute
// Capability" (as encoded in CCCL's arch_traits.h) for shared memory; PTX ISA target
// notes for wgmma (sm_90a), tcgen05 (sm_100/103), TMA and clusters (sm_90+), fp8 MMA
// (sm_89+); product tables in docs/targets.md.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DIALECT_TARGETS_H
#define KILN_DIALECT_TARGETS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>

namespace kiln {

/// What a compute capability provides.
struct SmTraits {
  unsigned sm;                  // e.g. 90
  uint64_t smemPerBlockOptin;   // bytes of opt-in dynamic shared memory per block
  unsigned maxThreadsPerSm;
  uint32_t featureBits;         // TargetFeature flags
};

/// A GPU product.
struct TargetPreset {
  llvm::StringRef name;         // "h200"
  llvm::StringRef product;      // "NVIDIA H200 SXM 141GB"
  unsigned sm;
  unsigned numSms;
  uint64_t memoryBytes;         // as seen by CUDA (cudaDeviceProp::totalGlobalMem)
};

/// Traits of a supported SM (80, 86, 89, 90, 100, 103, 120, 121); nullopt otherwise.
std::optional<SmTraits> lookupSmTraits(unsigned sm);
llvm::ArrayRef<SmTraits> supportedSms();

/// Preset by name ("h200", "l40s", ...); nullopt otherwise.
std::optional<TargetPreset> lookupTargetPreset(llvm::StringRef name);
llvm::ArrayRef<TargetPreset> targetPresets();

/// Parses "sm_90" / "sm90" / "90" into 90.
std::optional<unsigned> parseSmName(llvm::StringRef name);

} // namespace kiln

#endif
