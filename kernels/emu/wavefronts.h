// Shared-memory wavefronts of one warp instruction, from its lanes' byte addresses and access width: the
// count Nsight Compute reports as l1tex__data_pipe_lsu_wavefronts_mem_shared, and its bank conflicts.
//
// Model (32 banks of 4 bytes; bank = (offset / 4) % 32):
//   * a request is served in processing groups: the whole warp for accesses of up to 4 bytes, each
//     half-warp (lanes 0-15, 16-31) for 8-byte accesses, each quarter-warp for 16-byte accesses;
//     ldmatrix: each 8x8 matrix is one group, its 8 rows of 16 bytes addressed by 8 lanes;
//   * inside a group, lanes reading the same 4-byte word share it (broadcast); different words of one
//     bank serialise: the group costs max over banks of the distinct words it touches there (>= 1);
//   * a group with no active lane costs nothing; the instruction costs the sum over its groups;
//   * the ideal cost is the number of non-empty groups; bank conflicts = cost - ideal.
// Pure functions, no runtime state: the emulation runtime and the probes' expectations share them.
#pragma once

#include <cstdint>

namespace ddk::emu::wavefronts {

// Distinct-word cost of one processing group: `words[i]` are 4-byte word indices, `n` of them.
inline unsigned group_cost(const std::uint64_t* words, unsigned n) {
  if (n == 0) return 0;
  unsigned per_bank[32] = {};
  for (unsigned i = 0; i < n; ++i) {
    bool seen = false;
    for (unsigned j = 0; j < i; ++j)
      if (words[j] == words[i]) {
        seen = true;
        break;
      }
    if (!seen) ++per_bank[words[i] % 32];
  }
  unsigned worst = 1;
  for (unsigned b = 0; b < 32; ++b) worst = per_bank[b] > worst ? per_bank[b] : worst;
  return worst;
}

struct Cost {
  unsigned wavefronts = 0;
  unsigned ideal = 0;
};

// A load or store of `width` bytes (1, 2, 4, 8 or 16) per lane; `offset[l]` is lane l's byte offset in
// shared memory, used where bit l of `active` is set.
inline Cost lane_access(const std::uint64_t (&offset)[32], std::uint32_t active, unsigned width) {
  const unsigned group_lanes = width <= 4 ? 32 : width == 8 ? 16 : 8;
  const unsigned words_per_lane = width <= 4 ? 1 : width / 4;
  Cost cost;
  for (unsigned g0 = 0; g0 < 32; g0 += group_lanes) {
    std::uint64_t words[32 * 4];
    unsigned n = 0;
    for (unsigned l = g0; l < g0 + group_lanes; ++l) {
      if (!(active >> l & 1u)) continue;
      for (unsigned k = 0; k < words_per_lane; ++k) words[n++] = offset[l] / 4 + k;
    }
    if (n == 0) continue;
    cost.wavefronts += group_cost(words, n);
    ++cost.ideal;
  }
  return cost;
}

// ldmatrix .x1/.x2/.x4: matrix i's rows are addressed by lanes 8i..8i+7, 16 bytes each.
inline Cost ldmatrix(const std::uint64_t (&row_offset)[32], unsigned matrices) {
  Cost cost;
  for (unsigned m = 0; m < matrices; ++m) {
    std::uint64_t words[32];
    unsigned n = 0;
    for (unsigned l = 8 * m; l < 8 * m + 8; ++l)
      for (unsigned k = 0; k < 4; ++k) words[n++] = row_offset[l] / 4 + k;
    cost.wavefronts += group_cost(words, n);
    ++cost.ideal;
  }
  return cost;
}

}  // namespace ddk::emu::wavefronts
