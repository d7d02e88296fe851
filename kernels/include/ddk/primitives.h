// ddk device primitives: the one header kernel source is written against.
//
// The same kernel source compiles
//   * with nvcc for the GPU (sm_80, sm_89, sm_90, sm_120): every primitive is inline PTX or a CUDA
//     intrinsic, using only mma.sync m16n8k16 (bf16 in, fp32 accumulate), ldmatrix, cp.async, warp
//     shuffles and, from sm_90, cluster barriers and ld.shared::cluster; or
//   * with g++ -std=c++20 -DDDK_EMULATE for the host emulation (kernels/emu/): indices, shared memory,
//     barriers and warp collectives go through the emulation runtime, whose warp collectives rebuild
//     the warp-wide operands from the per-lane fragments with the PTX ISA layouts.
//
// Fragment layouts (PTX ISA 8.7, section "Warp Level Matrix Multiply-Accumulate Instructions",
// subsection "Matrix Fragments for mma.m16n8k16 with floating point type", and the "ldmatrix"
// instruction description, "Warp-level matrix load instruction: ldmatrix"):
//   groupID = lane >> 2, threadID_in_group = lane % 4 (g and t below);
//   A (16x16, .row): a[0] = {A[g][2t], A[g][2t+1]},   a[1] = {A[g+8][2t], A[g+8][2t+1]},
//                    a[2] = {A[g][2t+8], A[g][2t+9]}, a[3] = {A[g+8][2t+8], A[g+8][2t+9]};
//   B (16x8, .col):  b[0] = {B[2t][g], B[2t+1][g]},   b[1] = {B[2t+8][g], B[2t+9][g]};
//   C, D (16x8 f32): c[0] = C[g][2t], c[1] = C[g][2t+1], c[2] = C[g+8][2t], c[3] = C[g+8][2t+1];
//   a .b32 register {x, y} holds x in its lower 16 bits (the lower column / row index);
//   ldmatrix .m8n8 .b16: lane l supplies the address of row l%8 of matrix l/8 (x2: lanes 0-15 are
//   used); register i of lane l receives row l/4, columns 2(l%4) and 2(l%4)+1 of matrix i (of its
//   transpose with .trans).
//
// Global and shared memory: kernel code reads and writes both only through ld_global / st_global /
// ld_shared / st_shared (and cp_async_16, cp_async_4, ldmatrix_*, ld_cluster, st_generic, ld_global_cg,
// atomic_add_global), so the emulation sees every access.
//
// API (namespace ddk). In the emulation the collectives and barriers take a trailing defaulted
// std::source_location so divergence reports can name call sites; kernel code never passes it.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>


#if defined(DDK_EMULATE)
// ------------------------------------------------------------------------------------------------
// Host emulation
// ------------------------------------------------------------------------------------------------
#include "../../emu/runtime.h"

#include <stdexcept>

#define DDK_DEVICE inline
#define DDK_DEVICE_NOINLINE inline
#define DDK_GLOBAL
#define DDK_HOST_DEVICE inline
#define DDK_LAUNCH_BOUNDS(threads, min_blocks)

#elif defined(__CUDACC__)
// ------------------------------------------------------------------------------------------------
// CUDA
// ------------------------------------------------------------------------------------------------
#include <cuda_runtime.h>

#define DDK_DEVICE __device__ __forceinline__
// A device function kept out of line: its registers are not added to those of its caller's live ranges.
#define DDK_DEVICE_NOINLINE __device__ __noinline__
#define DDK_GLOBAL __global__
#define DDK_HOST_DEVICE __host__ __device__ __forceinline__
// ptxas fits the registers to `threads` per block, `min_blocks` blocks per SM.
#define DDK_LAUNCH_BOUNDS(threads, min_blocks) __launch_bounds__(threads, min_blocks)

#else
#error "ddk/primitives.h: compile with nvcc, or define DDK_EMULATE for the host emulation"
#endif

