// RUN: ssmjit-opt %s --sj-vectorize-accesses | FileCheck %s

// [16, 32] tiles in the state update's parent layout: runs of 4 along dim 1, so at most 4
// consecutive f32 (16 bytes) a thread. Each access takes the widest vector that the layout's run,
// the offsets' contiguity and divisibility, the pointer's alignment and the mask's constancy
// allow. Layouts as sj-assign-layouts leaves them (the pass reads only those of accessed values).
#blocked = #sj.blocked<spt = [1, 4], tpw = [8, 4], wpc = [2, 2]>
#rows = #sj.slice<dim = 1, parent = #blocked>
#cols = #sj.slice<dim = 0, parent = #blocked>

// CHECK-LABEL: func.func @accesses
func.func @accesses(%state: !sj.ptr<f32> {sj.align = 16 : i64}, %unaligned: !sj.ptr<f32> {sj.align = 4 : i64},
                    %half: !sj.ptr<bf16> {sj.align = 16 : i64}, %x: !sj.ptr<f32> {sj.align = 16 : i64},
                    %s16: i32 {sj.div = 16 : i64}, %s: i32, %n16: i32 {sj.div = 16 : i64}, %n: i32)
    attributes {sj.kernel, sj.num_warps = 4 : i32, sj.parent = #blocked} {
  %r = sj.range {sj.layouts = [#sj.any]} : tensor<16xi32>
  %c = sj.range {sj.layouts = [#sj.any]} : tensor<32xi32>
  %rows = sj.expand_dims %r {axis = 1 : i32, sj.layouts = [#blocked]} : tensor<16xi32> -> tensor<16x1xi32>
  %cols = sj.expand_dims %c {axis = 0 : i32, sj.layouts = [#blocked]} : tensor<32xi32> -> tensor<1x32xi32>
  %cb = sj.broadcast %cols {sj.layouts = [#blocked]} : tensor<1x32xi32> -> tensor<16x32xi32>
  %a16 = sj.splat %s16 {sj.layouts = [#blocked]} : i32 -> tensor<16x1xi32>
  %ra = arith.muli %rows, %a16 {sj.layouts = [#blocked]} : tensor<16x1xi32>
  %rab = sj.broadcast %ra {sj.layouts = [#blocked]} : tensor<16x1xi32> -> tensor<16x32xi32>
  %off = arith.addi %rab, %cb {sj.layouts = [#blocked]} : tensor<16x32xi32>
  %as = sj.splat %s {sj.layouts = [#blocked]} : i32 -> tensor<16x1xi32>
  %rs = arith.muli %rows, %as {sj.layouts = [#blocked]} : tensor<16x1xi32>
  %rsb = sj.broadcast %rs {sj.layouts = [#blocked]} : tensor<16x1xi32> -> tensor<16x32xi32>
  %offd = arith.addi %rsb, %cb {sj.layouts = [#blocked]} : tensor<16x32xi32>

  // Rows of a stride divisible by 16 elements from a 16-byte aligned pointer: full vectors.
  // CHECK: sj.load %arg0[%[[OFF:.*]]] {sj.layouts = [#blocked], sj.vec = 4 : i64}
  %t0 = sj.load %state[%off] {sj.layouts = [#blocked]} : !sj.ptr<f32>, tensor<16x32xi32> -> tensor<16x32xf32>
  // A pointer aligned to 4 bytes only.
  // CHECK: sj.load %arg1[%[[OFF]]] {sj.layouts = [#blocked], sj.vec = 1 : i64}
  %t1 = sj.load %unaligned[%off] {sj.layouts = [#blocked]} : !sj.ptr<f32>, tensor<16x32xi32> -> tensor<16x32xf32>
  // A row stride of unknown divisibility: a row may start anywhere.
  // CHECK: sj.load %arg0[%{{.*}}] {sj.layouts = [#blocked], sj.vec = 1 : i64}
  %t2 = sj.load %state[%offd] {sj.layouts = [#blocked]} : !sj.ptr<f32>, tensor<16x32xi32> -> tensor<16x32xf32>
  // bf16: 8 elements would fit 16 bytes, the layout's run of 4 bounds it.
  // CHECK: sj.load %arg2[%[[OFF]]] {sj.layouts = [#blocked], sj.vec = 4 : i64}
  %t3 = sj.load %half[%off] {sj.layouts = [#blocked]} : !sj.ptr<bf16>, tensor<16x32xi32> -> tensor<16x32xf32>
  // A column mask against a bound divisible by 16 is constant over each run; against any bound
  // it may change inside one.
  %b16 = sj.splat %n16 {sj.layouts = [#blocked]} : i32 -> tensor<16x32xi32>
  %m16 = arith.cmpi slt, %cb, %b16 {sj.layouts = [#blocked]} : tensor<16x32xi32>
  %b = sj.splat %n {sj.layouts = [#blocked]} : i32 -> tensor<16x32xi32>
  %m = arith.cmpi slt, %cb, %b {sj.layouts = [#blocked]} : tensor<16x32xi32>
  // CHECK: sj.load %arg0[%[[OFF]]] mask %{{.*}} {sj.layouts = [#blocked], sj.vec = 4 : i64}
  %t4 = sj.load %state[%off] mask %m16 {sj.layouts = [#blocked]} : !sj.ptr<f32>, tensor<16x32xi32>, tensor<16x32xi1> -> tensor<16x32xf32>
  // CHECK: sj.load %arg0[%[[OFF]]] mask %{{.*}} {sj.layouts = [#blocked], sj.vec = 1 : i64}
  %t5 = sj.load %state[%off] mask %m {sj.layouts = [#blocked]} : !sj.ptr<f32>, tensor<16x32xi32>, tensor<16x32xi1> -> tensor<16x32xf32>
  // A 1-D tile down the rows (slice of dim 1): a thread's registers are not consecutive.
  // CHECK: sj.load %arg3[%{{.*}}] {sj.layouts = [#sj.slice<dim = 1, parent = #blocked>], sj.vec = 1 : i64}
  %xr = sj.load %x[%r] {sj.layouts = [#rows]} : !sj.ptr<f32>, tensor<16xi32> -> tensor<16xf32>
  %xe = sj.expand_dims %xr {axis = 1 : i32, sj.layouts = [#blocked]} : tensor<16xf32> -> tensor<16x1xf32>
  %xb = sj.broadcast %xe {sj.layouts = [#blocked]} : tensor<16x1xf32> -> tensor<16x32xf32>
  %p = arith.mulf %t0, %xb {sj.layouts = [#blocked]} : tensor<16x32xf32>
  %q = arith.addf %p, %t1 {sj.layouts = [#blocked]} : tensor<16x32xf32>
  %q2 = arith.addf %q, %t2 {sj.layouts = [#blocked]} : tensor<16x32xf32>
  %q3 = arith.addf %q2, %t3 {sj.layouts = [#blocked]} : tensor<16x32xf32>
  %q4 = arith.addf %q3, %t4 {sj.layouts = [#blocked]} : tensor<16x32xf32>
  %q5 = arith.addf %q4, %t5 {sj.layouts = [#blocked]} : tensor<16x32xf32>
  // A 1-D tile along the columns (slice of dim 0) keeps the parent's runs along dim 1.
  %y = sj.reduce %q5 {axis = 0 : i32, kind = "sum", sj.layouts = [#cols]} : tensor<16x32xf32> -> tensor<32xf32>
  // CHECK: sj.store %arg3[%{{.*}}], %{{.*}} {sj.vec = 4 : i64}
  sj.store %x[%c], %y : !sj.ptr<f32>, tensor<32xi32>, tensor<32xf32>
  // CHECK: sj.store %arg0[%[[OFF]]], %{{.*}} {sj.vec = 4 : i64}
  sj.store %state[%off], %q5 : !sj.ptr<f32>, tensor<16x32xi32>, tensor<16x32xf32>
  // CHECK: sj.store %arg1[%[[OFF]]], %{{.*}} {sj.vec = 1 : i64}
  sj.store %unaligned[%off], %q5 : !sj.ptr<f32>, tensor<16x32xi32>, tensor<16x32xf32>
  return
}

// A copy takes the vector both sides allow: source rows of 32 f32 and buffer rows of 32 give the
// layout's run of 4; buffer rows of 34 (divisible by 2 only) give pairs.
// CHECK-LABEL: func.func @copies
func.func @copies(%src: !sj.ptr<f32> {sj.align = 16 : i64}) attributes {sj.kernel, sj.num_warps = 4 : i32, sj.parent = #blocked} {
  %buf = sj.shared_buffer 2048 {dynamic} : !sj.ptr<f32>
  %r = sj.range {sj.layouts = [#sj.any]} : tensor<16xi32>
  %c = sj.range {sj.layouts = [#sj.any]} : tensor<32xi32>
  %rows = sj.expand_dims %r {axis = 1 : i32, sj.layouts = [#blocked]} : tensor<16xi32> -> tensor<16x1xi32>
  %cols = sj.expand_dims %c {axis = 0 : i32, sj.layouts = [#blocked]} : tensor<32xi32> -> tensor<1x32xi32>
  %cb = sj.broadcast %cols {sj.layouts = [#blocked]} : tensor<1x32xi32> -> tensor<16x32xi32>
  %k32 = arith.constant {sj.layouts = [#sj.any]} dense<32> : tensor<16x1xi32>
  %k34 = arith.constant {sj.layouts = [#sj.any]} dense<34> : tensor<16x1xi32>
  %g = arith.muli %rows, %k32 {sj.layouts = [#blocked]} : tensor<16x1xi32>
  %gb = sj.broadcast %g {sj.layouts = [#blocked]} : tensor<16x1xi32> -> tensor<16x32xi32>
  %goff = arith.addi %gb, %cb {sj.layouts = [#blocked]} : tensor<16x32xi32>
  %s = arith.muli %rows, %k34 {sj.layouts = [#blocked]} : tensor<16x1xi32>
  %sb = sj.broadcast %s {sj.layouts = [#blocked]} : tensor<16x1xi32> -> tensor<16x32xi32>
  %soff = arith.addi %sb, %cb {sj.layouts = [#blocked]} : tensor<16x32xi32>
  // CHECK: sj.copy_async %{{.*}}[%{{.*}}], %arg0[%{{.*}}] {sj.vec = 4 : i64}
  sj.copy_async %buf[%goff], %src[%goff] : !sj.ptr<f32>, tensor<16x32xi32>, !sj.ptr<f32>, tensor<16x32xi32>
  // CHECK: sj.copy_async %{{.*}}[%{{.*}}], %arg0[%{{.*}}] {sj.vec = 2 : i64}
  sj.copy_async %buf[%soff], %src[%goff] : !sj.ptr<f32>, tensor<16x32xi32>, !sj.ptr<f32>, tensor<16x32xi32>
  return
}
