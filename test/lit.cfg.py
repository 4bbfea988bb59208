# -*- Python -*- lit configuration for Kiln's IR tests.
import os
import lit.formats
from lit.llvm import llvm_config

config.name = "Kiln"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".json", ".test"]
config.excludes = ["Inputs", "Kernels", "Unit", "CMakeLists.txt", "lit.cfg.py",
                   "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.kiln_obj_root, "test")
config.environment["FILECHECK_OPTS"] = "-enable-var-scope"
config.substitutions.append(("%examples", os.path.join(config.kiln_src_root, "examples")))
config.substitutions.append(("%kiln_src", config.kiln_src_root))

llvm_config.use_default_substitutions()
tool_dirs = [config.kiln_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["kiln-opt", "kiln-compile"], tool_dirs)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.kiln_tools_dir, append_path=True)
# kiln-run and libkiln_runtime.so are built with the runtime half, not in the sanitizer
# build of the compiler half: tests of kiln-run say `REQUIRES: kiln-run`.
config.substitutions.append(("%kiln_lib", os.path.join(config.kiln_obj_root, "lib")))
if os.path.exists(os.path.join(config.kiln_tools_dir, "kiln-run")):
    config.available_features.add("kiln-run")
