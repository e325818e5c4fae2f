# lit configuration of the sj pass tests: each .mlir file's RUN lines pipe ssmjit-opt into
# FileCheck. tests/lit/CMakeLists.txt passes where the tools are and where to write.
import os

import lit.formats

config.name = "ssmjit-passes"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.test_source_root = os.path.dirname(__file__)

params = {}
for key in ("ssmjit_opt_dir", "llvm_tools_dir", "exec_root"):
    if key not in lit_config.params:
        lit_config.fatal(f"lit parameter '{key}' is missing (run through ctest, or pass --param {key}=DIR)")
    params[key] = lit_config.params[key]
config.test_exec_root = params["exec_root"]
config.environment["PATH"] = os.pathsep.join(
    [params["ssmjit_opt_dir"], params["llvm_tools_dir"], os.environ.get("PATH", "")])
