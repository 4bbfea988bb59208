// kiln::compile, the driver as a library: the options struct reaches everything the
// tool's flags do (deploy options, output, emit kind), exit codes included.
#include "kiln/Driver/Compile.h"
#include "kiln/InitAll.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

namespace {

std::string tinyConfig() { return std::string(KILN_SOURCE_DIR) + "/test/Parity/configs/llama-tiny.json"; }

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Compiler {
  mlir::DialectRegistry registry;
  std::unique_ptr<mlir::MLIRContext> context;
  Compiler() {
    kiln::registerAllDialects(registry);
    context = std::make_unique<mlir::MLIRContext>(registry);
    context->loadAllAvailableDialects();
  }
};

std::string tempPath(const char *name) {
  return "/tmp/kiln-compile-test-" + std::to_string(getpid()) + "-" + name;
}

TEST(CompileApi, JsonReportWithDeployOptions) {
  Compiler c;
  kiln::CompileOptions options;
  options.modelPath = tinyConfig();
  options.deploy.target = "l40s";
  options.deploy.spec = "ngram:3";
  options.deploy.maxBatch = 4;
  options.deploy.maxSeqLen = 512;
  options.reportFormat = kiln::ReportFormat::json;
  options.outputPath = tempPath("report.json");
  ASSERT_EQ(kiln::compile(*c.context, options), 0);
  std::string report = readFile(options.outputPath);
  EXPECT_NE(report.find("\"name\": \"l40s\""), std::string::npos) << report.substr(0, 400);
  EXPECT_NE(report.find("\"max_draft_len\": 3"), std::string::npos);
  EXPECT_NE(report.find("\"fits\": true"), std::string::npos);
  std::remove(options.outputPath.c_str());
}

TEST(CompileApi, LoweredModuleAndExitCodes) {
  Compiler c;
  kiln::CompileOptions options;
  options.modelPath = tinyConfig();
  options.deploy.maxBatch = 2;
  options.deploy.maxSeqLen = 256;
  options.emit = kiln::EmitKind::lowered;
  options.outputPath = tempPath("lowered.mlir");
  ASSERT_EQ(kiln::compile(*c.context, options), 0);
  EXPECT_NE(readFile(options.outputPath).find("call @kiln_rt_attention"), std::string::npos);
  std::remove(options.outputPath.c_str());

  // A plan that does not fit: exit 2, the report still written.
  options.emit = kiln::EmitKind::report;
  options.deploy.maxBatch = 1u << 20;
  options.deploy.maxSeqLen = 1u << 20;
  options.outputPath = tempPath("big.txt");
  EXPECT_EQ(kiln::compile(*c.context, options), 2);
  EXPECT_NE(readFile(options.outputPath).find("DOES NOT FIT"), std::string::npos);
  std::remove(options.outputPath.c_str());

  // An output naming the input is refused, and the input kept.
  const std::string before = readFile(tinyConfig());
  options.outputPath = tinyConfig();
  EXPECT_EQ(kiln::compile(*c.context, options), 1);
  EXPECT_EQ(readFile(tinyConfig()), before);
}

} // namespace
