// Tree-verify attention for absorbed MLA (DeepSeek-V3 / Kimi K2.x) on sm_80..sm_120, written once against the
// ddk primitives so the same source runs on the GPU (nvcc) and under the CPU emulation (g++ -DDDK_EMULATE).
//
// One CTA = (split s, row tile, request r). Rows are (draft token, local head) pairs packed into the MMA M
// dimension, so each KV tile is read once per CTA for all heads. The request's keys (prefix slots followed by
// the draft slots) are cut into 32-key tiles; the tiles are shared out among `num_splits` CTAs (split-KV,
// flash-decoding) whose partial results a second kernel combines by their log-sum-exp. Only keys at or after
// the prefix length read the tree mask (bit words per draft row over the draft columns).
//
// 8 warps: warp w works on row group g = w / 4 (16 rows) and quarter c = w % 4. For S = Q K^T, the quarter is
// a 144-wide slice of the 576 dims (Q fragments stay in registers); the four partial S tiles of a row group
// meet in shared memory. For O += P V, the quarter is a 128-wide slice of the 512 output columns.
#pragma once

#include <ddk/primitives.h>

#include <cstdint>

namespace ddk_verify {

constexpr int kDimQK = 576;          // [512 latent || 64 rope]
constexpr int kDimV = 512;           // V = the latent part of the same pool row
constexpr int kRowBytes = kDimQK * 2;
constexpr int kChunksPerRow = kRowBytes / 16;  // 72 chunks of 16 bytes
constexpr int kBlockM = 32;          // rows (token x head) per CTA
constexpr int kBlockN = 32;          // keys per tile
constexpr int kStages = 2;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kDimSlice = kDimQK / 4;   // 144 dims of S per warp
constexpr int kKSteps = kDimSlice / 16; // 9 mma k-steps per slice
constexpr int kColSlice = kDimV / 4;    // 128 output columns per warp
constexpr int kOutTiles = kColSlice / 8; // 16 n8 tiles of O per warp
constexpr int kStageBytes = kBlockN * kRowBytes;            // 36,864
constexpr int kReduceBytes = 2 * 4 * 16 * kBlockN * 4;      // 16,384: partial S of both row groups
constexpr int kSmemBytes = kStages * kStageBytes + kReduceBytes;  // 90,112 <= 101,376
static_assert(kBlockM * kRowBytes <= kStageBytes, "Q staging must fit in stage 0");
static_assert(kSmemBytes <= 101376, "sm_120 allows 99 KB of shared memory per block");

constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kLn2 = 0.69314718055994530942f;

struct VerifyParams {
  const uint16_t* q;            // (T, H, 576) bf16
  const uint16_t* kv;           // (pool, 576) bf16
  const int32_t* kv_slots;      // per request: prefix slots then draft slots
  const int32_t* kv_offsets;    // (bs + 1)
  const int32_t* q_offsets;     // (bs + 1)
  const uint32_t* mask_words;   // (T, mask_words_per_row): bit j of row t = draft column j visible
  uint16_t* out;                // (T, H, 512) bf16
  float* lse;                   // (T, H) natural-log LSE, or nullptr
  float* ws_o;                  // (num_splits, T * H, 512) fp32 partial outputs (num_splits > 1)
  float* ws_lse;                // (num_splits, T * H) partial LSE in log2 units (num_splits > 1)
  int total_rows;               // T * H
  int heads;
  int mask_words_per_row;
  int num_splits;
  float scale_log2;             // sm_scale * log2(e): scores live in the exp2 domain
};

// Byte offset of 16-byte chunk `chunk` of smem row `row`: XOR-swizzled within groups of 8 chunks, because the
// 1152-byte row stride maps every row to the same banks and ldmatrix reads 8 rows at one column.
DDK_HOST_DEVICE int swizzled(int row, int chunk) {
  return row * kRowBytes + (((chunk & ~7) | ((chunk ^ row) & 7)) << 4);
}

DDK_DEVICE void load_tile(char* stage, const VerifyParams& p, int key_base, int key_end, int first_key) {
  // 32 keys x 72 chunks, 9 chunks per thread; keys past the end are zero-filled (0 * garbage would be NaN).
  for (int i = ddk::thread_idx_x(); i < kBlockN * kChunksPerRow; i += kThreads) {
    const int j = i / kChunksPerRow, chunk = i % kChunksPerRow;
    const int key = first_key + j;
    const bool valid = key < key_end;
    const uint16_t* src = p.kv;
    if (valid) src += static_cast<int64_t>(ddk::ld_global(p.kv_slots + (key_base + key))) * kDimQK + chunk * 8;
    ddk::cp_async_16(stage + swizzled(j, chunk), src, valid);
  }
}

DDK_GLOBAL void verify_attention_kernel(const VerifyParams p) {
  char* smem = ddk::dynamic_smem();
  float* reduce = reinterpret_cast<float*>(smem + kStages * kStageBytes);
  const int split = ddk::block_idx_x(), row_tile = ddk::block_idx_y(), request = ddk::block_idx_z();
  const int warp = ddk::warp_id(), lane = ddk::lane_id();
  const int group = warp / 4, quarter = warp % 4;
  const int lr = lane / 4, lc = lane % 4;  // PTX groupID and threadID_in_group

  const int q_base = ddk::ld_global(p.q_offsets + request), q_len = ddk::ld_global(p.q_offsets + (request + 1)) - q_base;
  const int key_base = ddk::ld_global(p.kv_offsets + request), keys = ddk::ld_global(p.kv_offsets + (request + 1)) - key_base;
  const int prefix = keys - q_len;
  const int rows = q_len * p.heads;
  const int row0 = row_tile * kBlockM;
  if (row0 >= rows) return;  // uniform over the CTA

  const int tiles = (keys + kBlockN - 1) / kBlockN;
  const int per_split = (tiles + p.num_splits - 1) / p.num_splits;
  const int tile_begin = split * per_split;
  const int tile_end = tile_begin + per_split < tiles ? tile_begin + per_split : tiles;

  // The two rows this lane owns in every C fragment, relative to the CTA and as (token, head).
  int my_token[2], my_global_row[2];
  bool my_valid[2];
  for (int h = 0; h < 2; ++h) {
    const int r = row0 + group * 16 + lr + 8 * h;
    my_valid[h] = r < rows;
    my_token[h] = my_valid[h] ? r / p.heads : 0;
    my_global_row[h] = (q_base + my_token[h]) * p.heads + (my_valid[h] ? r % p.heads : 0);
  }

  float o[kOutTiles][4];
  for (int n = 0; n < kOutTiles; ++n)
    for (int k = 0; k < 4; ++k) o[n][k] = 0.f;
  float row_max[2] = {kNegInf, kNegInf}, row_sum[2] = {0.f, 0.f};

  if (tile_begin < tile_end) {
    // Q: stage the CTA's 32 rows in smem (stage 0), then each warp keeps its 16 rows x 144 dims in registers.
    for (int i = ddk::thread_idx_x(); i < kBlockM * kChunksPerRow; i += kThreads) {
      const int m = i / kChunksPerRow, chunk = i % kChunksPerRow;
      const int r = row0 + m;
      const bool valid = r < rows;
      const uint16_t* src = p.q;
      if (valid) src += (static_cast<int64_t>(q_base + r / p.heads) * p.heads + r % p.heads) * kDimQK + chunk * 8;
      ddk::cp_async_16(smem + swizzled(m, chunk), src, valid);
    }
    ddk::cp_async_commit();
    ddk::cp_async_wait_all();
    ddk::sync_block();
    uint32_t qf[kKSteps][4];
    for (int ks = 0; ks < kKSteps; ++ks) {
      const int chunk = (quarter * kDimSlice + ks * 16) / 8 + lane / 16;
      ddk::ldmatrix_x4(qf[ks], smem + swizzled(group * 16 + lane % 16, chunk));
    }
    ddk::sync_block();  // stage 0 is about to hold keys

    load_tile(smem, p, key_base, keys, tile_begin * kBlockN);
    ddk::cp_async_commit();
    for (int tile = tile_begin; tile < tile_end; ++tile) {
      const int it = tile - tile_begin;
      char* stage = smem + (it % kStages) * kStageBytes;
      if (tile + 1 < tile_end) load_tile(smem + ((it + 1) % kStages) * kStageBytes, p, key_base, keys, (tile + 1) * kBlockN);
      ddk::cp_async_commit();
      ddk::cp_async_wait<1>();
      ddk::sync_block();

      // Partial S over this warp's 144 dims: 4 n8 tiles of keys.
      float s[4][4];
      for (int n = 0; n < 4; ++n)
        for (int k = 0; k < 4; ++k) s[n][k] = 0.f;
      for (int ks = 0; ks < kKSteps; ++ks) {
        for (int pair = 0; pair < 2; ++pair) {
          uint32_t b[4];
          const int m = lane / 8;
          const int key = pair * 16 + (m / 2) * 8 + lane % 8;
          const int chunk = (quarter * kDimSlice + ks * 16) / 8 + (m % 2);
          ddk::ldmatrix_x4(b, stage + swizzled(key, chunk));
          const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
          ddk::mma_bf16_m16n8k16(s[2 * pair], qf[ks], b0, s[2 * pair]);
          ddk::mma_bf16_m16n8k16(s[2 * pair + 1], qf[ks], b1, s[2 * pair + 1]);
        }
      }
      float* mine = reduce + ((group * 4 + quarter) * 16) * kBlockN;
      for (int n = 0; n < 4; ++n)
        for (int h = 0; h < 2; ++h) {
          ddk::st_shared(mine + ((lr + 8 * h) * kBlockN + n * 8 + 2 * lc), s[n][2 * h]);
          ddk::st_shared(mine + ((lr + 8 * h) * kBlockN + n * 8 + 2 * lc + 1), s[n][2 * h + 1]);
        }
      ddk::sync_block();

      // Full S (the four quarters summed in a fixed order, so every warp of the group agrees bit for bit),
      // scaled into the exp2 domain and masked.
      float tile_max[2] = {kNegInf, kNegInf};
      for (int n = 0; n < 4; ++n)
        for (int e = 0; e < 4; ++e) {
          const int h = e / 2;
          const int at = (lr + 8 * h) * kBlockN + n * 8 + 2 * lc + (e % 2);
          float v = 0.f;
          for (int qq = 0; qq < 4; ++qq) v += ddk::ld_shared(reduce + (((group * 4 + qq) * 16) * kBlockN + at));
          v *= p.scale_log2;
          const int key = tile * kBlockN + n * 8 + 2 * lc + (e % 2);
          if (key >= keys) {
            v = kNegInf;
          } else if (key >= prefix && my_valid[h]) {
            const int j = key - prefix;
            const uint32_t word =
                ddk::ld_global(p.mask_words + (static_cast<int64_t>(q_base + my_token[h]) * p.mask_words_per_row + j / 32));
            if (!((word >> (j % 32)) & 1u)) v = kNegInf;
          }
          s[n][e] = v;
          tile_max[h] = v > tile_max[h] ? v : tile_max[h];
        }
      float scale_old[2], use_max[2];
      for (int h = 0; h < 2; ++h) {
        tile_max[h] = fmaxf(tile_max[h], ddk::shfl_xor(tile_max[h], 1));
        tile_max[h] = fmaxf(tile_max[h], ddk::shfl_xor(tile_max[h], 2));
        const float new_max = fmaxf(row_max[h], tile_max[h]);
        use_max[h] = new_max == kNegInf ? 0.f : new_max;  // nothing visible yet: avoid (-inf) - (-inf)
        scale_old[h] = ddk::fast_exp2(row_max[h] - use_max[h]);
        row_max[h] = new_max;
        row_sum[h] *= scale_old[h];
      }
      for (int n = 0; n < kOutTiles; ++n) {
        o[n][0] *= scale_old[0];
        o[n][1] *= scale_old[0];
        o[n][2] *= scale_old[1];
        o[n][3] *= scale_old[1];
      }
      // P rounded to bf16 before P.V, and the row sums taken of the rounded values.
      uint32_t pf[2][4];
      for (int n = 0; n < 4; ++n)
        for (int h = 0; h < 2; ++h) {
          const uint32_t packed = ddk::pack_bf16x2(ddk::fast_exp2(s[n][2 * h] - use_max[h]),
                                                   ddk::fast_exp2(s[n][2 * h + 1] - use_max[h]));
          row_sum[h] += ddk::bf16_to_float(static_cast<uint16_t>(packed & 0xffffu)) +
                        ddk::bf16_to_float(static_cast<uint16_t>(packed >> 16));
          pf[n / 2][(n % 2) * 2 + h] = packed;  // C fragments of n-tiles 2j, 2j+1 -> A fragment of k-step j
        }

      for (int kstep = 0; kstep < 2; ++kstep)
        for (int pair = 0; pair < kOutTiles / 2; ++pair) {
          uint32_t b[4];
          const int m = lane / 8;
          const int key = kstep * 16 + (m % 2) * 8 + lane % 8;
          const int chunk = (quarter * kColSlice + pair * 16) / 8 + m / 2;
          ddk::ldmatrix_x4_trans(b, stage + swizzled(key, chunk));
          const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
          ddk::mma_bf16_m16n8k16(o[2 * pair], pf[kstep], b0, o[2 * pair]);
          ddk::mma_bf16_m16n8k16(o[2 * pair + 1], pf[kstep], b1, o[2 * pair + 1]);
        }
      ddk::sync_block();  // the stage and the reduce buffer are rewritten next iteration
    }
  }

  // Row sums were kept per lane; the 4 lanes of a quad hold the rest of each row.
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += ddk::shfl_xor(row_sum[h], 1);
    row_sum[h] += ddk::shfl_xor(row_sum[h], 2);
  }
  for (int h = 0; h < 2; ++h) {
    if (!my_valid[h]) continue;
    const float inv = row_sum[h] > 0.f ? 1.f / row_sum[h] : 0.f;  // a fully masked row gives 0, not NaN
    // NaN (a poisoned key was read) must reach the combine and the output, never hide as an empty split.
    const bool seen = row_sum[h] > 0.f || row_sum[h] != row_sum[h];
    const float lse2 = seen ? row_max[h] + log2f(row_sum[h]) : kNegInf;
    const int64_t grow = my_global_row[h];
    if (p.num_splits == 1) {
      uint32_t* dst = reinterpret_cast<uint32_t*>(p.out + grow * kDimV + quarter * kColSlice);
      for (int n = 0; n < kOutTiles; ++n)
        ddk::st_global(dst + (n * 8 + 2 * lc) / 2, ddk::pack_bf16x2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv));
      if (p.lse != nullptr && quarter == 0 && lc == 0) ddk::st_global(p.lse + grow, lse2 * kLn2);
    } else {
      float* dst = p.ws_o + (static_cast<int64_t>(split) * p.total_rows + grow) * kDimV + quarter * kColSlice;
      for (int n = 0; n < kOutTiles; ++n) {
        ddk::st_global(dst + (n * 8 + 2 * lc), o[n][2 * h] * inv);
        ddk::st_global(dst + (n * 8 + 2 * lc + 1), o[n][2 * h + 1] * inv);
      }
      if (quarter == 0 && lc == 0) ddk::st_global(p.ws_lse + (static_cast<int64_t>(split) * p.total_rows + grow), lse2);
    }
  }
}

