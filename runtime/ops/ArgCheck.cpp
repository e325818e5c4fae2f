// The shared argument checker (see ArgCheck.h).
#include "runtime/ops/ArgCheck.h"

#include <cstdio>
#include <vector>

namespace ssmjit::detail {

std::string listString(const int64_t* v, int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) {
    if (i) s += ", ";
    s += std::to_string(v[i]);
  }
  return s + ")";
}

std::string dimSizes(const Dim* d, int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) {
    if (i) s += ", ";
    s += std::to_string(d[i].size);
  }
  return s + ")";
}

std::string dimNames(const Dim* d, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i) s += ", ";
    s += d[i].name;
  }
  return s;
}

std::string hexPtr(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p)));
  return buf;
}

bool inSet(DType t, unsigned set) { return (set >> static_cast<int>(t)) & 1u; }

std::string setString(unsigned set) {
  std::string s;
  const DType all[] = {DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64};
  int n = 0, k = 0;
  for (DType t : all) n += inSet(t, set);
  for (DType t : all) {
    if (!inSet(t, set)) continue;
    if (k) s += (k == n - 1) ? " or " : ", ";
    s += dtypeName(t);
    ++k;
  }
  return s;
}

void Checker::fail(const std::string& msg) const {
  throw Error(Error::Kind::InvalidArgument, std::string(op_) + ": " + msg);
}

void Checker::required(const char* name, const TensorView& t) const {
  if (!t.defined()) fail(std::string(name) + " is required, got an undefined tensor (null data pointer)");
}

void Checker::rank(const char* name, const TensorView& t, const Dim* exp, int n) const {
  if (t.ndim != n)
    fail(std::string(name) + " has rank " + std::to_string(t.ndim) + " (shape " + t.shapeString() +
         "), expected rank " + std::to_string(n) + " (" + dimNames(exp, n) + ")" + form_);
}

void Checker::tensor(const char* name, const TensorView& t, const Dim* exp, int n, unsigned dtypes,
                     bool zeroStrideOk) const {
  rank(name, t, exp, n);
  for (int i = 0; i < n; ++i) {
    if (t.shape[i] != exp[i].size)
      fail(std::string(name) + " has shape " + t.shapeString() + ", expected " + dimSizes(exp, n) + " [" +
           dimNames(exp, n) + "]: dim " + std::to_string(i) + " (" + exp[i].name + ") is " +
           std::to_string(t.shape[i]) + ", expected " + std::to_string(exp[i].size) + form_);
  }
  if (!inSet(t.dtype, dtypes))
    fail(std::string(name) + " has dtype " + dtypeName(t.dtype) + ", expected " + setString(dtypes));
  if (t.device != device_)
    fail(std::string(name) + " is a " + (t.device == DeviceKind::CUDA ? "CUDA" : "CPU") + " tensor, expected a " +
         (device_ == DeviceKind::CUDA ? "CUDA" : "CPU") + " tensor");
  if (device_ == DeviceKind::CUDA && t.deviceId != deviceId_)
    fail(std::string(name) + " is on CUDA device " + std::to_string(t.deviceId) + ", expected device " +
         std::to_string(deviceId_) + " (where " + deviceFrom_ + " is)");
  for (int i = 0; i < n; ++i) {
    if (t.strides[i] < 0)
      fail(std::string(name) + " has strides " + listString(t.strides, n) + " for shape " + t.shapeString() + ": dim " +
           std::to_string(i) + " (" + exp[i].name + ") has stride " + std::to_string(t.strides[i]) +
           ", expected a stride >= 0");
    if (t.strides[i] == 0 && t.shape[i] > 1 && !zeroStrideOk)
      fail(std::string(name) + " has strides " + listString(t.strides, n) + " for shape " + t.shapeString() + ": dim " +
           std::to_string(i) + " (" + exp[i].name + ", size " + std::to_string(t.shape[i]) +
           ") has stride 0, expected a nonzero stride (the kernel takes no broadcast axis "
           "here)");
  }
  const int eb = dtypeBytes(t.dtype);
  if (reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(eb) != 0)
    fail(std::string(name) + " has data pointer " + hexPtr(t.data) + ", expected a multiple of its element size (" +
         dtypeName(t.dtype) + ": " + std::to_string(eb) + " bytes)");
}

