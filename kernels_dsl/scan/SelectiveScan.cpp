// Mamba-1 selective scan forward, written once in the DSL for dense rows and packed rows
// (cu_seqlens), with initial and final states and long sequences split into spans joined by a
// state-passing step. See SelectiveScan.h for the argument contract and the two passes.
//
// A program keeps a block of channels' N states in fp32 registers and walks its span in
// [channels x BLOCK_T] tiles. Per state n the tile's recurrence h_t = exp(dt_t A_n) h_{t-1} +
// dt_t B_nt u_t is an associative scan along time of (a, b) pairs, with the carried h folded in
// as the scan's init; a thread holds a run of the tile's tokens (a chain of fma in registers) and
// a few lanes share the tile (shuffles), and exp2 is the only special function per element.
#include "kernels_dsl/scan/SelectiveScan.h"

#include <algorithm>
#include <functional>
#include <string>

#include "kernels_dsl/Dsl.h"
#include "kernels_dsl/MetaDefaults.h"
#include "kernels_dsl/Registry.h"
#include "kernels_dsl/conv/ConvTiles.h"
#include "kernels_dsl/scan/CheckpointSpans.h"
#include "kernels_dsl/scan/PackedRuns.h"
#include "kernels_dsl/scan/ScanSequences.h"
#include "kernels_dsl/scan/StagedBC.h"
#include "kernels_dsl/scan/TileEnds.h"