namespace ddk {

// ---------------------------------------------------------------- pure helpers (both worlds) ----

// The stored value's parameter of st_global / st_shared takes T from the pointer only (C++17's nvcc
// builds lack std::type_identity).
template <class T>
struct nondeduced_type {
  using type = T;
};
template <class T>
using nondeduced = typename nondeduced_type<T>::type;

DDK_HOST_DEVICE std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

DDK_HOST_DEVICE float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// fp32 -> bf16, round to nearest even; a NaN stays a NaN (quiet). On the device this is
// cvt.rn.bf16.f32, whose NaN result is the canonical NaN; on the host the sign and the upper payload
// bits are kept and the quiet bit is set. Every non-NaN input gives the same bits on both.
DDK_HOST_DEVICE std::uint16_t float_to_bf16(float f) {
#if defined(__CUDA_ARCH__)
  std::uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
#endif
}

DDK_HOST_DEVICE float bf16_to_float(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

// Two floats -> one .b32 register of two bf16: `lo` in bits 0-15, `hi` in bits 16-31.
DDK_HOST_DEVICE std::uint32_t pack_bf16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  std::uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<std::uint32_t>(float_to_bf16(lo)) | (static_cast<std::uint32_t>(float_to_bf16(hi)) << 16);
#endif
}

// fp32 -> IEEE fp16, round to nearest even, subnormals kept, overflow to infinity, a NaN stays a NaN. On the
// device cvt.rn.f16.f32 (canonical NaN); on the host the same rounding by integer arithmetic, so every
// non-NaN input gives the same bits on both.
DDK_HOST_DEVICE std::uint16_t float_to_f16(float f) {
#if defined(__CUDA_ARCH__)
  std::uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x47800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65536 (and infinity)
  if (a >= 0x38800000u) {  // a normal fp16 (>= 2^-14): drop 13 mantissa bits, rebias the exponent by 112
    const std::uint32_t rounded = a + 0x0fffu + ((a >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
  }
  const std::uint32_t exponent = a >> 23;
  if (exponent < 102) return static_cast<std::uint16_t>(sign);  // below 2^-25: rounds to zero
  const std::uint32_t mantissa = (a & 0x7fffffu) | 0x800000u, shift = 126 - exponent;  // units of 2^-24
  std::uint32_t q = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u))) ++q;
  return static_cast<std::uint16_t>(sign | q);
#endif
}

DDK_HOST_DEVICE float f16_to_float(std::uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 31) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    const float tiny = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // mantissa * 2^-24, exact
    return sign != 0 ? -tiny : tiny;
  }
  return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
#endif
}

// Two floats -> one .b32 register of two fp16: `lo` in bits 0-15, `hi` in bits 16-31.
DDK_HOST_DEVICE std::uint32_t pack_f16x2(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  std::uint32_t r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<std::uint32_t>(float_to_f16(lo)) | (static_cast<std::uint32_t>(float_to_f16(hi)) << 16);
#endif
}

// 2^x by the SFU alone (ex2.approx.ftz: about 2 ULP), subnormal inputs and results flushed to zero: exp2f's
// subnormal handling cost 3 more instructions an exponential, about 50 a warp a key tile (ncu, sm_90). The
// emulation rounds correctly and flushes alike; a flushed weight (below 2^-126) cannot move a bf16 output.
DDK_HOST_DEVICE float fast_exp2(float x) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
#else
  const float r = std::exp2(std::fabs(x) < FLT_MIN ? 0.f : x);
  return r < FLT_MIN ? 0.f : r;
#endif
}

#if defined(DDK_EMULATE)
// ================================================================ host emulation primitives ======

using emu::Site;

