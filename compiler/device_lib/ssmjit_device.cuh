// ssmjit device library: the small set of helpers generated kernels call. Embedded in libssmjit
// and handed to NVRTC as an in-memory header; its hash is part of every cache key. Needs no CUDA
// headers (NVRTC's built-ins only).
#pragma once

struct ssm_f16 {
  unsigned short x;
};
struct ssm_bf16 {
  unsigned short x;
};

// ---- conversions: storage <-> compute (fp32 math; round to nearest even on the way out) ------
__device__ __forceinline__ float ssm_to_float(float v) { return v; }
__device__ __forceinline__ float ssm_to_float(ssm_bf16 v) { return __uint_as_float(((unsigned)v.x) << 16); }
__device__ __forceinline__ float ssm_to_float(ssm_f16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x));
  return f;
}
// One MUFU op: results below 2^-126 flush to zero (exp2f adds a denormal fix-up around it). The
// scan's decays exp2(dt A log2e) <= 1 lose nothing a float32 state could hold.
__device__ __forceinline__ float ssm_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
template <typename T>
__device__ __forceinline__ T ssm_from_float(float v);
template <>
__device__ __forceinline__ float ssm_from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ ssm_bf16 ssm_from_float<ssm_bf16>(float v) {
  ssm_bf16 r;
#if __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.x) : "f"(v));
#else
  unsigned u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.x = 0x7fc0;
    return r;
  }  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  r.x = (unsigned short)(u >> 16);
#endif
  return r;
}
template <>
__device__ __forceinline__ ssm_f16 ssm_from_float<ssm_f16>(float v) {
  ssm_f16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(v));
  return r;
}

// ---- scalar accesses ----------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ float ssm_load(const T* p) {
  return ssm_to_float(*p);
}
__device__ __forceinline__ long long ssm_load(const long long* p) { return *p; }
__device__ __forceinline__ int ssm_load(const int* p) { return *p; }
template <typename T, typename V>
__device__ __forceinline__ void ssm_store(T* p, V v) {
  *p = ssm_from_float<T>((float)v);
}
template <typename V>
__device__ __forceinline__ void ssm_store(long long* p, V v) {
  *p = (long long)v;
}
template <typename V>
__device__ __forceinline__ void ssm_store(int* p, V v) {
  *p = (int)v;
}

// ---- vector accesses: V consecutive elements in one instruction (the vectorizer proved the
// address aligned to V * sizeof(T)) ----------------------------------------------------------
template <int Bytes>
struct ssm_raw;
template <>
struct ssm_raw<16> {
  typedef uint4 type;
};
template <>
struct ssm_raw<8> {
  typedef uint2 type;
};
template <>
struct ssm_raw<4> {
  typedef unsigned int type;
};
template <>
struct ssm_raw<2> {
  typedef unsigned short type;
};

template <typename T>
struct ssm_bits {
  typedef T type;
};

template <int V, typename D, typename T>
__device__ __forceinline__ void ssm_ld(D* dst, const T* p) {
  if constexpr (V == 1) {
    dst[0] = (D)ssm_load(p);
  } else {
    typedef typename ssm_raw<V * sizeof(T)>::type R;
    union {
      R r;
      T e[V];
    } u;
    u.r = *reinterpret_cast<const R*>(p);
#pragma unroll
    for (int k = 0; k < V; ++k) dst[k] = (D)ssm_load(&u.e[k]);
  }
}

// V consecutive elements as stored, no conversion (16-bit loads convert at each use).
template <int V, typename T>
__device__ __forceinline__ void ssm_ld_raw(T* dst, const T* p) {
  if constexpr (V == 1) {
    dst[0] = *p;
  } else {
    typedef typename ssm_raw<V * sizeof(T)>::type R;
    union {
      R r;
      T e[V];
    } u;
    u.r = *reinterpret_cast<const R*>(p);
#pragma unroll
    for (int k = 0; k < V; ++k) dst[k] = u.e[k];
  }
}

// V >= 2 consecutive 16-bit elements, each kept as the 32-bit word that holds it (element k in
// half k % 2): ssm_word_to_float then takes one shift or mask, not an extract and a shift.
template <int V, typename T>
__device__ __forceinline__ void ssm_ld_words(unsigned* dst, const T* p) {
  static_assert(V >= 2 && sizeof(T) == 2, "words of 16-bit elements");
  typedef typename ssm_raw<V * 2>::type R;
  union {
    R r;
    unsigned w[V / 2];
  } u;
  u.r = *reinterpret_cast<const R*>(p);
#pragma unroll
  for (int k = 0; k < V; ++k) dst[k] = u.w[k / 2];
}
template <typename T>
__device__ __forceinline__ float ssm_word_to_float(unsigned w, int half);
template <>
__device__ __forceinline__ float ssm_word_to_float<ssm_bf16>(unsigned w, int half) {
  return __uint_as_float(half ? (w & 0xffff0000u) : (w << 16));
}
template <>
__device__ __forceinline__ float ssm_word_to_float<ssm_f16>(unsigned w, int half) {
  float f;
  if (half)
    asm("{ .reg .f16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, hi; }" : "=f"(f) : "r"(w));
  else
    asm("{ .reg .f16 lo, hi; mov.b32 {lo, hi}, %1; cvt.f32.f16 %0, lo; }" : "=f"(f) : "r"(w));
  return f;
}

