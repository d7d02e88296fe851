// Probe kernels for the emulation runtime, written against <ddk/primitives.h> and exported with
// extern "C" entry points taking raw pointers (for ctypes; tests/test_emu_primitives.py). Every entry
// point returns the launch status code (0 = ok) and writes the message into err[0..err_len).
//
// Lines marked "SITE:<name>" are call sites the tests expect to see named in error reports.
#include <ddk/primitives.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

using namespace ddk;
using std::uint16_t;
using std::uint32_t;
using std::uint8_t;

namespace {

int finish(const emu::Status& st, char* err, int err_len) {
  return emu::copy_status(st, err, err_len > 0 ? static_cast<std::size_t>(err_len) : 0);
}

// ------------------------------------------------------------------------------------------ mma --

struct MmaArgs {
  const uint32_t* a;  // [32][4] per-lane A fragments
  const uint32_t* b;  // [32][2]
  const float* c;     // [32][4]
  float* d;           // [32][4]
  int alias;          // 1: d aliases c (mma_bf16_m16n8k16(c, a, b, c))
};

DDK_GLOBAL void mma_kernel(MmaArgs p) {
  const unsigned l = lane_id();
  uint32_t a[4], b[2];
  float c[4], d[4];
  for (int i = 0; i < 4; ++i) a[i] = p.a[l * 4 + i];
  for (int i = 0; i < 2; ++i) b[i] = p.b[l * 2 + i];
  for (int i = 0; i < 4; ++i) c[i] = p.c[l * 4 + i];
  if (p.alias) {
    mma_bf16_m16n8k16(c, a, b, c);
    for (int i = 0; i < 4; ++i) p.d[l * 4 + i] = c[i];
  } else {
    mma_bf16_m16n8k16(d, a, b, c);
    for (int i = 0; i < 4; ++i) p.d[l * 4 + i] = d[i];
  }
}

// ------------------------------------------------------------------------------------- ldmatrix --

struct LdmArgs {
  const uint8_t* image;  // copied to the start of dynamic shared memory
  int image_bytes;
  const int* offsets;  // [32] byte offset of each lane's row address into shared memory
  int variant;         // 0 x4, 1 x4.trans, 2 x2, 3 x2.trans
  uint32_t* out;       // [32][4] (x2: registers 2, 3 are written as 0)
};

DDK_GLOBAL void ldmatrix_kernel(LdmArgs p) {
  char* smem = dynamic_smem();
  for (int i = static_cast<int>(thread_idx_x()); i < p.image_bytes; i += static_cast<int>(block_dim_x()))
    smem[i] = static_cast<char>(p.image[i]);
  sync_block();
  const unsigned l = lane_id();
  const char* row = smem + p.offsets[l];
  uint32_t r[4] = {0, 0, 0, 0};
  if (p.variant == 0) {
    ldmatrix_x4(r, row);
  } else if (p.variant == 1) {
    ldmatrix_x4_trans(r, row);
  } else if (p.variant == 2) {
    uint32_t r2[2];
    ldmatrix_x2(r2, row);
    r[0] = r2[0];
    r[1] = r2[1];
  } else {
    uint32_t r2[2];
    ldmatrix_x2_trans(r2, row);
    r[0] = r2[0];
    r[1] = r2[1];
  }
  for (int i = 0; i < 4; ++i) p.out[l * 4 + i] = r[i];
}

// ----------------------------------------------------------------------------------------- shfl --

struct ShflArgs {
  const float* fin;  // [block]
  const int* iin;    // [block]
  const int* masks;  // [block] per-thread lane_mask
  float* fout;
  int* iout;
};

DDK_GLOBAL void shfl_kernel(ShflArgs p) {
  const unsigned t = thread_idx_x();
  p.fout[t] = shfl_xor(p.fin[t], p.masks[t]);
  p.iout[t] = shfl_xor(p.iin[t], p.masks[t]);
}

// -------------------------------------------------------------------------------------- cp.async --

struct CpArgs {
  const uint8_t* src;  // 64 bytes, 16-byte aligned
  uint8_t* out;        // 5 snapshots of the first 64 bytes of shared memory
};

DDK_GLOBAL void cp_async_kernel(CpArgs p) {
  if (thread_idx_x() != 0) return;
  char* s = dynamic_smem();
  auto snap = [&](int k) { std::memcpy(p.out + 64 * k, s, 64); };
  snap(0);                                   // fresh block: the 0xCD fill
  cp_async_16(s + 0, p.src + 0, true);       // group 0: slot A
  cp_async_commit();
  cp_async_16(s + 16, p.src + 16, true);     // group 1: slot B
  cp_async_16(s + 32, nullptr, false);       //          slot C, zero-filled, source never read
  cp_async_commit();
  cp_async_16(s + 48, p.src + 48, true);     // not committed: slot D
  snap(1);                                   // before any wait: nothing has landed
  cp_async_wait<1>();
  snap(2);                                   // group 0 only
  cp_async_wait<0>();
  snap(3);                                   // groups 0 and 1; the uncommitted copy is still pending
  cp_async_wait_all();
  snap(4);                                   // everything
}

struct PipeArgs {
  const uint8_t* src;  // n_chunks x 512 bytes, 16-byte aligned
  uint8_t* out;        // n_chunks x 512 bytes
  int n_chunks;
};

// Two-stage cp.async pipeline (one warp, 512-byte chunks): copy chunk k+1 while reading chunk k,
// reading a neighbour's 16 bytes so a missing wait or barrier would show.
DDK_GLOBAL void cp_pipeline_kernel(PipeArgs p) {
  char* s = dynamic_smem();
  const unsigned l = lane_id();
  cp_async_16(s + 16 * l, p.src + 16 * l, true);
  cp_async_commit();
  for (int k = 0; k < p.n_chunks; ++k) {
    if (k + 1 < p.n_chunks)
      cp_async_16(s + 512 * ((k + 1) % 2) + 16 * l, p.src + 512 * static_cast<std::size_t>(k + 1) + 16 * l, true);
    cp_async_commit();
    cp_async_wait<1>();
    sync_block();
    const unsigned nb = (l + 1) % 32;
    std::memcpy(p.out + 512 * static_cast<std::size_t>(k) + 16 * nb, s + 512 * (k % 2) + 16 * nb, 16);
    sync_block();
  }
  cp_async_wait<0>();
}

// ------------------------------------------------------------------------------ multi-warp kernel --

struct MultiArgs {
  const float* in;  // [blocks][256]
  float* out;       // [blocks][256]
  unsigned* ids;    // [blocks][8]: bx, by, bz, gx, gy, gz, block_dim, warps seen
};

DDK_GLOBAL void multiwarp_kernel(MultiArgs p) {
  const unsigned t = thread_idx_x();
  const unsigned b = block_idx_x() + grid_dim_x() * (block_idx_y() + grid_dim_y() * block_idx_z());
  auto* s = reinterpret_cast<float*>(dynamic_smem());
  s[t] = p.in[b * 256 + t];
  sync_block();
  const float v = s[(t + 37) % 256];  // written by another warp
  sync_block();
  float sum = v;
  for (int m = 16; m >= 1; m >>= 1) sum += shfl_xor(sum, m);
  p.out[b * 256 + t] = v * 1000.0f + sum;
  if (t == 0) {
    unsigned* id = p.ids + 8 * b;
    id[0] = block_idx_x();
    id[1] = block_idx_y();
    id[2] = block_idx_z();
    id[3] = grid_dim_x();
    id[4] = grid_dim_y();
    id[5] = grid_dim_z();
    id[6] = block_dim_x();
  }
  if (lane_id() == 0) {
    const unsigned w = warp_id();
    s[w] = static_cast<float>(w);  // smem reused after the barrier above
  }
  sync_block();
  if (t == 0) {
    unsigned n = 0;
    for (unsigned w = 0; w < block_dim_x() / 32; ++w) n += s[w] == static_cast<float>(w) ? 1u : 0u;
    p.ids[8 * b + 7] = n;
  }
}

// ------------------------------------------------------------------------------ faulty kernels ----

struct Empty {
  int unused;
};

DDK_GLOBAL void div_shfl_exit_kernel(Empty) {
  if (lane_id() >= 16) return;
  volatile float v = shfl_xor(1.0f, 1);  // SITE:div_shfl_exit
  (void)v;
}

DDK_GLOBAL void div_shfl_sites_kernel(Empty) {
  float v;
  if (lane_id() < 16)
    v = shfl_xor(1.0f, 1);  // SITE:div_shfl_a
  else
    v = shfl_xor(2.0f, 1);  // SITE:div_shfl_b
  (void)v;
}

DDK_GLOBAL void div_sync_exit_kernel(Empty) {
  if (warp_id() == 1) return;
  sync_block();  // SITE:div_sync
}

DDK_GLOBAL void div_sync_sites_kernel(Empty) {
  if (warp_id() == 0)
    sync_block();  // SITE:div_sync_a
  else
    sync_block();  // SITE:div_sync_b
}

DDK_GLOBAL void div_mixed_kernel(Empty) {
  if (lane_id() < 16) {
    volatile float v = shfl_xor(1.0f, 2);  // SITE:div_mixed_shfl
    (void)v;
  }
  sync_block();  // SITE:div_mixed_sync
}

DDK_GLOBAL void div_mma_kernel(Empty) {
  // Lanes 0-7 skip the mma: the rest of the warp waits for them forever.
  uint32_t a[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};
  uint32_t b[2] = {0x3f803f80u, 0x3f803f80u};
  float c[4] = {0, 0, 0, 0};
  if (lane_id() < 8) return;
  mma_bf16_m16n8k16(c, a, b, c);  // SITE:div_mma
}

DDK_GLOBAL void oob_ldmatrix_kernel(Empty) {
  uint32_t r[4];
  const unsigned l = lane_id();
  const char* row = dynamic_smem() + (l == 3 ? 4096 : 16 * l);  // smem is 4096 bytes
  ldmatrix_x4(r, row);  // SITE:oob_ldmatrix
}

DDK_GLOBAL void oob_cp_async_kernel(const uint8_t* src) {
  const unsigned t = thread_idx_x();
  char* dst = dynamic_smem() + (t == 5 ? 4096 - 8 : 16 * t);
  cp_async_16(dst, src, true);  // SITE:oob_cp_async
  cp_async_wait_all();
}

DDK_GLOBAL void smem_overflow_kernel(Empty) {
  if (thread_idx_x() == 0) dynamic_smem()[4096 + 7] = 1;  // one past the end, then some
}

DDK_GLOBAL void throwing_kernel(Empty) {
  if (thread_idx_x() == 40) throw std::runtime_error("probe exception");
}

DDK_GLOBAL void trivial_kernel(unsigned* out) {
  if (thread_idx_x() == 0) out[block_idx_x()] = block_dim_x();
}

// --------------------------------------------------------------------------------------- bench --

DDK_GLOBAL void mma_bench_kernel(int iters, float* out) {
  uint32_t a[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u};
  uint32_t b[2] = {0x3c003c00u, 0x3c003c00u};
  float c[4] = {0, 0, 0, 0};
  for (int i = 0; i < iters; ++i) mma_bf16_m16n8k16(c, a, b, c);
  out[thread_idx_x()] = c[0];
}

DDK_GLOBAL void shfl_bench_kernel(int iters, float* out) {
  float v = static_cast<float>(thread_idx_x());
  for (int i = 0; i < iters; ++i) v = shfl_xor(v, 1 << (i % 5));
  out[thread_idx_x()] = v;
}

DDK_GLOBAL void sync_bench_kernel(int iters, float* out) {
  for (int i = 0; i < iters; ++i) sync_block();
  out[thread_idx_x()] = 1.0f;
}

// 256 threads, 25 rounds of {shfl, ldmatrix, mma, sync_block}: 100 collectives per thread.
DDK_GLOBAL void probe_kernel(float* out) {
  char* smem = dynamic_smem();
  const unsigned t = thread_idx_x(), l = lane_id(), w = warp_id();
  for (unsigned i = 2 * t; i < 8192; i += 2 * block_dim_x()) {  // bf16 values in [1, 2)
    const uint16_t v = static_cast<uint16_t>(0x3f80u | (i * 7u & 0x7fu));
    std::memcpy(smem + i, &v, 2);
  }
  float acc[4] = {0, 0, 0, 0};
  float v = static_cast<float>(t);
  for (int round = 0; round < 25; ++round) {
    v += shfl_xor(v, 1);
    uint32_t a[4];
    ldmatrix_x4(a, smem + 512 * (w % 8) + 16 * l);
    uint32_t b[2] = {a[0] ^ 0x80000000u, a[1]};
    mma_bf16_m16n8k16(acc, a, b, acc);
    sync_block();
  }
  out[t] = v + acc[0] + acc[1] + acc[2] + acc[3];
}

double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// ------------------------------------------------------------------- traced probes (counters) ----
//
// Kernels with known counts for tests/test_emu_counters.py and tests/test_emu_sanitizer.py. Shared
// memory is prepared with std::memset (untraced) where a probe must count one instruction only.

struct SmemProbe {
  const int* offsets;  // [32] byte offset of each lane's access (read with plain, untraced loads)
  int width;           // 1, 2, 4, 8, 16
  int store;           // 1: st_shared, 0: ld_shared
  std::uint32_t active;  // lanes that access
  std::uint32_t* sink;
};

template <class T>
void smem_probe_access(const SmemProbe& p, char* smem, unsigned l) {
  T* at = reinterpret_cast<T*>(smem + p.offsets[l]);
  if (p.store) {
    st_shared(at, T{});
  } else {
    const T v = ld_shared(at);
    std::memcpy(p.sink + l, &v, sizeof v < 4 ? sizeof v : 4);
  }
}

struct alignas(16) Bytes16 {
  std::uint32_t w[4];
};

DDK_GLOBAL void smem_probe_kernel(SmemProbe p) {
  char* smem = dynamic_smem();
  const unsigned l = lane_id();
  if (l == 0) std::memset(smem, 0, 8192);
  sync_block();
  if (p.active >> l & 1u) {
    switch (p.width) {
      case 1: smem_probe_access<std::uint8_t>(p, smem, l); break;
      case 2: smem_probe_access<std::uint16_t>(p, smem, l); break;
      case 4: smem_probe_access<std::uint32_t>(p, smem, l); break;
      case 8: smem_probe_access<std::uint64_t>(p, smem, l); break;
      default: smem_probe_access<Bytes16>(p, smem, l); break;
    }
  }
}

struct LdmProbe {
  const int* offsets;  // [32] row addresses
  int variant;         // 0 x4, 1 x4.trans, 2 x2, 3 x2.trans
  std::uint32_t* sink;
};

DDK_GLOBAL void ldm_probe_kernel(LdmProbe p) {
  char* smem = dynamic_smem();
  const unsigned l = lane_id();
  if (l == 0) std::memset(smem, 0, 8192);
  sync_block();
  std::uint32_t r[4] = {0, 0, 0, 0};
  const char* row = smem + p.offsets[l];
  if (p.variant == 0) ldmatrix_x4(r, row);
  if (p.variant == 1) ldmatrix_x4_trans(r, row);
  if (p.variant == 2) ldmatrix_x2(*reinterpret_cast<std::uint32_t(*)[2]>(r), row);
  if (p.variant == 3) ldmatrix_x2_trans(*reinterpret_cast<std::uint32_t(*)[2]>(r), row);
  p.sink[l] = r[0];
}

struct GlobalProbe {
  const float* data;
  const int* index;  // [blocks * threads]: element each thread reads (-1: none); plain loads
  float* out;        // [blocks * threads]
  int stores;        // 1: also st_global the value to out
};

DDK_GLOBAL void global_probe_kernel(GlobalProbe p) {
  const unsigned t = block_idx_x() * block_dim_x() + thread_idx_x();
  const int i = p.index[t];
  if (i < 0) return;
  const float v = ld_global(p.data + i);
  if (p.stores) st_global(p.out + t, v);
}

// Phases: Q-like staging, then three barrier intervals with known work (one warp per 32 threads).
DDK_GLOBAL void phase_probe_kernel(float* out) {
  const unsigned l = lane_id(), t = thread_idx_x();
  std::uint32_t a[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u}, b[2] = {0x3f803f80u, 0x3f803f80u};
  float c[4] = {0, 0, 0, 0};
  mma_bf16_m16n8k16(c, a, b, c);  // phase 0: 1 mma per warp
  mma_bf16_m16n8k16(c, a, b, c);
  sync_block();
  float v = shfl_xor(c[0], 1);  // phase 1: 3 shuffles per warp
  v = shfl_xor(v, 2);
  v = shfl_xor(v, 4);
  sync_block();
  st_shared(reinterpret_cast<float*>(dynamic_smem()) + t, v);  // phase 2: 1 shared store, 1 global store
  st_global(out + t, v + static_cast<float>(l));
}

// cp.async pipeline over n chunks of 512 bytes (one warp): chunk k+1 issued while chunk k is read.
DDK_GLOBAL void cp_probe_kernel(PipeArgs p) {
  char* s = dynamic_smem();
  const unsigned l = lane_id();
  cp_async_16(s + 16 * l, p.src + 16 * l, true);
  cp_async_commit();
  for (int k = 0; k < p.n_chunks; ++k) {
    if (k + 1 < p.n_chunks)
      cp_async_16(s + 512 * ((k + 1) % 2) + 16 * l, p.src + 512 * static_cast<std::size_t>(k + 1) + 16 * l, true);
    cp_async_commit();
    cp_async_wait<1>();
    sync_block();
    const unsigned nb = (l + 1) % 32;
    st_global(reinterpret_cast<Bytes16*>(p.out + 512 * static_cast<std::size_t>(k) + 16 * nb),
              ld_shared(reinterpret_cast<const Bytes16*>(s + 512 * (k % 2) + 16 * nb)));
    sync_block();
  }
  cp_async_wait<0>();
}

// ---------------------------------------------------------------- traced probes (sanitizer) ----

struct RaceProbe {
  int variant;  // see ddk_probe_sanitize
  const float* in;
  int n;        // elements of `in`
  float* out;
};

DDK_GLOBAL void race_probe_kernel(RaceProbe p) {
  float* s = reinterpret_cast<float*>(dynamic_smem());
  const unsigned t = thread_idx_x(), l = lane_id(), w = warp_id();
  switch (p.variant) {
    case 0:  // clean: write, barrier, read another warp's word
      st_shared(s + t, 1.0f);
      sync_block();
      st_global(p.out + t, ld_shared(s + (t + 32) % block_dim_x()));
      break;
    case 1:  // planted race across warps: warp 1 reads what warp 0 writes, no barrier
      if (w == 0) st_shared(s + l, 2.0f);  // SITE:race_write
      if (w == 1) st_global(p.out + t, ld_shared(s + l));  // SITE:race_read
      sync_block();
      break;
    case 2:  // planted race inside a warp: lane 1 reads lane 0's word, nothing between
      if (w == 0 && l == 0) st_shared(s + 5, 3.0f);  // SITE:warp_race_write
      if (w == 0 && l == 1) st_global(p.out + t, ld_shared(s + 5));  // SITE:warp_race_read
      break;
    case 3: {  // the same, ordered by a warp collective: clean
      if (w == 0 && l == 0) st_shared(s + 5, 3.0f);
      const float v = shfl_xor(1.0f, 1);
      if (w == 0 && l == 1) st_global(p.out + t, ld_shared(s + 5) + v);
      break;
    }
    case 4:  // out-of-range global read: thread 3 reads one element past the end
      st_global(p.out + t, ld_global(p.in + (t == 3 ? p.n : t % p.n)));  // SITE:oob_read
      break;
    case 5:  // uninitialised shared read
      st_global(p.out + t, ld_shared(s + 64 + t));  // SITE:uninit_read
      break;
    case 6:  // write-after-read across warps: warp 0 reads, warp 1 overwrites, no barrier
      st_shared(s + t, 1.0f);
      sync_block();
      if (w == 0) st_global(p.out + t, ld_shared(s + 32 + l));  // SITE:war_read
      if (w == 1) st_shared(s + t, 4.0f);                        // SITE:war_write
      sync_block();
      break;
    case 7: {  // cp.async landing in a buffer another warp reads without a barrier after the wait
      char* c = dynamic_smem();
      if (w == 0) {
        cp_async_16(c + 16 * l, p.in + 4 * l, true);  // SITE:cp_race_write
        cp_async_wait_all();
      }
      if (w == 1) st_global(p.out + t, ld_shared(reinterpret_cast<const float*>(c + 16 * l)));  // SITE:cp_race_read
      sync_block();
      break;
    }
    case 8: {  // the same with the barrier: clean
      char* c = dynamic_smem();
      if (w == 0) {
        cp_async_16(c + 16 * l, p.in + 4 * l, true);
        cp_async_wait_all();
      }
      sync_block();
      if (w == 1) st_global(p.out + t, ld_shared(reinterpret_cast<const float*>(c + 16 * l)));
      break;
    }
    default: break;
  }
}

struct ClusterProbe {
  int variant;  // see ddk_probe_cluster
  const float* in;
  float* out;
};

// Each CTA stages its slice of `in` in shared memory; each thread then sums word t of every CTA of its
// cluster through ld_cluster (variant 0). Variant 8 reads one rank a lane in one instruction; variant 9 ends
// with the barrier in two halves (cluster_arrive, work, cluster_wait); the other variants break one rule each.
DDK_GLOBAL void cluster_probe_kernel(ClusterProbe p) {
  float* s = reinterpret_cast<float*>(dynamic_smem());
  const unsigned t = thread_idx_x(), rank = cluster_ctarank(), size = cluster_nctarank();
  const unsigned at = block_idx_x() * block_dim_x() + t;
  st_shared(s + t, ld_global(p.in + at));
  if (p.variant == 1) {  // reads the next CTA's word before any cluster barrier
    st_global(p.out + at, ld_cluster(s + t, (rank + 1) % size));  // SITE:cluster_early_read
    sync_cluster();
    return;
  }
  if (p.variant == 4 && rank == 1) return;  // never arrives: the others wait at the barrier forever
  if (p.variant == 13) cluster_wait();  // SITE:early_wait: waits for a barrier it never arrived at
  sync_cluster();  // SITE:cluster_barrier
  if (p.variant == 8) {  // one warp instruction over every rank, the CTA's own included: lane t reads rank t % size
    st_global(p.out + at, ld_cluster(s + t, t % size));
    sync_cluster();
    return;
  }
  if (p.variant == 7) {  // the last rank reads rank 0 and no barrier follows: rank 0 may exit before the read
    st_global(p.out + at, rank == size - 1 ? ld_cluster(s + t, 0) : 0.f);  // SITE:cluster_read_then_exit
    return;
  }
  float sum = 0.f;
  for (unsigned r = 0; r < size; ++r) sum += ld_cluster(s + t, r);
  if (p.variant == 5) sum += ld_cluster(s + block_dim_x() + t, (rank + 1) % size);  // SITE:cluster_uninit
  if (p.variant == 6) sum += ld_cluster(s + t, size);  // SITE:cluster_bad_rank
  st_global(p.out + at, sum);
  if (p.variant >= 9) {  // the last barrier in two halves
    if (p.variant == 14 && rank == 1) {  // never arrives: the others wait for its arrival forever
      sync_cluster();
      return;
    }
    cluster_arrive();  // SITE:split_arrive
    if (p.variant == 12) cluster_arrive();  // SITE:second_arrive
    st_global(p.out + at, sum);  // work the barrier's latency hides
    if (p.variant == 15 && rank == 0) return;  // exits without waiting for the barrier it arrived at
    if (p.variant == 16) sync_cluster();  // SITE:whole_between_halves
    if (p.variant == 10) st_shared(s + t, 0.f);  // SITE:split_late_write: others may still be reading it
    if (p.variant == 11) st_global(p.out + at, sum + ld_cluster(s + t, (rank + 1) % size));  // SITE:split_late_read
    cluster_wait();  // SITE:split_wait
    return;
  }
  if (p.variant == 2) st_shared(s + t, 0.f);  // SITE:cluster_late_write: others may still be reading it
  if (p.variant == 3 && rank == 1) return;  // exits while rank 0 still reads its shared memory
  if (p.variant == 3 && rank == 0) st_global(p.out + at, sum + ld_cluster(s + t, 1));  // SITE:cluster_gone
  sync_cluster();  // no CTA leaves while another may read its shared memory
}

char* probe_copy(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

// The tail of every traced probe: the launch's status, and its counters / findings as malloc'd JSON.
int traced_finish(const emu::Status& st, const emu::Report& report, const emu::LaunchOptions& opt, char** counters,
                  char** findings, char* err, int err_len) {
  *counters = opt.count && st.ok() ? probe_copy(report.counters_json()) : nullptr;
  *findings = opt.sanitize && st.ok() ? probe_copy(report.sanitizer_json()) : nullptr;
  return finish(st, err, err_len);
}

emu::LaunchOptions traced_options(emu::Report& report, int flags, int workers) {
  emu::LaunchOptions opt;
  opt.report = &report;
  opt.count = (flags & 1) != 0;
  opt.sanitize = (flags & 2) != 0;
  opt.group_shapes = (flags & 4) != 0;
  opt.workers = workers;
  opt.kernel_name = "probe";
  return opt;
}

}  // namespace

extern "C" {

int ddk_probe_mma(const uint32_t* a, const uint32_t* b, const float* c, float* d, int alias, char* err,
                  int err_len) {
  return finish(emu::launch(mma_kernel, {1}, 32, 0, MmaArgs{a, b, c, d, alias}), err, err_len);
}

int ddk_probe_ldmatrix(const uint8_t* image, int image_bytes, const int* offsets, int variant, uint32_t* out,
                       char* err, int err_len) {
  LdmArgs args{image, image_bytes, offsets, variant, out};
  return finish(emu::launch(ldmatrix_kernel, {1}, 32, static_cast<std::size_t>(image_bytes), args), err, err_len);
}

int ddk_probe_shfl(const float* fin, const int* iin, const int* masks, float* fout, int* iout, int block_x,
                   char* err, int err_len) {
  return finish(emu::launch(shfl_kernel, {1}, static_cast<unsigned>(block_x), 0, ShflArgs{fin, iin, masks, fout, iout}),
                err, err_len);
}

int ddk_probe_cp_async(const uint8_t* src, uint8_t* out, char* err, int err_len) {
  return finish(emu::launch(cp_async_kernel, {1}, 32, 1024, CpArgs{src, out}), err, err_len);
}

int ddk_probe_cp_pipeline(const uint8_t* src, uint8_t* out, int n_chunks, char* err, int err_len) {
  return finish(emu::launch(cp_pipeline_kernel, {1}, 32, 1024, PipeArgs{src, out, n_chunks}), err, err_len);
}

int ddk_probe_multiwarp(const float* in, float* out, unsigned* ids, unsigned gx, unsigned gy, unsigned gz,
                        int workers, char* err, int err_len) {
  emu::LaunchOptions opt;
  opt.workers = workers;
  return finish(emu::launch_with(opt, multiwarp_kernel, {gx, gy, gz}, 256, 256 * sizeof(float), MultiArgs{in, out, ids}),
                err, err_len);
}

// which: 0 divergent shfl (half the warp exits), 1 shfl at two call sites, 2 sync_block with a warp
// exited, 3 mma with lanes 0-7 exited, 4 ldmatrix out of range, 5 cp.async out of range,
// 6 write past the end of shared memory, 7 exception, 8 smem too large, 9 bad block size,
// 10 sync_block at two call sites, 11 half a warp at a shfl while the rest waits at sync_block.
int ddk_probe_fault(int which, const uint8_t* src16, char* err, int err_len) {
  unsigned dummy[4] = {0, 0, 0, 0};
  switch (which) {
    case 0: return finish(emu::launch(div_shfl_exit_kernel, {1}, 32, 0, Empty{}), err, err_len);
    case 1: return finish(emu::launch(div_shfl_sites_kernel, {1}, 64, 0, Empty{}), err, err_len);
    case 2: return finish(emu::launch(div_sync_exit_kernel, {2}, 64, 0, Empty{}), err, err_len);
    case 3: return finish(emu::launch(div_mma_kernel, {1}, 32, 0, Empty{}), err, err_len);
    case 4: return finish(emu::launch(oob_ldmatrix_kernel, {1}, 32, 4096, Empty{}), err, err_len);
    case 5: return finish(emu::launch(oob_cp_async_kernel, {1}, 32, 4096, src16), err, err_len);
    case 6: return finish(emu::launch(smem_overflow_kernel, {1}, 32, 4096, Empty{}), err, err_len);
    case 7: return finish(emu::launch(throwing_kernel, {1}, 64, 0, Empty{}), err, err_len);
    case 8: return finish(emu::launch(trivial_kernel, {1}, 32, 101377, dummy), err, err_len);
    case 9: return finish(emu::launch(trivial_kernel, {1}, 48, 0, dummy), err, err_len);
    case 10: return finish(emu::launch(div_sync_sites_kernel, {1}, 96, 0, Empty{}), err, err_len);
    case 11: return finish(emu::launch(div_mixed_kernel, {1}, 64, 0, Empty{}), err, err_len);
    default: return -1;
  }
}

// A valid launch at the shared-memory limit and the largest block, to check limits are inclusive.
int ddk_probe_limits(unsigned* out, char* err, int err_len) {
  return finish(emu::launch(trivial_kernel, {2}, 1024, 101376, out), err, err_len);
}

// out: [0] ns per raw fiber switch, [1] ns per emulated mma (warp-wide), [2] ns per warp-wide shfl,
// [3] ns per thread-arrival at sync_block (256 threads), [4] ms for the 256-thread probe kernel
// (100 collectives per thread), [5] ms for the same probe on 2 workers over 4 blocks / 4.
int ddk_probe_bench(double* out, char* err, int err_len) {
  static float sink[1024];
  out[0] = emu::measure_switch_ns(200000);
  emu::Status st;
  const int mma_iters = 20000;
  double t0 = now_ns();
  st = emu::launch(mma_bench_kernel, {1}, 32, 0, mma_iters, sink);
  out[1] = (now_ns() - t0) / mma_iters;
  if (!st.ok()) return finish(st, err, err_len);
  const int shfl_iters = 20000;
  t0 = now_ns();
  st = emu::launch(shfl_bench_kernel, {1}, 32, 0, shfl_iters, sink);
  out[2] = (now_ns() - t0) / shfl_iters;
  if (!st.ok()) return finish(st, err, err_len);
  const int sync_iters = 2000;
  t0 = now_ns();
  st = emu::launch(sync_bench_kernel, {1}, 256, 0, sync_iters, sink);
  out[3] = (now_ns() - t0) / (sync_iters * 256.0);
  if (!st.ok()) return finish(st, err, err_len);
  st = emu::launch(probe_kernel, {1}, 256, 8192, sink);  // warm the fiber pool
  t0 = now_ns();
  st = emu::launch(probe_kernel, {1}, 256, 8192, sink);
  out[4] = (now_ns() - t0) / 1e6;
  if (!st.ok()) return finish(st, err, err_len);
  emu::LaunchOptions two;
  two.workers = 2;
  st = emu::launch_with(two, probe_kernel, {4}, 256, 8192, sink);  // warm the second worker
  t0 = now_ns();
  st = emu::launch_with(two, probe_kernel, {4}, 256, 8192, sink);
  out[5] = (now_ns() - t0) / 4e6;
  return finish(st, err, err_len);
}

// Pure helpers (no launch): float -> bf16 bits, pairs packed, and bf16 -> float back.
void ddk_probe_bf16(const float* in, int n, uint16_t* bits, uint32_t* packed, float* back) {
  for (int i = 0; i < n; ++i) {
    bits[i] = float_to_bf16(in[i]);
    back[i] = bf16_to_float(bits[i]);
  }
  for (int i = 0; i + 1 < n; i += 2) packed[i / 2] = pack_bf16x2(in[i], in[i + 1]);
}

// The same for fp16 (the combine's parts).
void ddk_probe_f16(const float* in, int n, uint16_t* bits, uint32_t* packed, float* back) {
  for (int i = 0; i < n; ++i) {
    bits[i] = float_to_f16(in[i]);
    back[i] = f16_to_float(bits[i]);
  }
  for (int i = 0; i + 1 < n; i += 2) packed[i / 2] = pack_f16x2(in[i], in[i + 1]);
}

float ddk_probe_exp2(float x) { return fast_exp2(x); }

// Traced probes. flags: bit 0 counters, bit 1 sanitizer, bit 2 group CTAs by shape. *counters and
// *findings receive malloc'd JSON (free with ddk_probe_free), or nullptr.
int ddk_probe_smem(const int* offsets, int width, int store, unsigned active, int flags, char** counters,
                   char** findings, char* err, int err_len) {
  static std::uint32_t sink[32];
  emu::Report report;
  const emu::LaunchOptions opt = traced_options(report, flags, 1);
  const emu::Status st = emu::launch_with(opt, smem_probe_kernel, {1}, 32, 8192, SmemProbe{offsets, width, store, active, sink});
  return traced_finish(st, report, opt, counters, findings, err, err_len);
}

int ddk_probe_ldm(const int* offsets, int variant, int flags, char** counters, char** findings, char* err,
                  int err_len) {
  static std::uint32_t sink[32];
  emu::Report report;
  const emu::LaunchOptions opt = traced_options(report, flags, 1);
  const emu::Status st = emu::launch_with(opt, ldm_probe_kernel, {1}, 32, 8192, LdmProbe{offsets, variant, sink});
  return traced_finish(st, report, opt, counters, findings, err, err_len);
}

int ddk_probe_global(const float* data, const int* index, float* out, int stores, unsigned blocks, unsigned threads,
                     int flags, int workers, char** counters, char** findings, char* err, int err_len) {
  emu::Report report;
  const emu::LaunchOptions opt = traced_options(report, flags, workers);
  const emu::Status st =
      emu::launch_with(opt, global_probe_kernel, {blocks}, threads, 0, GlobalProbe{data, index, out, stores});
  return traced_finish(st, report, opt, counters, findings, err, err_len);
}

int ddk_probe_phases(float* out, unsigned threads, int flags, char** counters, char** findings, char* err,
                     int err_len) {
  emu::Report report;
  const emu::LaunchOptions opt = traced_options(report, flags, 1);
  const emu::Status st = emu::launch_with(opt, phase_probe_kernel, {1}, threads, 4 * threads, out);
  return traced_finish(st, report, opt, counters, findings, err, err_len);
}

int ddk_probe_cp_traced(const uint8_t* src, uint8_t* out, int n_chunks, int flags, int late_wait_phases,
                        char** counters, char** findings, char* err, int err_len) {
  emu::Report report;
  emu::LaunchOptions opt = traced_options(report, flags, 1);
  opt.late_wait_phases = late_wait_phases;
  const emu::Status st = emu::launch_with(opt, cp_probe_kernel, {1}, 32, 1024, PipeArgs{src, out, n_chunks});
  return traced_finish(st, report, opt, counters, findings, err, err_len);
}

// variant: 0 clean, 1 cross-warp write-read race, 2 intra-warp race, 3 intra-warp ordered by shfl (clean),
// 4 out-of-range global read, 5 uninitialised shared read, 6 cross-warp read-write race, 7 cp.async race,
// 8 cp.async with the barrier (clean). `in` is registered as buffer "in" of n floats, `out` as "out".
int ddk_probe_sanitize(int variant, const float* in, int n, float* out, int out_n, int flags, char** counters,
                       char** findings, char* err, int err_len) {
  emu::Report report;
  emu::LaunchOptions opt = traced_options(report, flags, 1);
  const emu::Buffer buffers[2] = {{"in", in, static_cast<std::size_t>(n) * sizeof(float)},
                                  {"out", out, static_cast<std::size_t>(out_n) * sizeof(float)}};
  opt.buffers = buffers;
  opt.n_buffers = 2;
  const emu::Status st = emu::launch_with(opt, race_probe_kernel, {2}, 64, 1024, RaceProbe{variant, in, n, out});
  return traced_finish(st, report, opt, counters, findings, err, err_len);
}

// variant: 0 clean cluster sum, 1 a remote read before the cluster barrier, 2 a local write while others may
// still read it, 3 a read of a CTA that exited, 4 a CTA that never reaches the barrier, 5 a remote read of
// bytes never written, 6 a rank outside the cluster, 7 no cluster barrier before the CTAs exit. `blocks` CTAs of `threads`, clusters of `cluster`;
// `in` and `out` hold blocks * threads floats (registered as buffers "in" and "out").
int ddk_probe_cluster(int variant, unsigned cluster, unsigned blocks, unsigned threads, const float* in, float* out,
                      int flags, int workers, char** counters, char** findings, char* err, int err_len) {
  emu::Report report;
  emu::LaunchOptions opt = traced_options(report, flags, workers);
  const std::size_t bytes = std::size_t{blocks} * threads * sizeof(float);
  const emu::Buffer buffers[2] = {{"in", in, bytes}, {"out", out, bytes}};
  opt.buffers = buffers;
  opt.n_buffers = 2;
  opt.cluster_x = cluster;
  const emu::Status st = emu::launch_with(opt, cluster_probe_kernel, {blocks}, threads, 2 * threads * sizeof(float),
                                          ClusterProbe{variant, in, out});
  return traced_finish(st, report, opt, counters, findings, err, err_len);
}

void ddk_probe_free(char* p) { std::free(p); }

}  // extern "C"
