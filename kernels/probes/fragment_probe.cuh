// One warp per block runs every warp-level primitive the verify kernel uses on caller-given random data, so
// the hardware (nvcc build) and the CPU emulation (g++ -DDDK_EMULATE build) can be compared bit for bit.
#pragma once

#include <ddk/primitives.h>

#include <cstdint>

namespace ddk_probe {

constexpr int kShuffleMasks = 5;    // xor 1, 2, 4, 8, 16
constexpr int kConversions = 3;     // pack_f16x2 (ordinary, overflow/subnormal), pack_bf16x2
constexpr int kTileBytes = 4 * 64 * 2;  // four 8x8 bf16 matrices

struct ProbeParams {
  const uint32_t* a;      // (trials, 32, 4) mma A fragments
  const uint32_t* b;      // (trials, 32, 2)
  const float* c;         // (trials, 32, 4)
  float* d;               // (trials, 32, 4)
  const uint16_t* tiles;  // (trials, 4, 8, 8) bf16: the matrices ldmatrix reads
  uint32_t* ldm;          // (trials, 32, 4) ldmatrix_x4
  uint32_t* ldm_trans;    // (trials, 32, 4) ldmatrix_x4_trans
  const float* values;    // (trials, 32) shuffle inputs
  float* shuffled;        // (trials, 32, 5)
  uint32_t* packed;       // (trials, 32, 3) the conversions of the shuffle inputs, see below
  float* widened;         // (trials, 32, 2) f16_to_float of both halves of packed[0]
};

DDK_GLOBAL void fragment_probe_kernel(const ProbeParams p) {
  const int trial = ddk::block_idx_x(), lane = ddk::lane_id();
  const int64_t at = static_cast<int64_t>(trial) * 32 + lane;

  uint32_t a[4], b[2];
  float c[4], d[4];
  for (int i = 0; i < 4; ++i) a[i] = p.a[at * 4 + i], c[i] = p.c[at * 4 + i];
  for (int i = 0; i < 2; ++i) b[i] = p.b[at * 2 + i];
  ddk::mma_bf16_m16n8k16(d, a, b, c);
  for (int i = 0; i < 4; ++i) p.d[at * 4 + i] = d[i];

  // Each lane copies 16 bytes of the four matrices into shared memory (row l%8 of matrix l/8).
  char* smem = ddk::dynamic_smem();
  const uint32_t* src = reinterpret_cast<const uint32_t*>(p.tiles + static_cast<int64_t>(trial) * (kTileBytes / 2));
  uint32_t* dst = reinterpret_cast<uint32_t*>(smem);
  for (int i = 0; i < 4; ++i) dst[lane * 4 + i] = src[lane * 4 + i];
  ddk::sync_block();
  uint32_t r[4];
  ddk::ldmatrix_x4(r, smem + lane * 16);
  for (int i = 0; i < 4; ++i) p.ldm[at * 4 + i] = r[i];
  ddk::ldmatrix_x4_trans(r, smem + lane * 16);
  for (int i = 0; i < 4; ++i) p.ldm_trans[at * 4 + i] = r[i];

  const float v = p.values[at];
  for (int k = 0; k < kShuffleMasks; ++k) p.shuffled[at * kShuffleMasks + k] = ddk::shfl_xor(v, 1 << k);

  // The conversions the split parts and the output go through (cvt.rn.f16x2.f32 and cvt.f32.f16 on the GPU,
  // integer rounding on the host): ordinary values, values past fp16's range and in its subnormals.
  const uint32_t ordinary = ddk::pack_f16x2(v * 3.f, v * -0.01f);
  p.packed[at * kConversions + 0] = ordinary;
  p.packed[at * kConversions + 1] = ddk::pack_f16x2(v * 70000.f, v * 1e-6f);
  p.packed[at * kConversions + 2] = ddk::pack_bf16x2(v, v * 1e-30f);
  p.widened[at * 2 + 0] = ddk::f16_to_float(static_cast<uint16_t>(ordinary & 0xffffu));
  p.widened[at * 2 + 1] = ddk::f16_to_float(static_cast<uint16_t>(ordinary >> 16));
}

}  // namespace ddk_probe
