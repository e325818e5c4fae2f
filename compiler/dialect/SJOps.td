// The sj dialect: Triton-style block programs over tiles. Tiles are builtin ranked tensors of
// static shape; elementwise math uses arith and math on tensors. These ops add what those lack:
// program ids, ranges, broadcasting, typed pointers with masked gathers and scatters, reductions.
#ifndef SSMJIT_SJ_OPS
#define SSMJIT_SJ_OPS

include "dialect/SJDialect.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def SJ_Ptr : Type<CPred<"::llvm::isa<::ssmjit::sj::PtrType>($_self)">, "sj pointer">;
def SJ_Int : AnyTypeOf<[I1, I32, I64, TensorOf<[I1, I32, I64]>]>;
def SJ_Index : AnyTypeOf<[I32, I64, TensorOf<[I32, I64]>]>;
def SJ_ScalarIndex : AnyTypeOf<[I32, I64]>;
def SJ_Float : AnyTypeOf<[F32, TensorOf<[F32]>]>;
def SJ_Mask : AnyTypeOf<[I1, TensorOf<[I1]>]>;
def SJ_Value : AnyTypeOf<[I1, I32, I64, F32, TensorOf<[I1, I32, I64, F32]>]>;

class SJ_Op<string mnemonic, list<Trait> traits = []> : Op<SJ_Dialect, mnemonic, traits>;

def SJ_ProgramIdOp : SJ_Op<"program_id", [Pure]> {
  let summary = "index of this program along a grid axis";
  let arguments = (ins I32Attr:$axis);
  let results = (outs I32:$result);
  let assemblyFormat = "$axis attr-dict `:` type($result)";
}

