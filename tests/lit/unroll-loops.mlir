// RUN: ssmjit-opt %s --sj-unroll-loops | FileCheck %s
// RUN: ssmjit-opt %s --sj-unroll-loops="unroll-ops=8" | FileCheck %s --check-prefix=BUDGET

// Four iterations of a 3-operation body (12 operations) unroll within the default budget of 256;
// past a budget of 8 the loop stays rolled.
// CHECK-LABEL: func.func @four_tokens
// CHECK-NOT: scf.for
// CHECK-COUNT-4: sj.load %arg0
// CHECK-NOT: sj.load
// CHECK: return
// BUDGET-LABEL: func.func @four_tokens
// BUDGET: scf.for
// BUDGET-COUNT-1: sj.load %arg0
// BUDGET-NOT: sj.load
// BUDGET: return
func.func @four_tokens(%x: !sj.ptr<f32>) -> f32 {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %zero = arith.constant 0.000000e+00 : f32
  %sum = scf.for %t = %c0 to %c4 step %c1 iter_args(%acc = %zero) -> (f32) : i32 {
    %v = sj.load %x[%t] : !sj.ptr<f32>, i32 -> f32
    %s = arith.addf %acc, %v : f32
    scf.yield %s : f32
  }
  return %sum : f32
}

// A single iteration is always unrolled, whatever the budget.
// CHECK-LABEL: func.func @one_token
// CHECK-NOT: scf.for
// BUDGET-LABEL: func.func @one_token
// BUDGET-NOT: scf.for
// BUDGET: return
func.func @one_token(%x: !sj.ptr<f32>) -> f32 {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %zero = arith.constant 0.000000e+00 : f32
  %sum = scf.for %t = %c0 to %c1 step %c1 iter_args(%acc = %zero) -> (f32) : i32 {
    %v = sj.load %x[%t] : !sj.ptr<f32>, i32 -> f32
    %e = math.exp %v : f32
    %m = arith.mulf %e, %v : f32
    %d = arith.divf %m, %acc : f32
    %s = arith.addf %acc, %d : f32
    scf.yield %s : f32
  }
  return %sum : f32
}

// A loop over a dynamic count stays rolled.
// CHECK-LABEL: func.func @dynamic_tokens
// CHECK: scf.for
func.func @dynamic_tokens(%x: !sj.ptr<f32>, %n: i32) -> f32 {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %zero = arith.constant 0.000000e+00 : f32
  %sum = scf.for %t = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f32) : i32 {
    %v = sj.load %x[%t] : !sj.ptr<f32>, i32 -> f32
    %s = arith.addf %acc, %v : f32
    scf.yield %s : f32
  }
  return %sum : f32
}
