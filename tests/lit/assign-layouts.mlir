// RUN: ssmjit-opt %s --split-input-file --verify-diagnostics --sj-assign-layouts | FileCheck %s
// RUN: ssmjit-opt %s --split-input-file --verify-diagnostics --sj-assign-layouts | ssmjit-opt --split-input-file | FileCheck %s

// The state update's core, cut down: a [16, 16] f32 state tile times x along its rows, summed
// over the rows. 4 warps of f32: runs of 4 along dim 1 (16-byte vectors), 4 lanes there (the 16
// columns), the other 8 lanes and the warps down the rows. x meets the 2-D tiles through an
// expansion at axis 1 (slice of dim 1); the sum along axis 0 is a slice of dim 0, and so is
// what is computed from it. 1-D ranges and constants are made where used; scalars are uniform.
// CHECK: #blocked = #sj.blocked<spt = [1, 4], tpw = [8, 4], wpc = [2, 2]>
// CHECK-LABEL: func.func @state_rows
// CHECK-SAME: sj.parent = #blocked
// CHECK: sj.program_id 0 {sj.layouts = [#sj.scalar]}
// CHECK: sj.range {sj.layouts = [#sj.any]}
// CHECK: sj.load %arg1{{.*}}sj.layouts = [#sj.slice<dim = 1, parent = #blocked>]
// CHECK: sj.expand_dims {{.*}}sj.layouts = [#blocked]
// CHECK: sj.load %arg0{{.*}}sj.layouts = [#blocked]
// CHECK: arith.mulf {{.*}}sj.layouts = [#blocked]
// CHECK: sj.reduce {{.*}}sj.layouts = [#sj.slice<dim = 0, parent = #blocked>]
// CHECK: arith.constant {sj.layouts = [#sj.any]} dense<1.000000e+00> : tensor<16xf32>
// CHECK: arith.addf {{.*}}sj.layouts = [#sj.slice<dim = 0, parent = #blocked>]
// CHECK: sj.store %arg2
func.func @state_rows(%state: !sj.ptr<f32>, %x: !sj.ptr<f32>, %out: !sj.ptr<f32>) attributes {sj.kernel, sj.num_warps = 4 : i32} {
  %pid = sj.program_id 0 : i32
  %r = sj.range : tensor<16xi32>
  %xr = sj.load %x[%r] : !sj.ptr<f32>, tensor<16xi32> -> tensor<16xf32>
  %c16 = arith.constant dense<16> : tensor<16x1xi32>
  %rows = sj.expand_dims %r {axis = 1 : i32} : tensor<16xi32> -> tensor<16x1xi32>
  %cols = sj.expand_dims %r {axis = 0 : i32} : tensor<16xi32> -> tensor<1x16xi32>
  %rs = arith.muli %rows, %c16 : tensor<16x1xi32>
  %rb = sj.broadcast %rs : tensor<16x1xi32> -> tensor<16x16xi32>
  %cb = sj.broadcast %cols : tensor<1x16xi32> -> tensor<16x16xi32>
  %off = arith.addi %rb, %cb : tensor<16x16xi32>
  %s = sj.load %state[%off] : !sj.ptr<f32>, tensor<16x16xi32> -> tensor<16x16xf32>
  %xe = sj.expand_dims %xr {axis = 1 : i32} : tensor<16xf32> -> tensor<16x1xf32>
  %xb = sj.broadcast %xe : tensor<16x1xf32> -> tensor<16x16xf32>
  %p = arith.mulf %s, %xb : tensor<16x16xf32>
  %y = sj.reduce %p {axis = 0 : i32, kind = "sum"} : tensor<16x16xf32> -> tensor<16xf32>
  %one = arith.constant dense<1.0> : tensor<16xf32>
  %y2 = arith.addf %y, %one : tensor<16xf32>
  sj.store %out[%r], %y2 : !sj.ptr<f32>, tensor<16xi32>, tensor<16xf32>
  return
}

// -----

