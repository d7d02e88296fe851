// ddk emulation runtime: a block's life on a worker (its fibers, stacks and guarded shared memory, its start)
// and running the CTAs of a cluster to their end, with the checks made once they stop.
#include "runtime_internal.h"

#include <cstdlib>

namespace ddk::emu::detail {

namespace {

constexpr std::size_t kRedZone = 4096;    // guard bytes on both sides of the shared-memory buffer
constexpr unsigned char kSmemFill = 0xCD;
constexpr unsigned char kRedFill = 0xA7;

bool red_zones_intact(const Worker& w) {
  const char* lo_begin = w.smem_alloc;
  const char* lo_end = w.smem;
  const char* hi_begin = w.smem + w.smem_bytes;
  const char* hi_end = w.smem_alloc + w.smem_alloc_bytes;
  for (const char* p = lo_begin; p < lo_end; ++p)
    if (static_cast<unsigned char>(*p) != kRedFill) return false;
  for (const char* p = hi_begin; p < hi_end; ++p)
    if (static_cast<unsigned char>(*p) != kRedFill) return false;
  return true;
}

// Sets up block (bx, by, bz) on w: its threads at the kernel's entry, fresh shared memory, all runnable.
void start_block(Worker& w, unsigned bx, unsigned by, unsigned bz, unsigned block_x) {
  w.cluster_arrived = false;
  w.cluster_gen = 0;
  w.bx = bx;
  w.by = by;
  w.bz = bz;
  for (unsigned i = 0; i < block_x; ++i) {
    Fiber& f = *w.fibers[i];
    f.view.tid = i;
    f.view.lane = i & 31u;
    f.view.warp = i >> 5;
    f.view.bx = bx;
    f.view.by = by;
    f.view.bz = bz;
    f.view.block_dim = block_x;
    f.view.gx = w.grid.x;
    f.view.gy = w.grid.y;
    f.view.gz = w.grid.z;
    f.view.cluster_rank = w.cluster_rank;
    f.view.cluster_size = static_cast<unsigned>(w.cluster->blocks.size());
    f.view.smem = w.smem;
    f.view.owner = &f;
    f.state = FState::Ready;
    f.wait_kind = Coll::None;
    f.cp.clear();
    f.cp_head = 0;
    f.cp_groups.clear();
    f.cp_group_epoch.clear();
    f.cp_group_head = 0;
    f.wait_ordinal = 0;
    f.view.traced = w.trace != nullptr;
    unpoison_stack(f.stack.lo, f.stack.bytes);  // frames abandoned by an earlier block
    init_context(f.ctx, f.stack.lo, f.stack.bytes, &fiber_main, &f);
  }
  for (unsigned wp = 0; wp < block_x / 32; ++wp) {
    w.warps[wp].kind = Coll::None;
    w.warps[wp].arrived = 0;
  }
  w.bar_arrived = 0;
  w.bar_waiting.clear();
  w.done = 0;
  std::memset(w.smem, kSmemFill, w.smem_bytes);
  if (w.trace != nullptr) trace_block_start(w);
  w.q_head = 0;
  w.q_count = 0;
  for (unsigned i = 0; i < block_x; ++i) w.push(w.fibers[i].get());

}

}  // namespace

bool ensure_resources(Worker& w, unsigned nthreads, std::size_t smem_bytes) {
  if (w.stack_bytes == 0) w.stack_bytes = stack_bytes_from_env();
  while (w.fibers.size() < nthreads) {
    auto f = std::make_unique<Fiber>();
    if (!f->stack.allocate(w.stack_bytes)) {
      fail(w, kInternal, fmt("could not map a %zu-byte fiber stack", w.stack_bytes));
      return false;
    }
    f->worker = &w;
    w.fibers.push_back(std::move(f));
  }
  if (w.queue.size() < nthreads) w.queue.assign(nthreads, nullptr);
  if (w.warps.size() < nthreads / 32) w.warps.resize(nthreads / 32);
  w.bar_waiting.reserve(nthreads);
  const std::size_t rounded = (smem_bytes + 4095) / 4096 * 4096;
  const std::size_t need = kRedZone + rounded + kRedZone;
  if (w.smem_alloc_bytes < need) {
    std::free(w.smem_alloc);
    w.smem_alloc = static_cast<char*>(std::aligned_alloc(4096, need));
    w.smem_alloc_bytes = w.smem_alloc ? need : 0;
    if (w.smem_alloc == nullptr) {
      fail(w, kInternal, "could not allocate the shared-memory buffer");
      return false;
    }
  }
  w.smem = w.smem_alloc + kRedZone;
  w.smem_bytes = smem_bytes;
  std::memset(w.smem_alloc, kRedFill, w.smem_alloc_bytes);
  w.nthreads = nthreads;
  return true;
}

// Runs the CTAs of a cluster (of one, without clusters) to their end on this OS thread: each pass runs every
// CTA that has runnable threads, and the last arrival at a cluster barrier makes the other CTAs' threads
// runnable again. coords[k]: CTA rank k's block index.
void run_cluster(Cluster& cl, const std::array<unsigned, 3>* coords, unsigned block_x) {
  cl.arrived = 0;
  cl.waiting.clear();
  cl.split_arrived = 0;
  cl.split_done = 0;
  cl.split_waiting.clear();
  for (std::size_t k = 0; k < cl.blocks.size(); ++k)
    start_block(*cl.blocks[k], coords[k][0], coords[k][1], coords[k][2], block_x);
  for (bool ran = true; ran;) {
    ran = false;
    for (Worker* w : cl.blocks) {
      if (w->q_count == 0) continue;
      ran = true;
      run_ready(*w);
      if (w->failed) return;
    }
  }
  for (Worker* w : cl.blocks) {
    if (w->done == block_x) continue;
    std::string report = deadlock_report(*w);
    if (cl.blocks.size() > 1)
      for (Worker* other : cl.blocks)
        report += fmt("\n  cluster rank %u (%s): %u of %u threads exited", other->cluster_rank,
                      block_str(*other).c_str(), other->done, block_x);
    fail(*w, kDivergence, std::move(report));
    return;
  }
  for (Worker* w : cl.blocks) {
    if (!w->cluster_arrived) continue;
    fail(*w, kKernelException, fmt("%s exited after a cluster_arrive without its cluster_wait", block_str(*w).c_str()));
    return;
  }
  for (Worker* w : cl.blocks)
    if (w->trace != nullptr && w->trace->sanitize && cl.blocks.size() > 1) check_exit_after_remote_reads(*w);
  for (Worker* w : cl.blocks) {
    if (!red_zones_intact(*w)) {
      fail(*w, kMemoryError,
           fmt("%s wrote outside its %zu-byte dynamic shared memory (the guard bytes before or after it changed)",
               block_str(*w).c_str(), w->smem_bytes));
      return;
    }
    if (w->trace != nullptr) trace_block_end(*w);
  }
}

}  // namespace ddk::emu::detail