DDK_DEVICE unsigned thread_idx_x() { return emu::detail::view("thread_idx_x").tid; }
DDK_DEVICE unsigned thread_idx_x_here() { return emu::detail::view("thread_idx_x_here").tid; }
DDK_DEVICE unsigned block_idx_x() { return emu::detail::view("block_idx_x").bx; }
DDK_DEVICE unsigned block_idx_y() { return emu::detail::view("block_idx_y").by; }
DDK_DEVICE unsigned block_idx_z() { return emu::detail::view("block_idx_z").bz; }
DDK_DEVICE unsigned block_dim_x() { return emu::detail::view("block_dim_x").block_dim; }
DDK_DEVICE unsigned grid_dim_x() { return emu::detail::view("grid_dim_x").gx; }
DDK_DEVICE unsigned grid_dim_y() { return emu::detail::view("grid_dim_y").gy; }
DDK_DEVICE unsigned grid_dim_z() { return emu::detail::view("grid_dim_z").gz; }
DDK_DEVICE unsigned lane_id() { return emu::detail::view("lane_id").lane; }
DDK_DEVICE unsigned warp_id() { return emu::detail::view("warp_id").warp; }

// The block's dynamic shared memory: 128-byte aligned, filled with 0xCD at the start of every block.
DDK_DEVICE char* dynamic_smem() { return emu::detail::view("dynamic_smem").smem; }

DDK_DEVICE void sync_block(Site site = Site::current()) { emu::detail::sync_block(site); }

// Thread-block clusters (LaunchOptions::cluster_x; a launch without clusters is clusters of one CTA).
DDK_DEVICE unsigned cluster_ctarank() { return emu::detail::view("cluster_ctarank").cluster_rank; }
DDK_DEVICE unsigned cluster_nctarank() { return emu::detail::view("cluster_nctarank").cluster_size; }

// Stops the launch on a state the kernel must never reach (the emulation: a kernel exception naming it).
[[noreturn]] inline void trap(const char* why) { throw std::logic_error(why); }

// barrier.cluster.arrive.release + wait.acquire: every thread of every CTA of the cluster, and what each
// wrote to its shared memory before it is visible to the others' ld_cluster after it.
DDK_DEVICE void sync_cluster(Site site = Site::current()) { emu::detail::sync_cluster(site); }

// sync_cluster in two halves, with work between that the barrier's latency hides. cluster_arrive: a block
// barrier, then the CTA's arrival (barrier.cluster.arrive.release): what its threads wrote to its shared
// memory, and read of the others', before it is released to the cluster. cluster_wait
// (barrier.cluster.wait.acquire): every CTA of the cluster has arrived; what they released is visible. A
// CTA's accesses between its two halves are ordered by neither: it must not write what the others may still
// read, nor read the others' memory, until it has waited. Arrive once before each wait, every thread.
DDK_DEVICE void cluster_arrive(Site site = Site::current()) { emu::detail::cluster_arrive(site); }
DDK_DEVICE void cluster_wait(Site site = Site::current()) { emu::detail::cluster_wait(site); }

// The T at p's offset in the shared memory of CTA `rank` of this cluster (mapa + ld.shared::cluster); p
// points into the caller's own dynamic shared memory, T is 4, 8 or 16 bytes and p aligned to it.
template <class T>
DDK_DEVICE T ld_cluster(const T* p, unsigned rank, Site site = Site::current()) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16);
  T v;
  std::memcpy(&v, emu::detail::cluster_map(p, rank, sizeof(T), site), sizeof(T));
  return v;
}

DDK_DEVICE float shfl_xor(float v, int lane_mask, Site site = Site::current()) {
  float r;
  emu::detail::warp_collective(emu::detail::Coll::ShflXor,
                               {&v, nullptr, nullptr, &r, static_cast<std::uint32_t>(lane_mask)}, site);
  return r;
}

DDK_DEVICE int shfl_xor(int v, int lane_mask, Site site = Site::current()) {
  int r;
  emu::detail::warp_collective(emu::detail::Coll::ShflXor,
                               {&v, nullptr, nullptr, &r, static_cast<std::uint32_t>(lane_mask)}, site);
  return r;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d = A·B + C; d may alias c.
DDK_DEVICE void mma_bf16_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],
                                  const float (&c)[4], Site site = Site::current()) {
  emu::detail::warp_collective(emu::detail::Coll::Mma, {a, b, c, d, 0u}, site);
}

