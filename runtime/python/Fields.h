// The keyword fields of one op call as Python passes them: a dict from the C++ struct's field names
// to tensor descriptors, numbers or None. A tensor descriptor is the tuple
// (data_ptr, dtype_code, dtype_bits, shape, strides, device_type, device_id) with DLPack's codes,
// read into a TensorView through TensorView::fromDLPackFields (zero-copy: the caller keeps the
// tensor alive for the call). Every key must be read: a key the op does not know is an error.
#pragma once
#include <nanobind/nanobind.h>

#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "ssmjit/tensor.h"

namespace ssmjit::python {

class Fields {
 public:
  Fields(nanobind::dict fields, const char* op) : fields_(std::move(fields)), op_(op) {}

  TensorView tensor(const char* name);  // None or absent: an undefined view
  bool flag(const char* name, bool fallback = false);
  int64_t integer(const char* name, int64_t fallback = 0);
  float real(const char* name, float fallback = 0.0f);
  // Throws ssmjit::Error naming the keys no read asked for.
  void finish() const;

  // Reads field `name` into `v` by v's type (an enum as its integer code); None or absent leaves v
  // as it is, the argument struct's default.
  void read(const char* name, TensorView& v) { v = tensor(name); }
  void read(const char* name, bool& v) { v = flag(name, v); }
  void read(const char* name, float& v) { v = real(name, v); }
  template <class T, std::enable_if_t<std::is_integral_v<T> || std::is_enum_v<T>, int> = 0>
  void read(const char* name, T& v) {
    v = static_cast<T>(integer(name, static_cast<int64_t>(v)));
  }
  // Reads each member from the field named like it; `spelled` is the members as written, "a.x, a.dt"
  // (SSMJIT_READ_FIELDS passes it).
  template <class... T>
  void readEach(const char* spelled, T&... members) {
    const std::vector<std::string> names = memberNames(spelled);
    size_t i = 0;
    (read(names[i++].c_str(), members), ...);
  }

 private:
  nanobind::handle get(const char* name);
  // "a.x, b.y" -> {"x", "y"}.
  static std::vector<std::string> memberNames(const char* spelled);
  nanobind::dict fields_;
  const char* op_;
  std::set<std::string> read_;
};

// SSMJIT_READ_FIELDS(f, a.x, a.dt): each member read from the field of its own name ("x", "dt"),
// so that every name is written once.
#define SSMJIT_READ_FIELDS(fields, ...) (fields).readEach(#__VA_ARGS__, __VA_ARGS__)

// The stream a Python caller passes: torch.cuda.Stream.cuda_stream, an int (0: the legacy default).
inline void* streamOf(uintptr_t stream) { return reinterpret_cast<void*>(stream); }

void bindConv(nanobind::module_& m);
void bindScan(nanobind::module_& m);
void bindSsd(nanobind::module_& m);
void bindDecode(nanobind::module_& m);

}  // namespace ssmjit::python
