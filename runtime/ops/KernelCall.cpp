#include "runtime/ops/KernelCall.h"

#include <climits>
#include <cstring>
#include <memory>
#include <string>

#include "kernels_dsl/Registry.h"
#include "runtime/Driver.h"
#include "ssmjit/error.h"

namespace ssmjit::detail {

int64_t alignClass(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (int64_t c : {16, 8, 4, 2})
    if (a % static_cast<uintptr_t>(c) == 0) return c;
  return 1;
}

int64_t divClass(int64_t v) {
  for (int64_t c : {16, 8, 4, 2})
    if (v % c == 0) return c;
  return 1;
}

void KernelCall::pointer(int arg, const TensorView& t, DType absent, bool data) {
  v[arg].ptr = t.data;
  bind(2, arg, static_cast<int64_t>(t.defined() ? t.dtype : absent));
  // Only data pointers: index arrays' addresses vary between calls, and specialising on them
  // would recompile mid-serving.
  if (data) bind(3, arg, t.defined() ? alignClass(t.data) : 16);
}
void KernelCall::pointer(int arg, void* p, DType dtype) {
  v[arg].ptr = p;
  bind(2, arg, static_cast<int64_t>(dtype));
}
void KernelCall::size(int arg, int64_t value, bool bound) {
  v[arg].i64 = value;
  if (bound) bind(0, arg, value);
  else bind(1, arg, divClass(value));  // masks against it keep their vector width
}
void KernelCall::count(int arg, int64_t value) { v[arg].i64 = value; }
void KernelCall::stride(int arg, int64_t value) {
  v[arg].i64 = value;
  if (value == 0 || value == 1) bind(0, arg, value);
  else bind(1, arg, divClass(value));
}
void KernelCall::flag(int arg, bool value) {
  v[arg].i64 = value;
  bind(0, arg, value);
}
void KernelCall::meta(const char* name, int64_t value) {
  if (nMeta_ == kMaxMeta) throw Error(Error::Kind::Internal, "KernelCall: too many meta values");
  metaNames_[nMeta_] = name;
  bind(4, nMeta_++, value);
}

namespace {

struct MemoSlot {
  const char* kernel = nullptr;
  CUcontext ctx = nullptr;
  const LoadedKernel* loaded = nullptr;
  std::shared_ptr<const Specialization> spec;
  int count = 0;
  std::unique_ptr<char[]> binds;  // the Bind array, compared with memcmp
};
constexpr int kMemoSlots = 8;

}  // namespace

Specialization KernelCall::specialization(const std::string& arch) const {
  Specialization spec;
  spec.kernel = kernel_;
  spec.arch = arch;
  static const char* const prefix[] = {"", "div:", "dtype:", "align:", ""};
  for (int i = 0; i < nb_; ++i) {
    const Bind& b = binds_[i];
    spec.set(b.kind == 4 ? std::string(metaNames_[b.arg]) : prefix[b.kind] + std::string(schema_.names[b.arg]),
             b.value);
  }
  dsl::completeSpecialization(spec);
  return spec;
}

const LoadedKernel& KernelCall::kernel() {
  if (memo_) return *static_cast<const MemoSlot*>(memo_)->loaded;
  CUcontext ctx = driver::ensureContext();
  thread_local MemoSlot memo[kMemoSlots];
  thread_local unsigned next = 0;
  const size_t bytes = sizeof(Bind) * static_cast<size_t>(nb_);
  for (const MemoSlot& m : memo)
    if (m.kernel == kernel_ && m.ctx == ctx && m.count == nb_ && std::memcmp(m.binds.get(), binds_, bytes) == 0) {
      memo_ = &m;
      return *m.loaded;
    }
  auto spec = std::make_shared<Specialization>(specialization(driver::currentArch()));
  MemoSlot& m = memo[next++ % kMemoSlots];
  m.kernel = kernel_;
  m.ctx = ctx;
  m.loaded = &loadedKernel(*spec, schema_);
  m.spec = std::move(spec);
  m.count = nb_;
  m.binds.reset(new char[bytes ? bytes : 1]);
  std::memcpy(m.binds.get(), binds_, bytes);
  memo_ = &m;
  return *m.loaded;
}

int64_t KernelCall::metaValue(const char* name) {
  kernel();
  return static_cast<const MemoSlot*>(memo_)->spec->get(name);
}

void KernelCall::launch(const unsigned grid[3], CUstream stream) { launchKernel(kernel(), v, grid, stream); }

int ArgIndex::operator()(const char* n) const {
  for (int i = 0; i < KernelCall::kMaxArgs && seen[i]; ++i)
    if (seen[i] == n) return index[i];
  int k = -1;
  for (int i = 0; i < count && k < 0; ++i)
    if (std::string(names[i]) == n) k = i;
  if (k < 0) throw Error(Error::Kind::Internal, std::string("kernel binding: no kernel argument '") + n + "'");
  for (int i = 0; i < KernelCall::kMaxArgs; ++i)
    if (!seen[i]) {
      index[i] = k;
      seen[i] = n;
      break;
    }
  return k;
}

bool fits32(std::initializer_list<const TensorView*> ts) {
  for (const TensorView* t : ts)
    if (t->defined()) {
      if (t->span() > INT32_MAX) return false;
      for (int i = 0; i < t->ndim; ++i)
        if (t->strides[i] > INT32_MAX) return false;
    }
  return true;
}

}  // namespace ssmjit::detail
