//===- Report.cpp - text, JSON and HTML reports of a compiled module ---===//
//
// The JSON schema is documented (and kept stable) in docs/report-schema.md.
//
//===----------------------------------------------------------------------===//
#include "kiln/Report/Report.h"
#include "kiln/Dialect/Kiln/Kiln.h"
#include "kiln/Dialect/Kiln/LayerLoop.h"
#include "kiln/Registry/KernelRegistry.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <map>
#include <set>

using namespace mlir;
using namespace kiln;

//===----------------------------------------------------------------------===//
// Collection
//===----------------------------------------------------------------------===//


/// How many decode step shapes (CUDA-graph keys: batch, q_len, split-KV key chunk) a
/// model has, against how many the runtime may capture.
static void countDecodeShapes(RuntimeAttr runtime, unsigned maxDraftLen,
                              ReportData::DeviceMemory &device) {
  device.graphBatches = runtime.getGraphBatchCount();
  device.qLens = 1 + maxDraftLen;
  device.keyChunks = runtime.getDecodeKeyChunks();
  device.decodeShapes = runtime.getDecodeStepShapes(maxDraftLen);
  device.graphShapes = runtime.getCapturableShapes(maxDraftLen);
}

/// The layers [first, end) of a layer loop (`scf.for` marked `kiln.layers` with
/// constant bounds and step 1); none for any other op.
static std::optional<std::pair<int64_t, int64_t>> layerLoopBounds(Operation *op) {
  auto loop = dyn_cast<scf::ForOp>(op);
  if (!loop || !loop->hasAttr(KilnDialect::kLayersAttrName))
    return std::nullopt;
  return constantLayerRange(loop);
}

static std::string resourceName(int64_t layer, StringRef kind) {
  return "layer" + std::to_string(layer) + "." + kind.str();
}

