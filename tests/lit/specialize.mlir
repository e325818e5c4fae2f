// RUN: ssmjit-opt %s --sj-specialize="bindings=has_idx=0,s_x_p=1,dtype:x=2,align:x=16,div:s_x_b=8" | FileCheck %s
// RUN: ssmjit-opt %s --sj-specialize="bindings=has_idx=1,s_x_p=1,dtype:x=0,dtype:idx=3,align:idx=16" | FileCheck %s --check-prefix=IDX
// RUN: not ssmjit-opt %s --sj-specialize="bindings=s_x_p=1,dtype:x=2" 2>&1 | FileCheck %s --check-prefix=UNBOUND
// RUN: not ssmjit-opt %s --sj-specialize="bindings=has_idx=0,dtype:x=3" 2>&1 | FileCheck %s --check-prefix=DTYPE
// RUN: not ssmjit-opt %s --sj-specialize="bindings=has_idx=0" 2>&1 | FileCheck %s --check-prefix=NODTYPE
// RUN: not ssmjit-opt %s --sj-specialize="bindings=has_idx" 2>&1 | FileCheck %s --check-prefix=SYNTAX

// The state update's slot lookup and a row of x, cut down: a flag and a stride bound, a pointer
// given its dtype and alignment, a stride left dynamic with its divisibility class.

// The flag's dead branch and the unused arguments (batch, the index pointer) go; x becomes bf16
// storage with its alignment; the unit stride folds away.
// CHECK-LABEL: func.func @row
// CHECK-SAME: (%arg0: !sj.ptr<bf16> {sj.align = 16 : i64, sj.name = "x", sj.role = "data"},
// CHECK-SAME: %arg1: i32 {sj.div = 8 : i64, sj.name = "s_x_b", sj.role = "int"})
// CHECK-NOT: scf.if
// CHECK: %[[PID:.*]] = sj.program_id 0
// CHECK-NEXT: %[[BASE:.*]] = arith.muli %[[PID]], %arg1 : i32
// CHECK-NEXT: %[[R:.*]] = sj.range
// CHECK-NEXT: %[[S:.*]] = sj.splat %[[BASE]]
// CHECK-NEXT: %[[OFF:.*]] = arith.addi %[[S]], %[[R]] : tensor<16xi32>
// CHECK-NEXT: sj.load %arg0[%[[OFF]]] : !sj.ptr<bf16>, tensor<16xi32> -> tensor<16xf32>

// With the flag set the slot comes from the index pointer, a metadata pointer: never aligned.
// IDX-LABEL: func.func @row
// IDX-SAME: (%arg0: !sj.ptr<f32> {sj.name = "x", sj.role = "data"},
// IDX-SAME: %arg1: !sj.ptr<i32> {sj.name = "idx", sj.role = "metadata"},
// IDX-SAME: %arg2: i32 {sj.name = "s_x_b", sj.role = "int"})
// IDX-NOT: scf.if
// IDX: %[[PID:.*]] = sj.program_id 0
// IDX-NEXT: %[[SLOT:.*]] = sj.load %arg1[%[[PID]]] : !sj.ptr<i32>, i32 -> i32
// IDX-NEXT: arith.muli %[[SLOT]], %arg2 : i32

// UNBOUND: error: specialize: flag 'has_idx' must be bound
// DTYPE: error: specialize: pointer 'x' bound to dtype int32, which its kernel cannot take
// NODTYPE: error: specialize: pointer 'x' is used but has no dtype binding
// SYNTAX: error: sj-specialize: binding 'has_idx' is not name=<integer>
func.func @row(%x: !sj.ptr<f32> {sj.name = "x", sj.role = "data"},
               %idx: !sj.ptr<i32> {sj.name = "idx", sj.role = "metadata"},
               %batch: i32 {sj.name = "batch", sj.role = "int"},
               %s_x_b: i32 {sj.name = "s_x_b", sj.role = "int"},
               %s_x_p: i32 {sj.name = "s_x_p", sj.role = "int"},
               %has_idx: i1 {sj.name = "has_idx", sj.role = "flag"}) attributes {sj.kernel, sj.num_warps = 4 : i32} {
  %0 = sj.program_id 0 : i32
  %1 = scf.if %has_idx -> (i32) {
    %v = sj.load %idx[%0] : !sj.ptr<i32>, i32 -> i32
    scf.yield %v : i32
  } else {
    scf.yield %0 : i32
  }
  %2 = arith.muli %1, %s_x_b : i32
  %3 = sj.range : tensor<16xi32>
  %4 = sj.splat %s_x_p : i32 -> tensor<16xi32>
  %5 = arith.muli %3, %4 : tensor<16xi32>
  %6 = sj.splat %2 : i32 -> tensor<16xi32>
  %7 = arith.addi %6, %5 : tensor<16xi32>
  %8 = sj.load %x[%7] : !sj.ptr<f32>, tensor<16xi32> -> tensor<16xf32>
  %9 = arith.addf %8, %8 : tensor<16xf32>
  sj.store %x[%7], %9 : !sj.ptr<f32>, tensor<16xi32>, tensor<16xf32>
  return
}