// Combine split partials: one CTA of 128 threads per (token, head) row, 4 columns per thread.
constexpr int kCombineThreads = 128;

DDK_GLOBAL void combine_splits_kernel(const VerifyParams p) {
  const int64_t row = ddk::block_idx_x();
  if (row >= p.total_rows) return;
  float best = kNegInf;
  for (int s = 0; s < p.num_splits; ++s)
    best = fmaxf(best, ddk::ld_global(p.ws_lse + (s * static_cast<int64_t>(p.total_rows) + row)));
  const float base = best == kNegInf ? 0.f : best;
  float weight_sum = 0.f;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  const int col = ddk::thread_idx_x() * 4;
  for (int s = 0; s < p.num_splits; ++s) {
    const float lse = ddk::ld_global(p.ws_lse + (s * static_cast<int64_t>(p.total_rows) + row));
    const float w = ddk::fast_exp2(lse - base);  // an empty split has lse -inf: weight 0
    weight_sum += w;
    if (w == 0.f) continue;
    const float* src = p.ws_o + (s * static_cast<int64_t>(p.total_rows) + row) * kDimV + col;
    for (int k = 0; k < 4; ++k) acc[k] += w * ddk::ld_global(src + k);
  }
  const float inv = weight_sum > 0.f ? 1.f / weight_sum : 0.f;
  uint32_t* dst = reinterpret_cast<uint32_t*>(p.out + row * kDimV + col);
  ddk::st_global(dst + 0, ddk::pack_bf16x2(acc[0] * inv, acc[1] * inv));
  ddk::st_global(dst + 1, ddk::pack_bf16x2(acc[2] * inv, acc[3] * inv));
  if (p.lse != nullptr && ddk::thread_idx_x() == 0)
    ddk::st_global(p.lse + row, weight_sum > 0.f ? (base + log2f(weight_sum)) * kLn2 : kNegInf);
}

}  // namespace ddk_verify