ReportData kiln::collectReport(ModuleOp module) {
  ReportData d;
  ModuleConfig config = getModuleConfig(module);
  if (config.model) {
    d.modelName = config.model.getName().str();
    d.modelType = config.model.getModelType().str();
    d.numLayers = config.model.getNumLayers();
    d.weightBytes = config.model.getWeightBytes();
  }
  if (config.target) {
    d.targetName = config.target.getName().str();
    d.sm = config.target.getSm();
    d.memoryBytes = config.target.getMemoryBytes();
  }
  if (config.spec) {
    d.hasSpec = true;
    d.specMode = stringifySpecMode(config.spec.getMode()).str();
    d.maxDraftLen = config.spec.getMaxDraftLen();
    d.ssmMode = stringifySsmSpecMode(config.spec.getSsm()).str();
  }
  if (auto memory = module->getAttrOfType<DeviceMemoryAttr>(KilnDialect::kDeviceMemoryAttrName)) {
    ReportData::DeviceMemory device;
    device.weights = memory.getWeights();
    device.caches = memory.getCaches();
    device.activations = memory.getActivations();
    device.workspace = memory.getWorkspace();
    device.io = memory.getIo();
    device.allocation = memory.getTotal().value_or(UINT64_MAX);
    device.cudaGraphs = memory.getCudaGraphs();
    device.collectives = memory.getCollectives();
    device.total = memory.getDeviceTotal().value_or(UINT64_MAX);
    if (RuntimeAttr runtime = config.runtime)
      countDecodeShapes(runtime, d.maxDraftLen, device);
    device.maxStepTokens = memory.getMaxStepTokens();
    device.maxLogitRows = memory.getMaxLogitRows();
    device.activationBuffers = memory.getActivationBuffers();
    d.device = device;
  }
  std::map<std::string, std::string> poolCategory;
  if (auto plan = module->getAttrOfType<PlanAttr>(KilnDialect::kPlanAttrName)) {
    d.hasPlan = true;
    d.totalBytes = plan.getTotalBytes();
    d.kvBytes = plan.getKvBytes();
    d.stateBytes = plan.getStateBytes();
    d.speculativeBytes = plan.getSpeculativeBytes();
    d.unmanagedBytes = plan.getUnmanagedBytes();
    d.budgetBytes = plan.getBudgetBytes();
    d.kvPages = plan.getKvPages();
    d.fits = plan.getFits();
    for (PoolAttr pool : plan.getPoolList()) {
      d.pools.push_back({pool.getName().str(), stringifyPoolCategory(pool.getCategory()).str(), pool.getBytes(),
                         pool.getResources()});
      poolCategory[pool.getName().str()] = stringifyPoolCategory(pool.getCategory()).str();
    }
  }

  // `layer`: the layer a layer loop's body op stands for (its own layer attribute names
  // the loop's first).
  auto collectOp = [&](Operation *op, std::optional<int64_t> layer) {
    if (auto res = dyn_cast<CacheResourceOp>(op)) {
      ReportResource r;
      r.layer = layer.value_or(res.getLayer());
      r.kind = stringifyResourceKind(res.getKind()).str();
      r.name = resourceName(r.layer, r.kind);
      r.speculativeOnly = res.getSpeculativeOnly();
      if (std::optional<int64_t> bytes = res.getBytes())
        r.bytes = static_cast<uint64_t>(*bytes);
      else if (config.runtime) // unplanned: what the planner would give, when it can
        r.bytes = computeResourceBytes(cast<CacheResourceInterface>(op), config.runtime)
                      .value_or(0);
      if (std::optional<StringRef> pool = res.getPool())
        r.poolName = pool->str();
      if (res.getUnmanaged()) {
        r.pool = "unmanaged";
      } else if (!r.poolName.empty()) {
        auto it = poolCategory.find(r.poolName);
        r.pool = it != poolCategory.end() ? it->second
                                          : StringRef(r.poolName).split('.').first.str();
      } else {
        r.pool = isPerTokenKind(res.getKind()) ? "kv" : "state";
      }
      d.resources.push_back(std::move(r));
      return;
    }
    auto cached = dyn_cast<CachedOpInterface>(op);
    if (!cached)
      return;
    std::string opName = stringifyOpFamily(cached.getOpFamily()).str();
    std::optional<std::string> mode;
    if (auto m = op->getAttrOfType<SpecDecModeAttr>("spec_dec_mode"))
      mode = stringifySpecDecMode(m.getValue()).str();
    std::optional<std::string> draft;
    if (std::optional<DraftKind> kind = cached.getDraftKind())
      draft = stringifyDraftKind(*kind).str();
    for (StringRef phase : {"decode", "prefill"}) {
      auto kernel = op->getAttrOfType<StringAttr>((phase + "_kernel").str());
      if (!kernel)
        continue;
      // The spec-dec mode describes how decode handles draft tokens; prefill has none.
      std::optional<std::string> phaseMode =
          phase == "decode" ? mode : (mode ? std::optional<std::string>("single_token") : mode);
      const KernelVariant *variant = KernelRegistry::global().lookup(kernel.getValue());
      d.kernels.push_back({layer.value_or(cached.getLayerIndex()), opName, phase.str(),
                           kernel.getValue().str(), phaseMode, draft,
                           variant && !variant->implemented});
    }
  };
  // A layer loop (a rolled import) stands for its layers: the report lists each, in the
  // order kiln-expand-layers would copy them, without copying the IR (a report of 100k
  // layers stays linear and cheap). The body is collected once, as its first layer, and
  // its rows repeated for the others.
  module.walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (std::optional<std::pair<int64_t, int64_t>> layers = layerLoopBounds(op)) {
      const size_t firstResource = d.resources.size(), firstKernel = d.kernels.size();
      for (Operation &member : cast<scf::ForOp>(op).getBody()->without_terminator())
        member.walk([&](Operation *nested) { collectOp(nested, layers->first); });
      const size_t endResource = d.resources.size(), endKernel = d.kernels.size();
      for (int64_t layer = layers->first + 1; layer < layers->second; ++layer) {
        for (size_t i = firstResource; i < endResource; ++i) {
          ReportResource r = d.resources[i];
          r.layer = layer;
          r.name = resourceName(layer, r.kind);
          d.resources.push_back(std::move(r));
        }
        for (size_t i = firstKernel; i < endKernel; ++i) {
          ReportKernel k = d.kernels[i];
          k.layer = layer;
          d.kernels.push_back(std::move(k));
        }
      }
      return WalkResult::skip();
    }
    collectOp(op, std::nullopt);
    return WalkResult::advance();
  });
  std::stable_sort(d.resources.begin(), d.resources.end(),
                   [](const ReportResource &a, const ReportResource &b) {
                     return a.layer < b.layer;
                   });
  return d;
}

