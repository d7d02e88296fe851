// ddk emulation runtime, internal: the state its files share (a block's fibers and worker, a cluster, a traced
// launch's records) and the functions one file calls in another. Not for kernels: they include runtime.h
// through <ddk/primitives.h>. README.md ("Files") says which file holds what.
#pragma once

#include "runtime.h"

#include "context.h"
#include "counters.h"
#include "sanitizer.h"
#include "wavefronts.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

// Hidden: one emulation library's runtime never binds to another's loaded in the same process, and calls
// between the runtime's files go direct, not through the PLT.
#pragma GCC visibility push(hidden)

namespace ddk::emu::detail {

// ------------------------------------------------------------------------------ fibers, worker --

struct Worker;

struct CpCopy {
  void* dst;
  const void* src;
  bool valid;
  std::uint8_t bytes = 16;  // 4 or 16
  std::uint32_t issue_epoch1 = 0, issue_warp_epoch = 0;  // traced launches: when it was issued, where
  std::uint16_t site = 0;
};

struct Trace;

enum class FState : std::uint8_t { Ready, WaitWarp, WaitBarrier, Diverged, Done };

struct Fiber {
  ThreadView view;
  Context ctx;
  Worker* worker = nullptr;
  FState state = FState::Ready;
  Coll wait_kind = Coll::None;
  Site wait_site{};
  std::vector<CpCopy> cp;                // queued copies (cp_head.. are pending)
  std::size_t cp_head = 0;
  std::vector<std::size_t> cp_groups;    // end index (into cp) of each committed group
  std::vector<std::uint32_t> cp_group_epoch;  // traced launches: the block epoch of each commit
  std::size_t cp_group_head = 0;
  std::uint32_t wait_ordinal = 0;        // traced launches: cp.async waits this thread has made
  Stack stack;
};

struct WarpSlot {
  Coll kind = Coll::None;
  Site site{};
  unsigned arrived = 0;
  LaneArgs args[32];
};

// The CTAs of one thread-block cluster, run together on one OS thread (a launch without clusters runs
// clusters of one), and the state of their cluster barrier.
struct Cluster {
  std::vector<Worker*> blocks;  // by rank
  unsigned arrived = 0;
  Site site{};
  std::vector<Fiber*> waiting;
  // cluster_arrive / cluster_wait: the CTAs arrived at the barrier now filling, the barriers completed, and
  // the CTAs whose threads wait for the one filling
  std::size_t split_arrived = 0;
  std::uint64_t split_done = 0;
  std::vector<Worker*> split_waiting;
};

struct Worker {
  std::vector<std::unique_ptr<Fiber>> fibers;
  std::size_t stack_bytes = 0;
  unsigned nthreads = 0;
  Context main_ctx;
  Fiber* current = nullptr;

  std::vector<Fiber*> queue;  // ring buffer of runnable fibers
  std::size_t q_head = 0, q_count = 0;

  std::vector<WarpSlot> warps;
  unsigned bar_arrived = 0;
  Site bar_site{};
  std::vector<Fiber*> bar_waiting;
  unsigned done = 0;
  bool cluster_arrived = false;  // at a cluster barrier it has not waited for yet
  std::uint64_t cluster_gen = 0;  // that barrier: the cluster's split_done when it arrived
  Site cluster_wait_site{};

  char* smem_alloc = nullptr;
  std::size_t smem_alloc_bytes = 0;
  char* smem = nullptr;
  std::size_t smem_bytes = 0;

  KernelThunk thunk = nullptr;
  const void* args = nullptr;
  Dim3 grid{};
  unsigned bx = 0, by = 0, bz = 0;

  bool failed = false;
  Status status;
  Trace* trace = nullptr;  // the launch's instrumentation state for this worker, when traced
  Cluster* cluster = nullptr;
  unsigned cluster_rank = 0;

  ~Worker() { std::free(smem_alloc); }

