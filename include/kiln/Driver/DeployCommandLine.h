//===- DeployCommandLine.h - the deploy options as command-line flags ------===//
//
// A tool's flags for the deploy pipeline, generated from the rows of
// kiln/Transforms/DeployOptions.def (the same rows define DeployOptions and kiln-opt's
// `kiln-deploy{...}` options), registered in the tool's option categories.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_DRIVER_DEPLOYCOMMANDLINE_H
#define KILN_DRIVER_DEPLOYCOMMANDLINE_H

#include "kiln/Transforms/Pipeline.h"

#include "llvm/Support/CommandLine.h"

#include <string>

namespace kiln {

/// The option categories a tool groups the deploy flags in (`--help`).
struct DeployCategories {
  llvm::cl::OptionCategory &Target, &Spec, &Memory;
};

class DeployCommandLine {
public:
  /// Registers the flags (construct before llvm::cl::ParseCommandLineOptions).
  explicit DeployCommandLine(const DeployCategories &categories);

  /// The flags given on the command line; flags not given keep DeployOptions' defaults
  /// (and so the module's values).
  DeployOptions get() const;

  /// What no module could accept, as a message naming the flag ("" if nothing): a count
  /// of zero, a usable fraction outside (0, 1], an unknown SSM mode or KV dtype.
  std::string validate() const;

private:
#define KILN_DEPLOY_STRING(field, flag, category, help) llvm::cl::opt<std::string> field;
#define KILN_DEPLOY_COUNT(field, flag, category, help) llvm::cl::opt<unsigned> field;
#define KILN_DEPLOY_SCALAR(type, field, flag, default, category, help)                     \
  llvm::cl::opt<type> field;
#define KILN_DEPLOY_LIST(field, flag, category, help) llvm::cl::list<std::string> field;
#include "kiln/Transforms/DeployOptions.def"
  bool registered; // last member: closes the generated initializer list
};

} // namespace kiln

#endif