def SJ_RangeOp : SJ_Op<"range", [Pure]> {
  let summary = "the tile [0, 1, ..., n-1] (n = the result's size)";
  let results = (outs TensorOf<[I32, I64]>:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def SJ_SplatOp : SJ_Op<"splat", [Pure]> {
  let summary = "a tile with every element equal to a scalar";
  let arguments = (ins AnyTypeOf<[I1, I32, I64, F32]>:$src);
  let results = (outs TensorOf<[I1, I32, I64, F32]>:$result);
  let assemblyFormat = "$src attr-dict `:` type($src) `->` type($result)";
  let hasFolder = 1;
}

def SJ_ExpandDimsOp : SJ_Op<"expand_dims", [Pure]> {
  let summary = "insert a unit axis";
  let arguments = (ins TensorOf<[I1, I32, I64, F32]>:$src, I32Attr:$axis);
  let results = (outs TensorOf<[I1, I32, I64, F32]>:$result);
  let assemblyFormat = "$src attr-dict `:` type($src) `->` type($result)";
  let hasVerifier = 1;
}

def SJ_BroadcastOp : SJ_Op<"broadcast", [Pure]> {
  let summary = "repeat unit axes up to the result's shape";
  let arguments = (ins TensorOf<[I1, I32, I64, F32]>:$src);
  let results = (outs TensorOf<[I1, I32, I64, F32]>:$result);
  let assemblyFormat = "$src attr-dict `:` type($src) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def SJ_LoadOp : SJ_Op<"load", [MemoryEffects<[MemRead]>, AttrSizedOperandSegments]> {
  let summary = "gather ptr[offsets] where mask, else `other` (0 by default)";
  let description = [{
    Offsets are in elements. Float storage is widened to f32; integer storage is converted to
    the offsets' integer type. A scalar offset gives a scalar.
  }];
  let arguments = (ins SJ_Ptr:$ptr, SJ_Index:$offsets, Optional<SJ_Mask>:$mask,
                       Optional<SJ_Value>:$other);
  let results = (outs SJ_Value:$result);
  let assemblyFormat = [{
    $ptr `[` $offsets `]` (`mask` $mask^)? (`other` $other^)? attr-dict `:`
    type($ptr) `,` type($offsets) (`,` type($mask)^)? (`,` type($other)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def SJ_StoreOp : SJ_Op<"store", [MemoryEffects<[MemWrite]>]> {
  let summary = "scatter value into ptr[offsets] where mask (narrowing to the storage dtype)";
  let arguments = (ins SJ_Ptr:$ptr, SJ_Index:$offsets, SJ_Value:$value, Optional<SJ_Mask>:$mask);
  let assemblyFormat = [{
    $ptr `[` $offsets `]` `,` $value (`mask` $mask^)? attr-dict `:`
    type($ptr) `,` type($offsets) `,` type($value) (`,` type($mask)^)?
  }];
  let hasVerifier = 1;
}

def SJ_ReduceOp : SJ_Op<"reduce", [Pure]> {
  let summary = "reduce a tile along one axis (sum, max or min)";
  let description = [{
    With `weight` (kind sum, f32 only): the sum of src * weight along the axis, each product
    fused into the running sum (one fma an element). form-fma makes it from a sum of a product.
  }];
  let arguments = (ins TensorOf<[F32, I32, I64]>:$src, I32Attr:$axis, StrAttr:$kind,
                       Optional<TensorOf<[F32]>>:$weight);
  let results = (outs AnyTypeOf<[F32, I32, I64, TensorOf<[F32, I32, I64]>]>:$result);
  let assemblyFormat = "$src (`weight` $weight^)? attr-dict `:` type($src) (`,` type($weight)^)? `->` type($result)";
  let hasVerifier = 1;
}

def SJ_ShiftOp : SJ_Op<"shift", [Pure, AllTypesMatch<["cur", "fill", "result"]>]> {
  let summary = "a tile moved along an axis, the vacated places filled from a neighbour tile";
  let description = [{
    The sliding window of a tile streamed along `axis` (S elements long there): with
    `amount` = s > 0, result[i] = cur[i - s] for i >= s and fill[S + i - s] below (fill is the
    previous tile); with s < 0, result[i] = cur[i - s] for i - s < S and fill[i - s - S] above
    (fill is the next tile). 0 < |s| < S. The layout keeps the axis inside one warp.
    With `period` P (dividing S), the axis is cut into segments of P places, each moved on its
    own: S reads P above, and fill is the tile P places later (s < 0) or earlier (s > 0); 0 < |s|
    < P. When P is a thread's run along the axis, the shift is register moves only.
  }];
  let arguments = (ins TensorOf<[F32, I32, I64]>:$cur, TensorOf<[F32, I32, I64]>:$fill,
                       I32Attr:$axis, I32Attr:$amount, OptionalAttr<I32Attr>:$period);
  let results = (outs TensorOf<[F32, I32, I64]>:$result);
  let assemblyFormat = "$cur `,` $fill attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def SJ_ScanOp : SJ_Op<"scan", [RecursiveMemoryEffects, AttrSizedOperandSegments]> {
  let summary = "inclusive associative scan of k tiles along one axis, with the axis' totals";
  let description = [{
    result[i][..., t, ...] = x[0] (+) x[1] (+) ... (+) x[t] along `axis`, for k tiles of one
    shape combined elementwise by the `combine` region: block arguments (lhs_0..lhs_{k-1},
    rhs_0..rhs_{k-1}) scalars, yielding k scalars; it must be associative (lhs is the earlier
    element). `inits`, when given (k values shaped like the totals), come before the first
    element of the axis: result[i][..., t, ...] = init (+) x[0] (+) ... (+) x[t]. Results: the k
    scanned tiles, then the k totals (the whole axis combined, after the inits: tiles with `axis`
    dropped, scalars for 1-D tiles). The order of combination is fixed by the
    layout (each thread its contiguous run, then lanes, then warps), never by the data. With
    `reverse` the axis is walked from its last element to its first: result[i][..., t, ...] =
    x[S-1] (+) ... (+) x[t] (lhs the later element); the inits come after the axis' last
    element and the totals end at its first (adjoint recurrences of a backward pass).
  }];
  let arguments = (ins Variadic<TensorOf<[F32, I32, I64]>>:$srcs,
                       Variadic<AnyTypeOf<[F32, I32, I64, TensorOf<[F32, I32, I64]>]>>:$inits,
                       I32Attr:$axis, UnitAttr:$reverse);
  let results = (outs Variadic<AnyTypeOf<[F32, I32, I64, TensorOf<[F32, I32, I64]>]>>:$results);
  let regions = (region SizedRegion<1>:$combine);
  let hasVerifier = 1;
}

def SJ_YieldOp : SJ_Op<"yield", [Pure, Terminator, HasParent<"ScanOp">]> {
  let summary = "the combined values of an sj.scan combine region";
  let arguments = (ins Variadic<AnyTypeOf<[F32, I32, I64]>>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

def SJ_ReportErrorOp : SJ_Op<"report_error", [MemoryEffects<[MemWrite]>]> {
  let summary = "record the first device-side error: err[0..3] = code, a, b, c (first wins)";
  let arguments = (ins SJ_Ptr:$err, I64:$code, I64:$a, I64:$b, I64:$c);
  let assemblyFormat = "$err `,` $code `,` $a `,` $b `,` $c attr-dict `:` type($err)";
}

def SJ_ArriveLastOp : SJ_Op<"arrive_last", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "count this program's arrival at counter[offset]; true in the last of `count`";
  let description = [{
    Every thread of the program has finished its memory accesses above (a barrier and a fence
    come first); the program then adds one to the int32 counter. The one that brings it to
    `count` gets true and resets the counter to 0 (so the next launch finds it zero); the others
    get false. Lets the programs of a group hand the writes of data they all read to the last.
  }];
  let arguments = (ins SJ_Ptr:$counter, SJ_Index:$offset, SJ_Index:$count);
  let results = (outs I1:$result);
  let assemblyFormat = "$counter `[` $offset `]` `,` $count attr-dict `:` type($counter) `,` type($offset) `,` type($count)";
}

def SJ_TicketOp : SJ_Op<"ticket", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "this program's place among the programs that reach this op: counter[offset]++";
  let description = [{
    One thread adds one to the int32 counter and the program gets the old value (uniform).
    Programs take tickets in the order they start running, so a program that waits on the work
    of lower tickets waits only on programs already resident (no deadlock, whatever order the
    hardware dispatches the grid in). The counter must start at 0 for each launch.
  }];
  let arguments = (ins SJ_Ptr:$counter, SJ_Index:$offset);
  let results = (outs SJ_Index:$result);
  let assemblyFormat = "$counter `[` $offset `]` attr-dict `:` type($counter) `,` type($offset) `->` type($result)";
}

def SJ_WaitFlagOp : SJ_Op<"wait_flag", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "the program waits until the int32 flag[offset] is nonzero (acquire)";
  let description = [{
    One thread polls the flag with gpu-scope acquire loads, then every thread of the program
    passes a barrier: the writes the setter made before its set_flag are visible to all of them.
    Top level or a uniform branch.
  }];
  let arguments = (ins SJ_Ptr:$flag, SJ_Index:$offset);
  let assemblyFormat = "$flag `[` $offset `]` attr-dict `:` type($flag) `,` type($offset)";
}

def SJ_SetFlagOp : SJ_Op<"set_flag", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "after the program's accesses above, the int32 flag[offset] = 1 (release)";
  let description = [{
    Every thread of the program passes a barrier, then one thread sets the flag with a gpu-scope
    release, so a program that sees the flag (wait_flag) sees every write the program made
    before it. Top level or a uniform branch.
  }];
  let arguments = (ins SJ_Ptr:$flag, SJ_Index:$offset);
  let assemblyFormat = "$flag `[` $offset `]` attr-dict `:` type($flag) `,` type($offset)";
}

def SJ_SharedBufferOp : SJ_Op<"shared_buffer", [MemoryEffects<[MemAlloc]>]> {
  let summary = "a program's own buffer in shared memory, 16-byte aligned";
  let description = [{
    Loads and stores take it like a pointer argument. Tiles staged through it are read back in
    another thread's layout (a barrier in between): one conversion or global load per element
    for the whole program, where each thread would otherwise fetch what it needs itself.
    Not Pure: two buffers of one size are two buffers. Without `dynamic`: a static f32 array
    (48 KiB at most, the static limit). With `dynamic`: carved out of the kernel's one dynamic
    shared array (128-byte aligned), storage f32, f16 or bf16 (the pointer's element type;
    stores narrow, loads widen), the kernel's total recorded for the launch.
    With `within`: no memory of its own but a view of another dynamic buffer's bytes from
    `offset` (a multiple of 16), of its own storage type, for phases of a program that never use
    both at once (the program's barriers order them).
    With `swizzle` (32, 64 or 128): a 16-bit dynamic buffer in the XOR pattern of Hopper's
    tensor-core layouts, for a wgmma's b: the 16-byte chunk at byte address a lies at chunk
    (a >> 4) ^ ((a >> 7) & (swizzle / 16 - 1)), the buffer starting at a multiple of 1024 bytes.
    Loads and stores address it by the logical offsets (the emitter swizzles), in vectors that
    stay within a chunk.
  }];
  let arguments = (ins I64Attr:$size, UnitAttr:$dynamic, Optional<SJ_Ptr>:$within, OptionalAttr<I64Attr>:$offset,
                       OptionalAttr<I64Attr>:$swizzle);
  let results = (outs SJ_Ptr:$result);
  let assemblyFormat = "$size (`within` $within^ `at` $offset)? attr-dict `:` type($result) (`,` type($within)^)?";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    // The bytes its elements take in its storage type.
    int64_t getBytes();
  }];
}

def SJ_CopyAsyncOp : SJ_Op<"copy_async", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "start copying ptr[offsets] into smem[smem_offsets] (cp.async), 0 where masked";
  let description = [{
    An asynchronous copy of one tile of elements from global memory into a dynamic shared
    buffer of the same storage type (checked once specialised), bits unchanged; masked-off elements are written as zeros
    (a source size of 0). The copies a thread issued since its last sj.commit_group form one
    group; sj.wait_group waits for them. A thread reads its copies' data only after a wait, and
    other threads' after a wait and a barrier. Vectors too narrow for cp.async (below 4 bytes)
    are copied with a plain load and store, done before the wait.
  }];
  let arguments = (ins SJ_Ptr:$smem, SJ_Index:$smem_offsets, SJ_Ptr:$ptr, SJ_Index:$offsets,
                       Optional<SJ_Mask>:$mask);
  let assemblyFormat = [{
    $smem `[` $smem_offsets `]` `,` $ptr `[` $offsets `]` (`mask` $mask^)? attr-dict `:`
    type($smem) `,` type($smem_offsets) `,` type($ptr) `,` type($offsets) (`,` type($mask)^)?
  }];
  let hasVerifier = 1;
}

def SJ_CopyTileAsyncOp : SJ_Op<"copy_tile_async", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "start copying a row-major [rows, cols] tile into a shared buffer (cp.async)";
  let description = [{
    smem[smem_base + r * pitch + c] = ptr[base + r * row_stride + c] for r < rows_valid and
    c < cols_valid, 0 elsewhere, for r < rows and c < cols: the source's columns contiguous. The
    block's threads share the tile in vectors of `vec` elements (consecutive threads along a row),
    whatever the kernel's layout, so a warp's copies are whole 16-byte vectors into consecutive
    banks. The caller guarantees that base, row_stride and the pointer are aligned to `vec`
    elements. Grouped and waited for as sj.copy_async.
  }];
  let arguments = (ins SJ_Ptr:$smem, SJ_ScalarIndex:$smem_base, SJ_Ptr:$ptr, SJ_ScalarIndex:$base,
                       SJ_ScalarIndex:$row_stride, SJ_ScalarIndex:$rows_valid, SJ_ScalarIndex:$cols_valid, I64Attr:$rows, I64Attr:$cols, I64Attr:$pitch,
                       I64Attr:$vec);
  let assemblyFormat = [{
    $smem `[` $smem_base `]` `,` $ptr `[` $base `]` `row_stride` $row_stride `valid` $rows_valid `,` $cols_valid
    attr-dict `:` type($smem) `,` type($smem_base) `,` type($ptr) `,` type($base) `,` type($row_stride) `,`
    type($rows_valid) `,` type($cols_valid)
  }];
  let hasVerifier = 1;
}

def SJ_StoreTileOp : SJ_Op<"store_tile", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "store a row-major [rows, cols] tile from a shared buffer to memory in vectors";
  let description = [{
    ptr[base + r * row_stride + c] = smem[smem_base + r * pitch + c] for r < rows_valid and
    c < cols_valid, nothing elsewhere, for r < rows and c < cols: the destination's columns
    contiguous. The block's threads share the tile in vectors of `vec` elements (consecutive
    threads along a row), whatever the kernel's layout, so a warp's stores are whole 16-byte
    vectors of whole sectors. The caller guarantees that base, row_stride and the pointer are
    aligned to `vec` elements, and a barrier between the writes of the tile to smem and this op.
  }];
  let arguments = (ins SJ_Ptr:$smem, SJ_ScalarIndex:$smem_base, SJ_Ptr:$ptr, SJ_ScalarIndex:$base,
                       SJ_ScalarIndex:$row_stride, SJ_ScalarIndex:$rows_valid, SJ_ScalarIndex:$cols_valid, I64Attr:$rows, I64Attr:$cols, I64Attr:$pitch,
                       I64Attr:$vec);
  let assemblyFormat = [{
    $smem `[` $smem_base `]` `,` $ptr `[` $base `]` `row_stride` $row_stride `valid` $rows_valid `,` $cols_valid
    attr-dict `:` type($smem) `,` type($smem_base) `,` type($ptr) `,` type($base) `,` type($row_stride) `,`
    type($rows_valid) `,` type($cols_valid)
  }];
  let hasVerifier = 1;
}