std::vector<ReportResource> kiln::largestConsumers(const ReportData &data, size_t count) {
  std::vector<ReportResource> sorted = data.resources;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const ReportResource &a, const ReportResource &b) {
                     return a.bytes > b.bytes;
                   });
  if (sorted.size() > count)
    sorted.resize(count);
  return sorted;
}

std::vector<ReportConsumerGroup> kiln::largestConsumerGroups(const ReportData &data,
                                                            size_t count) {
  std::vector<ReportConsumerGroup> groups;
  for (const ReportResource &r : data.resources) {
    auto group = std::find_if(groups.begin(), groups.end(), [&](const ReportConsumerGroup &g) {
      return g.kind == r.kind && g.speculativeOnly == r.speculativeOnly;
    });
    if (group == groups.end())
      group = groups.insert(groups.end(), ReportConsumerGroup{r.kind, r.speculativeOnly, 0, 0});
    ++group->count;
    group->bytes = llvm::SaturatingAdd(group->bytes, r.bytes);
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const ReportConsumerGroup &a, const ReportConsumerGroup &b) {
                     return a.bytes > b.bytes;
                   });
  if (groups.size() > count)
    groups.resize(count);
  return groups;
}

//===----------------------------------------------------------------------===//
// Formatting helpers
//===----------------------------------------------------------------------===//


static std::string pad(StringRef s, size_t width) {
  std::string out = s.str();
  if (out.size() < width)
    out.append(width - out.size(), ' ');
  return out;
}
static std::string padLeft(StringRef s, size_t width) {
  std::string out;
  if (s.size() < width)
    out.append(width - s.size(), ' ');
  return out + s.str();
}