namespace ssmjit::kernels {
using namespace dsl;

namespace {

// The serial class' groups of states (n % G), whose sums of C h meet in a fixed tree: up to 4, with
// at least two states each (a group's sum is then an fma, never a bare product, however many
// threads a channel: form-fma would fuse a product into the tree's add in one thread but not across
// threads). Its threads a channel (meta:state_parts) divide G. More groups cost the
// one-thread-a-channel case and 8 threads a channel gain nothing over 4.
int64_t scanStateGroups(int64_t N) {
  int64_t g = 1;
  while (g < 4 && N % (4 * g) == 0) g *= 2;
  return g;
}

void buildScan(KernelBuilder& k, const Specialization& spec) {
  const int64_t BD = spec.get("meta:BLOCK_D"), BT = spec.get("meta:BLOCK_T"), N = spec.get("meta:dstate"),
                SPAN = spec.get("meta:span");
  const bool statesPass = spec.get("meta:states_pass") != 0;
  // For the backward: no out; the carried state at each tile's start goes to ws (see the header).
  // Cut into spans (a sequence longer than the backward's span), each span's from a zero start but
  // the first's, which the fold of the spans completes (CheckpointSpans.h).
  const bool checkpoints = spec.get("meta:checkpoints") != 0;
  const bool ckptSpans = checkpoints && SPAN < kScanWholeSequences;
  k.setShiftLanes(static_cast<int>(spec.get("meta:time_lanes")));
  Value u = k.arg("u"), delta = k.arg("delta"), A = k.arg("A"), Bp = k.arg("B"), Cp = k.arg("C"), Dv = k.arg("Dv"),
        z = k.arg("z"), dbias = k.arg("dbias"), out = k.arg("out"), init = k.arg("init"), fin = k.arg("final"),
        ws = k.arg("ws"), yacc = k.arg("yacc");
  Value cu = k.arg("cu"), initIdx = k.arg("init_idx"), finIdx = k.arg("final_idx"), err = k.arg("err");
  auto I = [&](const char* n) { return k.arg(n); };
  Value D = I("D"), L = I("L"), nseq = I("nseq"), nInit = I("nslots_init"), nFinal = I("nslots_final"),
        maxLen = I("max_len"), kpr = I("keys_per_row"), group = I("group"), cpr = I("ckpt_per_row"),
        auxBase = I("aux_base");
  Value sUb = I("s_u_b"), sUd = I("s_u_d"), sDlb = I("s_dl_b"), sDld = I("s_dl_d"), sZb = I("s_z_b"), sZd = I("s_z_d"),
        sOb = I("s_o_b"), sOd = I("s_o_d"), sYab = I("s_ya_b"), sYad = I("s_ya_d"), sAd = I("s_A_d"), sAn = I("s_A_n"),
        sBb = I("s_B_b"), sBg = I("s_B_g"), sBn = I("s_B_n"), sBd = I("s_B_d"), sCb = I("s_C_b"), sCg = I("s_C_g"),
        sCn = I("s_C_n"), sCd = I("s_C_d"), sDd = I("s_D_d"), sDbd = I("s_db_d"), sIs = I("s_init_slot"),
        sId = I("s_init_d"), sIn = I("s_init_n"), sFs = I("s_final_slot"), sFd = I("s_final_d"), sFn = I("s_final_n"),
        sCu = I("s_cu"), sIidx = I("s_init_idx"), sFidx = I("s_final_idx");
  auto Fl = [&](const char* n) { return k.arg(n); };
  Value bVar = Fl("b_varying"), cVar = Fl("c_varying"), hasD = Fl("has_D"), hasZ = Fl("has_z"),
        hasDbias = Fl("has_dbias"), softplusOn = Fl("softplus"), hasCu = Fl("has_cu"), hasMax = Fl("has_max_len"),
        hasInit = Fl("has_init"), hasInitIdx = Fl("has_init_idx"), hasFinal = Fl("has_final"),
        hasFinalIdx = Fl("has_final_idx"), multi = Fl("multi_span"), hasYacc = Fl("has_yacc");

  // Length classes (SelectiveScan.h): 1 scans the sequences of at most meta:serial_len tokens
  // serially, 2 the longer ones by the lanes' scan, 0 every sequence by the lanes' scan.
  const int64_t lengthClass = spec.get("meta:length_class"), serialLen = spec.get("meta:serial_len");
  const bool serial = lengthClass == 1;
  // The serial class splits a channel's states over P threads (its parts), state n in part n % P,
  // and sums y over G fixed groups of states (n % G), so its bits do not depend on P.
  const int64_t P = serial ? spec.get("meta:state_parts") : 1, G = serial ? scanStateGroups(N) : 1;
  const int64_t NS = N / P;  // states a thread
  const int64_t R = BD * P;  // a program's threads along channels: (channel, part)
  Value pidD = k.programId(0), j = k.programId(1);
  Value i = programSequence(k, spec, cu, sCu, nseq, k.programId(2));  // longest first (ScanSequences.h)
  Value zeroI = k.constInt(0), zero = k.constFloat(0);
  // One program of the main pass reports a sequence's errors; those found before the class is
  // known (cu_seqlens, max_seqlen), class 1's when two classes run.
  Value reporter = statesPass ? k.constInt(1) : pidD + j;
  Value rowReporter = lengthClass == 2 ? k.constInt(1) : reporter;

  // The sequence: [start, end) of its row; cu_seqlens checked.
  const ScanSequence seq = scanSequence(k, hasCu, cu, sCu, L, nseq, i);
  Value start = seq.start, end = seq.end, row = seq.row, badCu = seq.bad;
  k.ifThen(badCu && (rowReporter == 0), [&] { k.reportError(err, k.constInt(kErrScanCuSeqlens), i, start, end); });
  k.returnIf(badCu);
  Value len = end - start;
  Value tooLong = hasMax && (len > maxLen);
  k.ifThen(tooLong && (rowReporter == 0), [&] { k.reportError(err, k.constInt(kErrScanMaxLen), i, len, maxLen); });
  k.returnIf(tooLong);
  if (lengthClass == 1) k.returnIf(len > serialLen);
  if (lengthClass == 2) k.returnIf(len <= serialLen);
  Value t0rel = j * SPAN;
  k.returnIf(t0rel >= len);
  Value nspans = cdiv(len, k.constInt(SPAN));
  Value isLast = j == nspans - 1;
  if (statesPass) k.returnIf(isLast);  // only spans with a successor
  Value t0 = start + t0rel, spanLen = k.minimum(k.constInt(SPAN), len - t0rel);

  Value rowsR = k.range(R), chan = P == 1 ? rowsR : rowsR / P, part = P == 1 ? Value{} : rowsR % P;
  Value offsD = pidD * BD + chan, mD = offsD < D;
  auto dE = [&](Value v) { return k.expandDims(v, 1); };  // [R] -> [R, 1]
  Value dOffs = dE(offsD), mD2 = dE(mD);
  // The thread's s-th state: s, or part + s P ([R]).
  auto stateOf = [&](int64_t s) { return P == 1 ? k.constInt(s) : part + s * P; };
  std::vector<Value> A2;  // A * log2(e): exp(dt A) = exp2(dt A2)
  for (int64_t n = 0; n < NS; ++n) A2.push_back(k.load(A, offsD * sAd + stateOf(n) * sAn, mD, zero) * kLog2e);

  // ws: states [key, d, n], then summed dt [key, d], then initial-state copies [i, d, n].
  Value DN = D * N;
  Value rows = k.select(hasCu, k.constInt(1), nseq);
  Value sumBase = rows * kpr * DN, copyBase = sumBase + rows * kpr * D;
  auto loadStates = [&](Value ptr, Value base, Value sD, Value sN, Value mask) {
    std::vector<Value> h;
    for (int64_t n = 0; n < NS; ++n) h.push_back(k.load(ptr, base + offsD * sD + stateOf(n) * sN, mask, zero));
    return h;
  };
  auto storeStates = [&](Value ptr, Value base, Value sD, Value sN, const std::vector<Value>& h, Value mask) {
    for (int64_t n = 0; n < NS; ++n) k.store(ptr, base + offsD * sD + stateOf(n) * sN, h[n], mask);
  };
  std::vector<Value> zeros(NS, k.splat(zero, {R}));
  Value slotIn = k.ifElse(
      hasInit,
      [&] {
        return std::vector<Value>{
            checkedSlot(k, hasInitIdx, initIdx, sIidx, nInit, i, reporter, err, kErrScanInitSlot)};
      },
      [&] { return std::vector<Value>{k.constInt(-1)}; })[0];
  // The sequence's initial state: read by span 0 (of the main pass from ws when the states pass
  // copied it: the last span may overwrite the slot in place meanwhile).
  auto initialState = [&] {
    Value fromCopy = statesPass ? k.constBool(false) : (hasInit && multi && (nspans > 1));
    return k.ifElse(
        fromCopy, [&] { return loadStates(ws, copyBase + i * DN, k.constInt(N), k.constInt(1), mD); },
        [&] { return loadStates(init, slotIn * sIs, sId, sIn, mD && (slotIn >= 0)); });
  };
  std::vector<Value> h = k.ifElse(j == 0, initialState, [&] {
    if (statesPass || checkpoints) return zeros;
    // The fold of the predecessors' end states, in order: h = exp(A sum_dt) h + h_end.
    return k.forLoop(k.constInt(1), j + 1, k.constInt(1), zeros, [&](Value jj, const std::vector<Value>& c) {
      Value key = row * kpr + (start + jj * SPAN) / SPAN;
      Value sd = k.load(ws, sumBase + key * D + offsD, mD, zero);
      std::vector<Value> next;
      for (int64_t n = 0; n < NS; ++n)
        next.push_back(k.exp2(A2[n] * sd) * c[n] + k.load(ws, key * DN + offsD * N + n, mD, zero));
      return next;
    });
  });
  if (statesPass)
    k.ifThen((j == 0) && hasInit, [&] { storeStates(ws, copyBase + i * DN, k.constInt(N), k.constInt(1), h, mD); });

  Value dbiasT = k.ifElse(
      hasDbias, [&] { return std::vector<Value>{dE(k.load(dbias, offsD * sDbd, mD, zero))}; },
      [&] { return std::vector<Value>{dE(k.splat(zero, {R}))}; })[0];
  Value DvT = k.ifElse(
      hasD, [&] { return std::vector<Value>{dE(k.load(Dv, offsD * sDd, mD, zero))}; },
      [&] { return std::vector<Value>{dE(k.splat(zero, {R}))}; })[0];
  Value gE = dE(offsD / group);
  Value rT = k.range(BT);
  auto tE = [&](Value v) { return k.expandDims(v, 0); };  // [BT] -> [1, BT]
  auto linear = [&](const std::vector<Value>& l, const std::vector<Value>& r) {
    return std::vector<Value>{l[0] * r[0], r[0] * l[1] + r[1]};
  };
  // B or C of the thread's s-th state over the tile: time-varying [row, g, n, t] or constant [d, n].
  auto bcTile = [&](Value varying, Value p, Value sB, Value sG, Value sN, Value sD, int64_t s, Value tOff,
                    const std::function<Value(Value, Value)>& load) {
    Value n = stateOf(s);
    return k.ifElse(
        varying,
        [&] { return std::vector<Value>{load(p, row * sB + gE * sG + (P == 1 ? n * sN : dE(n * sN)) + tOff)}; },
        [&] {
          return std::vector<Value>{k.broadcastTo(dE(k.load(p, offsD * sD + n * sN, mD, zero)), {R, BT})};
        })[0];
  };

  // Time-varying B and C rows staged through shared memory when the block's channels share a group
  // (StagedBC); rows that do not fit are read as before.
  const bool oneGroup = spec.find("group") && spec.get("group") % BD == 0;
  const bool stageB = oneGroup && spec.get("b_varying", 0) && StagedBC::fits(N, BT, 1);
  const bool stageC =
      oneGroup && spec.get("c_varying", 0) && !statesPass && !checkpoints && StagedBC::fits(N, BT, stageB ? 2 : 1);
  StagedBC staged(k, N, R, BT, stageB, stageC, (pidD * BD) / group, row, {Bp, sBb, sBg, sBn}, {Cp, sCb, sCg, sCn});

  // D bound to a multiple of BLOCK_D: no channel mask, so a whole tile's accesses are plain.
  const bool channelsWhole = spec.find("D") && spec.get("D") % BD == 0;
  // A packed row's whole tiles load through PackedRuns (aligned vectors moved along time). Tiles
  // stay where they are, relative to the sequence start: a packed sequence's results equal its
  // own, bitwise.
  // A packed row's extra time over a dense one is mostly its sequences' last tiles (partial: a
  // tile's math runs for all of its tokens) and tiles that straddle two 128-byte lines (~5% of the
  // forward; docs/performance.md). Tiles placed on the row's lines instead would change the scan's
  // association within a sequence, and with it a packed sequence's bits against its own call; the
  // serial class (serial_seqlen, ssmjit/ops.h) keeps its tiles on the row's grid instead, for
  // calls of many sequences.
  // Rows whose strides are not all multiples of a run (an odd row length: channel d's row starts
  // at d L) align each row's runs on its own address (PackedRuns, perRow), dense rows too, rather
  // than load element by element (docs/performance.md, odd row lengths).
  const bool packed = spec.get("has_cu", 0) != 0;
  const int64_t run = BT / spec.get("meta:time_lanes");  // a thread's tokens
  std::vector<std::string> rowStrides{"s_u_d", "s_dl_d", "s_z_d"};
  if (stageB) rowStrides.push_back("s_B_n");
  if (stageC) rowStrides.push_back("s_C_n");
  if (!packed) {  // and the batch's
    rowStrides.insert(rowStrides.end(), {"s_u_b", "s_dl_b", "s_z_b"});
    if (stageB) rowStrides.push_back("s_B_b");
    if (stageC) rowStrides.push_back("s_C_b");
  }
  const bool rowsAligned = std::all_of(rowStrides.begin(), rowStrides.end(),
                                       [&](const std::string& s) { return spec.provesMultiple(s, run); });
  const bool realignRuns = !serial && (packed || !rowsAligned), perRow = realignRuns && !rowsAligned;
  // One tile [c, c + BT) of the span. A whole tile (the common case) has a mask constant along
  // time, or none: straight-line loads the compiler can vectorise and schedule ahead of the math.
  // Checkpoint keys of the sequence: its tile q at ckptKey0 + q (see the header).
  Value ckptKey0 = firstScanKey(k, seq, cpr, BT, hasCu, i);
  const CheckpointSpans spans{auxBase, k.select(hasCu, k.constInt(1), nseq) * kpr, D, N};
  auto tile = [&](bool whole, Value c, const std::vector<Value>& cs) {
    if (checkpoints) {
      Value key = ckptKey0 + (t0rel + c) / BT;
      storeStates(ws, key * DN, k.constInt(1), D, cs, mD);
      if (ckptSpans) k.store(ws, spans.tileDtAt(key, offsD), cs[NS], mD);
    }
    Value tl = c + rT;  // token of the span
    Value m2 = tE(tl < spanLen) && mD2;
    Value mask = whole ? (channelsWhole ? Value{} : k.broadcastTo(mD2, {R, BT})) : m2;
    Value tOff = tE(t0 + tl);
    auto load = [&](Value p, Value off) { return mask.valid() ? k.load(p, off, mask, zero) : k.load(p, off); };
    const bool realigned = realignRuns && whole;
    std::vector<Value> got;
    if (realigned) {
      PackedRuns al(k, t0 + c, BT, run, {}, perRow);
      al.load(u, row * sUb + dOffs * sUd, mask);
      al.load(delta, row * sDlb + dOffs * sDld, mask);
      staged.queue(al);
      got = al.realign();
    }
    staged.fill(realigned ? std::vector<Value>(got.begin() + 2, got.end()) : std::vector<Value>{},
                whole ? Value{} : tE(tl < spanLen), tOff);
    Value xu = realigned ? got[0] : load(u, row * sUb + dOffs * sUd + tOff);
    Value dt = (realigned ? got[1] : load(delta, row * sDlb + dOffs * sDld + tOff)) + dbiasT;
    dt = k.ifElse(
        softplusOn, [&] { return std::vector<Value>{softplus(dt)}; }, [&] { return std::vector<Value>{dt}; })[0];
    if (!whole) dt = k.select(m2, dt, zero);  // past the span: a = 1, b = 0 leave the carry as it is
    Value du = dt * xu;
    if (statesPass || checkpoints) {  // the tile's end state only (TileEnds.h)
      TileEnds e = scanTileEnds(
          k, dt, A2, cs,
          [&](int64_t n) {
            return du * (stageB ? staged.row(n, false) : bcTile(bVar, Bp, sBb, sBg, sBn, sBd, n, tOff, load));
          },
          false);
      e.carries.push_back(statesPass || ckptSpans ? cs[NS] + e.dtSum : cs[NS]);
      return e.carries;
    }
    // The earlier state chunks' sum of y (SelectiveScan.h, state chunks).
    Value y = k.ifElse(
        hasYacc, [&] { return std::vector<Value>{DvT * xu + load(yacc, row * sYab + dOffs * sYad + tOff)}; },
        [&] { return std::vector<Value>{DvT * xu}; })[0];
    std::vector<Value> next;
    for (int64_t n = 0; n < NS; ++n) {
      Value a = k.exp2(dt * dE(A2[n]));
      Value b = du * (stageB ? staged.row(n, false) : bcTile(bVar, Bp, sBb, sBg, sBn, sBd, n, tOff, load));
      std::vector<Value> s = k.associativeScan({a, b}, 1, linear, {k.splat(k.constFloat(1), {R}), cs[n]});
      next.push_back(s[3]);
      y = y + (stageC ? staged.row(n, true) : bcTile(cVar, Cp, sCb, sCg, sCn, sCd, n, tOff, load)) * s[1];
    }
    next.push_back(cs[NS]);
    y = k.ifElse(
        hasZ,
        [&] {
          if (!realigned) return std::vector<Value>{y * silu(load(z, row * sZb + dOffs * sZd + tOff))};
          PackedRuns az(k, t0 + c, BT, run, {}, perRow);
          az.load(z, row * sZb + dOffs * sZd, mask);
          return std::vector<Value>{y * silu(az.realign()[0])};
        },
        [&] { return std::vector<Value>{y}; })[0];
    Value oOff = row * sOb + dOffs * sOd + tOff;
    k.store(out, oOff, y, mask);
    return next;
  };
  // The serial class' tile: tokens [c, c + BT) of the span, from token tStart = t0 + c of the row,
  // tiles on the row's BT grid (c < 0 on a sequence's first tile, which may start in the sequence
  // before). Per state the plain recurrence h_t = a_t h_{t-1} + b_t, one thread's register chain:
  // its bits do not depend on where a tile starts. Thread (channel, part) holds the channel's states
  // part + s P and computes dt for its own W = BT / P tokens; with P > 1 the parts exchange dt and
  // dt u, and their sums of C h over each group of states, through shared memory.
  const int64_t W = BT / P, xchgPlane = BD * BT, groupRow = G * BT + 4;  // + 4: banks
  Value xchg = P > 1 ? k.sharedBuffer(2 * xchgPlane) : Value{},
        groups = P > 1 ? k.sharedBuffer(BD * groupRow) : Value{};
  Value chanE = dE(chan), partE = P > 1 ? dE(part) : Value{};
  Value own = P == 1 ? tE(k.range(W)) : partE * W + tE(k.range(W));  // [R or 1, W]: the thread's tokens
  // Which of the thread's own tokens, and which of the tile's, lie in the span.
  auto ownInAt = [&](Value c) { return (c + own >= 0) && (c + own < spanLen); };
  auto inSpanAt = [&](Value c) { return tE((c + rT >= 0) && (c + rT < spanLen)); };
  auto ownMaskOf = [&](bool whole, Value ownIn) {
    return whole ? (channelsWhole ? Value{} : k.broadcastTo(mD2, {R, W})) : k.broadcastTo(ownIn && mD2, {R, W});
  };
  auto loadOwnWith = [&](Value mask, Value tStart, Value p, Value base) {
    Value off = base + tStart + own;
    return mask.valid() ? k.load(p, off, mask, zero) : k.load(p, off);
  };
  // The tile's global reads before its math: u and delta (own tokens), then the staged B/C rows.
  auto serialLoads = [&](bool whole, Value c, Value tStart) {
    Value mask = ownMaskOf(whole, ownInAt(c));
    std::vector<Value> got{loadOwnWith(mask, tStart, u, row * sUb + dOffs * sUd),
                           loadOwnWith(mask, tStart, delta, row * sDlb + dOffs * sDld)};
    for (Value v : staged.load(whole ? Value{} : inSpanAt(c), tE(tStart + rT))) got.push_back(v);
    return got;
  };
  // `got`: the tile's serialLoads when issued a tile ahead (meta:prefetch), else empty.
  auto serialTile = [&](bool whole, Value c, Value tStart, const std::vector<Value>& cs, std::vector<Value> got) {
    if (got.empty()) got = serialLoads(whole, c, tStart);
    Value ownIn = ownInAt(c);
    Value ownMask = ownMaskOf(whole, ownIn);
    auto loadOwn = [&](Value p, Value base) { return loadOwnWith(ownMask, tStart, p, base); };
    Value xu = got[0];
    Value dt = got[1] + dbiasT;
    dt = k.ifElse(
        softplusOn, [&] { return std::vector<Value>{softplus(dt)}; }, [&] { return std::vector<Value>{dt}; })[0];
    if (!whole) dt = k.select(k.broadcastTo(ownIn, {R, W}), dt, zero);  // outside the span: a = 1
    Value du = dt * xu;
    Value base = k.ifElse(
        hasYacc, [&] { return std::vector<Value>{DvT * xu + loadOwn(yacc, row * sYab + dOffs * sYad)}; },
        [&] { return std::vector<Value>{DvT * xu}; })[0];
    Value inSpan = inSpanAt(c);
    Value tOff = tE(tStart + rT);
    if (P > 1) {
      k.store(xchg, chanE * BT + own, dt);
      k.store(xchg, chanE * BT + own + xchgPlane, du);
    }
    staged.fill(std::vector<Value>(got.begin() + 2, got.end()), whole ? Value{} : inSpan, tOff);
    Value dtT = dt, duT = du;
    if (P > 1) {
      if (!staged.any()) k.barrier();
      Value at = k.broadcastTo(chanE * BT + tE(rT), {R, BT});
      dtT = k.load(xchg, at);
      duT = k.load(xchg, at + xchgPlane);
    }
    Value mask =
        whole ? (channelsWhole ? Value{} : k.broadcastTo(mD2, {R, BT})) : k.broadcastTo(inSpan && mD2, {R, BT});
    auto load = [&](Value p, Value off) { return mask.valid() ? k.load(p, off, mask, zero) : k.load(p, off); };
    Value outside = whole ? Value{} : k.broadcastTo(!inSpan, {R, BT});
    // The thread's state s is in its group q = s % (G / P) (group q P + part of the channel's): walked
    // group by group, so that one group's sum of C h is live at a time, and summed in the fixed tree.
    const int64_t GQ = G / P;
    std::vector<Value> next(NS);
    std::vector<std::pair<Value, int64_t>> tree;  // pending sums and their levels, ((g0 + g1) + (g2 + g3))
    auto treeAdd = [&](Value v) {
      int64_t level = 0;
      for (; !tree.empty() && tree.back().second == level; ++level) {
        v = tree.back().first + v;
        tree.pop_back();
      }
      tree.push_back({v, level});
    };
    for (int64_t q = 0; q < GQ; ++q) {
      Value sum;
      for (int64_t n = q; n < NS; n += GQ) {
        Value a = k.exp2(dtT * dE(A2[n]));
        Value bcN = P == 1 ? Value{} : dE(stateOf(n));
        Value b = duT * (stageB ? (P == 1 ? staged.row(n, false) : staged.row(bcN, false))
                                : bcTile(bVar, Bp, sBb, sBg, sBn, sBd, n, tOff, load));
        // Outside the span (a = 1): b = -0 leaves the carry's bits as they are, -0 included.
        if (!whole) b = k.select(outside, k.constFloat(-0.0), b);
        std::vector<Value> sc = k.associativeScan({a, b}, 1, linear, {k.splat(k.constFloat(1), {R}), cs[n]});
        next[n] = sc[3];
        Value ch = (stageC ? (P == 1 ? staged.row(n, true) : staged.row(bcN, true))
                           : bcTile(cVar, Cp, sCb, sCg, sCn, sCd, n, tOff, load)) *
                   sc[1];
        sum = sum.valid() ? sum + ch : ch;
      }
      if (P == 1)
        treeAdd(sum);
      else
        k.store(groups, chanE * groupRow + (partE + q * P) * BT + tE(rT), sum);
    }
    next.push_back(cs[NS]);
    if (P > 1) {  // the channel's G groups over the own tokens
      k.barrier();
      for (int64_t g = 0; g < G; ++g) treeAdd(k.load(groups, k.broadcastTo(chanE * groupRow + g * BT + own, {R, W})));
    }
    Value y = base + tree[0].first;
    y = k.ifElse(
        hasZ, [&] { return std::vector<Value>{y * silu(loadOwn(z, row * sZb + dOffs * sZd))}; },
        [&] { return std::vector<Value>{y}; })[0];
    Value oOff = row * sOb + dOffs * sOd + tStart + own;
    k.store(out, oOff, y, ownMask);
    return next;
  };
  std::vector<Value> carry = h;
  carry.push_back(k.splat(zero, {R}));  // summed dt (states pass)
  if (serial) {
    // Tiles from the row's BT-multiple at or before t0. With meta:prefetch each tile's global reads
    // are issued one tile ahead and carried (the last tile's, past the span, are masked off).
    const bool prefetch = spec.get("meta:prefetch") != 0;
    auto loadsAt = [&](Value r) {
      Value c = r - t0;
      return k.ifElse((c >= 0) && (c + BT <= spanLen), [&] { return serialLoads(true, c, r); },
                      [&] { return serialLoads(false, c, r); });
    };
    Value r0 = (t0 / BT) * BT;
    const size_t nState = carry.size();
    if (prefetch)
      for (Value v : loadsAt(r0)) carry.push_back(v);
    carry = k.forLoop(r0, t0 + spanLen, k.constInt(BT), carry, [&](Value r, const std::vector<Value>& cs) {
      const std::vector<Value> state(cs.begin(), cs.begin() + nState), got(cs.begin() + nState, cs.end());
      const std::vector<Value> ahead = prefetch ? loadsAt(r + BT) : std::vector<Value>{};
      Value c = r - t0;
      Value whole = (c >= 0) && (c + BT <= spanLen);
      std::vector<Value> next = k.ifElse(
          whole, [&] { return serialTile(true, c, r, state, got); },
          [&] { return serialTile(false, c, r, state, got); });
      next.insert(next.end(), ahead.begin(), ahead.end());
      return next;
    });
  } else {
    const bool tilesWhole = scanTilesWhole(spec, BT) && !realignRuns;
    carry = k.forLoop(zeroI, spanLen, k.constInt(BT), carry, [&](Value c, const std::vector<Value>& cs) {
      if (tilesWhole) return tile(true, c, cs);
      // A realigned whole tile also reads the run after it (perRow: and the one before): they
      // must lie in the row.
      Value whole = c + BT <= spanLen;
      if (realignRuns) whole = whole && (t0 + c + BT + run <= L);
      if (perRow) whole = whole && (t0 + c >= run);
      return k.ifElse(
          whole, [&] { return tile(true, c, cs); }, [&] { return tile(false, c, cs); });
    });
  }
  std::vector<Value> hEnd(carry.begin(), carry.begin() + NS);
  if (ckptSpans) {  // a span with a successor: its end state and summed dt, for the fold
    k.ifThen(!isLast, [&] {
      Value key = firstScanKey(k, seq, kpr, SPAN, hasCu, i) + j;
      for (int64_t n = 0; n < NS; ++n) k.store(ws, spans.endAt(key, n, offsD), hEnd[n], mD);
      k.store(ws, spans.endAt(key, N, offsD), carry[NS], mD);
    });
    return;
  }
  if (statesPass) {
    Value key = row * kpr + (t0 + SPAN) / SPAN;
    storeStates(ws, key * DN, k.constInt(N), k.constInt(1), hEnd, mD);
    k.store(ws, sumBase + key * D + offsD, carry[NS], mD);
    return;
  }
  k.returnIf(!(isLast && hasFinal));
  Value slotOut = checkedSlot(k, hasFinalIdx, finIdx, sFidx, nFinal, i, pidD, err, kErrScanFinalSlot);
  k.returnIf(slotOut == -1);
  storeStates(fin, slotOut * sFs, sFd, sFn, hEnd, mD);
}

// A program: time_lanes lanes of a warp along time, each holding a contiguous run of BLOCK_T /
// time_lanes tokens (the scan within a run is a register chain, across the lanes log2(lanes)
// shuffles), the rest of the warp and the warps along channels. The span (tokens one program
// scans serially) depends only on D: a wide model scans whole sequences; a narrower one cuts
// them into spans of about D / 2.5 tokens (256..2048), so a long sequence still fills the GPU.
void chooseScanMeta(Specialization& s) {
  const int64_t D = s.get("D");
  // 8 lanes of 8 tokens: the best of 1..16 lanes and 4..16 tokens a thread at Mamba-1 2.8B shapes;
  // fewer lanes lose on one long sequence and on packed rows, more lanes or fewer tokens a thread
  // lose on dense rows.
  setDefault(s, "meta:length_class", 0);
  setDefault(s, "meta:serial_len", 0);
  const bool serial = s.get("meta:length_class") == 1;
  // The serial class: 2 warps of (channel, part) threads, 8-token tiles, 5 an SM, whole sequences
  // (16-token tiles and 1 or 4 warps are slower on dense and packed rows).
  if (serial) {
    setDefault(s, "meta:time_lanes", 1);
    setDefault(s, "meta:BLOCK_T", 8);
    setDefault(s, "meta:num_warps", 2);
    setDefault(s, "meta:min_blocks", 5);
  }
  // Whole sequences a program: the serial class (at most serial_len tokens) and the checkpoint pass.
  if (!s.find("meta:span") && (serial || s.get("meta:checkpoints", 0))) s.set("meta:span", kScanWholeSequences);
  setDefault(s, "meta:state_parts", 1);
  setDefault(s, "meta:time_lanes", 8);
  const int64_t lanes = s.get("meta:time_lanes");
  setDefault(s, "meta:BLOCK_T", 8 * lanes);
  if (serial) {  // P: a power of two dividing the groups of states, with a token of the tile each
    const int64_t most =
        std::min({s.get("meta:state_parts"), scanStateGroups(s.get("meta:dstate", 1)), s.get("meta:BLOCK_T")});
    int64_t parts = 1;
    while (parts * 2 <= most) parts *= 2;
    s.set("meta:state_parts", parts);
  }
  setDefault(s, "meta:num_warps", std::clamp<int64_t>(nextPow2(D) * lanes / 32, 1, 4));
  // A program's threads along channels: its channels times the parts of each (serial class).
  const int64_t parts = serial ? s.get("meta:state_parts") : 1;
  // The serial class' reads a tile ahead where a channel's states are split (few sequences: each
  // program's tiles wait on memory); with one thread a channel (many sequences) registers are short
  // and the prefetch costs.
  setDefault(s, "meta:prefetch", parts > 1);
  if (!s.find("meta:BLOCK_D"))
    s.set("meta:BLOCK_D", std::max<int64_t>(1, s.get("meta:num_warps") * 32 / lanes / parts));
  if (!s.find("meta:span")) {
    int64_t span = scanSpanForWidth(D);
    // A sequence whose channels alone give ~1000 warps fills the GPU: no spans, no states pass.
    const int64_t bd = s.get("meta:BLOCK_D");
    if ((D + bd - 1) / bd * s.get("meta:num_warps") >= 1024) span = kScanWholeSequences;
    s.set("meta:span", std::max(span, s.get("meta:BLOCK_T")));
  }
  // The longest first where programs take whole sequences (spans already bound a program's
  // length; there the ranked sequence index, held in a register, spilled 312 B where 256 at most at D 256).
  setDefault(s, "meta:longest_first", s.get("has_cu", 0) && !s.get("multi_span", 0));
  setDefault(s, "meta:states_pass", 0);
  setDefault(s, "meta:min_blocks", 0);  // the op sets it from the grid
  // Held to 4 blocks an SM (dense rows: 128 registers a thread), the tile's register loops unroll
  // in the source up to 64 lines each, which the scheduler uses (docs/performance.md); at 5 (96
  // registers) the same code spills more and runs slower.
  const int64_t mb = s.get("meta:min_blocks");
  setDefault(s, "meta:unroll_lines", mb >= 1 && mb <= 4 ? 64 : 0);
  setDefault(s, "meta:checkpoints", 0);
  setDefault(s, "meta:index_bits", 32);
}

}  // namespace

ScanTiles scanTiles(int64_t programs, bool packed) {
  if (programs < 1024) return {5, 2};
  return {packed ? 5 : 4, 0};
}

int64_t scanStateParts(int64_t channelSequences) {
  if (channelSequences >= 8 * 5120) return 1;
  return channelSequences >= 4 * 5120 ? 2 : 4;
}

const KernelRegistration kForward(__FILE__, {kScan.kernel, buildScan, chooseScanMeta, &kScan});

}  // namespace ssmjit::kernels