void checkWorkspace(const char* op, const TensorView& w, const TensorView& on, const char* onName, int64_t need,
                    const std::string& sizeFn, const std::string& missingNote) {
  Checker c(op, DeviceKind::CUDA);
  c.setDeviceId(on.deviceId, onName);
  if (!w.defined())
    c.fail("workspace is not given, expected a float32 buffer of at least " + std::to_string(need) + " elements (" +
           sizeFn + (missingNote.empty() ? "" : ": " + missingNote) + ")");
  std::vector<Dim> e;
  for (int k = 0; k < w.ndim; ++k) e.push_back({w.shape[k], "n"});
  c.tensor("workspace", w, e.data(), w.ndim, kF32Only, false);
  int64_t expect = 1;
  for (int k = w.ndim - 1; k >= 0; --k) {
    if (w.shape[k] != 1 && w.strides[k] != expect)
      c.fail("workspace has strides " + listString(w.strides, w.ndim) + " for shape " + w.shapeString() +
             ", expected contiguous strides");
    expect *= w.shape[k];
  }
  if (w.numel() < need)
    c.fail("workspace has " + std::to_string(w.numel()) + " elements (shape " + w.shapeString() +
           "), expected at least " + std::to_string(need) + " (" + sizeFn + ")");
}

int64_t checkPackedRow(const Checker& c, const TensorView& cu, int64_t batch, const TensorView& first,
                       const char* firstName) {
  if (!cu.defined()) return batch;
  if (batch != 1)
    c.fail("cu_seqlens is given and " + std::string(firstName) + " has batch " + std::to_string(batch) + " (shape " +
           first.shapeString() + "), expected batch 1 (one packed row)");
  Dim e[1] = {{-1, "nseq + 1"}};
  c.rank("cu_seqlens", cu, e, 1);
  if (cu.shape[0] < 2)
    c.fail("cu_seqlens has shape " + cu.shapeString() + ", expected at least 2 entries (nseq + 1, nseq >= 1)");
  e[0].size = cu.shape[0];
  c.tensor("cu_seqlens", cu, e, 1, kIndexTypes, false);
  return cu.shape[0] - 1;
}

void onlyWith(const Checker& c, const char* name, const TensorView& t, const char* other, const TensorView& o,
              const char* why) {
  if (t.defined() && !o.defined())
    c.fail(std::string(name) + " is given (shape " + t.shapeString() + "), expected none: " + other +
           " is not given (" + why + ")");
}

void exactlyWith(const Checker& c, const char* name, const TensorView& t, const char* input, const TensorView& in) {
  if (in.defined() && !t.defined())
    c.fail(std::string(name) + " is not given, expected a tensor: forward." + input + " is given");
  if (!in.defined() && t.defined())
    c.fail(std::string(name) + " is given (shape " + t.shapeString() + "), expected none: forward." + input +
           " is not given");
}

int64_t checkStateSlots(const Checker& c, const char* name, const TensorView& t, const char* idxName,
                        const TensorView& idx, const Dim* inner, int n, int64_t nseq) {
  onlyWith(c, idxName, idx, name, t, "indices select its slots");
  if (!t.defined()) return 0;
  std::vector<Dim> e{{-1, "slots"}};
  e.insert(e.end(), inner, inner + n);
  c.rank(name, t, e.data(), n + 1);
  e[0].size = t.shape[0];
  c.tensor(name, t, e.data(), n + 1, kFloat16Or32, false);
  const Dim eIdx[1] = {{nseq, "nseq"}};
  c.optional(idxName, idx, eIdx, 1, kIndexTypes, false);
  if (!idx.defined() && t.shape[0] < nseq)
    c.fail(std::string(name) + " has " + std::to_string(t.shape[0]) + " slots (dim 0 of shape " + t.shapeString() +
           "), expected at least nseq = " + std::to_string(nseq) + " (without " + idxName +
           ", sequence i uses slot i)");
  return t.shape[0];
}

}  // namespace ssmjit::detail