DDK_DEVICE void ldmatrix_x4(std::uint32_t (&r)[4], const void* smem_row_ptr, Site site = Site::current()) {
  emu::detail::warp_collective(emu::detail::Coll::LdmX4, {smem_row_ptr, nullptr, nullptr, r, 0u}, site);
}

DDK_DEVICE void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* smem_row_ptr, Site site = Site::current()) {
  emu::detail::warp_collective(emu::detail::Coll::LdmX4Trans, {smem_row_ptr, nullptr, nullptr, r, 0u}, site);
}

DDK_DEVICE void ldmatrix_x2(std::uint32_t (&r)[2], const void* smem_row_ptr, Site site = Site::current()) {
  emu::detail::warp_collective(emu::detail::Coll::LdmX2, {smem_row_ptr, nullptr, nullptr, r, 0u}, site);
}

DDK_DEVICE void ldmatrix_x2_trans(std::uint32_t (&r)[2], const void* smem_row_ptr, Site site = Site::current()) {
  emu::detail::warp_collective(emu::detail::Coll::LdmX2Trans, {smem_row_ptr, nullptr, nullptr, r, 0u}, site);
}

// cp.async.cg.shared.global, 16 bytes; when !valid the 16 bytes are zero-filled and gmem_src is not
// read. The copy is queued and happens when a later wait releases its commit group.
DDK_DEVICE void cp_async_16(void* smem_dst, const void* gmem_src, bool valid, Site site = Site::current()) {
  emu::detail::cp_async(smem_dst, gmem_src, 16, valid, site);
}

// cp.async.ca.shared.global, 4 bytes (both addresses 4-byte aligned), likewise: in the same commit groups.
DDK_DEVICE void cp_async_4(void* smem_dst, const void* gmem_src, bool valid, Site site = Site::current()) {
  emu::detail::cp_async(smem_dst, gmem_src, 4, valid, site);
}

DDK_DEVICE void cp_async_commit() { emu::detail::cp_async_commit(); }

// cp.async.wait_group N: every committed group but the newest N is complete on return.
template <int N>
DDK_DEVICE void cp_async_wait(Site site = Site::current()) {
  static_assert(N >= 0, "cp_async_wait<N>: N must be >= 0");
  emu::detail::cp_async_wait(N, site);
}

// cp.async.wait_all: commits the pending copies, then waits for every group.
DDK_DEVICE void cp_async_wait_all(Site site = Site::current()) { emu::detail::cp_async_wait_all(site); }

// Memory accessors: every global and shared access of kernel code goes through these, so the emulation
// can count and check them (LaunchOptions::count / sanitize); on the GPU they are the plain access.
// T: a trivially copyable type of 1, 2, 4, 8 or 16 bytes.
template <class T>
DDK_DEVICE T ld_global(const T* p, Site site = Site::current()) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16);
  if (emu::detail::traced_now()) [[unlikely]] {
    if (!emu::detail::mem_access(emu::detail::Space::Global, false, p, sizeof(T), site)) return T{};
  }
  return *p;
}

template <class T>
DDK_DEVICE void st_global(T* p, nondeduced<T> v, Site site = Site::current()) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16);
  if (emu::detail::traced_now()) [[unlikely]] {
    if (!emu::detail::mem_access(emu::detail::Space::Global, true, p, sizeof(T), site)) return;
  }
  *p = v;
}

// A store through a generic address (shared or global memory, as the address says); the emulation traces
// it as the one it is.
template <class T>
DDK_DEVICE void st_generic(T* p, nondeduced<T> v, Site site = Site::current()) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16);
  if (emu::detail::traced_now()) [[unlikely]] {
    if (!emu::detail::mem_access(emu::detail::space_of(p), true, p, sizeof(T), site)) return;
  }
  *p = v;
}

