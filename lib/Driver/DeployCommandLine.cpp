//===- DeployCommandLine.cpp - the deploy options as command-line flags ---===//
#include "kiln/Driver/DeployCommandLine.h"

#include "llvm/ADT/STLExtras.h"

using namespace kiln;
namespace cl = llvm::cl;

DeployCommandLine::DeployCommandLine(const DeployCategories &categories)
    :
#define KILN_DEPLOY_STRING(field, flag, category, help)                                    \
  field(flag, cl::desc(help), cl::init(""), cl::cat(categories.category)),
#define KILN_DEPLOY_COUNT(field, flag, category, help)                                     \
  field(flag, cl::desc(help), cl::cat(categories.category)),
#define KILN_DEPLOY_SCALAR(type, field, flag, default, category, help)                     \
  field(flag, cl::desc(help), cl::init(default), cl::cat(categories.category)),
#define KILN_DEPLOY_LIST(field, flag, category, help)                                      \
  field(flag, cl::desc(help), cl::cat(categories.category)),
#include "kiln/Transforms/DeployOptions.def"
      registered(true) {}

DeployOptions DeployCommandLine::get() const {
  DeployOptions options;
#define KILN_DEPLOY_STRING(field, flag, category, help) options.field = field;
#define KILN_DEPLOY_COUNT(field, flag, category, help)                                     \
  if (field.getNumOccurrences())                                                           \
    options.field = field;
#define KILN_DEPLOY_SCALAR(type, field, flag, default, category, help) options.field = field;
#define KILN_DEPLOY_LIST(field, flag, category, help)                                      \
  options.field.assign(field.begin(), field.end());
#include "kiln/Transforms/DeployOptions.def"
  return options;
}

std::string DeployCommandLine::validate() const {
  // Zero is never a size: every count flag rejects it the same way (the passes' own
  // options use 0 for "keep the module's value", which a flag does not need).
#define KILN_DEPLOY_COUNT(field, flag, category, help)                                     \
  if (field.getNumOccurrences() && field == 0)                                             \
    return std::string("--") + flag + " must be >= 1";
#include "kiln/Transforms/DeployOptions.def"
  if (!(usableFraction > 0.0 && usableFraction <= 1.0))
    return "--usable-fraction must be in (0, 1]";
  if (!ssmMode.empty() && ssmMode != "rewind" && ssmMode != "replay")
    return "invalid --ssm-mode '" + ssmMode + "'; expected rewind or replay";
  if (!kvDtype.empty() && !llvm::is_contained({"bf16", "f16", "f32", "fp8"}, kvDtype))
    return "invalid --kv-dtype '" + kvDtype + "'; expected bf16, f16, f32 or fp8";
  return "";
}