def SJ_CommitGroupOp : SJ_Op<"commit_group", [MemoryEffects<[MemWrite]>]> {
  let summary = "close this thread's group of asynchronous copies (cp.async.commit_group)";
  let assemblyFormat = "attr-dict";
}

def SJ_WaitGroupOp : SJ_Op<"wait_group", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "wait until at most `pending` of this thread's newest copy groups are in flight";
  let arguments = (ins I32Attr:$pending);
  let assemblyFormat = "$pending attr-dict";
  let hasVerifier = 1;
}

def SJ_BarrierOp : SJ_Op<"barrier", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "every thread of the program reaches this point before any goes on";
  let description = [{
    Orders one thread's accesses above before another thread's below (tiles of different
    shapes or layouts spread the same elements over different threads). With `async_proxy`,
    each thread first fences its shared-memory writes to the async proxy, so that a wgmma below
    reads them (fence.proxy.async).
  }];
  let arguments = (ins UnitAttr:$async_proxy);
  let assemblyFormat = "attr-dict";
}

def SJ_ReturnIfOp : SJ_Op<"return_if", [MemoryEffects<[MemWrite]>]> {
  let summary = "end this program if the (uniform) condition holds";
  let arguments = (ins I1:$cond);
  let assemblyFormat = "$cond attr-dict";
}

