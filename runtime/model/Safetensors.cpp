// The safetensors reader (see Safetensors.h).
#include "runtime/model/Safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "ssmjit/error.h"

namespace ssmjit::model {

namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& msg) {
  throw Error(Error::Kind::InvalidArgument, "safetensors file " + path + ": " + msg);
}

std::string tensorLabel(const std::string& name) { return "tensor '" + name + "'"; }

// A non-negative integer of the header, or an error naming what it is.
uint64_t headerUint(const std::string& path, const std::string& what, const json& v) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
    fail(path, what + " is " + v.dump() + ", expected a non-negative integer");
  return v.get<uint64_t>();
}

SafetensorsEntry readEntry(const std::string& path, const std::string& name, const json& v, uint64_t dataBytes) {
  const std::string label = tensorLabel(name);
  if (!v.is_object()) fail(path, label + " is " + v.dump() + ", expected an object with dtype, shape, data_offsets");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) fail(path, label + " has no \"" + key + "\"");
  SafetensorsEntry e;
  const json& dt = v["dtype"];
  if (!dt.is_string()) fail(path, label + " has dtype " + dt.dump() + ", expected a string");
  e.dtype = dt.get<std::string>();
  const int bytes = safetensorsDtypeBytes(e.dtype);
  if (bytes == 0) fail(path, label + " has dtype \"" + e.dtype + "\", which safetensors does not define");

  const json& shape = v["shape"];
  if (!shape.is_array()) fail(path, label + " has shape " + shape.dump() + ", expected an array");
  uint64_t numel = 1;
  for (const json& s : shape) {
    const uint64_t n = headerUint(path, label + " shape entry", s);
    if (n > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, n, &numel))
      fail(path, label + " has shape " + shape.dump() + ", whose element count overflows");
    e.shape.push_back(static_cast<int64_t>(n));
  }

  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    fail(path, label + " has data_offsets " + off.dump() + ", expected [begin, end]");
  e.begin = headerUint(path, label + " data_offsets[0]", off[0]);
  e.end = headerUint(path, label + " data_offsets[1]", off[1]);
  if (e.end < e.begin)
    fail(path, label + " has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                   "]: end before begin");
  if (e.end > dataBytes)
    fail(path, label + " has data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                   "], past the end of the data region (" + std::to_string(dataBytes) +
                   " bytes): the file is truncated or the offsets are wrong");
  uint64_t expect = 0;
  if (__builtin_mul_overflow(numel, uint64_t(bytes), &expect) || e.end - e.begin != expect)
    fail(path, label + " has " + std::to_string(e.end - e.begin) + " bytes (data_offsets [" +
                   std::to_string(e.begin) + ", " + std::to_string(e.end) + "]), expected " + std::to_string(numel) +
                   " elements x " + std::to_string(bytes) + " bytes (" + e.dtype + ", shape " + shape.dump() +
                   ") = " + std::to_string(numel * uint64_t(bytes)));
  return e;
}

// No two tensors share a byte (empty tensors hold none).
void checkNoOverlap(const std::string& path, const std::map<std::string, SafetensorsEntry>& entries) {
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  for (const auto& [name, e] : entries)
    if (e.end > e.begin) order.emplace_back(&name, &e);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < order.size(); ++i) {
    const SafetensorsEntry &prev = *order[i - 1].second, &cur = *order[i].second;
    if (cur.begin < prev.end)
      fail(path, tensorLabel(*order[i].first) + " (bytes [" + std::to_string(cur.begin) + ", " +
                     std::to_string(cur.end) + ")) overlaps " + tensorLabel(*order[i - 1].first) + " (bytes [" +
                     std::to_string(prev.begin) + ", " + std::to_string(prev.end) + "))");
  }
}

}  // namespace

int safetensorsDtypeBytes(const std::string& dtype) {
  static const std::map<std::string, int> kBytes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  const auto it = kBytes.find(dtype);
  return it == kBytes.end() ? 0 : it->second;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(err));
  }
  const auto fileSize = static_cast<uint64_t>(st.st_size);
  if (fileSize < 8) {
    ::close(fd);
    fail(path, "the file has " + std::to_string(fileSize) + " bytes, expected at least 8 (the header length)");
  }
  void* m = ::mmap(nullptr, fileSize, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (m == MAP_FAILED) fail(path, std::string("cannot mmap: ") + std::strerror(err));
  map_ = static_cast<const uint8_t*>(m);
  size_ = fileSize;

  try {
    uint64_t headerLen = 0;
    for (int i = 7; i >= 0; --i) headerLen = (headerLen << 8) | map_[i];
    if (headerLen > fileSize - 8)
      fail(path, "the header length is " + std::to_string(headerLen) + " bytes, but only " +
                     std::to_string(fileSize - 8) + " bytes follow it (truncated file or not safetensors)");
    json header;
    try {
      header = json::parse(map_ + 8, map_ + 8 + headerLen);
    } catch (const json::exception& e) {
      fail(path, std::string("the header is not valid JSON: ") + e.what());
    }
    if (!header.is_object()) fail(path, "the header is " + std::string(header.type_name()) + ", expected a JSON object");
    data_ = map_ + 8 + headerLen;
    const uint64_t dataBytes = fileSize - 8 - headerLen;
    for (const auto& [name, v] : header.items()) {
      if (name == "__metadata__") continue;
      entries_.emplace(name, readEntry(path, name, v, dataBytes));
    }
    checkNoOverlap(path, entries_);
  } catch (...) {
    release();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { release(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)), map_(std::exchange(o.map_, nullptr)), size_(std::exchange(o.size_, 0)),
      data_(std::exchange(o.data_, nullptr)), entries_(std::move(o.entries_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    release();
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    size_ = std::exchange(o.size_, 0);
    data_ = std::exchange(o.data_, nullptr);
    entries_ = std::move(o.entries_);
  }
  return *this;
}

void SafetensorsFile::release() noexcept {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), size_);
  map_ = data_ = nullptr;
  size_ = 0;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

TensorView SafetensorsFile::view(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  if (!e) fail(path_, "no " + tensorLabel(name));
  static const std::map<std::string, DType> kViewable = {{"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}};
  const auto dt = kViewable.find(e->dtype);
  if (dt == kViewable.end())
    fail(path_, tensorLabel(name) + " has dtype " + e->dtype + ", expected F32, F16 or BF16");
  if (e->shape.size() > size_t(TensorView::kMaxDims))
    fail(path_, tensorLabel(name) + " has " + std::to_string(e->shape.size()) + " dims, expected at most " +
                    std::to_string(TensorView::kMaxDims));
  // The ops take element-aligned data; the safetensors library pads the header so that it is.
  const int bytes = dtypeBytes(dt->second);
  if ((uint64_t(data_ - map_) + e->begin) % uint64_t(bytes) != 0)
    fail(path_, tensorLabel(name) + " starts at byte " + std::to_string(uint64_t(data_ - map_) + e->begin) +
                    " of the file, expected a multiple of its element size (" + std::to_string(bytes) + " bytes)");
  TensorView v;
  v.data = const_cast<uint8_t*>(data_ + e->begin);  // PROT_READ: a write through the view faults
  v.dtype = dt->second;
  v.ndim = static_cast<int>(e->shape.size());
  v.device = DeviceKind::CPU;
  int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.shape[d] = e->shape[size_t(d)];
    v.strides[d] = stride;
    stride *= v.shape[d];
  }
  return v;
}

}  // namespace ssmjit::model
