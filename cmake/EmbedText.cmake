# Writes the text file IN as a C++ string constant `ssmjit::${NAME}` into OUT:
#   cmake -DIN=file -DOUT=file.cpp -DNAME=kIdentifier -P EmbedText.cmake
foreach(_var IN ITEMS IN OUT NAME)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "EmbedText.cmake: -D${_var}=... is required (IN, OUT, NAME)")
  endif()
endforeach()
if(NOT NAME MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
  message(FATAL_ERROR "EmbedText.cmake: NAME is '${NAME}', expected a C++ identifier")
endif()
file(READ "${IN}" _text)
# A raw string ends at the first )SSMJIT_EMBED": the text must not contain it.
string(FIND "${_text}" ")SSMJIT_EMBED\"" _clash)
if(NOT _clash EQUAL -1)
  message(FATAL_ERROR "EmbedText.cmake: ${IN} contains the raw-string delimiter )SSMJIT_EMBED\"")
endif()
get_filename_component(_name "${IN}" NAME)
file(WRITE "${OUT}" "// Generated from ${_name} by cmake/EmbedText.cmake; do not edit.\nnamespace ssmjit {\nextern const char* const ${NAME};\nconst char* const ${NAME} = R\"SSMJIT_EMBED(${_text})SSMJIT_EMBED\";\n}\n")
