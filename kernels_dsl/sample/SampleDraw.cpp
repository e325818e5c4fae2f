// Temperature / top-k / top-p sampling, one program per row, in the passes over the row that
// Sample.h lists. Every sum runs in a fixed order (per thread along the tiles, then the block's
// reduction), so the same inputs, seed and step give the same token. See Sample.h for the
// argument contract.
#include <array>
#include <vector>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/sample/Philox.h"
#include "kernels_dsl/sample/Sample.h"
#include "kernels_dsl/sample/SampleRows.h"

namespace ssmjit::dsl {
// The bitwise and / or of index values that philoxWord needs (the DSL's logical ops are bitwise
// on integers).
Value bitAnd(Value a, Value b) { return a && b; }
Value bitOr(Value a, Value b) { return a || b; }
}  // namespace ssmjit::dsl

namespace ssmjit::kernels {
using namespace dsl;

namespace {

constexpr double kLowest = -3.0e38;  // scaled logits at or below are never drawn (NaN and -inf too)
constexpr double kHighest = 3.0e38;  // +inf and overflowed scaled logits count as this
constexpr double kZeroMassBelow = 126;  // exp2(y - max) flushes to 0 this far below the maximum

// One tile of the row in base-2 logits: y (meaningful where `valid`), and its indices.
struct Tile {
  Value offs, y, valid;
};

class Row {
 public:
  Row(KernelBuilder& k, int64_t bv) : k_(k), bv_(bv), r_(k.range(bv)), V_(k.arg("V")) {
    base_ = k.programId(0) * k.arg("s_logits_b");
  }
  KernelBuilder& k() { return k_; }
  Value V() const { return V_; }
  Value zeros() { return k_.splat(k_.constFloat(0), {bv_}); }

  // One pass over the row: body(tile, carried) returns the next carried values.
  std::vector<Value> pass(const std::vector<Value>& inits,
                          const std::function<std::vector<Value>(const Tile&, const std::vector<Value>&)>& body) {
    return k_.forLoop(k_.constInt(0), V_, k_.constInt(bv_), inits, [&](Value v0, const std::vector<Value>& c) {
      Value offs = v0 + r_, in = offs < V_;
      Value xs = k_.load(k_.arg("logits"), base_ + offs * k_.arg("s_logits_v"), in, k_.constFloat(0)) *
                 k_.arg("inv_temp");
      return body(Tile{offs, k_.minimum(xs, k_.constFloat(kHighest)), in && (xs > kLowest)}, c);
    });
  }

  // The threshold search of Sample.h over [lo, hi): each pass totals weigh(tile, t) over the row at
  // kSearchProbes + 1 thresholds t from lo up, and moves lo to the highest one whose total is
  // `enough` (the totals fall as t rises), hi to the next. Returns lo and its total.
  std::array<Value, 2> search(Value lo, Value hi, const std::function<Value(const Tile&, Value)>& weigh,
                              const std::function<Value(Value)>& enough) {
    constexpr int P = kSearchProbes;
    Value zero = k_.constFloat(0);
    auto out = k_.forLoop(
        k_.constInt(0), k_.constInt(kSearchPasses), k_.constInt(1), {lo, hi, zero},
        [&](Value, const std::vector<Value>& c) {
          std::vector<Value> probes;
          for (int j = 0; j <= P; ++j) probes.push_back(c[0] + (c[1] - c[0]) * (double(j) / (P + 1)));
          std::vector<Value> acc(P + 1, zeros());
          acc = pass(acc, [&](const Tile& t, const std::vector<Value>& a) {
            std::vector<Value> next;
            for (int j = 0; j <= P; ++j) next.push_back(a[j] + weigh(t, probes[j]));
            return next;
          });
          std::vector<Value> ok(P + 1);
          Value newLo = probes[0], newHi = c[1], total = k_.reduce(acc[0], 0, "sum");
          for (int j = 1; j <= P; ++j) {
            Value tj = k_.reduce(acc[j], 0, "sum");
            ok[j] = enough(tj);
            newLo = k_.select(ok[j], probes[j], newLo);
            total = k_.select(ok[j], tj, total);
          }
          for (int j = P; j >= 1; --j) newHi = k_.select(ok[j], newHi, probes[j]);
          return std::vector<Value>{newLo, newHi, total};
        });
    return {out[0], out[2]};
  }

