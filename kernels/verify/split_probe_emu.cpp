// The verify kernel's split of work across CTAs as its own functions compute it, under the CPU emulation (g++
// -DDDK_EMULATE), behind a C ABI for ctypes: tests/test_work_split.py holds the host's mirror
// (ddbench/kernel/work_split.py) to it over many batches and plans. No attention is computed: only the
// offsets are read.
#include "verify_attn.cuh"

#include <cstdint>
#include <string>

namespace {

using ddk_verify::VerifyParams;

// What a walk kernel's CTA writes for itself at walk + cta * (2 + 5 * capacity): its cluster merge, its
// segments' count, then each segment's request, row tile, key tiles [begin, end) and slot (the first
// `capacity` of them).
constexpr int kWalkHeader = 2, kWalkFields = 5;
// What a place kernel's CTA writes for its row tile at placed + b * (3 + capacity): the row tile's first and
// last CTA, its parts (0: one CTA, or one cluster, had it whole), then their slots in CTA order.
constexpr int kPlaceHeader = 3;

struct Outputs {
  int32_t* walk;
  int walk_capacity;
  const int64_t* tile_rows;  // each row tile's first row over the batch (token * heads + head)
  int32_t* placed;
  int placed_capacity;
};

// CTA c's walk over its range, as verify_attention_kernel takes it (first_range, then segment_at until the
// range's end; a merging cluster's CTAs have their one segment), by its thread 0.
DDK_GLOBAL void walk_kernel(const VerifyParams p, const Outputs out) {
  if (ddk::thread_idx_x() != 0) return;
  const int cta = static_cast<int>(ddk::block_idx_x());
  ddk_verify::Range range;
  ddk_verify::Cursor at;
  ddk_verify::Request g;
  int merge;
  int64_t units;
  ddk_verify::first_range(p, cta, range, at, g, merge, units);
  int32_t* mine = out.walk + static_cast<int64_t>(cta) * (kWalkHeader + kWalkFields * out.walk_capacity);
  int segment = 0;
  while (at.request_base + at.unit < range.end) {
    const ddk_verify::SegmentAt s = ddk_verify::segment_at(p, at, range.end, g);
    const bool whole = s.tile_begin == 0 && s.tile_end == g.tiles;
    const int slot = whole ? -1 : 2 * cta + (segment == 0 ? 0 : 1);  // the walk's own rule (in the kernel body)
    if (segment < out.walk_capacity) {
      int32_t* f = mine + kWalkHeader + kWalkFields * segment;
      f[0] = s.request;
      f[1] = s.row_tile;
      f[2] = s.tile_begin;
      f[3] = s.tile_end;
      f[4] = slot;
    }
    ++segment;
    at = ddk_verify::Cursor{s.request_base, s.row_tile * g.tiles + s.tile_end, s.request};
  }
  mine[0] = merge;
  mine[1] = segment;
}

// Row tile b's place and parts as the combine finds them (place_segment, then list_parts: the final merge's
// list too), by one warp.
DDK_GLOBAL void place_kernel(const VerifyParams p, const Outputs out) {
  char* smem = ddk::dynamic_smem();
  auto* segment = reinterpret_cast<ddk_verify::CombineSegment*>(smem);
  int* listed = reinterpret_cast<int*>(smem + ddk_verify::kCombineSegmentBytes);
  const int b = static_cast<int>(ddk::block_idx_x());
  const int64_t row = out.tile_rows[b];
  ddk_verify::place_segment(p, segment, row, row + 1);
  ddk::sync_block();
  const ddk_verify::SegmentRows s = ddk::ld_shared(&segment->rows);
  const ddk_verify::SegmentUnits u = ddk::ld_shared(&segment->units);
  const ddk_verify::SegmentCtas c = ddk::ld_shared(&segment->ctas);
  if (s.parts > 0) ddk_verify::list_parts(p, listed, 32, u.units, c.first, c.last, u.tile_base, s.tiles);
  ddk::sync_block();
  if (ddk::thread_idx_x() != 0) return;
  int32_t* mine = out.placed + static_cast<int64_t>(b) * (kPlaceHeader + out.placed_capacity);
  mine[0] = static_cast<int32_t>(c.first);
  mine[1] = static_cast<int32_t>(c.last);
  mine[2] = s.parts;
  const int block_m = ddk_verify::kGroupRows * p.row_groups;
  for (int i = 0; i < s.parts && i < out.placed_capacity; ++i)
    mine[kPlaceHeader + i] = ddk::ld_shared(listed + i) / block_m;  // the list holds slot * block_m
}

}  // namespace

// The walk of every CTA of a launch of `num_ctas` (whole_row_tiles, row_groups, cluster: the launch's), and the
// place and parts of each row tile whose first row is in tile_rows. Returns the launch status (the launchers'
// check of the cluster size included); the message in error.
extern "C" int ddk_split_probe(const int32_t* q_offsets, const int32_t* kv_offsets, const int32_t* slot_offsets,
                               int batch, int heads, int num_ctas, int whole_row_tiles, int row_groups, int cluster,
                               int32_t* walk, int walk_capacity, const int64_t* tile_rows, int n_tiles,
                               int32_t* placed, int placed_capacity, char* error, int error_len) {
  VerifyParams p{};
  p.q_offsets = q_offsets;
  p.kv_offsets = kv_offsets;
  p.slot_offsets = slot_offsets;
  p.batch = batch;
  p.heads = heads;
  p.num_ctas = num_ctas;
  p.whole_row_tiles = whole_row_tiles;
  p.row_groups = row_groups;
  p.cluster = cluster;
  const auto len = static_cast<std::size_t>(error_len);
  if (!ddk_verify::valid_cluster(p.cluster, p.num_ctas, p.whole_row_tiles))
    return ddk::emu::copy_status({ddk::emu::kInvalidLaunch, "cluster of " + std::to_string(cluster) +
                                                                " for " + std::to_string(num_ctas) + " CTAs"},
                                 error, len);
  const Outputs out{walk, walk_capacity, tile_rows, placed, placed_capacity};
  ddk::emu::Status status =
      ddk::emu::launch(walk_kernel, ddk::emu::Dim3(static_cast<unsigned>(num_ctas)), 32, 0, p, out);
  if (status.ok() && n_tiles > 0 && whole_row_tiles == 0)  // as the combine, which has nothing to merge then
    status = ddk::emu::launch(place_kernel, ddk::emu::Dim3(static_cast<unsigned>(n_tiles)), 32,
                              ddk_verify::kCombineSegmentBytes + 4 * static_cast<std::size_t>(num_ctas), p, out);
  return ddk::emu::copy_status(status, error, len);
}