static std::string escapeHtml(StringRef s) {
  std::string out;
  for (char c : s) {
    switch (c) {
    case '&': out += "&amp;"; break;
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '"': out += "&quot;"; break;
    case '\'': out += "&#39;"; break;
    default: out += c;
    }
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Text
//===----------------------------------------------------------------------===//

/// "  <label>  <bytes, readable>  <bytes>": one row of a memory table.
static void printBytesRow(llvm::raw_ostream &os, StringRef label, uint64_t bytes) {
  os << "  " << pad(label, 20) << padLeft(formatBytes(bytes), 12)
     << padLeft(std::to_string(bytes), 18) << "\n";
}

static void printText(const ReportData &d, llvm::raw_ostream &os) {
  os << "Kiln deploy report\n";
  os << "  model   " << (d.modelName.empty() ? "(unnamed)" : d.modelName);
  if (!d.modelType.empty())
    os << " (" << d.modelType << ", " << d.numLayers << " layers, weights ~"
       << formatBytes(d.weightBytes) << ")";
  os << "\n  target  " << (d.targetName.empty() ? "(none)" : d.targetName) << " (sm_"
     << d.sm << ", " << formatBytes(d.memoryBytes) << ")\n";
  os << "  spec    ";
  if (d.hasSpec)
    os << d.specMode << ", max_draft_len " << d.maxDraftLen << ", ssm " << d.ssmMode << "\n";
  else
    os << "none (speculative-only resources dropped)\n";

  os << "\nMemory";
  if (!d.hasPlan) {
    os << ": no plan (module not compiled)\n";
  } else {
    os << " (budget " << formatBytes(d.budgetBytes) << "): "
       << (d.fits ? "FITS" : "DOES NOT FIT") << "\n";
    auto row = [&](StringRef label, uint64_t bytes) { printBytesRow(os, label, bytes); };
    row("weights (estimate)", d.weightBytes);
    row("kv", d.kvBytes);
    row("state", d.stateBytes);
    row("speculative-only", d.speculativeBytes);
    row("unmanaged", d.unmanagedBytes);
    row("total", d.totalBytes);
    os << "  kv pages: " << d.kvPages << "\n";
    if (d.unmanagedBytes > 0)
      os << "  WARNING: " << formatBytes(d.unmanagedBytes)
         << " are UNMANAGED allocations outside Kiln's pools\n";
  }

  if (d.device) {
    const ReportData::DeviceMemory &m = *d.device;
    os << "\nDevice memory (the runtime's one allocation, then the CUDA graphs' reserve)\n";
    auto row = [&](StringRef label, uint64_t bytes) { printBytesRow(os, label, bytes); };
    row("weights", m.weights);
    row("caches", m.caches);
    row("activations", m.activations);
    row("workspace", m.workspace);
    row("io", m.io);
    row("allocation", m.allocation);
    row("cuda graphs", m.cudaGraphs);
    if (m.collectives) // a tensor-parallel rank's communicator (NCCL's buffers)
      row("nccl communicator", m.collectives);
    row("device total", m.total);
    os << "  activations: " << m.activationBuffers << " buffers, step of up to "
       << m.maxStepTokens << " tokens and " << m.maxLogitRows << " logit rows\n";
    os << "  cuda graphs: up to " << m.graphShapes << " of " << m.decodeShapes
       << " decode step shapes (" << m.graphBatches << " batch sizes x " << m.qLens
       << " q_lens x " << m.keyChunks << " key chunks)";
    if (m.graphShapes)
      os << ", " << formatBytes(m.cudaGraphs / m.graphShapes) << " reserved each";
    os << "; the others launch eagerly\n";
  }

  if (!d.pools.empty()) {
    os << "\nPools\n  " << pad("name", 28) << pad("category", 11) << padLeft("resources", 10)
       << padLeft("bytes", 14) << "\n";
    for (const ReportPool &p : d.pools)
      os << "  " << pad(p.name, 28) << pad(p.category, 11)
         << padLeft(std::to_string(p.resources), 10) << padLeft(formatBytes(p.bytes), 14)
         << "\n";
  }

  os << "\nResources (" << d.resources.size() << ")\n  " << pad("name", 34) << pad("pool", 11)
     << pad("spec-only", 10) << padLeft("bytes", 14) << "\n";
  for (const ReportResource &r : d.resources)
    os << "  " << pad(r.name, 34) << pad(r.pool, 11) << pad(r.speculativeOnly ? "yes" : "", 10)
       << padLeft(formatBytes(r.bytes), 14) << "\n";

  os << "\nKernels\n  " << pad("layer", 7) << pad("op", 17) << pad("phase", 9) << pad("kernel", 32)
     << "spec_dec_mode\n";
  for (const ReportKernel &k : d.kernels)
    os << "  " << pad(std::to_string(k.layer), 7) << pad(k.op, 17) << pad(k.phase, 9)
       << pad(k.kernel + (k.planned ? " (planned)" : ""), 32) << k.specDecMode.value_or("-")
       << (k.draft ? "  (draft " + *k.draft + ")" : std::string()) << "\n";
  if (d.kernels.empty())
    os << "  (none selected)\n";

  os << "\nLargest consumers (by kind)\n";
  for (const ReportConsumerGroup &g : largestConsumerGroups(d))
    os << "  " << pad(std::to_string(g.count) + " x " + g.kind +
                          (g.speculativeOnly ? " (speculative-only)" : ""),
                      48)
       << padLeft(formatBytes(g.bytes), 14) << "\n";
  os << "\nLargest single resources\n";
  for (const ReportResource &r : largestConsumers(d))
    os << "  " << pad(r.name, 34) << padLeft(formatBytes(r.bytes), 14) << "  (" << r.pool
       << (r.speculativeOnly ? ", speculative-only" : "") << ")\n";
}

//===----------------------------------------------------------------------===//
// JSON
//===----------------------------------------------------------------------===//

static void printJson(const ReportData &d, llvm::raw_ostream &os) {
  llvm::json::OStream j(os, 2);
  j.object([&] {
    j.attributeObject("model", [&] {
      j.attribute("name", d.modelName);
      j.attribute("model_type", d.modelType);
      j.attribute("num_layers", static_cast<int64_t>(d.numLayers));
    });
    j.attributeObject("target", [&] {
      j.attribute("name", d.targetName);
      j.attribute("sm", static_cast<int64_t>(d.sm));
      j.attribute("memory_bytes", d.memoryBytes);
    });
    if (d.hasSpec)
      j.attributeObject("spec", [&] {
        j.attribute("mode", d.specMode);
        j.attribute("max_draft_len", static_cast<int64_t>(d.maxDraftLen));
        j.attribute("ssm_mode", d.ssmMode);
      });
    else
      j.attribute("spec", nullptr);
    j.attributeArray("resources", [&] {
      for (const ReportResource &r : d.resources)
        j.object([&] {
          j.attribute("name", r.name);
          j.attribute("layer", r.layer);
          j.attribute("kind", r.kind);
          j.attribute("speculative_only", r.speculativeOnly);
          j.attribute("bytes", r.bytes);
          j.attribute("pool", r.pool);
        });
    });
    j.attributeArray("kernels", [&] {
      for (const ReportKernel &k : d.kernels)
        j.object([&] {
          j.attribute("layer", k.layer);
          j.attribute("op", k.op);
          j.attribute("phase", k.phase);
          j.attribute("kernel", k.kernel);
          if (k.specDecMode)
            j.attribute("spec_dec_mode", *k.specDecMode);
          else
            j.attribute("spec_dec_mode", nullptr);
          j.attribute("implemented", !k.planned);
        });
    });
    j.attributeObject("memory", [&] {
      j.attribute("total_bytes", d.totalBytes);
      j.attribute("kv_bytes", d.kvBytes);
      j.attribute("state_bytes", d.stateBytes);
      j.attribute("speculative_bytes", d.speculativeBytes);
      j.attribute("unmanaged_bytes", d.unmanagedBytes);
      j.attribute("budget_bytes", d.budgetBytes);
      j.attribute("fits", d.fits);
    });
    if (d.device)
      j.attributeObject("device_memory", [&] {
        j.attribute("weights_bytes", d.device->weights);
        j.attribute("caches_bytes", d.device->caches);
        j.attribute("activations_bytes", d.device->activations);
        j.attribute("workspace_bytes", d.device->workspace);
        j.attribute("io_bytes", d.device->io);
        j.attribute("allocation_bytes", d.device->allocation);
        j.attribute("cuda_graph_bytes", d.device->cudaGraphs);
        j.attribute("cuda_graph_shapes", d.device->graphShapes);
        if (d.device->collectives)
          j.attribute("collective_bytes", d.device->collectives);
        j.attribute("decode_step_shapes", d.device->decodeShapes);
        j.attribute("total_bytes", d.device->total);
        j.attribute("max_step_tokens", d.device->maxStepTokens);
        j.attribute("max_logit_rows", d.device->maxLogitRows);
        j.attribute("activation_buffers", d.device->activationBuffers);
      });
  });
  os << "\n";
}

//===----------------------------------------------------------------------===//
// HTML
//===----------------------------------------------------------------------===//

/// Device memory as one stacked bar: weights, the caches (their speculative-only share
/// hatched), activations, workspace and per-step buffers, against the target's memory.
/// Only for whole models (their every device byte is known).
static void printDeviceBar(const ReportData &d, llvm::raw_ostream &os) {
  if (!d.device || d.memoryBytes == 0)
    return;
  const ReportData::DeviceMemory &m = *d.device;
  const uint64_t speculative = std::min(d.speculativeBytes, m.caches);
  struct Segment {
    const char *label;
    uint64_t bytes;
    const char *fill;
  };
  const Segment segments[] = {{"weights", m.weights, "#888"},
                              {"caches", m.caches - speculative, "#3a7bd5"},
                              {"speculative-only caches", speculative, "url(#speculative)"},
                              {"activations", m.activations, "#2e9e5b"},
                              {"workspace", m.workspace, "#8e44ad"},
                              {"io", m.io, "#555"},
                              {"cuda graphs (reserve)", m.cudaGraphs, "#c0392b"}};
  const double scale = double(std::max(d.memoryBytes, m.total));
  const unsigned width = 800, barHeight = 28, legendRow = 18;
  const unsigned height = barHeight + 30 + legendRow * (std::size(segments) + 1);
  os << "<h2>Device memory</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\""
     << width + 20 << "\" height=\"" << height
     << "\" role=\"img\" aria-label=\"device memory, stacked\">\n"
     << "<defs><pattern id=\"speculative\" width=\"6\" height=\"6\" "
        "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
        "<rect width=\"6\" height=\"6\" fill=\"#d58a3a\"/>"
        "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#fff\" stroke-width=\"2\"/>"
        "</pattern></defs>\n";
  double x = 0;
  for (const Segment &segment : segments) {
    const double w = double(segment.bytes) / scale * width;
    os << "<rect class=\"device\" x=\"" << unsigned(x) << "\" y=\"0\" width=\""
       << unsigned(w + 0.5) << "\" height=\"" << barHeight << "\" fill=\"" << segment.fill
       << "\"><title>" << segment.label << ": " << escapeHtml(formatBytes(segment.bytes))
       << "</title></rect>\n";
    x += w;
  }
  const unsigned capacity = unsigned(double(d.memoryBytes) / scale * width);
  os << "<line x1=\"" << capacity << "\" y1=\"0\" x2=\"" << capacity << "\" y2=\""
     << barHeight + 6 << "\" stroke=\"#b00\" stroke-dasharray=\"4 3\"/>\n";
  unsigned y = barHeight + 24;
  for (const Segment &segment : segments) {
    os << "<rect x=\"0\" y=\"" << y - 11 << "\" width=\"12\" height=\"12\" fill=\""
       << segment.fill << "\"/><text x=\"18\" y=\"" << y << "\" font-size=\"12\">"
       << segment.label << ": " << escapeHtml(formatBytes(segment.bytes)) << "</text>\n";
    y += legendRow;
  }
  os << "<text x=\"18\" y=\"" << y << "\" font-size=\"12\">total "
     << escapeHtml(formatBytes(m.total)) << " of " << escapeHtml(formatBytes(d.memoryBytes))
     << " (dashed line)</text>\n</svg>\n";
}

static void printHtml(const ReportData &d, llvm::raw_ostream &os) {
  std::string title = "Kiln report: " + d.modelName + " on " + d.targetName;
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
     << escapeHtml(title) << "</title>\n<style>\n"
     << "body{font-family:system-ui,sans-serif;margin:2em;color:#222}\n"
     << "table{border-collapse:collapse;margin:1em 0}\n"
     << "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}\n"
     << "td.n{text-align:right;font-variant-numeric:tabular-nums}\n"
     << ".bad{color:#b00;font-weight:bold}.ok{color:#070;font-weight:bold}\n"
     << "</style>\n</head>\n<body>\n";
  os << "<h1>" << escapeHtml(title) << "</h1>\n<p>Model <b>" << escapeHtml(d.modelName)
     << "</b> (" << escapeHtml(d.modelType) << ", " << d.numLayers << " layers, weights ~"
     << escapeHtml(formatBytes(d.weightBytes)) << "); target <b>" << escapeHtml(d.targetName)
     << "</b> (sm_" << d.sm << ", " << escapeHtml(formatBytes(d.memoryBytes))
     << "); speculation: ";
  if (d.hasSpec)
    os << escapeHtml(d.specMode) << ", max_draft_len " << d.maxDraftLen << ", ssm "
       << escapeHtml(d.ssmMode);
  else
    os << "none";
  os << ".</p>\n";
  if (d.hasPlan)
    os << "<p>Budget " << escapeHtml(formatBytes(d.budgetBytes)) << ": "
       << (d.fits ? "<span class=\"ok\">fits</span>" : "<span class=\"bad\">does not fit</span>")
       << "</p>\n";
  if (d.unmanagedBytes > 0)
    os << "<p class=\"bad\">" << escapeHtml(formatBytes(d.unmanagedBytes))
       << " are unmanaged allocations outside Kiln's pools.</p>\n";

  printDeviceBar(d, os);

  // Bars: categories, then pools.
  struct Bar {
    std::string label;
    uint64_t bytes;
    const char *color;
  };
  std::vector<Bar> bars = {{"weights (estimate)", d.weightBytes, "#888"},
                           {"kv", d.kvBytes, "#3a7bd5"},
                           {"state", d.stateBytes, "#2e9e5b"},
                           {"speculative-only", d.speculativeBytes, "#d58a3a"},
                           {"unmanaged", d.unmanagedBytes, "#c0392b"},
                           {"total (caches)", d.totalBytes, "#555"}};
  for (const ReportPool &p : d.pools)
    bars.push_back({"pool " + p.name + " (" + p.category + ")", p.bytes,
                    p.category == "kv" ? "#6fa0e8" : p.category == "state" ? "#66c08a" : "#e07060"});
  uint64_t scale = std::max<uint64_t>(d.budgetBytes, 1);
  for (const Bar &b : bars)
    scale = std::max(scale, b.bytes);
  const unsigned labelWidth = 300, barWidth = 500, rowHeight = 22;
  unsigned height = rowHeight * (bars.size() + 1) + 10;
  os << "<h2>Memory by category and pool</h2>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\""
     << labelWidth + barWidth + 120 << "\" height=\"" << height
     << "\" role=\"img\" aria-label=\"memory by category and pool\">\n";
  for (auto [i, b] : llvm::enumerate(bars)) {
    unsigned y = 5 + i * rowHeight;
    unsigned w = static_cast<unsigned>(double(b.bytes) / double(scale) * barWidth);
    os << "<text x=\"0\" y=\"" << y + 15 << "\" font-size=\"13\">" << escapeHtml(b.label)
       << "</text>\n<rect x=\"" << labelWidth << "\" y=\"" << y << "\" width=\"" << w
       << "\" height=\"" << rowHeight - 4 << "\" fill=\"" << b.color << "\"/>\n<text x=\""
       << labelWidth + w + 5 << "\" y=\"" << y + 15 << "\" font-size=\"12\">"
       << escapeHtml(formatBytes(b.bytes)) << "</text>\n";
  }
  if (d.budgetBytes > 0) {
    unsigned x = labelWidth + static_cast<unsigned>(double(d.budgetBytes) / double(scale) * barWidth);
    os << "<line x1=\"" << x << "\" y1=\"0\" x2=\"" << x << "\" y2=\"" << height
       << "\" stroke=\"#b00\" stroke-dasharray=\"4 3\"/>\n<text x=\"" << x + 3 << "\" y=\""
       << height - 4 << "\" font-size=\"11\" fill=\"#b00\">budget</text>\n";
  }
  os << "</svg>\n";

  // Per-layer table.
  std::set<int64_t> layers;
  for (const ReportResource &r : d.resources)
    layers.insert(r.layer);
  for (const ReportKernel &k : d.kernels)
    layers.insert(k.layer);
  os << "<h2>Layers</h2>\n<table>\n<thead><tr><th>layer</th><th>ops and kernels</th>"
     << "<th>resources</th><th>bytes</th></tr></thead>\n<tbody>\n";
  for (int64_t layer : layers) {
    uint64_t bytes = 0;
    os << "<tr><td class=\"n\">" << layer << "</td><td>";
    bool first = true;
    for (const ReportKernel &k : d.kernels) {
      if (k.layer != layer)
        continue;
      os << (first ? "" : "<br>") << escapeHtml(k.op) << " " << escapeHtml(k.phase) << ": "
         << escapeHtml(k.kernel) << (k.planned ? " (planned)" : "");
      if (k.specDecMode)
        os << " (" << escapeHtml(*k.specDecMode) << ")";
      if (k.draft)
        os << " [draft " << escapeHtml(*k.draft) << "]";
      first = false;
    }
    os << "</td><td>";
    first = true;
    for (const ReportResource &r : d.resources) {
      if (r.layer != layer)
        continue;
      bytes += r.bytes;
      os << (first ? "" : "<br>") << escapeHtml(r.kind) << " (" << escapeHtml(r.pool)
         << (r.speculativeOnly ? ", speculative-only" : "") << "): "
         << escapeHtml(formatBytes(r.bytes));
      first = false;
    }
    os << "</td><td class=\"n\">" << bytes << "</td></tr>\n";
  }
  os << "</tbody>\n</table>\n</body>\n</html>\n";
}

void kiln::printReport(const ReportData &data, ReportFormat format, llvm::raw_ostream &os) {
  switch (format) {
  case ReportFormat::text:
    printText(data, os);
    return;
  case ReportFormat::json:
    printJson(data, os);
    return;
  case ReportFormat::html:
    printHtml(data, os);
    return;
  }
}
