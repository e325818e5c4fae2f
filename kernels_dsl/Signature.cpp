#include "kernels_dsl/Signature.h"

#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "ssmjit/error.h"

namespace ssmjit::dsl {

void detail::unknownArgument(const char* kernel, const char* what, const char* name) {
  throw Error(Error::Kind::Internal,
              std::string("kernel ") + kernel + ": no " + what + " '" + name + "' in its signature");
}

namespace {

std::string strideName(const TensorArg& t, int axis) {
  const std::string base = std::string("s_") + (t.stride ? t.stride : t.name);
  return *t.axes[axis] ? base + "_" + t.axes[axis] : base;
}

Parameters build(const Signature& sig) {
  Parameters p;
  for (int i = 0; i < sig.tensors.n; ++i) {
    const TensorArg& t = sig.tensors[i];
    p.params.push_back({t.name, ParamKind::Pointer, t.cls, t.role});
  }
  for (int i = 0; i < sig.sizes.n; ++i) {
    Param s{sig.sizes[i].name, ParamKind::Size};
    s.use = sig.sizes[i].use;
    p.params.push_back(s);
  }
  for (int i = 0; i < sig.scalars.n; ++i) p.params.push_back({sig.scalars[i], ParamKind::Scalar});
  const int order = sig.strideOrder.n ? sig.strideOrder.n : sig.tensors.n;
  for (int i = 0; i < order; ++i) {
    const TensorArg& t = sig.tensors[sig.strideOrder.n ? sig.tensorIndex(sig.strideOrder[i]) : i];
    for (int a = 0; a < t.rank(); ++a) p.params.push_back({strideName(t, a), ParamKind::Stride});
  }
  for (int i = 0; i < sig.flags.n; ++i) p.params.push_back({sig.flags[i], ParamKind::Flag});
  for (int i = 0; i < sig.modes.n; ++i) p.params.push_back({sig.modes[i], ParamKind::Mode});
  return p;
}

}  // namespace

void checkSignature(const Signature& sig) {
  const auto bad = [&](const std::string& what) {
    throw Error(Error::Kind::Internal, std::string("kernel ") + sig.kernel + " signature: " + what);
  };
  if (sig.strideOrder.n) {
    std::set<int> seen;
    for (int i = 0; i < sig.strideOrder.n; ++i)
      if (!seen.insert(sig.tensorIndex(sig.strideOrder[i])).second)
        bad(std::string("tensor '") + sig.strideOrder[i] + "' is twice in the stride order");
    for (int i = 0; i < sig.tensors.n; ++i)
      if (sig.tensors[i].rank() > 0 && !seen.count(i))
        bad(std::string("tensor '") + sig.tensors[i].name + "' has strides but is not in the stride order");
  }
  std::set<std::string> names;
  for (const Param& p : parameters(sig).params)
    if (!names.insert(p.name).second) bad("argument '" + p.name + "' is declared twice");
}

const Parameters& parameters(const Signature& sig) {
  static std::mutex mu;
  static std::map<const Signature*, std::unique_ptr<Parameters>> built;
  std::lock_guard<std::mutex> lock(mu);
  auto& p = built[&sig];
  if (!p) {
    p = std::make_unique<Parameters>(build(sig));
    for (const Param& q : p->params) p->names.push_back(q.name.c_str());
  }
  return *p;
}

}  // namespace ssmjit::dsl
