// The argument checks of rms_norm and gated_rms_norm (see RmsNormCheck.h and the contract in
// ssmjit/ops.h). Shapes, dtypes, devices, strides and aliasing only: no tensor data is read.
#include "runtime/ops/RmsNormCheck.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "runtime/ops/ArgCheck.h"
#include "ssmjit/error.h"
#include "ssmjit/ops.h"

namespace ssmjit::detail {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// One tensor of the call, by name.
struct Named {
  const char* name;
  const TensorView* t;
};
// An output, and the input it may replace (in place), if any.
struct Output {
  const char* name;
  const TensorView* t;
  const char* inPlaceOf;
};

// A (T, D) tensor: x's dtype (x itself: fp32/bf16/fp16) or fp32, no broadcast axis, and a unit
// stride along D so that every access is a vector.
void checkRows(const Checker& c, const NormDims& d, const char* name, const TensorView& t, unsigned dtypes) {
  if (!t.defined()) return;
  const Dim e[2] = {{d.T, "tokens"}, {d.D, "dim"}};
  c.tensor(name, t, e, 2, dtypes, false);
  if (d.D > 1 && t.strides[1] != 1)
    c.fail(std::string(name) + " has strides " + listString(t.strides, 2) + ", expected a unit stride along dim " +
           "(dim 1): channels are read as vectors");
}

// x fixes the rows, the channels and the device; fp32, bf16 or fp16, as checkRows says.
NormDims checkX(Checker& c, const TensorView& x) {
  const Dim e[2] = {{-1, "tokens"}, {-1, "dim"}};
  c.lead("x", x, e, 2);
  NormDims d;
  d.T = x.shape[0];
  d.D = x.shape[1];
  if (d.T > INT32_MAX) c.fail("x has " + str(d.T) + " tokens (dim 0), expected at most " + str(INT32_MAX));
  checkRows(c, d, "x", x, kFloat16Or32);
  return d;
}

void checkEps(const Checker& c, float eps) {
  if (!(eps > 0.0f) || !std::isfinite(eps)) c.fail("eps is " + std::to_string(eps) + ", expected a finite value > 0");
}

bool sameView(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; ++i)
    if (a.shape[i] != b.shape[i] || a.strides[i] != b.strides[i]) return false;
  return true;
}

// Whether the byte ranges the two views span intersect.
bool overlaps(const TensorView& a, const TensorView& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0) return false;
  const auto lo = [](const TensorView& t) { return reinterpret_cast<uintptr_t>(t.data); };
  const auto hi = [&](const TensorView& t) { return lo(t) + static_cast<uintptr_t>(t.span() * dtypeBytes(t.dtype)); };
  return lo(a) < hi(b) && lo(b) < hi(a);
}

// Each program reads its whole tile, then writes it, through the input's own pointer in place
// (RmsNorm.h): any other sharing would overwrite what other programs (or threads) still read, or
// reach one tensor through two __restrict__ pointers.
void checkOutputs(const Checker& c, std::initializer_list<Output> outputs, std::initializer_list<Named> inputs) {
  for (const Output* o = outputs.begin(); o != outputs.end(); ++o) {
    for (const Named& i : inputs) {
      const bool partner = o->inPlaceOf && std::string(o->inPlaceOf) == i.name;
      if (!overlaps(*o->t, *i.t) || (partner && sameView(*o->t, *i.t))) continue;
      const std::string what = std::string(o->name) + " (data " + hexPtr(o->t->data) + ", shape " +
                               o->t->shapeString() + ") shares memory with " + i.name + " (data " + hexPtr(i.t->data) +
                               ", shape " + i.t->shapeString() + "), expected ";
      if (partner)
        c.fail(what + i.name +
               " itself (in place: the same data pointer, dtype, shape and strides) or memory apart "
               "from it");
      c.fail(what + "memory apart from it" +
             (o->inPlaceOf ? std::string(" (only ") + o->inPlaceOf + " may be " + o->name + " itself, in place)"
                           : std::string()));
    }
    for (const Output* p = o + 1; p != outputs.end(); ++p)
      if (overlaps(*o->t, *p->t))
        c.fail(std::string(o->name) + " (data " + hexPtr(o->t->data) + ") shares memory with " + p->name + " (data " +
               hexPtr(p->t->data) + "), expected two separate outputs");
  }
}

