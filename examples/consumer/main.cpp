// Parses a module with Kiln's configuration attributes and a model op, verifies it,
// and asks a resource for its bytes through the interface.
#include "kiln/Dialect/Kiln.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <cstdio>

static const char *kModule = R"mlir(
module attributes {kiln.target = #kiln.target<"h200">,
                   kiln.runtime = #kiln.runtime<max_batch = 4, max_seq_len = 1024, kv_dtype = bf16>} {
  func.func @f() {
    %kv = kiln.cache_resource layer 0 unit [2, 8, 128] of bf16 : !kiln.cache<kv>
    return
  }
}
)mlir";

int main() {
  mlir::MLIRContext context;
  context.loadDialect<kiln::KilnDialect, mlir::func::FuncDialect>();
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kModule, &context);
  if (!module) {
    std::fprintf(stderr, "kiln-consumer: failed to parse\n");
    return 1;
  }
  kiln::ModuleConfig config = kiln::getModuleConfig(*module);
  uint64_t bytes = 0;
  module->walk([&](kiln::CacheResourceInterface resource) {
    bytes += kiln::computeResourceBytes(resource, config.runtime);
  });
  // 4 sequences x 1024 tokens x 2 x 8 x 128 x 2 bytes.
  const uint64_t expected = 4ull * 1024 * 2 * 8 * 128 * 2;
  std::printf("kiln-consumer: target %s sm_%u, kv bytes %llu\n",
              config.target.getName().str().c_str(), config.target.getSm(),
              static_cast<unsigned long long>(bytes));
  return bytes == expected ? 0 : 1;
}