// A load that bypasses L1 (ld.global.cg): data another CTA wrote in this launch, after fence_gpu and the
// atomic that orders it (see atomic_add_global). T: 4, 8 or 16 bytes.
template <class T>
DDK_DEVICE T ld_global_cg(const T* p, Site site = Site::current()) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16);
  return ld_global(p, site);
}

// atomicAdd on a global int: the old value. With fence_gpu before it (the writer) and after it (the
// reader), what one CTA wrote before its atomic is visible to another CTA's loads after a later atomic on
// the same word (the last arrival of a counter reads every earlier arrival's data). The emulation's CTAs
// run on several OS threads: a real atomic, and memcheck and counting (atom_global) when traced.
DDK_DEVICE int atomic_add_global(int* p, int v, Site site = Site::current()) {
  if (emu::detail::traced_now()) [[unlikely]] {
    if (!emu::detail::atomic_access(p, site)) return 0;
  }
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

// __threadfence: this thread's earlier accesses are ordered before its later ones for the whole GPU.
DDK_DEVICE void fence_gpu() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

template <class T>
DDK_DEVICE T ld_shared(const T* p, Site site = Site::current()) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16);
  if (emu::detail::traced_now()) [[unlikely]] {
    if (!emu::detail::mem_access(emu::detail::Space::Shared, false, p, sizeof(T), site)) return T{};
  }
  return *p;
}

template <class T>
DDK_DEVICE void st_shared(T* p, nondeduced<T> v, Site site = Site::current()) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16);
  if (emu::detail::traced_now()) [[unlikely]] {
    if (!emu::detail::mem_access(emu::detail::Space::Shared, true, p, sizeof(T), site)) return;
  }
  *p = v;
}

#else
// ================================================================ CUDA primitives ===============

DDK_DEVICE unsigned thread_idx_x() { return threadIdx.x; }
// The thread index read again where it is used: ptxas cannot hoist a volatile read, so what derives from it is
// computed there rather than kept (or spilled) in a register through a long loop.
DDK_DEVICE unsigned thread_idx_x_here() {
  unsigned t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}
DDK_DEVICE unsigned block_idx_x() { return blockIdx.x; }
DDK_DEVICE unsigned block_idx_y() { return blockIdx.y; }
DDK_DEVICE unsigned block_idx_z() { return blockIdx.z; }
DDK_DEVICE unsigned block_dim_x() { return blockDim.x; }
DDK_DEVICE unsigned grid_dim_x() { return gridDim.x; }
DDK_DEVICE unsigned grid_dim_y() { return gridDim.y; }
DDK_DEVICE unsigned grid_dim_z() { return gridDim.z; }
DDK_DEVICE unsigned lane_id() { return threadIdx.x & 31u; }
DDK_DEVICE unsigned warp_id() { return threadIdx.x >> 5; }

DDK_DEVICE char* dynamic_smem() {
  extern __shared__ __align__(128) char ddk_dynamic_smem[];
  return ddk_dynamic_smem;
}

DDK_DEVICE void sync_block() { __syncthreads(); }

// Thread-block clusters need sm_90 or later; before it every CTA is rank 0 of a cluster of one, and the host
// never asks for more.
template <bool kRank>  // %cluster_ctarank, else %cluster_nctarank
DDK_DEVICE unsigned cluster_register() {
#if __CUDA_ARCH__ >= 900
  unsigned v;
  if constexpr (kRank)
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(v));
  else
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(v));
  return v;
#else
  return kRank ? 0u : 1u;
#endif
}
DDK_DEVICE unsigned cluster_ctarank() { return cluster_register<true>(); }
DDK_DEVICE unsigned cluster_nctarank() { return cluster_register<false>(); }

// Stops the launch on a state the kernel must never reach (an illegal-instruction error on the GPU).
[[noreturn]] DDK_DEVICE void trap(const char*) { __trap(); }

DDK_DEVICE void sync_cluster() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __syncthreads();
#endif
}
DDK_DEVICE void cluster_arrive() {
  __syncthreads();
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#endif
}
DDK_DEVICE void cluster_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#endif
}