// A kernel with a dot takes the mma accumulator's layout: 8 lane groups down the rows, 4 lanes
// along them in runs of one 16-byte vector of the widest global element (bf16: 8), warps down.
// CHECK: #blocked = #sj.blocked<spt = [1, 8], tpw = [8, 4], wpc = [4, 1]>
// CHECK-LABEL: func.func @dot
// CHECK: sj.dot {{.*}}sj.layouts = [#blocked]
func.func @dot(%a: tensor<64x16xf32>, %b: !sj.ptr<bf16>, %acc: tensor<64x16xf32>, %o: i32, %sk: i32, %sn: i32) -> tensor<64x16xf32> attributes {sj.kernel, sj.num_warps = 4 : i32} {
  %r = sj.dot %a, %b[%o, %sk, %sn], %acc {a_pieces = 1 : i32, b_pieces = 1 : i32} : tensor<64x16xf32>, !sj.ptr<bf16>, i32, i32, i32, tensor<64x16xf32> -> tensor<64x16xf32>
  %off = arith.constant dense<0> : tensor<64x16xi32>
  %v = sj.load %b[%off] : !sj.ptr<bf16>, tensor<64x16xi32> -> tensor<64x16xf32>
  return %r : tensor<64x16xf32>
}

// -----

// A dot reading b from a 16-bit dynamic shared buffer (by ldmatrix) takes runs of a pair, the
// columns 2 q, 2 q + 1 a lane's fragments hold, whatever the global elements' width.
// CHECK: #blocked = #sj.blocked<spt = [1, 2], tpw = [8, 4], wpc = [4, 1]>
// CHECK-LABEL: func.func @dot_fragments
// CHECK: sj.dot {{.*}}sj.layouts = [#blocked]
func.func @dot_fragments(%a: tensor<64x16xf32>, %x: !sj.ptr<bf16>, %acc: tensor<64x16xf32>, %o: i32) -> tensor<64x16xf32> attributes {sj.kernel, sj.num_warps = 4 : i32} {
  %buf = sj.shared_buffer 4096 {dynamic} : !sj.ptr<bf16>
  %one = arith.constant 1 : i32
  %pitch = arith.constant 24 : i32
  %r = sj.dot %a, %buf[%o, %one, %pitch], %acc {a_pieces = 1 : i32, b_pieces = 1 : i32} : tensor<64x16xf32>, !sj.ptr<bf16>, i32, i32, i32, tensor<64x16xf32> -> tensor<64x16xf32>
  %off = arith.constant dense<0> : tensor<64x16xi32>
  %v = sj.load %x[%off] : !sj.ptr<bf16>, tensor<64x16xi32> -> tensor<64x16xf32>
  return %r : tensor<64x16xf32>
}

// -----

// One 1-D tile cannot run along both dims: there is no layout conversion.
func.func @both_dims(%x: !sj.ptr<f32>) -> (tensor<16x1xf32>, tensor<1x16xf32>) attributes {sj.kernel, sj.num_warps = 4 : i32} {
  %r = sj.range : tensor<16xi32>
  %xr = sj.load %x[%r] : !sj.ptr<f32>, tensor<16xi32> -> tensor<16xf32>
  %a = sj.expand_dims %xr {axis = 1 : i32} : tensor<16xf32> -> tensor<16x1xf32>
  // expected-error @below {{assign-layouts: a 1-D tile is needed as both slice1 and slice0}}
  %b = sj.expand_dims %xr {axis = 0 : i32} : tensor<16xf32> -> tensor<1x16xf32>
  return %a, %b : tensor<16x1xf32>, tensor<1x16xf32>
}

// -----

// A shifted tile sets the parent, not a larger tile beside it (a packed scan's [64, 8] ranking of
// its sequences beside [16, 16] time tiles): the emitter shifts only along an axis the layout
// holds whole in one warp, here 8 lanes (sj.shift_lanes) of runs of 2 along dim 1.
// CHECK: #blocked = #sj.blocked<spt = [1, 2], tpw = [4, 8], wpc = [4, 1]>
// CHECK-LABEL: func.func @shift_beside_larger
// CHECK: sj.shift {{.*}}sj.layouts = [#blocked]
func.func @shift_beside_larger(%x: !sj.ptr<f32>) -> (tensor<64x8xf32>, tensor<16x16xf32>) attributes {sj.kernel, sj.num_warps = 4 : i32, sj.shift_lanes = 8 : i32} {
  %w = arith.constant dense<0> : tensor<64x8xi32>
  %wide = sj.load %x[%w] : !sj.ptr<f32>, tensor<64x8xi32> -> tensor<64x8xf32>
  %o = arith.constant dense<0> : tensor<16x16xi32>
  %t = sj.load %x[%o] : !sj.ptr<f32>, tensor<16x16xi32> -> tensor<16x16xf32>
  %s = sj.shift %t, %t {axis = 1 : i32, amount = -1 : i32, period = 2 : i32} : tensor<16x16xf32>
  return %wide, %s : tensor<64x8xf32>, tensor<16x16xf32>
}
