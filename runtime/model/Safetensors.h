// One safetensors file, memory-mapped read-only: an 8-byte little-endian header length, a JSON
// header (name -> dtype, shape, data_offsets into the data region after it), then the raw bytes.
// The whole header is checked when the file is opened; tensors come out as CPU views into the
// mapping, valid as long as the SafetensorsFile lives (moving it keeps them valid). Internal to
// the runtime.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ssmjit/tensor.h"

namespace ssmjit::model {

struct SafetensorsEntry {
  std::string dtype;            // as the header spells it: "BF16", "F32", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data region
};

class SafetensorsFile {
 public:
  // Maps `path` and checks its header: length within the file, valid JSON, every entry's dtype,
  // shape and offsets (inside the data region, byte size = numel * dtype size, no overlaps).
  // Throws ssmjit::Error(InvalidArgument) naming the file and the tensor.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const SafetensorsEntry* find(const std::string& name) const;
  // A contiguous CPU view of tensor `name` (F32, F16 or BF16; at most TensorView::kMaxDims
  // dims; its data aligned to its element size). Throws naming the file and tensor for an
  // unknown name, another dtype or misaligned data.
  TensorView view(const std::string& name) const;

 private:
  void release() noexcept;

  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data region
  std::map<std::string, SafetensorsEntry> entries_;
};

// Bytes per element of a safetensors dtype name; 0 for a name safetensors does not define.
int safetensorsDtypeBytes(const std::string& dtype);

}  // namespace ssmjit::model