def SJ_DotOp : SJ_Op<"dot", [MemoryEffects<[MemRead]>]> {
  let summary = "acc + a . b on the tensor cores, b read from memory";
  let description = [{
    a: an [M, K] tile, acc and the result [M, N]; b[k][n] = ptr[offset + k * stride_k +
    n * stride_n] for k < K, n < N (b comes from memory because every warp needs all of it).
    K and N are multiples of 8. Each operand is taken as a sum of `a_pieces` / `b_pieces` bf16
    terms, each the rounding of what the earlier ones left (1 is exact for bf16 data, 2 for fp16,
    3 for any f32 in the normal range); the products of the terms whose weights reach 2^-24 go
    through bf16 mma with f32 accumulation, smallest first. The kernel's parent layout is then
    the mma accumulator's (assign-layouts): a's registers are the A fragments.
    b from a dynamic shared buffer of 16-bit storage is read with ldmatrix, its words the B
    fragments as they are (b_pieces 1), the mma taking b's type (bf16 or f16; a is split into
    terms of that type): one stride is the constant 1 (.trans when it is stride_n), the other a
    constant multiple of 8, K and N multiples of 16, and the offset a multiple of 8 (checked
    when constant), so every 8-element row ldmatrix reads is 16-byte aligned.
    b in a swizzled buffer (sj.shared_buffer's `swizzle`) is read by wgmma instead (sm_90a),
    through a matrix descriptor, once for the block's one warpgroup (4 warps along M): rows of the
    swizzle's bytes, k- or n-contiguous (strides (1, row) with K up to a row, or (row, 1) with N
    a row), the offset a multiple of 8 rows.
  }];
  let arguments = (ins TensorOf<[F32]>:$a, SJ_Ptr:$ptr, AnyTypeOf<[I32, I64]>:$offset,
                       AnyTypeOf<[I32, I64]>:$stride_k, AnyTypeOf<[I32, I64]>:$stride_n,
                       TensorOf<[F32]>:$acc, I32Attr:$a_pieces, I32Attr:$b_pieces);
  let results = (outs TensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $a `,` $ptr `[` $offset `,` $stride_k `,` $stride_n `]` `,` $acc attr-dict `:`
    type($a) `,` type($ptr) `,` type($offset) `,` type($stride_k) `,` type($stride_n) `,`
    type($acc) `->` type($result)
  }];
  let hasVerifier = 1;
}

