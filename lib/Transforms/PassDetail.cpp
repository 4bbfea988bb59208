#include "PassDetail.h"

using namespace mlir;

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
