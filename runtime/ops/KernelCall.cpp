#include "runtime/ops/KernelCall.h"

#include <climits>
#include <cstring>
#include <memory>
#include <string>

#include "kernels_dsl/Registry.h"
#include "runtime/Driver.h"
#include "runtime/ops/CompileAhead.h"
#include "ssmjit/error.h"

namespace ssmjit::detail {

int64_t alignClass(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (int64_t c : {16, 8, 4, 2})
    if (a % static_cast<uintptr_t>(c) == 0) return c;
  return 1;
}

int64_t divClass(int64_t v, int64_t most) {
  for (int64_t c = most; c > 1; c /= 2)
    if (v % c == 0) return c;
  return 1;
}

namespace {
enum BindKind : int32_t { kUnbound = 0, kPlain, kDiv, kPointer, kFree, kMeta };
}  // namespace

KernelCall::KernelCall(const dsl::Signature& sig) : sig_(sig), n_(sig.count()) {
  if (n_ > kMaxArgs)
    throw Error(Error::Kind::Internal,
                std::string("kernel ") + sig.kernel + ": more than " + std::to_string(kMaxArgs) + " arguments");
}

void KernelCall::bind(int arg, int kind, int64_t value, int32_t aux) {
  if (binds_[arg].kind != kUnbound)
    throw Error(Error::Kind::Internal, std::string("kernel ") + sig_.kernel + ": argument '" +
                                           dsl::parameters(sig_).names[arg] + "' bound twice");
  binds_[arg] = Bind{kind, aux, value};
  ++bound_;
}

void KernelCall::tensor(dsl::TensorId t, const TensorView& view, const Axes& axes) {
  const dsl::TensorArg& decl = sig_.tensors[t.tensor];
  const bool data = decl.role == dsl::PtrRole::Data;
  v_[t.pointer].ptr = view.data;
  const DType absent = decl.cls == dsl::PtrClass::Float ? DType::F32 : DType::I32;
  // Only data pointers bind their alignment: index arrays' addresses vary between calls, and
  // specialising on them would recompile mid-serving.
  bind(t.pointer, kPointer, data ? (view.defined() ? alignClass(view.data) : 16) : -1,
       static_cast<int32_t>(view.defined() ? view.dtype : absent));
  for (int j = 0; j < t.rank; ++j) stride(t.firstStride + j, axes[j] != kNoAxis ? view.strides[axes[j]] : 0);
}
void KernelCall::pointer(dsl::TensorId t, void* p, DType dtype) {
  v_[t.pointer].ptr = p;
  bind(t.pointer, kPointer, -1, static_cast<int32_t>(dtype));
}
void KernelCall::size(int arg, int64_t value) {
  v_[arg].i64 = value;
  switch (sig_.sizes[arg - sig_.tensors.n].use) {
    case dsl::SizeUse::Bound:
      bind(arg, kPlain, value);
      break;
    case dsl::SizeUse::Div:
      bind(arg, kDiv, divClass(value));
      break;  // masks keep their vector width
    case dsl::SizeUse::TileDiv:
      bind(arg, kDiv, divClass(value, 64));
      break;
    case dsl::SizeUse::Count:
      bind(arg, kFree, 0);
      break;
  }
}
void KernelCall::scalar(int arg, float value) {
  v_[arg].f32 = value;
  bind(arg, kFree, 0);
}
void KernelCall::stride(int arg, int64_t value) {
  v_[arg].i64 = value;
  if (value == 0 || value == 1)
    bind(arg, kPlain, value);
  else
    bind(arg, kDiv, divClass(value));
}
void KernelCall::flag(int arg, bool value) {
  v_[arg].i64 = value;
  bind(arg, kPlain, value);
}
void KernelCall::mode(int arg, int64_t value) {
  v_[arg].i64 = value;
  bind(arg, kPlain, value);
}
void KernelCall::meta(const char* name, int64_t value) {
  if (nMeta_ == kMaxMeta) throw Error(Error::Kind::Internal, "KernelCall: too many meta values");
  metaNames_[nMeta_] = name;
  binds_[n_ + nMeta_] = Bind{kMeta, nMeta_, value};
  ++nMeta_;
}

void KernelCall::checkComplete() const {
  if (bound_ == n_) return;
  std::string missing;
  for (int i = 0; i < n_; ++i)
    if (binds_[i].kind == kUnbound)
      missing += (missing.empty() ? "'" : ", '") + std::string(dsl::parameters(sig_).names[i]) + "'";
  throw Error(Error::Kind::Internal, std::string("kernel ") + sig_.kernel + ": argument(s) " + missing + " not bound");
}

namespace {

struct MemoSlot {
  const dsl::Signature* kernel = nullptr;
  CUcontext ctx = nullptr;
  const LoadedKernel* loaded = nullptr;
  std::shared_ptr<const Specialization> spec;
  int count = 0;
  std::unique_ptr<char[]> binds;  // the Bind array, then the meta names, compared with memcmp
  // Meta values asked for by metaValue, by the name's address.
  static constexpr int kAsked = 4;
  const char* askedNames[kAsked] = {};
  int64_t askedValues[kAsked] = {};
  int nAsked = 0;
};
constexpr int kMemoSlots = 8;

}  // namespace

Specialization KernelCall::specialization(const std::string& arch) const {
  checkComplete();
  Specialization spec;
  spec.kernel = sig_.kernel;
  spec.arch = arch;
  const auto& names = dsl::parameters(sig_).names;
  for (int i = 0; i < n_; ++i) {
    const Bind& b = binds_[i];
    const std::string name = names[i];
    if (b.kind == kPlain)
      spec.set(name, b.value);
    else if (b.kind == kDiv)
      spec.set("div:" + name, b.value);
    else if (b.kind == kPointer) {
      spec.set("dtype:" + name, b.aux);
      if (b.value >= 0) spec.set("align:" + name, b.value);
    }
  }
  for (int i = 0; i < nMeta_; ++i) spec.set(metaNames_[i], binds_[n_ + i].value);
  dsl::completeSpecialization(spec);
  return spec;
}

const LoadedKernel& KernelCall::kernel() {
  if (memo_) return *static_cast<const MemoSlot*>(memo_)->loaded;
  checkComplete();
  CUcontext ctx = driver::ensureContext();
  thread_local MemoSlot memo[kMemoSlots];
  thread_local unsigned next = 0;
  const int nb = n_ + nMeta_;
  const size_t bytes = sizeof(Bind) * static_cast<size_t>(nb), names = sizeof(char*) * static_cast<size_t>(nMeta_);
  for (MemoSlot& m : memo)
    if (m.kernel == &sig_ && m.ctx == ctx && m.count == nb && std::memcmp(m.binds.get(), binds_, bytes) == 0 &&
        std::memcmp(m.binds.get() + bytes, metaNames_, names) == 0) {
      memo_ = &m;
      return *m.loaded;
    }
  const std::string arch = driver::currentArch();
  auto spec = std::make_shared<Specialization>(specialization(arch));
  CompileAhead::beforeLoad(*spec, arch);
  MemoSlot& m = memo[next++ % kMemoSlots];
  m.kernel = &sig_;
  m.ctx = ctx;
  m.loaded = &loadedKernel(*spec, ArgSchema{dsl::parameters(sig_).names.data(), n_});
  m.spec = std::move(spec);
  m.count = nb;
  m.nAsked = 0;
  m.binds.reset(new char[bytes + names]);
  std::memcpy(m.binds.get(), binds_, bytes);
  std::memcpy(m.binds.get() + bytes, metaNames_, names);
  memo_ = &m;
  return *m.loaded;
}

int64_t KernelCall::metaValue(const char* name) {
  kernel();
  auto* m = static_cast<MemoSlot*>(memo_);
  for (int i = 0; i < m->nAsked; ++i)
    if (m->askedNames[i] == name) return m->askedValues[i];
  const int64_t v = m->spec->get(name);
  if (m->nAsked < MemoSlot::kAsked) {
    m->askedNames[m->nAsked] = name;
    m->askedValues[m->nAsked++] = v;
  }
  return v;
}

void KernelCall::launch(const unsigned grid[3], CUstream stream) { launchKernel(kernel(), v_, grid, stream); }

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