  void push(Fiber* f) {
    std::size_t idx = q_head + q_count;
    if (idx >= queue.size()) idx -= queue.size();
    queue[idx] = f;
    ++q_count;
  }
  Fiber* pop() {
    if (q_count == 0) return nullptr;
    Fiber* f = queue[q_head];
    if (++q_head == queue.size()) q_head = 0;
    --q_count;
    return f;
  }
};

// ----------------------------------------------- traced launches (trace.cpp, counting.cpp, sanitizer.cpp) --

struct MemInstr {
  std::uint16_t site = 0;
  std::uint8_t kind = 0;  // 0 shared load/store, 1 global load/store, 2 cp.async, 3 ld_cluster
  bool store = false;
  std::uint8_t width = 0;
  std::uint32_t mask = 0, valid = 0;
  std::uint64_t addr[32];
  std::uint64_t src[32];
};

struct SiteOcc {
  std::uint32_t count[32] = {};
  std::vector<std::uint32_t> instr;  // occurrence k -> index into the warp's pending instructions
  bool touched = false;
};

struct WarpTrace {
  std::vector<MemInstr> pending;
  std::vector<SiteOcc> occ;  // by site id
  std::vector<std::uint16_t> touched;
  std::uint32_t epoch = 0;  // warp collectives completed by this warp in this block
};

struct SiteKeyHash {
  std::size_t operator()(const std::pair<const char*, std::uint64_t>& k) const {
    return std::hash<const void*>()(k.first) ^ (std::hash<std::uint64_t>()(k.second) * 0x9e3779b97f4a7c15ull);
  }
};

struct FindingRec {
  std::string key;   // what makes two findings the same (check, hazard, sites, buffer)
  std::string json;  // without "count"
  std::uint64_t cta_linear = 0, seq = 0, count = 0;
};

constexpr std::size_t kMaxPending = 1u << 16;  // per warp; past it instructions close early (see README)

struct Trace {
  const LaunchOptions* opt = nullptr;
  bool count = false, sanitize = false;
  std::vector<Site> sites;
  std::unordered_map<std::pair<const char*, std::uint64_t>, std::uint16_t, SiteKeyHash> site_ids;
  std::vector<WarpTrace> warps;
  std::uint32_t epoch = 0;  // barriers the current block has passed
  std::uint32_t cluster_epoch = 0;  // cluster barriers it has waited for (acquired)
  std::uint32_t cluster_arrivals = 0;  // cluster barriers it has arrived at (released its accesses to)
  // by cluster barrier k (1-based): epoch + 1 of the CTA's first access after its arrival there ([0] = 0)
  std::vector<std::uint32_t> arrive_floor1{0};
  CtaRecord cta;
  std::vector<CtaRecord> done;
  std::unordered_set<std::uint64_t> cta_sectors, launch_sectors;
  Shadow shadow;
  std::vector<FindingRec> findings;
  std::unordered_map<std::string, std::size_t> finding_index;
  std::uint64_t findings_total = 0, finding_seq = 0;
  std::uint64_t shared_checked = 0, global_checked = 0;
  bool pending_overflow = false;
  std::uint64_t weight = 1;  // of the block now running (sampled launches)
};

// -------------------------------------------------------------------------- messages (messages.cpp) --

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
const char* coll_name(Coll k);
std::string site_str(const Site& s);

inline bool same_site(const Site& a, const Site& b) {
  if (a.line() != b.line() || a.column() != b.column()) return false;
  const char* fa = a.file_name();
  const char* fb = b.file_name();
  return fa == fb || std::strcmp(fa, fb) == 0;
}

// "0-15", "3", "0-3,5,7-9" for a 32-bit lane mask.
std::string lane_list(std::uint32_t mask);
std::string lanes_phrase(std::uint32_t mask);
std::string block_str(const Worker& w);
std::string thread_str(const Fiber& f);
// Stops the block with this status (the first failure of a block wins).
void fail(Worker& w, int code, std::string msg);
std::string json_escape(const std::string& in);
std::string who_json(unsigned tid, const std::string& site);

// ---------------------------------------------------------------------- scheduling (scheduler.cpp) --

// Leaves fiber f (blocked, done, or aborting) for the next runnable fiber, or for the block's
// scheduler when none is left. Returns when f is resumed.
inline void switch_to_next(Fiber* f, bool dying = false) {
  Worker* w = f->worker;
  Fiber* n = w->pop();
  if (n != nullptr) {
    w->current = n;
    tl_view = &n->view;
    switch_ctx(&f->ctx, &n->ctx, dying);
  } else {
    w->current = nullptr;
    tl_view = nullptr;
    switch_ctx(&f->ctx, &w->main_ctx, dying);
  }
}

// Stops the block: back to the scheduler, never to be resumed.
[[noreturn]] void abort_to_main(Fiber* f);
// The entry of every fiber: runs the kernel, then leaves for the next runnable thread.
void fiber_main(void* p);
// Runs w's runnable threads until none is left: they wait at a rendezvous, exited, or the block failed.
void run_ready(Worker& w);
// A rendezvous of `total` threads at one call site (sync_block: the block's; sync_cluster: the cluster's).
// True in the last thread to arrive; the others are parked in `waiting` until the caller releases them. A
// thread arriving at another call site than the first parks for good (the deadlock report names both).
bool arrive(Fiber* f, unsigned& arrived, Site& at, unsigned total, std::vector<Fiber*>& waiting, Coll kind,
            const Site& site);
// Makes the parked threads runnable again.
void release(std::vector<Fiber*>& waiting);

inline Fiber* current_fiber(const char* what) {
  ThreadView* v = tl_view;
  if (v == nullptr) outside_launch(what);
  return static_cast<Fiber*>(v->owner);
}

// ------------------------------------------------------------------------------- blocks (blocks.cpp) --

// Fibers, stacks and shared memory for blocks of `nthreads` threads and `smem_bytes` on w; false (and w
// failed) when they cannot be had.
bool ensure_resources(Worker& w, unsigned nthreads, std::size_t smem_bytes);
// Runs the CTAs of a cluster (of one, without clusters) to their end on this OS thread. coords[k]: CTA rank
// k's block index.
void run_cluster(Cluster& cl, const std::array<unsigned, 3>* coords, unsigned block_x);
// One line per group of consecutive warps in the same state; which lanes wait where or have exited
// (deadlock.cpp).
std::string deadlock_report(Worker& w);

// ------------------------------------------------------------------------- collectives.cpp, cluster.cpp --

// True when [p, p+bytes) lies inside the block's shared memory and p is `bytes`-aligned; else says why.
bool check_smem(const Worker& w, const void* p, unsigned bytes, std::string* why);

// ------------------------------------------------------------------------------- tracing (trace.cpp) --

std::uint16_t intern_site(Trace& t, const Site& site);
std::string site_of(const Trace& t, std::uint16_t id);
// Closes the warp's pending instructions (counting.cpp counts each).
void flush_warp(Worker& w, unsigned warp);
void flush_all(Worker& w);
// One lane's traced access, into its warp instruction: kind 0 shared load/store, 1 global, 2 cp.async (src and
// valid: its global side), 3 ld_cluster, 4 atomic.
void record_lane(Worker& w, const Fiber& f, std::uint16_t site, std::uint8_t kind, bool store, unsigned width,
                 std::uint64_t addr, std::uint64_t src, bool valid);
void trace_block_start(Worker& w);
void trace_block_end(Worker& w);
// At the last lane's arrival, before the collective's effect: close the warp's instructions, count it.
void trace_collective(Worker& w, Coll kind, const WarpSlot& s, unsigned warp);
// The CTA arrives at a cluster barrier (after the block barrier that goes with it): what it accessed before
// is released to the cluster's CTAs that wait for that barrier.
void trace_cluster_arrival(Trace& t);
// At the barrier's completion: the phase ends. A cluster barrier also orders this block's shared memory
// with the other CTAs' reads of it.
void trace_barrier(Worker& w, const Site& site, bool cluster = false);

// ---------------------------------------------------------------------------- counting (counting.cpp) --

// A closed warp instruction into the CTA's counters.
void close_instruction(Worker& w, const MemInstr& m);

// -------------------------------------------------------------------------- sanitizer (sanitizer.cpp) --

// A finding into the worker's trace: counted, and kept once per distinct `key`.
void add_finding(Worker& w, std::string key, const std::string& json_body);
AccessNow access_now(const Trace& t, const Fiber& f, std::uint16_t site);
// A race between two CTAs of a cluster on the shared memory of `w` (the CTA whose memory it is).
void remote_race_finding(Worker& w, const char* hazard, const ShadowAccess& first, unsigned first_rank,
                         const ShadowAccess& second, unsigned second_rank, std::size_t offset, const char* what);
// Checks an access of [offset, offset + n) of shared memory, then records it. `what` names the access.
void shadow_access(Worker& w, const AccessNow& now, std::size_t offset, unsigned n, bool store, bool record,
                   const char* what);
// memcheck of a global access; false (and a finding) when it is outside every registered buffer.
bool check_global(Worker& w, const Fiber& f, std::uint16_t site, const void* p, unsigned n, bool store,
                  const char* what);
// The sanitizer's checks of one lane's shared access: in range, and no race (false: a finding stopped it).
bool shared_checked(Worker& w, const Fiber& f, std::uint16_t id, const void* p, unsigned bytes, bool store);
// racecheck and initcheck of another CTA's read of [offset, offset + n) of `target`'s shared memory.
void check_remote_read(Worker& target, const Worker& reader, const Fiber& f, const Site& site, std::size_t offset,
                       unsigned n);
// A CTA's shared memory ends with the CTA: another CTA's read of it since the last cluster barrier may come
// after the exit (a race whichever order the emulation ran them in).
void check_exit_after_remote_reads(Worker& w);

// ------------------------------------------------------------------------------ report (report.cpp) --

// Everything the workers of a traced launch recorded, into the report.
void merge_traces(const std::vector<std::unique_ptr<Trace>>& traces, const LaunchOptions& o, Dim3 grid,
                  unsigned block_x, std::size_t smem_bytes);

}  // namespace ddk::emu::detail

#pragma GCC visibility pop
