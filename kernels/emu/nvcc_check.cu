// Compile check of the CUDA side of <ddk/primitives.h>: one __global__ kernel instantiating every
// primitive, built by tests/test_emu_primitives.py with `nvcc -arch=sm_XX -cubin` (sm_80, sm_90, sm_120: before
// sm_90 the cluster primitives are those of a cluster of one).
// It is never launched; the point is that the inline PTX assembles for each target.
#include <ddk/primitives.h>

using namespace ddk;

struct alignas(8) Float2Pair {
  float x, y;
};

DDK_GLOBAL void ddk_nvcc_check_kernel(const uint4* __restrict__ src, float* __restrict__ out, int* __restrict__ iout) {
  char* smem = dynamic_smem();
  const unsigned t = thread_idx_x();
  const unsigned l = lane_id();

  cp_async_16(smem + 16 * t, src + t, t < 16);
  cp_async_commit();
  cp_async_16(smem + 16 * (t + 32), src + t + 32, true);
  cp_async_commit();
  cp_async_wait<1>();
  cp_async_wait<0>();
  cp_async_wait_all();
  sync_block();

  std::uint32_t a[4], b[2], at[4], bt[2];
  ldmatrix_x4(a, smem + 16 * l);
  ldmatrix_x4_trans(at, smem + 16 * l);
  ldmatrix_x2(b, smem + 16 * (l % 16));
  ldmatrix_x2_trans(bt, smem + 16 * (l % 16));

  float c[4] = {0.f, 0.f, 0.f, 0.f};
  float d[4];
  mma_bf16_m16n8k16(d, a, b, c);
  mma_bf16_m16n8k16(d, at, bt, d);  // d aliasing c

  float v = shfl_xor(d[0] + d[1] + d[2] + d[3], 1);
  int iv = shfl_xor(static_cast<int>(a[0] ^ b[1]), 16);
  const std::uint32_t packed = pack_bf16x2(v, fast_exp2(v));
  v += bf16_to_float(float_to_bf16(v)) + bf16_to_float(static_cast<std::uint16_t>(packed >> 16));
  const std::uint32_t halves = pack_f16x2(v, -v);
  v += f16_to_float(float_to_f16(v)) + f16_to_float(static_cast<std::uint16_t>(halves >> 16));

  float* s = reinterpret_cast<float*>(smem);
  st_shared(s + t, v);
  sync_block();
  v += ld_shared(s + (t + 1) % 32) + ld_global(out + t);

  sync_cluster();
  const unsigned peer = (cluster_ctarank() + 1) % cluster_nctarank();
  v += ld_cluster(s + t, peer);
  const Float2Pair two = ld_cluster(reinterpret_cast<const Float2Pair*>(s) + t / 2, peer);
  const uint4 four = ld_cluster(reinterpret_cast<const uint4*>(s) + t / 4, peer);
  v += two.x + two.y + static_cast<float>(four.w);
  sync_cluster();

  const unsigned idx = block_idx_x() + grid_dim_x() * (block_idx_y() + grid_dim_y() * block_idx_z());
  st_global(out + idx * block_dim_x() + t, v + static_cast<float>(warp_id() + grid_dim_z()));
  st_global(iout + idx * block_dim_x() + t, iv);
}
