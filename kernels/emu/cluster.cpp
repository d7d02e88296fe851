// ddk emulation runtime: thread-block clusters. sync_cluster, its halves cluster_arrive and cluster_wait, and
// ld_cluster's mapping of another CTA's shared memory.
#include "runtime_internal.h"

namespace ddk::emu::detail {

void sync_cluster(const Site& site) {
  Fiber* f = current_fiber("sync_cluster");
  Cluster& cl = *f->worker->cluster;
  const auto total = static_cast<unsigned>(f->worker->nthreads * cl.blocks.size());
  if (!arrive(f, cl.arrived, cl.site, total, cl.waiting, Coll::SyncCluster, site)) return;
  for (Worker* b : cl.blocks) {
    if (!b->cluster_arrived) continue;
    fail(*b, kKernelException, fmt("sync_cluster at %s: %s arrived at a cluster barrier it has not waited for",
                                   site_str(site).c_str(), block_str(*b).c_str()));
    abort_to_main(f);
  }
  for (Worker* b : cl.blocks)
    if (b->trace != nullptr) trace_barrier(*b, site, true);
  release(cl.waiting);
}

namespace {

// A CTA passes its cluster_wait: the phase ends (a cluster barrier, not a block barrier: what its threads
// did between their arrival and the wait is not ordered by it) and the others' released accesses are acquired.
void pass_cluster_wait(Worker& w) {
  w.cluster_arrived = false;
  if (w.trace != nullptr) {
    Trace& t = *w.trace;
    flush_all(w);
    if (t.count) {
      t.cta.count(Op::SyncCluster, intern_site(t, w.cluster_wait_site), w.nthreads / 32);
      ++t.cta.cluster_barriers;
      t.cta.phases.emplace_back();
    }
    ++t.cluster_epoch;
  }
  release(w.bar_waiting);
}

void cluster_misuse(Fiber* f, const Site& site, const char* what) {
  Worker& w = *f->worker;
  fail(w, kKernelException, fmt("%s at %s in %s: %s", coll_name(f->wait_kind), site_str(site).c_str(),
                                block_str(w).c_str(), what));
  abort_to_main(f);
}

}  // namespace

void cluster_arrive(const Site& site) {
  Fiber* f = current_fiber("cluster_arrive");
  Worker& w = *f->worker;
  if (!arrive(f, w.bar_arrived, w.bar_site, w.nthreads, w.bar_waiting, Coll::ClusterArrive, site)) return;
  f->wait_kind = Coll::ClusterArrive;
  if (w.cluster_arrived) cluster_misuse(f, site, "arrived again before waiting for the cluster barrier");
  if (w.trace != nullptr) {  // a block barrier, whose phase ends at the arrival
    Trace& t = *w.trace;
    trace_barrier(w, site);
    if (t.count) t.cta.phases[t.cta.phases.size() - 2].cluster_arrives = 1;
    trace_cluster_arrival(t);
  }
  Cluster& cl = *w.cluster;
  w.cluster_arrived = true;
  w.cluster_gen = cl.split_done;
  if (++cl.split_arrived == cl.blocks.size()) {  // the barrier completes: the CTAs waiting for it go on
    cl.split_arrived = 0;
    ++cl.split_done;
    std::vector<Worker*> waiting;
    waiting.swap(cl.split_waiting);
    for (Worker* b : waiting) pass_cluster_wait(*b);
  }
  f->wait_kind = Coll::None;
  release(w.bar_waiting);
}

void cluster_wait(const Site& site) {
  Fiber* f = current_fiber("cluster_wait");
  Worker& w = *f->worker;
  if (!arrive(f, w.bar_arrived, w.bar_site, w.nthreads, w.bar_waiting, Coll::ClusterWait, site)) return;
  f->wait_kind = Coll::ClusterWait;
  if (!w.cluster_arrived) cluster_misuse(f, site, "waited for a cluster barrier it did not arrive at");
  w.cluster_wait_site = site;
  Cluster& cl = *w.cluster;
  if (cl.split_done > w.cluster_gen) {
    f->wait_kind = Coll::None;
    pass_cluster_wait(w);
    return;
  }
  // the last thread waits with the others until another CTA's arrival completes the barrier
  f->state = FState::WaitBarrier;
  f->wait_site = site;
  w.bar_waiting.push_back(f);
  cl.split_waiting.push_back(&w);
  switch_to_next(f);
}

const void* cluster_map(const void* p, unsigned rank, unsigned bytes, const Site& site) {
  Fiber* f = current_fiber("ld_cluster");
  Worker& w = *f->worker;
  Cluster& cl = *w.cluster;
  const auto addr = reinterpret_cast<std::uintptr_t>(p), base = reinterpret_cast<std::uintptr_t>(w.smem);
  const long long off = static_cast<long long>(addr - base);
  std::string why;
  if (rank >= cl.blocks.size())
    why = fmt("rank %u is outside the cluster of %zu CTAs", rank, cl.blocks.size());
  else if (addr < base || addr - base + bytes > w.smem_bytes)
    why = fmt("offset %lld (+%u bytes) is outside the block's %zu-byte dynamic shared memory", off, bytes,
              w.smem_bytes);
  else if (addr % bytes != 0)
    why = fmt("offset %lld is not %u-byte aligned", off, bytes);
  else if (cl.blocks[rank]->done == cl.blocks[rank]->nthreads)
    why = fmt("CTA rank %u of the cluster has exited: its shared memory is gone", rank);
  if (!why.empty()) {
    fail(w, kMemoryError, fmt("ld_cluster at %s in %s, %s: %s", site_str(site).c_str(), block_str(w).c_str(),
                              thread_str(*f).c_str(), why.c_str()));
    abort_to_main(f);
  }
  Worker& target = *cl.blocks[rank];
  const char* mapped = target.smem + (addr - base);
  if (w.trace == nullptr) return mapped;
  if (&target == &w) {  // the CTA's own shared memory: checked as a plain shared load, counted as this ld_cluster
    if (w.trace->sanitize) shared_checked(w, *f, intern_site(*w.trace, site), p, bytes, false);  // (in range)
  } else if (w.trace->sanitize) {
    check_remote_read(target, w, *f, site, addr - base, bytes);
  }
  if (w.trace->count)
    record_lane(w, *f, intern_site(*w.trace, site), 3, false, bytes, reinterpret_cast<std::uint64_t>(mapped), 0,
                false);
  return mapped;
}

}  // namespace ddk::emu::detail
