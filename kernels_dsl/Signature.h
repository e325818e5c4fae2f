// A kernel's signature, declared once beside its definition: its tensors (storage class, role,
// named axes), sizes (and how a call binds each), f32 scalars, flags and modes. Everything else
// follows from it: the kernel's parameter list (pointers, sizes, scalars, strides, flags, modes;
// a tensor's stride along axis `a` is "s_<stride>_<a>", or "s_<stride>" for an axis named ""),
// the builder's arguments (KernelBuilder::declare) and the runtime's generic binder (KernelCall).
// Lookups by name are constexpr: an op's handles are compile-time constants, and a name the
// signature lacks fails to compile. Plain C++, no MLIR.
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <vector>

namespace ssmjit::dsl {

// Storage class of a pointer argument; its exact dtype is bound by specialisation.
enum class PtrClass { Float, Int };
// Data pointers may be specialised on their alignment; metadata pointers (indices, cu_seqlens,
// status records) never are.
enum class PtrRole { Data, Metadata };
// How a call binds a size: on its value (it shapes the code), on its divisibility class (masks
// against it keep their vector width), on its class up to 64 (a length cut into tiles: where the
// class proves every tile whole, the kernel leaves out the partial tile's code), or not at all (a
// count or bound the kernel only compares against or loops to: calls that differ in it share one
// kernel).
enum class SizeUse { Bound, Div, TileDiv, Count };

inline constexpr int kMaxAxes = 6;

struct TensorArg {
  const char* name;
  PtrClass cls;
  const char* axes[kMaxAxes];    // named axes with a stride argument each, in order
  const char* stride = nullptr;  // the strides' short name (default: `name`)
  PtrRole role = PtrRole::Data;
  constexpr int rank() const {
    int r = 0;
    while (r < kMaxAxes && axes[r]) ++r;
    return r;
  }
};

struct SizeArg {
  const char* name;
  SizeUse use;
};

// Short names for the tables a kernel header declares (`using namespace dsl::decl;`).
namespace decl {
using dsl::SizeArg;
using dsl::TensorArg;
inline constexpr auto F = PtrClass::Float, I = PtrClass::Int;
inline constexpr auto M = PtrRole::Metadata;
inline constexpr auto Bound = SizeUse::Bound, Div = SizeUse::Div, TileDiv = SizeUse::TileDiv, Count = SizeUse::Count;

// The entries of `a`, then those of `b`: one kernel's table extending another's.
template <class T, std::size_t A, std::size_t B>
constexpr std::array<T, A + B> concat(const T (&a)[A], const T (&b)[B]) {
  std::array<T, A + B> out{};
  for (std::size_t i = 0; i < A; ++i) out[i] = a[i];
  for (std::size_t i = 0; i < B; ++i) out[A + i] = b[i];
  return out;
}
}  // namespace decl

// A view of a constant array with static storage.
template <class T>
struct List {
  const T* at = nullptr;
  int n = 0;
  constexpr List() = default;
  template <std::size_t N>
  constexpr List(const T (&a)[N]) : at(a), n(static_cast<int>(N)) {}
  template <std::size_t N>
  constexpr List(const std::array<T, N>& a) : at(a.data()), n(static_cast<int>(N)) {}
  constexpr const T& operator[](int i) const { return at[i]; }
};

namespace detail {
constexpr bool sameName(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}
// Reached only in a constant expression with a name the signature lacks: a compile error there,
// an Error(Internal) naming the kernel and the argument otherwise.
[[noreturn]] void unknownArgument(const char* kernel, const char* what, const char* name);
}  // namespace detail

// A tensor's parameters: its pointer and first stride (its strides are consecutive).
struct TensorId {
  int tensor, pointer, firstStride, rank;
};

enum class ParamKind { Pointer, Size, Scalar, Stride, Flag, Mode };

struct Param {
  std::string name;
  ParamKind kind;
  PtrClass cls = PtrClass::Float;  // pointers only
  PtrRole role = PtrRole::Data;    // pointers only
  SizeUse use = SizeUse::Bound;    // sizes only
};

struct Signature {
  const char* kernel;
  List<TensorArg> tensors;
  List<SizeArg> sizes;
  List<const char*> scalars;  // f32
  List<const char*> flags;
  // The tensors' names in the order their strides come (default: the tensors' order).
  List<const char*> strideOrder;
  // Integer modes: always bound like flags (the code is specialised on each), with more than two
  // values.
  List<const char*> modes;

  constexpr int count() const { return firstStride() + strideCount() + flags.n + modes.n; }
  constexpr int firstStride() const { return tensors.n + sizes.n + scalars.n; }
  constexpr int strideCount() const {
    int n = 0;
    for (int i = 0; i < tensors.n; ++i) n += tensors[i].rank();
    return n;
  }
  constexpr int tensorIndex(const char* name) const {
    for (int i = 0; i < tensors.n; ++i)
      if (detail::sameName(tensors[i].name, name)) return i;
    detail::unknownArgument(kernel, "tensor", name);
  }
  constexpr TensorId tensor(const char* name) const {
    const int t = tensorIndex(name);
    int s = firstStride();
    if (tensors[t].rank() == 0) return {t, t, s, 0};
    for (int i = 0; i < (strideOrder.n ? strideOrder.n : tensors.n); ++i) {
      const int k = strideOrder.n ? tensorIndex(strideOrder[i]) : i;
      if (k == t) return {t, t, s, tensors[t].rank()};
      s += tensors[k].rank();
    }
    detail::unknownArgument(kernel, "stride order entry for tensor", name);
  }
  constexpr int size(const char* name) const {
    for (int i = 0; i < sizes.n; ++i)
      if (detail::sameName(sizes[i].name, name)) return tensors.n + i;
    detail::unknownArgument(kernel, "size", name);
  }
  constexpr int scalar(const char* name) const {
    for (int i = 0; i < scalars.n; ++i)
      if (detail::sameName(scalars[i], name)) return tensors.n + sizes.n + i;
    detail::unknownArgument(kernel, "scalar", name);
  }
  constexpr int flag(const char* name) const {
    for (int i = 0; i < flags.n; ++i)
      if (detail::sameName(flags[i], name)) return firstStride() + strideCount() + i;
    detail::unknownArgument(kernel, "flag", name);
  }
  constexpr int mode(const char* name) const {
    for (int i = 0; i < modes.n; ++i)
      if (detail::sameName(modes[i], name)) return firstStride() + strideCount() + flags.n + i;
    detail::unknownArgument(kernel, "mode", name);
  }
};

// The parameter list, in order (built once per signature; the storage lives as long as the
// process). `names` is the same list as C strings, for ArgSchema.
struct Parameters {
  std::vector<Param> params;
  std::vector<const char*> names;
};
const Parameters& parameters(const Signature& sig);
// Throws Error(Internal) naming the kernel and the entry when the declaration is malformed (a
// stride order that misses or repeats a tensor with strides, a name declared twice).
void checkSignature(const Signature& sig);

}  // namespace ssmjit::dsl