// Two floats rounded to 16 bits in one 32-bit word, lo first in memory: one cvt for both
// (sm_80 and later; one cvt each before).
template <typename T>
__device__ __forceinline__ unsigned ssm_pack2(float lo, float hi) {
  return (unsigned)ssm_from_float<T>(lo).x | ((unsigned)ssm_from_float<T>(hi).x << 16);
}
#if __CUDA_ARCH__ >= 800
template <>
__device__ __forceinline__ unsigned ssm_pack2<ssm_bf16>(float lo, float hi) {
  unsigned w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}
template <>
__device__ __forceinline__ unsigned ssm_pack2<ssm_f16>(float lo, float hi) {
  unsigned w;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}
#endif

// sj.dot's operands: x and y as P bf16 terms each, term i the rounding of what terms 0..i-1 left
// (3 terms hold any normal f32 exactly), packed x low, y high: an mma fragment register per term.
template <int P>
__device__ __forceinline__ void ssm_bf16_pieces(float x, float y, unsigned* out) {
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const unsigned w = ssm_pack2<ssm_bf16>(x, y);
    out[i] = w;
    x -= __uint_as_float(w << 16);
    y -= __uint_as_float(w & 0xffff0000u);
  }
}
// c += a . b, one mma.m16n8k16 (row.col, bf16 in, f32 accumulators; sm_80 and later).
__device__ __forceinline__ void ssm_mma_bf16(float& c0, float& c1, float& c2, float& c3, unsigned a0, unsigned a1,
                                             unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// sj.dot's a as P f16 terms (an f16 mma, b in f16): as ssm_bf16_pieces, each term the f16
// rounding of what the earlier ones left (in f16's range: beyond 65504 a term is infinite).
template <int P>
__device__ __forceinline__ void ssm_f16_pieces(float x, float y, unsigned* out) {
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const unsigned w = ssm_pack2<ssm_f16>(x, y);
    out[i] = w;
    x -= ssm_word_to_float<ssm_f16>(w, 0);
    y -= ssm_word_to_float<ssm_f16>(w, 1);
  }
}
// c += a . b, one mma.m16n8k16 with f16 inputs and f32 accumulators.
__device__ __forceinline__ void ssm_mma_f16(float& c0, float& c1, float& c2, float& c3, unsigned a0, unsigned a1,
                                            unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// ---- shared memory by address: ldmatrix and cp.async (sm_80 and later) ---------------------
// Volatile with a memory clobber: they read or write shared memory the compiler does not see,
// so they stay between the barriers and waits around them.
__device__ __forceinline__ unsigned ssm_smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// Four 8x8 matrices of 16-bit elements, lane 8 j + i giving the 16-byte row i of matrix j; r[j]
// is this lane's pair of matrix j (row lane / 4, columns 2 (lane % 4) + {0, 1}; transposed:
// rows 2 (lane % 4) + {0, 1} of column lane / 4).
template <bool Trans>
__device__ __forceinline__ void ssm_ldmatrix_x4(unsigned* r, const void* row) {
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(ssm_smem_addr(row))
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(ssm_smem_addr(row))
                 : "memory");
}
// Bytes (4, 8 or 16, the addresses aligned to it) from global to shared memory, asynchronously:
// the first n bytes read from src and zeros after them (n 0 reads nothing); ssm_cp_async reads
// all of them, or none when !pred.
template <int Bytes>
__device__ __forceinline__ void ssm_cp_async_n(void* dst, const void* src, int n) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  const unsigned d = ssm_smem_addr(dst);
  if constexpr (Bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(n) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(d), "l"(src), "n"(Bytes), "r"(n) : "memory");
}
// All Bytes of src.
template <int Bytes>
__device__ __forceinline__ void ssm_cp_async_full(void* dst, const void* src) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  const unsigned d = ssm_smem_addr(dst);
  if constexpr (Bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(d), "l"(src), "n"(Bytes) : "memory");
}
template <int Bytes>
__device__ __forceinline__ void ssm_cp_async(void* dst, const void* src, bool pred) {
  ssm_cp_async_n<Bytes>(dst, src, pred ? Bytes : 0);
}
__device__ __forceinline__ void ssm_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void ssm_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// ---- Hopper warpgroup mma (wgmma, sm_90a) ---------------------------------------------------
// A swizzled shared buffer's element offset (16-bit elements): the 16-byte chunk index XORed
// with the 128-byte line index's low bits, as the tensor cores' 32/64/128-byte patterns place
// them (Mask = swizzle / 16 - 1; the buffer 1024-byte aligned).
template <int Mask, typename I>
__device__ __forceinline__ I ssm_swizzle(I off) {
  return off ^ (((off >> 6) & Mask) << 3);
}
// The matrix descriptor of an operand at p in rows of Swizzle bytes in that pattern (k- or
// n-contiguous, one pattern wide), 8-row groups 8 Swizzle bytes apart (the stride byte offset);
// the leading byte offset is unused in these layouts. Adding j to it moves the start 16 j bytes.
template <int Swizzle>
__device__ __forceinline__ unsigned long long ssm_wgmma_desc(const void* p) {
  constexpr unsigned long long mode = Swizzle == 128 ? 1 : Swizzle == 64 ? 2 : 3;
  const unsigned long long a = ssm_smem_addr(p);
  return ((a & 0x3ffff) >> 4) | (1ull << 16) | ((unsigned long long)(8 * Swizzle >> 4) << 32) | (mode << 62);
}
// The async group's edges: the fence before wgmmas that read registers written since the last
// one, the commit, the wait. A register operand of a wgmma is neither read nor written by other
// instructions until the wait; ssm_wgmma_hold makes an accumulator register a value the
// compiler may not move across the points it stands at.
__device__ __forceinline__ void ssm_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void ssm_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void ssm_wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
__device__ __forceinline__ void ssm_wgmma_hold(float& r) { asm volatile("" : "+f"(r)::"memory"); }
// Shared-memory writes above reach the async proxy (a wgmma's operand reads) after a barrier.
__device__ __forceinline__ void ssm_fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// A copy narrower than cp.async takes: V elements now, zeros when !pred.
template <int V, typename T>
__device__ __forceinline__ void ssm_copy_sync(T* dst, const T* src, bool pred) {
#pragma unroll
  for (int k = 0; k < V; ++k) dst[k] = pred ? src[k] : T{};
}

