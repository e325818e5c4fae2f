// RUN: ssmjit-opt %s --sj-form-fma | FileCheck %s

// a * b + c and c + a * b: one fma each.
// CHECK-LABEL: func.func @add
// CHECK-NOT: arith.mulf
// CHECK: %[[F:.*]] = math.fma %arg0, %arg1, %arg2 : tensor<16xf32>
// CHECK-NEXT: %[[G:.*]] = math.fma %arg0, %arg2, %[[F]] : tensor<16xf32>
// CHECK-NEXT: return %[[G]]
func.func @add(%a: tensor<16xf32>, %b: tensor<16xf32>, %c: tensor<16xf32>) -> tensor<16xf32> {
  %m = arith.mulf %a, %b : tensor<16xf32>
  %s = arith.addf %m, %c : tensor<16xf32>
  %n = arith.mulf %a, %c : tensor<16xf32>
  %t = arith.addf %s, %n : tensor<16xf32>
  return %t : tensor<16xf32>
}

// a * b - c = fma(a, b, -c); c - a * b = fma(-a, b, c).
// CHECK-LABEL: func.func @sub
// CHECK: %[[NC:.*]] = arith.negf %arg2 : f32
// CHECK-NEXT: %[[F:.*]] = math.fma %arg0, %arg1, %[[NC]] : f32
// CHECK-NEXT: %[[NA:.*]] = arith.negf %arg0 : f32
// CHECK-NEXT: %[[G:.*]] = math.fma %[[NA]], %arg1, %arg2 : f32
// CHECK-NEXT: return %[[F]], %[[G]]
func.func @sub(%a: f32, %b: f32, %c: f32) -> (f32, f32) {
  %m = arith.mulf %a, %b : f32
  %s = arith.subf %m, %c : f32
  %n = arith.mulf %a, %b : f32
  %t = arith.subf %c, %n : f32
  return %s, %t : f32, f32
}

// A product with another use is rounded once and kept; so is one from outside the loop (one
// register rather than its two operands in every iteration).
// CHECK-LABEL: func.func @kept
// CHECK-NOT: math.fma
// CHECK: return
func.func @kept(%a: f32, %b: f32, %c: f32, %n: i32) -> (f32, f32) {
  %m = arith.mulf %a, %b : f32
  %s = arith.addf %m, %c : f32
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %p = arith.mulf %a, %c : f32
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %c) -> (f32) : i32 {
    %q = arith.addf %acc, %p : f32
    scf.yield %q : f32
  }
  return %s, %m : f32, f32
}

// The sum of a single-use product along an axis: a weighted reduction. A maximum is left alone.
// CHECK-LABEL: func.func @reduce
// CHECK-NOT: arith.mulf
// CHECK: %[[W:.*]] = sj.reduce %arg0 weight %arg1 {axis = 1 : i32, kind = "sum"} : tensor<16x16xf32>, tensor<16x16xf32> -> tensor<16xf32>
// CHECK: %[[M:.*]] = arith.mulf %arg0, %arg1
// CHECK-NEXT: sj.reduce %[[M]] {axis = 1 : i32, kind = "max"}
func.func @reduce(%a: tensor<16x16xf32>, %b: tensor<16x16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %m = arith.mulf %a, %b : tensor<16x16xf32>
  %s = sj.reduce %m {axis = 1 : i32, kind = "sum"} : tensor<16x16xf32> -> tensor<16xf32>
  %n = arith.mulf %a, %b : tensor<16x16xf32>
  %x = sj.reduce %n {axis = 1 : i32, kind = "max"} : tensor<16x16xf32> -> tensor<16xf32>
  return %s, %x : tensor<16xf32>, tensor<16xf32>
}
