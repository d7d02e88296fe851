// ddk emulation runtime: scheduling the threads of a block. Fibers run cooperatively until they block at a
// rendezvous (arrive / release) or exit; sync_block is the block's rendezvous.
#include "runtime_internal.h"

#include <exception>

namespace ddk::emu::detail {

// Stops the block: back to the scheduler, never to be resumed.
[[noreturn]] void abort_to_main(Fiber* f) {
  Worker* w = f->worker;
  f->state = FState::Diverged;
  w->current = nullptr;
  tl_view = nullptr;
  switch_ctx(&f->ctx, &w->main_ctx, true);
  std::abort();  // unreachable: an aborted fiber is never switched to again
}

void fiber_main(void* p) {
  context_started();
  Fiber* f = static_cast<Fiber*>(p);
  Worker* w = f->worker;
  std::string what;
  bool threw = false;
  try {
    w->thunk(w->args);
  } catch (const std::exception& e) {
    threw = true;
    what = e.what();
  } catch (...) {
    threw = true;
    what = "unknown exception";
  }
  if (threw) {
    fail(*w, kKernelException, fmt("exception escaped the kernel in %s, %s: %s", block_str(*w).c_str(),
                                    thread_str(*f).c_str(), what.c_str()));
    abort_to_main(f);
  }
  f->state = FState::Done;
  f->cp.clear();  // copies never waited for are dropped: nothing in this thread can observe them
  f->cp_groups.clear();
  f->cp_group_epoch.clear();
  ++w->done;
  switch_to_next(f, true);
  std::abort();  // unreachable: a finished fiber is never switched to again
}

// Runs w's runnable threads until none is left: they wait at a rendezvous, exited, or the block failed.
void run_ready(Worker& w) {
  if (w.q_count == 0) return;
  adopt_thread_stack(w.main_ctx);
  Fiber* first = w.pop();
  w.current = first;
  tl_view = &first->view;
  switch_ctx(&w.main_ctx, &first->ctx);
  tl_view = nullptr;
  w.current = nullptr;
}

// A rendezvous of `total` threads at one call site (sync_block: the block's; sync_cluster: the cluster's).
// True in the last thread to arrive; the others are parked in `waiting` until the caller releases them. A
// thread arriving at another call site than the first parks for good (the deadlock report names both).
bool arrive(Fiber* f, unsigned& arrived, Site& at, unsigned total, std::vector<Fiber*>& waiting, Coll kind,
            const Site& site) {
  if (arrived == 0) {
    at = site;
  } else if (!same_site(at, site)) {
    f->state = FState::Diverged;
    f->wait_kind = kind;
    f->wait_site = site;
    switch_to_next(f);
    abort_to_main(f);
  }
  if (++arrived < total) {
    f->state = FState::WaitBarrier;
    f->wait_kind = kind;
    f->wait_site = site;
    waiting.push_back(f);
    switch_to_next(f);
    return false;
  }
  arrived = 0;
  return true;
}

void release(std::vector<Fiber*>& waiting) {
  for (Fiber* g : waiting) {
    g->state = FState::Ready;
    g->wait_kind = Coll::None;
    g->worker->push(g);
  }
  waiting.clear();
}

void sync_block(const Site& site) {
  Fiber* f = current_fiber("sync_block");
  Worker& w = *f->worker;
  if (!arrive(f, w.bar_arrived, w.bar_site, w.nthreads, w.bar_waiting, Coll::SyncBlock, site)) return;
  if (w.trace != nullptr) trace_barrier(w, site);
  release(w.bar_waiting);
}

}  // namespace ddk::emu::detail
