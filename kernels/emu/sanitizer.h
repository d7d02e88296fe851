// Shadow state of a block's shared memory for racecheck and the uninitialised-read check, and the
// ordering rule between two accesses. Internal to the runtime: included through runtime_internal.h only.
//
// Ordering (what the emulation can prove; the GPU guarantees nothing more):
//   * accesses of one thread are ordered (program order);
//   * accesses of two threads are ordered when a sync_block lies between them (the block epoch,
//     the number of barriers the block has passed, differs);
//   * accesses of two lanes of one warp are also ordered when a warp collective of that warp (shfl,
//     mma, ldmatrix: all .sync.aligned) lies between them (the warp epoch differs);
//   * accesses of two CTAs of a cluster (ld_cluster reads another CTA's shared memory) are ordered only
//     when a sync_cluster lies between them;
//   * a cp.async write may land at any time from its issue to the wait that completes it: it is
//     unordered with every other thread's access from the issue epoch on, and visible to them only
//     after a barrier following the wait.
// Each byte keeps its last write and its two last reads by different threads: a write checks the read
// by another thread, and the newest such read is always one of the two (older unordered reads by a
// third thread, before an ordered one, can be missed: the report is a lower bound).
#pragma once

#include <cstdint>
#include <vector>

namespace ddk::emu::detail {

struct ShadowAccess {
  std::uint32_t epoch1 = 0;      // block epoch + 1; 0: no such access
  std::uint32_t warp_epoch = 0;  // the warp's epoch at the access
  std::uint16_t tid = 0;
  std::uint16_t site = 0;        // the worker's site id
};

struct ShadowByte {
  ShadowAccess write, read1, read2;  // read2: the newest read by a thread other than read1's
  // The last read by another CTA of the cluster (ld_cluster): epoch1 is the cluster epoch + 1 (cluster
  // barriers passed), tid the reader's, site interned in this block's trace. Only a cluster barrier orders
  // it with this block's accesses.
  ShadowAccess remote;
  std::uint16_t remote_rank = 0;
};

// The access being checked: issued at (epoch_lo, warp_epoch_lo) and happening at (epoch, warp_epoch).
struct AccessNow {
  ShadowAccess at;
  std::uint32_t epoch_lo1 = 0, warp_epoch_lo = 0;
};

// True when `prev` and the access `now` are not ordered and belong to different threads.
inline bool unordered(const ShadowAccess& prev, const AccessNow& now) {
  if (prev.epoch1 == 0 || prev.tid == now.at.tid) return false;
  if (prev.epoch1 < now.epoch_lo1) return false;  // a barrier lies between
  if (prev.tid / 32 != now.at.tid / 32) return true;
  return prev.warp_epoch >= now.warp_epoch_lo;  // same warp: ordered by a warp collective between
}

struct Shadow {
  std::vector<ShadowByte> bytes;

  void reset(std::size_t n) {
    if (bytes.size() < n) bytes.resize(n);
    std::fill(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n), ShadowByte{});
  }
};

}  // namespace ddk::emu::detail
