// Writes the starting corpus of a fuzz target at run time, so that no binary file is checked in:
//   make_seeds blob DIR            valid blobs (encodeBlob) of a few shapes
//   make_seeds manifest DIR DICT   manifests of each form, and a libFuzzer dictionary of their tokens
//   make_seeds safetensors DIR DICT  safetensors files of a few dtypes, and a dictionary of keys
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cache/Blob.h"

using namespace ssmjit;

namespace {

bool writeFile(const std::string& path, const void* data, size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::perror(path.c_str());
    return false;
  }
  const bool ok = std::fwrite(data, 1, n, f) == n;
  return std::fclose(f) == 0 && ok;
}

bool writeText(const std::string& path, const std::string& s) { return writeFile(path, s.data(), s.size()); }

// A libFuzzer dictionary of `tokens`: each entry a C-like string literal on its own line.
template <size_t N>
std::string dictionary(const char* const (&tokens)[N]) {
  std::string d;
  for (const char* t : tokens) {
    std::string escaped;
    for (const char* c = t; *c; ++c) escaped += *c == '"' || *c == '\\' ? std::string("\\") + *c : std::string(1, *c);
    d += "\"" + escaped + "\"\n";
  }
  return d;
}

bool blobSeeds(const std::string& dir) {
  CompiledKernel k;
  k.entry = "ssmjit_ssu_1f";
  k.params = {{"state", KernelParam::Kind::Ptr},
              {"batch", KernelParam::Kind::I32},
              {"stride", KernelParam::Kind::I64},
              {"eps", KernelParam::Kind::F32}};
  k.numThreads = 128;
  k.ptx = ".version 8.8\n.target sm_90a\n";
  for (int i = 0; i < 256; ++i) k.cubin.push_back(static_cast<char>(i));
  k.arch = "sm_90a";
  k.resources = ResourceUsage{32, 1024, 0, -1, -1};
  k.compileMs = 12.5;
  const std::vector<char> full = cache::encodeBlob("v1;selective_state_update;sm_90a;H=80;P=64", k);
  CompiledKernel bare;  // PTX only, no parameters
  bare.numThreads = 1;
  const std::vector<char> empty = cache::encodeBlob("", bare);
  return writeFile(dir + "/full.sjk", full.data(), full.size()) &&
         writeFile(dir + "/bare.sjk", empty.data(), empty.size());
}

bool manifestSeeds(const std::string& dir, const std::string& dict) {
  const std::string spec =
      "{\"kernel\": \"selective_state_update\", \"arch\": \"sm_90a\", \"bindings\": [[\"H\", 80], "
      "[\"dtype:state\", 2], [\"off\", -1]]}";
  const std::string op =
      "{\"op\": \"ssu-tokens\", \"archs\": [\"sm_90a\", \"sm_80\"], \"heads\": 80, \"tokens\": [2, 4], "
      "\"eps\": 0.5, \"no-z\": true, \"state-dtype\": [\"fp32\", \"bf16\"]}";
  const std::string doc = "{\"ssmjit_manifest\": 1, \"entries\": [\n" + spec + ",\n" + op + "\n]}\n";
  const std::string lines = spec + "\n\n" + "{\"op\": \"ssu\", \"arch\": \"compute_80a\", \"x\": \"y\"}\n";
  const std::string single = "{\n  \"op\": \"ssu\",\n  \"archs\": [\"sm_100a\"],\n  \"heads\": [1, 2.5e3]\n}\n";
  const char* const tokens[] = {
      "\"ssmjit_manifest\"", "\"entries\"",    "\"kernel\"", "\"op\"", "\"arch\"", "\"archs\"", "\"bindings\"",
      "\"sm_90a\"",          "\"compute_80\"", "true",       "false",  "null",     "1e400",     "-0",
      "\"\\u0065\"",         "[[\"",           "\":",        "\", \""};
  return writeText(dir + "/document.json", doc) && writeText(dir + "/record.jsonl", lines) &&
         writeText(dir + "/single.json", single) && writeText(dict, dictionary(tokens));
}

// A safetensors file: the header's length (8 bytes, little-endian), the header padded with spaces
// to 8 bytes, then `dataBytes` zero bytes.
std::string safetensors(std::string header, size_t dataBytes) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return out + header + std::string(dataBytes, '\0');
}

bool safetensorsSeeds(const std::string& dir, const std::string& dict) {
  const std::string weights = safetensors(
      "{\"__metadata__\": {\"format\": \"pt\"}, \"w\": {\"dtype\": \"F32\", \"shape\": [2, 2], "
      "\"data_offsets\": [0, 16]}, \"b\": {\"dtype\": \"BF16\", \"shape\": [3], \"data_offsets\": [16, 22]}}",
      22);
  const std::string mixed = safetensors(
      "{\"i\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [0, 8]}, \"e\": {\"dtype\": \"F16\", "
      "\"shape\": [0, 4], \"data_offsets\": [8, 8]}, \"h\": {\"dtype\": \"F16\", \"shape\": [], "
      "\"data_offsets\": [8, 10]}}",
      10);
  const char* const tokens[] = {"\"dtype\"",
                                "\"shape\"",
                                "\"data_offsets\"",
                                "\"__metadata__\"",
                                "\"F32\"",
                                "\"BF16\"",
                                "\"F16\"",
                                "\"I64\"",
                                "18446744073709551615",
                                "-1",
                                "1e300",
                                "[]",
                                "{}"};
  return writeText(dir + "/weights.safetensors", weights) && writeText(dir + "/mixed.safetensors", mixed) &&
         writeText(dict, dictionary(tokens));
}

}  // namespace

int main(int argc, char** argv) {
  const bool blob = argc == 3 && std::strcmp(argv[1], "blob") == 0;
  const bool manifest = argc == 4 && std::strcmp(argv[1], "manifest") == 0;
  const bool tensors = argc == 4 && std::strcmp(argv[1], "safetensors") == 0;
  if (!blob && !manifest && !tensors) {
    std::fprintf(stderr,
                 "usage: make_seeds blob DIR | make_seeds manifest DIR DICT | make_seeds safetensors DIR DICT\n");
    return 2;
  }
  if (blob) return blobSeeds(argv[2]) ? 0 : 1;
  return (manifest ? manifestSeeds(argv[2], argv[3]) : safetensorsSeeds(argv[2], argv[3])) ? 0 : 1;
}