// The weight (D,): x's dtype or fp32, any stride (a broadcast weight included).
void checkWeight(const Checker& c, const NormDims& d, const TensorView& w, unsigned dtypes) {
  c.required("weight", w);
  const Dim e[1] = {{d.D, "dim"}};
  c.tensor("weight", w, e, 1, dtypes, true);
}

void checkGroup(const Checker& c, NormDims& d, int64_t groupSize) {
  if (groupSize < 0) c.fail("group_size is " + str(groupSize) + ", expected 0 (the whole of dim) or a divisor of dim");
  d.groupSize = groupSize ? groupSize : d.D;
  if (d.groupSize && d.D % d.groupSize != 0)
    c.fail("group_size is " + str(groupSize) + ", expected a divisor of dim = " + str(d.D) + " (x's dim 1)");
  if (d.groupSize > kMaxNormGroup)
    c.fail("group_size is " + str(d.groupSize) + (groupSize ? "" : " (dim, group_size 0)") + ", expected at most " +
           str(kMaxNormGroup) + " (kMaxNormGroup) channels a group");
  if (d.groups() > 65535)  // grid y: one program column per group
    c.fail("x has " + str(d.groups()) + " groups of " + str(d.groupSize) + " channels, expected at most 65535");
}

// After x and the tensors beside it, both norms check weight, out (required) and eps.
template <class Args>
void checkWeightOutEps(Checker& c, const NormDims& d, const Args& a, unsigned types) {
  checkWeight(c, d, a.weight, types);
  c.required("out", a.out);
  checkRows(c, d, "out", a.out, types);
  checkEps(c, a.eps);
}

}  // namespace

NormDims checkRmsNormArgs(const RmsNormArgs& a, DeviceKind device, const char* op) {
  Checker c(op, device);
  NormDims d = checkX(c, a.x);
  const unsigned types = kF32Only | dtypeBit(a.x.dtype);
  checkRows(c, d, "residual", a.residual, types);
  checkRows(c, d, "residual_out", a.residual_out, types);
  checkWeightOutEps(c, d, a, types);
  checkGroup(c, d, 0);
  checkOutputs(c, {{"out", &a.out, "x"}, {"residual_out", &a.residual_out, "residual"}},
               {{"x", &a.x}, {"residual", &a.residual}, {"weight", &a.weight}});
  return d;
}

NormDims checkGatedRmsNormArgs(const GatedRmsNormArgs& a, DeviceKind device, const char* op) {
  Checker c(op, device);
  NormDims d = checkX(c, a.x);
  const unsigned types = kF32Only | dtypeBit(a.x.dtype);
  checkRows(c, d, "z", a.z, types);
  checkWeightOutEps(c, d, a, types);
  checkGroup(c, d, a.group_size);
  checkOutputs(c, {{"out", &a.out, "x"}}, {{"x", &a.x}, {"z", &a.z}, {"weight", &a.weight}});
  return d;
}

NormDims checkGatedRmsNormBackwardArgs(const GatedRmsNormBackwardArgs& a, DeviceKind device, const char* op) {
  Checker c(op, device);
  const GatedRmsNormArgs& f = a.forward;
  c.required("forward.x", f.x);
  NormDims d = checkX(c, f.x);
  const unsigned types = kF32Only | dtypeBit(f.x.dtype);
  checkRows(c, d, "forward.z", f.z, types);
  checkWeight(c, d, f.weight, types);
  checkEps(c, f.eps);
  checkGroup(c, d, f.group_size);
  c.required("dout", a.dout);
  checkRows(c, d, "dout", a.dout, types);
  c.required("dx", a.dx);
  checkRows(c, d, "dx", a.dx, types);
  if (f.z.defined() != a.dz.defined())
    c.fail(std::string("dz is ") + (a.dz.defined() ? "given" : "absent") +
           ", expected it exactly when forward.z is given");
  checkRows(c, d, "dz", a.dz, types);
  c.required("dweight", a.dweight);
  const Dim e[1] = {{d.D, "dim"}};
  c.tensor("dweight", a.dweight, e, 1, kF32Only | dtypeBit(f.weight.dtype), false);
  checkOutputs(c, {{"dx", &a.dx, nullptr}, {"dz", &a.dz, nullptr}, {"dweight", &a.dweight, nullptr}},
               {{"forward.x", &f.x}, {"forward.z", &f.z}, {"forward.weight", &f.weight}, {"dout", &a.dout}});
  return d;
}

}  // namespace ssmjit::detail
