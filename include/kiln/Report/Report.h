//===- Report.h - what a compiled kiln module allocates and runs -------===//
//
// Reads a module after the deploy pipeline (`kiln.plan`, `kiln.cache_resource`
// attributes `pool`/`bytes`, `kiln.cached_*` attributes `decode_kernel`,
// `prefill_kernel`, `spec_dec_mode`) and prints it as text, JSON (schema in
// docs/report-schema.md) or a self-contained HTML page.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_REPORT_REPORT_H
#define KILN_REPORT_REPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

enum class ReportFormat { text, json, html };

struct ReportResource {
  std::string name; // "layer3.kv"
  int64_t layer = 0;
  std::string kind; // "kv", "ssm_state", ...
  bool speculativeOnly = false;
  uint64_t bytes = 0;
  std::string pool;     // category: "kv", "state" or "unmanaged"
  std::string poolName; // the plan's pool name, e.g. "kv.w0.d128.bf16"
};

struct ReportKernel {
  int64_t layer = 0;
  std::string op;    // attention, mla_attention, ssm, causal_conv, gated_delta_net
  std::string phase; // decode, prefill
  std::string kernel;
  std::optional<std::string> specDecMode;
  std::optional<std::string> draft; // draft kind of the layer, if any
  bool planned = false;             // the registry's variant is not implemented yet
};

struct ReportPool {
  std::string name, category;
  uint64_t bytes = 0;
  unsigned resources = 0;
};

struct ReportData {
  std::string modelName, modelType;
  unsigned numLayers = 0;
  uint64_t weightBytes = 0;
  std::string targetName;
  unsigned sm = 0;
  uint64_t memoryBytes = 0;
  bool hasSpec = false;
  std::string specMode, ssmMode;
  unsigned maxDraftLen = 0;
  bool hasPlan = false;
  uint64_t totalBytes = 0, kvBytes = 0, stateBytes = 0, speculativeBytes = 0,
           unmanagedBytes = 0, budgetBytes = 0, kvPages = 0;
  bool fits = true;
  /// Every device byte of a whole compiled model (`kiln.device_memory`), when the
  /// module has an entry function: the runtime's one allocation, and the reserve of the
  /// driver memory its CUDA graphs may take; `total` is their sum.
  struct DeviceMemory {
    uint64_t weights = 0, caches = 0, activations = 0, workspace = 0, io = 0;
    uint64_t allocation = 0, cudaGraphs = 0, collectives = 0, total = 0;
    /// Decode step shapes the runtime may capture, and how many distinct shapes decode
    /// steps can have: captured batches x q_lens (1 + drafts) x split-KV key chunks.
    uint64_t graphShapes = 0, decodeShapes = 0, graphBatches = 0, qLens = 0, keyChunks = 0;
    uint64_t maxStepTokens = 0, maxLogitRows = 0, activationBuffers = 0;
  };
  std::optional<DeviceMemory> device;
  std::vector<ReportResource> resources;
  std::vector<ReportKernel> kernels;
  std::vector<ReportPool> pools;
};

/// Collects the report from a (compiled) module. Missing pieces stay empty.
ReportData collectReport(mlir::ModuleOp module);

/// Resources of one kind and speculative-only status, added up.
struct ReportConsumerGroup {
  std::string kind;
  bool speculativeOnly = false;
  unsigned count = 0;
  uint64_t bytes = 0;
};
/// The `count` largest groups, largest first ("27 x intermediate_ssm_state
/// (speculative-only)": what to change to fit).
std::vector<ReportConsumerGroup> largestConsumerGroups(const ReportData &data,
                                                       size_t count = 5);

/// The `count` largest resources, largest first.
std::vector<ReportResource> largestConsumers(const ReportData &data, size_t count = 5);

void printReport(const ReportData &data, ReportFormat format, llvm::raw_ostream &os);
inline void printReport(mlir::ModuleOp module, ReportFormat format, llvm::raw_ostream &os) {
  printReport(collectReport(module), format, os);
}

} // namespace kiln

#endif