def SJ_DotSharedOp : SJ_Op<"dot_shared", [MemoryEffects<[MemRead]>]> {
  let summary = "acc + a . b on the tensor cores, a and b read from 16-bit shared buffers";
  let description = [{
    a[m][k] = a_ptr[a_offset + m * a_stride_m + k * a_stride_k] for m < M (acc's rows), k < `k`;
    b as sj.dot's from a 16-bit shared buffer (same storage type as a's): both read with
    ldmatrix, their words the fragments as stored, the mma in their type (bf16 or f16). One of
    a's strides is the constant 1 (.trans when it is a_stride_m: a transposed operand such as
    x^T), the other a constant multiple of 8; M a multiple of 8, `k` and N of 16. The kernel's
    parent layout is the mma accumulator's, with column runs of a pair. b in a swizzled buffer as
    sj.dot's (wgmma); a never.
  }];
  let arguments = (ins SJ_Ptr:$a_ptr, AnyTypeOf<[I32, I64]>:$a_offset, AnyTypeOf<[I32, I64]>:$a_stride_m,
                       AnyTypeOf<[I32, I64]>:$a_stride_k, SJ_Ptr:$ptr, AnyTypeOf<[I32, I64]>:$offset,
                       AnyTypeOf<[I32, I64]>:$stride_k, AnyTypeOf<[I32, I64]>:$stride_n,
                       TensorOf<[F32]>:$acc, I64Attr:$k);
  let results = (outs TensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $a_ptr `[` $a_offset `,` $a_stride_m `,` $a_stride_k `]` `,` $ptr `[` $offset `,` $stride_k `,` $stride_n `]`
    `,` $acc attr-dict `:` type($a_ptr) `,` type($a_offset) `,` type($a_stride_m) `,` type($a_stride_k) `,`
    type($ptr) `,` type($offset) `,` type($stride_k) `,` type($stride_n) `,` type($acc) `->` type($result)
  }];
  let hasVerifier = 1;
}

#endif
