# Writes IN as a C++ string constant `ssmjit::kDeviceLibSource` into OUT.
file(READ "${IN}" _text)
string(LENGTH "${_text}" _len)
set(_out "// Generated from ssmjit_device.cuh; do not edit.\nnamespace ssmjit {\nextern const char* const kDeviceLibSource;\nconst char* const kDeviceLibSource = R\"SSMJIT_DEVLIB(${_text})SSMJIT_DEVLIB\";\n}\n")
file(WRITE "${OUT}" "${_out}")
