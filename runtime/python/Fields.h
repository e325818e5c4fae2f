// The keyword fields of one op call as Python passes them: a dict from the C++ struct's field names
// to tensor descriptors, numbers or None. A tensor descriptor is the tuple
// (data_ptr, dtype_code, dtype_bits, shape, strides, device_type, device_id) with DLPack's codes,
// read into a TensorView through TensorView::fromDLPackFields (zero-copy: the caller keeps the
// tensor alive for the call). Every key must be read: a key the op does not know is an error.
#pragma once
#include <nanobind/nanobind.h>

#include <set>
#include <string>

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

 private:
  nanobind::handle get(const char* name);
  nanobind::dict fields_;
  const char* op_;
  std::set<std::string> read_;
};

// The stream a Python caller passes: torch.cuda.Stream.cuda_stream, an int (0: the legacy default).
inline void* streamOf(uintptr_t stream) { return reinterpret_cast<void*>(stream); }

void bindConv(nanobind::module_& m);
void bindScan(nanobind::module_& m);
void bindSsd(nanobind::module_& m);
void bindDecode(nanobind::module_& m);

}  // namespace ssmjit::python