template <int V, typename T, typename S>
__device__ __forceinline__ void ssm_st(T* p, const S* src) {
  if constexpr (V == 1) {
    ssm_store(p, src[0]);
  } else if constexpr (sizeof(T) == 2) {  // bf16 / f16: pairs
    typedef typename ssm_raw<V * sizeof(T)>::type R;
    union {
      R r;
      unsigned w[V / 2];
    } u;
#pragma unroll
    for (int k = 0; k < V / 2; ++k) u.w[k] = ssm_pack2<T>((float)src[2 * k], (float)src[2 * k + 1]);
    *reinterpret_cast<R*>(p) = u.r;
  } else {
    typedef typename ssm_raw<V * sizeof(T)>::type R;
    union {
      R r;
      T e[V];
    } u;
#pragma unroll
    for (int k = 0; k < V; ++k) ssm_store(&u.e[k], src[k]);
    *reinterpret_cast<R*>(p) = u.r;
  }
}

// ---- last arrival of a group of programs (sj.arrive_last) ----------------------------------
// Every thread's accesses above are done (barrier), made visible device-wide (fence), then one
// thread counts the program in; the program that completes the count resets it for the next
// launch and sees the others' writes (fence after).
template <typename T, typename I>
__device__ __forceinline__ bool ssm_arrive_last(T* counter, I count) {
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const int prev = atomicAdd(reinterpret_cast<int*>(counter), 1);
    last = prev == (int)count - 1;
    if (last) {
      atomicExch(reinterpret_cast<int*>(counter), 0);
      __threadfence();
    }
  }
  __syncthreads();
  return last != 0;
}

// ---- chains of programs (sj.ticket, sj.wait_flag, sj.set_flag) ----------------------------
// A program's ticket: its place in the order programs get here (one thread's atomic, shared).
template <typename T>
__device__ __forceinline__ int ssm_ticket(T* counter) {
  __shared__ int ticket;
  if (threadIdx.x == 0) ticket = atomicAdd(reinterpret_cast<int*>(counter), 1);
  __syncthreads();
  return ticket;
}

// One thread polls with gpu-scope acquire loads; the barrier hands what it acquired to the rest.
template <typename T>
__device__ __forceinline__ void ssm_wait_flag(const T* flag) {
  if (threadIdx.x == 0) {
    const int* f = reinterpret_cast<const int*>(flag);
    int v = 0;
    do {
      asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
    } while (v == 0);
  }
  __syncthreads();
}

// Every thread's writes above are ordered before one thread's gpu-scope release of the flag (the
// barrier, then a cumulative release fence).
template <typename T>
__device__ __forceinline__ void ssm_set_flag(T* flag) {
  __syncthreads();
  if (threadIdx.x == 0) {
    int* f = reinterpret_cast<int*>(flag);
    asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(f), "r"(1) : "memory");
  }
}

// ---- device-side error record: err[0..3] = code, a, b, c; the first error wins --------------
__device__ __forceinline__ void ssm_report_error(long long* err, long long code, long long a, long long b,
                                                 long long c) {
  if (threadIdx.x != 0) return;
  if (atomicCAS(reinterpret_cast<unsigned long long*>(err), 0ull, (unsigned long long)code) == 0ull) {
    err[1] = a;
    err[2] = b;
    err[3] = c;
  }
}
