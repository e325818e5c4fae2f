// libFuzzer target for the safetensors reader: any file opens or throws ssmjit::Error naming it
// (nothing else, no crash), and every tensor of a file that opens is a view of the file's own bytes
// for that tensor, or an ssmjit::Error.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/model/Safetensors.h"
#include "ssmjit/error.h"

using namespace ssmjit;

namespace {

[[noreturn]] void bug(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::abort();
}

// The reader maps a path: one file a process, rewritten for each input.
const std::string& scratchPath() {
  static const std::string path = [] {
    char name[] = "/tmp/ssmjit_fuzz_safetensors_XXXXXX";
    const int fd = mkstemp(name);
    if (fd < 0) bug("cannot create a scratch file");
    close(fd);
    return std::string(name);
  }();
  return path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scratchPath();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, size, f) != size || std::fclose(f) != 0) bug("cannot write " + path);
  try {
    const model::SafetensorsFile file(path);
    for (const auto& [name, entry] : file.entries()) {
      try {
        const TensorView v = file.view(name);
        // The view holds the input's bytes of the tensor: the data region starts after the
        // 8-byte length and the header (a file that opens has both).
        uint64_t headerLen = 0;
        for (int i = 7; i >= 0; --i) headerLen = (headerLen << 8) | data[i];
        const uint8_t* expected = data + 8 + headerLen + entry.begin;
        if (std::memcmp(v.data, expected, entry.end - entry.begin) != 0) bug("tensor '" + name + "' views other bytes");
      } catch (const Error&) {
      }
    }
  } catch (const Error& e) {
    if (std::string(e.what()).find(path) == std::string::npos) bug(std::string("error names no file: ") + e.what());
  }
  return 0;
}