DDK_DEVICE float shfl_xor(float v, int lane_mask) { return __shfl_xor_sync(0xffffffffu, v, lane_mask); }
DDK_DEVICE int shfl_xor(int v, int lane_mask) { return __shfl_xor_sync(0xffffffffu, v, lane_mask); }

DDK_DEVICE void mma_bf16_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2],
                                  const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}

DDK_DEVICE std::uint32_t smem_addr(const void* p) { return static_cast<std::uint32_t>(__cvta_generic_to_shared(p)); }

DDK_DEVICE void ldmatrix_x4(std::uint32_t (&r)[4], const void* smem_row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem_row_ptr))
               : "memory");
}

DDK_DEVICE void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* smem_row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem_row_ptr))
               : "memory");
}

DDK_DEVICE void ldmatrix_x2(std::uint32_t (&r)[2], const void* smem_row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(smem_row_ptr))
               : "memory");
}

DDK_DEVICE void ldmatrix_x2_trans(std::uint32_t (&r)[2], const void* smem_row_ptr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr(smem_row_ptr))
               : "memory");
}

DDK_DEVICE void cp_async_16(void* smem_dst, const void* gmem_src, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src),
               "r"(src_size)
               : "memory");
}

DDK_DEVICE void cp_async_4(void* smem_dst, const void* gmem_src, bool valid) {
  const int src_size = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem_dst)), "l"(gmem_src),
               "r"(src_size)
               : "memory");
}

DDK_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

template <int N>
DDK_DEVICE void cp_async_wait() {
  static_assert(N >= 0, "cp_async_wait<N>: N must be >= 0");
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

DDK_DEVICE void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

// (volatile: kept in order with sync_cluster's asm, whose memory clobber orders the rest)
template <class T>
DDK_DEVICE T ld_cluster(const T* p, unsigned rank) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16);
#if __CUDA_ARCH__ >= 900
  std::uint32_t remote, v[4];
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(p)), "r"(rank));
  if constexpr (sizeof(T) == 4)
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v[0]) : "r"(remote));
  else if constexpr (sizeof(T) == 8)
    asm volatile("ld.shared::cluster.v2.u32 {%0, %1}, [%2];" : "=r"(v[0]), "=r"(v[1]) : "r"(remote));
  else
    asm volatile("ld.shared::cluster.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(remote));
  T out;
  std::memcpy(&out, v, sizeof(T));
  return out;
#else
  return *p;
#endif
}

// Memory accessors (see the emulation side): the plain access.
template <class T>
DDK_DEVICE T ld_global(const T* p) {
  return *p;
}
template <class T>
DDK_DEVICE void st_global(T* p, nondeduced<T> v) {
  *p = v;
}
template <class T>
DDK_DEVICE T ld_global_cg(const T* p) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16);
  T out;
  if constexpr (sizeof(T) == 4) {
    const unsigned v = __ldcg(reinterpret_cast<const unsigned*>(p));
    std::memcpy(&out, &v, 4);
  } else if constexpr (sizeof(T) == 8) {
    const uint2 v = __ldcg(reinterpret_cast<const uint2*>(p));
    std::memcpy(&out, &v, 8);
  } else {
    const uint4 v = __ldcg(reinterpret_cast<const uint4*>(p));
    std::memcpy(&out, &v, 16);
  }
  return out;
}
DDK_DEVICE int atomic_add_global(int* p, int v) { return atomicAdd(p, v); }
DDK_DEVICE void fence_gpu() { __threadfence(); }
template <class T>
DDK_DEVICE T ld_shared(const T* p) {
  return *p;
}
template <class T>
DDK_DEVICE void st_generic(T* p, nondeduced<T> v) {
  *p = v;
}
template <class T>
DDK_DEVICE void st_shared(T* p, nondeduced<T> v) {
  *p = v;
}

#endif

}  // namespace ddk