 private:
  KernelBuilder& k_;
  int64_t bv_;
  Value r_, V_, base_;
};

void build(KernelBuilder& k, const Specialization& spec) {
  Row row(k, spec.get("meta:BLOCK_V"));
  Value V = row.V();
  Value b = k.programId(0);
  Value key = sampleRowKey(k, b);
  k.returnIf(key == -1);
  Value step = k.arg("step"), at = b * k.arg("s_step_b");
  Value count = k.load(step, at);
  k.ifThen(k.arg("advance"), [&] { k.store(step, at, count + 1); });
  Value u = k.toFloat(philoxWord(k.arg("seed_lo"), k.arg("seed_hi"), key, count) / 256) * (1.0 / 16777216.0);

  // Pass 1: per position the running maximum, the mass below it and the lowest value; then the
  // row's.
  Value lowest = k.constFloat(kLowest), highest = k.constFloat(kHighest);
  auto stats = row.pass({k.splat(lowest, {spec.get("meta:BLOCK_V")}), row.zeros(),
                         k.splat(highest, {spec.get("meta:BLOCK_V")})},
                        [&](const Tile& t, const std::vector<Value>& c) {
                          Value m = k.maximum(c[0], k.select(t.valid, t.y, lowest));
                          Value z = c[1] * k.exp2(c[0] - m) + k.select(t.valid, k.exp2(t.y - m), k.constFloat(0));
                          return std::vector<Value>{m, z, k.minimum(c[2], k.select(t.valid, t.y, highest))};
                        });
  Value m = k.reduce(stats[0], 0, "max");
  Value Z = k.reduce(stats[1] * k.exp2(stats[0] - m), 0, "sum");
  Value ymin = k.reduce(stats[2], 0, "min");
  auto massAbove = [&](const Tile& t, Value thr) {
    return k.select(t.valid && (t.y >= thr), k.exp2(t.y - m), k.constFloat(0));
  };

  // Top-k: the highest threshold with at least top_k values at or above it, and the mass kept.
  Value topK = k.toFloat(k.arg("top_k"));
  std::vector<Value> kept = k.ifElse(
      k.arg("has_topk"),
      [&] {
        auto [thr, n] = row.search(
            k.maximum(ymin, m - kZeroMassBelow), m,
            [&](const Tile& t, Value q) { return k.select(t.valid && (t.y >= q), k.constFloat(1), k.constFloat(0)); },
            [&](Value n) { return n >= topK; });
        (void)n;
        Value mass = k.reduce(row.pass({row.zeros()},
                                       [&](const Tile& t, const std::vector<Value>& c) {
                                         return std::vector<Value>{c[0] + massAbove(t, thr)};
                                       })[0],
                              0, "sum");
        return std::vector<Value>{thr, mass};
      },
      [&] { return std::vector<Value>{lowest, Z}; });

  // Top-p within that: the highest threshold keeping at least top_p of the kept mass. Below
  // m + log2((1 - top_p) * mass / V) lies at most (1 - top_p) * mass, so the search starts there.
  Value topP = k.arg("top_p");
  kept = k.ifElse(
      k.arg("has_topp"),
      [&] {
        Value floor = m + k.log((1.0 - topP) * kept[1] / k.toFloat(V)) * 1.4426950408889634;
        auto [thr, mass] = row.search(k.maximum(kept[0], floor), m, massAbove,
                                      [&](Value w) { return w >= topP * kept[1]; });
        return std::vector<Value>{thr, mass};
      },
      [&] { return kept; });

  // The draw: the first index where the running kept mass exceeds u * kept mass (the last kept
  // index when rounding leaves the running total short of it; 0 when nothing is drawable).
  Value target = u * kept[1], none = V;
  auto draw = row.pass(
      {k.constFloat(0), none, k.splat(k.constInt(-1), {spec.get("meta:BLOCK_V")})},
      [&](const Tile& t, const std::vector<Value>& c) {
        Value w = massAbove(t, kept[0]), in = t.valid && (t.y >= kept[0]);
        Value sum = k.reduce(w, 0, "sum");
        Value chosen = k.ifElse(
            (c[1] == none) && (c[0] + sum > target),
            [&] {
              Value run = c[0] + k.associativeScan({w}, 0, [&](const std::vector<Value>& a, const std::vector<Value>& z) {
                                   return std::vector<Value>{a[0] + z[0]};
                                 })[0];
              return std::vector<Value>{k.reduce(k.select(in && (run > target), t.offs, none), 0, "min")};
            },
            [&] { return std::vector<Value>{c[1]}; })[0];
        return std::vector<Value>{c[0] + sum, chosen, k.select(in, t.offs, c[2])};
      });
  Value last = k.reduce(draw[2], 0, "max");
  Value token = k.select(draw[1] < V, draw[1], k.maximum(last, k.constInt(0)));
  k.store(k.arg("ids"), b * k.arg("s_ids_b"), token);
}

// 16 warps, 16 values a thread (and 16 registers for each of a search's 4 accumulators: 128 in
// all, no spills): one program has a row to itself on an SM, so it needs many warps to keep the
// SM busy. The RNG's words need 64-bit integer math.
void chooseMeta(Specialization& s) {
  setDefaults(s, {{"meta:num_warps", 16}, {"meta:BLOCK_V", 8192}});
  s.set("meta:index_bits", 64);
}

}  // namespace

const KernelRegistration kDraw(__FILE__, {kSampleDraw.kernel, build, chooseMeta, &kSampleDraw});

}  // namespace ssmjit::kernels
