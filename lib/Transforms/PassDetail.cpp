#include "PassDetail.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

std::string kiln::formatBytes(uint64_t bytes) {
  std::string text;
  llvm::raw_string_ostream os(text);
  const double kib = 1024.0, mib = kib * 1024, gib = mib * 1024, tib = gib * 1024,
               pib = tib * 1024, eib = pib * 1024;
  if (bytes >= eib)
    os << llvm::format("%.2f EiB", bytes / eib);
  else if (bytes >= pib)
    os << llvm::format("%.2f PiB", bytes / pib);
  else if (bytes >= tib)
    os << llvm::format("%.2f TiB", bytes / tib);
  else if (bytes >= gib)
    os << llvm::format("%.2f GiB", bytes / gib);
  else if (bytes >= mib)
    os << llvm::format("%.1f MiB", bytes / mib);
  else if (bytes >= kib)
    os << llvm::format("%.1f KiB", bytes / kib);
  else
    os << bytes << " B";
  return text;
}

LogicalResult kiln::emitMissingConfig(ModuleOp module, StringRef pass, StringRef attribute,
                                      StringRef example) {
  return module.emitError() << pass << " needs a '" << attribute
                            << "' module attribute, e.g. " << example;
}

LogicalResult kiln::emitMissingRuntime(ModuleOp module, StringRef pass) {
  return emitMissingConfig(module, pass, "kiln.runtime",
                           "#kiln.runtime<max_batch = 64, max_seq_len = 8192, kv_dtype = bf16>");
}

LogicalResult kiln::emitMissingTarget(ModuleOp module, StringRef pass) {
  return emitMissingConfig(module, pass, "kiln.target", "#kiln.target<\"h200\">");
}

std::string kiln::describeResource(CacheResourceInterface resource) {
  return ("layer " + llvm::Twine(resource.getLayerIndex()) + " " +
          stringifyResourceKind(resource.getResourceKind()))
      .str();
}
