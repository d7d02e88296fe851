// ddk emulation runtime: fibers, rendezvous, warp collectives, cp.async queues, error reports.
// See runtime.h for the model. Compiled into every emulation library (g++ -std=c++20 -O2 -fPIC).
#include "runtime.h"

#include "counters.h"
#include "sanitizer.h"
#include "wavefronts.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#if defined(__x86_64__) && !defined(DDK_EMU_UCONTEXT)
#define DDK_EMU_ASM_SWITCH 1
#else
#define DDK_EMU_ASM_SWITCH 0
#include <ucontext.h>
#endif

// Builds with -fsanitize=address tell ASan about every stack switch (and unpoison reused fiber
// stacks), so kernels can be checked for out-of-bounds global-memory accesses.
#if defined(__SANITIZE_ADDRESS__)
#define DDK_EMU_ASAN 1
#include <pthread.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#else
#define DDK_EMU_ASAN 0
#endif

namespace ddk::emu {

std::string Report::counters_json() const {
  std::string s = "{\"kernels\": [";
  for (std::size_t i = 0; i < kernels.size(); ++i) s += (i ? ", " : "") + kernels[i];
  return s + "]}";
}

std::string Report::sanitizer_json() const {
  std::string s = "{\"clean\": ";
  s += findings_total == 0 ? "true" : "false";
  s += ", \"findings_total\": " + std::to_string(findings_total);
  s += ", \"truncated\": ";
  s += findings_total > 0 && findings.size() >= kMaxFindings ? "true" : "false";
  s += ", \"findings\": [";
  for (std::size_t i = 0; i < findings.size(); ++i) s += (i ? ", " : "") + findings[i];
  s += "], \"checked\": [";
  for (std::size_t i = 0; i < checked.size(); ++i) s += (i ? ", " : "") + checked[i];
  return s + "]}";
}

int copy_status(const Status& status, char* buf, std::size_t len) {
  if (buf != nullptr && len > 0) {
    const std::size_t n = status.message.size() < len - 1 ? status.message.size() : len - 1;
    std::memcpy(buf, status.message.data(), n);
    buf[n] = '\0';
  }
  return status.code;
}

namespace detail {

[[noreturn]] void outside_launch(const char* what) {
  std::fprintf(stderr, "ddk-emu: %s() called outside an emulated kernel launch\n", what);
  std::abort();
}

namespace {

// ------------------------------------------------------------------------------ context switch --
//
// x86-64: a hand-written switch saving the System V callee-saved registers (rbx, rbp, r12-r15) on the
// old stack and swapping stack pointers; MXCSR and the x87 control word are not switched (kernels
// do not change them). Elsewhere, or with -DDDK_EMU_UCONTEXT, ucontext's swapcontext (which also
// saves the signal mask: a system call per switch, so much slower).

#if DDK_EMU_ASM_SWITCH
extern "C" void ddk_emu_switch_ctx(void** save_sp, void* new_sp);
extern "C" void ddk_emu_fiber_trampoline();

asm(R"(
  .text
  .p2align 4
  .globl ddk_emu_switch_ctx
  .hidden ddk_emu_switch_ctx
  .type ddk_emu_switch_ctx, @function
ddk_emu_switch_ctx:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ddk_emu_switch_ctx, .-ddk_emu_switch_ctx

  .p2align 4
  .globl ddk_emu_fiber_trampoline
  .hidden ddk_emu_fiber_trampoline
  .type ddk_emu_fiber_trampoline, @function
ddk_emu_fiber_trampoline:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size ddk_emu_fiber_trampoline, .-ddk_emu_fiber_trampoline
)");

struct Context {
  void* sp = nullptr;
  const void* stack_lo = nullptr;  // for ASan's fiber annotations
  std::size_t stack_size = 0;
};

inline void raw_switch(Context* from, Context* to) { ddk_emu_switch_ctx(&from->sp, to->sp); }

// A fresh context that, when switched to, calls entry(arg) on the given stack (entry never returns).
void init_context(Context& c, char* stack_lo, std::size_t bytes, void (*entry)(void*), void* arg) {
  const std::uintptr_t top = (reinterpret_cast<std::uintptr_t>(stack_lo) + bytes) & ~std::uintptr_t{15};
  // Frame popped by ddk_emu_switch_ctx: r15 r14 r13 r12 rbx rbp, then the return address. The
  // trampoline then runs with rsp = top - 16 (16-byte aligned), as a call requires.
  void** sp = reinterpret_cast<void**>(top - 72);
  sp[0] = nullptr;                                                // r15
  sp[1] = nullptr;                                                // r14
  sp[2] = reinterpret_cast<void*>(entry);                         // r13
  sp[3] = arg;                                                    // r12
  sp[4] = nullptr;                                                // rbx
  sp[5] = nullptr;                                                // rbp
  sp[6] = reinterpret_cast<void*>(&ddk_emu_fiber_trampoline);    // return address
  sp[7] = nullptr;
  sp[8] = nullptr;
  c.sp = sp;
  c.stack_lo = stack_lo;
  c.stack_size = bytes;
}
#else
struct Context {
  ucontext_t uc;
  const void* stack_lo = nullptr;  // for ASan's fiber annotations
  std::size_t stack_size = 0;
};

inline void raw_switch(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }

void uc_trampoline(unsigned e_hi, unsigned e_lo, unsigned a_hi, unsigned a_lo) {
  auto entry = reinterpret_cast<void (*)(void*)>((static_cast<std::uintptr_t>(e_hi) << 32) | e_lo);
  auto arg = reinterpret_cast<void*>((static_cast<std::uintptr_t>(a_hi) << 32) | a_lo);
  entry(arg);
  std::abort();
}

void init_context(Context& c, char* stack_lo, std::size_t bytes, void (*entry)(void*), void* arg) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack_lo;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  const auto e = reinterpret_cast<std::uintptr_t>(entry);
  const auto a = reinterpret_cast<std::uintptr_t>(arg);
  makecontext(&c.uc, reinterpret_cast<void (*)()>(&uc_trampoline), 4, static_cast<unsigned>(e >> 32),
              static_cast<unsigned>(e), static_cast<unsigned>(a >> 32), static_cast<unsigned>(a));
  c.stack_lo = stack_lo;
  c.stack_size = bytes;
}
#endif

// Switches from `from` to `to`; returns when something switches back to `from`. `from_dying`: `from`
// will never be resumed (lets ASan drop its fake stack).
inline void switch_ctx(Context* from, Context* to, bool from_dying = false) {
#if DDK_EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(from_dying ? nullptr : &fake, to->stack_lo, to->stack_size);
  raw_switch(from, to);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
  (void)from_dying;
  raw_switch(from, to);
#endif
}

// First thing on a fresh context's stack.
inline void context_started() {
#if DDK_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
}

// The calling OS thread's own stack, for switches back to it under ASan.
inline void adopt_thread_stack(Context& c) {
#if DDK_EMU_ASAN
  if (c.stack_lo != nullptr) return;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* lo = nullptr;
    std::size_t size = 0;
    pthread_attr_getstack(&attr, &lo, &size);
    pthread_attr_destroy(&attr);
    c.stack_lo = lo;
    c.stack_size = size;
  }
#else
  (void)c;
#endif
}

inline void unpoison_stack(char* lo, std::size_t bytes) {
#if DDK_EMU_ASAN
  ASAN_UNPOISON_MEMORY_REGION(lo, bytes);
#else
  (void)lo;
  (void)bytes;
#endif
}

// ------------------------------------------------------------------------------------- stacks --

std::size_t stack_bytes_from_env() {
  std::size_t kb = 256;
  if (const char* s = std::getenv("DDK_EMU_STACK_KB")) {
    const long v = std::strtol(s, nullptr, 10);
    if (v > 0) kb = static_cast<std::size_t>(v);
  }
  if (kb < 128) kb = 128;
  return kb * 1024;
}

std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

struct Stack {
  char* map = nullptr;  // guard page first, then the usable stack
  std::size_t map_bytes = 0;
  char* lo = nullptr;
  std::size_t bytes = 0;

  bool allocate(std::size_t usable) {
    const std::size_t pg = page_size();
    usable = (usable + pg - 1) / pg * pg;
    void* p = mmap(nullptr, usable + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    map = static_cast<char*>(p);
    map_bytes = usable + pg;
    mprotect(map, pg, PROT_NONE);  // overflow -> SIGSEGV instead of silent corruption
    lo = map + pg;
    bytes = usable;
    return true;
  }
  Stack() = default;
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  ~Stack() {
    if (map != nullptr) munmap(map, map_bytes);
  }
};

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

constexpr std::size_t kMaxSmem = 101376;  // sm_120 per-block dynamic shared-memory limit
constexpr std::size_t kRedZone = 4096;    // guard bytes on both sides of the shared-memory buffer
constexpr unsigned char kSmemFill = 0xCD;
constexpr unsigned char kRedFill = 0xA7;

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

thread_local Worker* tl_worker = nullptr;

// --------------------------------------------------------------------------------- formatting --

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

const char* coll_name(Coll k) {
  switch (k) {
    case Coll::ShflXor: return "shfl_xor";
    case Coll::Mma: return "mma_bf16_m16n8k16";
    case Coll::LdmX4: return "ldmatrix_x4";
    case Coll::LdmX4Trans: return "ldmatrix_x4_trans";
    case Coll::LdmX2: return "ldmatrix_x2";
    case Coll::LdmX2Trans: return "ldmatrix_x2_trans";
    case Coll::SyncBlock: return "sync_block";
    case Coll::SyncCluster: return "sync_cluster";
    case Coll::ClusterArrive: return "cluster_arrive";
    case Coll::ClusterWait: return "cluster_wait";
    default: return "?";
  }
}

std::string site_str(const Site& s) {
  const char* file = s.file_name();
  if (file == nullptr || *file == '\0') return "<unknown site>";
  const char* slash = std::strrchr(file, '/');
  return fmt("%s:%u", slash ? slash + 1 : file, static_cast<unsigned>(s.line()));
}

inline bool same_site(const Site& a, const Site& b) {
  if (a.line() != b.line() || a.column() != b.column()) return false;
  const char* fa = a.file_name();
  const char* fb = b.file_name();
  return fa == fb || std::strcmp(fa, fb) == 0;
}

// "0-15", "3", "0-3,5,7-9" for a 32-bit lane mask.
std::string lane_list(std::uint32_t mask) {
  std::string out;
  int l = 0;
  while (l < 32) {
    if (!(mask >> l & 1u)) {
      ++l;
      continue;
    }
    int e = l;
    while (e + 1 < 32 && (mask >> (e + 1) & 1u)) ++e;
    if (!out.empty()) out += ",";
    out += e == l ? fmt("%d", l) : fmt("%d-%d", l, e);
    l = e + 1;
  }
  return out;
}

std::string lanes_phrase(std::uint32_t mask) {
  return (__builtin_popcount(mask) == 1 ? "lane " : "lanes ") + lane_list(mask);
}

std::string block_str(const Worker& w) {
  return fmt("block (%u,%u,%u) of grid (%u,%u,%u)", w.bx, w.by, w.bz, w.grid.x, w.grid.y, w.grid.z);
}

std::string thread_str(const Fiber& f) {
  return fmt("thread %u (warp %u, lane %u)", f.view.tid, f.view.warp, f.view.lane);
}

void fail(Worker& w, int code, std::string msg) {
  if (w.failed) return;
  w.failed = true;
  w.status.code = code;
  w.status.message = "ddk-emu: " + std::move(msg);
}

// ------------------------------------------------------------------------------ instrumentation --
//
// Traced launches (LaunchOptions::count / sanitize). Memory accesses of one warp are grouped into warp
// instructions the SIMT way: the k-th execution of a call site by each lane of a warp is one
// instruction, whose active lanes are those that executed it. Instructions are closed when their warp
// meets at a collective or the block at a barrier (every lane of the warp is then past them), and at
// the end of the block.

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

std::uint16_t intern_site(Trace& t, const Site& site) {
  const std::uint64_t lc = (static_cast<std::uint64_t>(site.line()) << 32) | site.column();
  auto key = std::make_pair(site.file_name(), lc);
  auto it = t.site_ids.find(key);
  if (it != t.site_ids.end()) return it->second;
  const auto id = static_cast<std::uint16_t>(t.sites.size() < 65535 ? t.sites.size() : 65535);
  if (t.sites.size() < 65535) t.sites.push_back(site);
  t.site_ids.emplace(key, id);
  return id;
}

std::string site_of(const Trace& t, std::uint16_t id) {
  return id < t.sites.size() ? site_str(t.sites[id]) : std::string("<many sites>");
}

std::string json_escape(const std::string& in) {
  std::string out;
  for (char c : in) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt("\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
    } else {
      out += c;
    }
  }
  return out;
}

void add_finding(Worker& w, std::string key, const std::string& json_body) {
  Trace& t = *w.trace;
  ++t.findings_total;
  auto it = t.finding_index.find(key);
  if (it != t.finding_index.end()) {
    ++t.findings[it->second].count;
    return;
  }
  const std::uint64_t linear = w.bx + std::uint64_t{w.grid.x} * (w.by + std::uint64_t{w.grid.y} * w.bz);
  t.finding_index.emplace(key, t.findings.size());
  t.findings.push_back({std::move(key), json_body, linear, t.finding_seq++, 1});
}

std::string who_json(unsigned tid, const std::string& site) {
  return fmt("{\"site\": \"%s\", \"thread\": %u, \"warp\": %u, \"lane\": %u}", json_escape(site).c_str(), tid,
             tid / 32, tid % 32);
}

// ---------------------------------------------------------------------------------- counting --

void add_sectors(Trace& t, CtaRecord& c, const std::uint64_t* addr, std::uint32_t mask, unsigned width) {
  std::uint64_t sec[64];
  unsigned n = 0;
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    for (std::uint64_t s = addr[l] >> 5; s <= (addr[l] + width - 1) >> 5; ++s) sec[n++] = s;
  }
  std::sort(sec, sec + n);
  const unsigned distinct = static_cast<unsigned>(std::unique(sec, sec + n) - sec);
  c.sectors += distinct;
  for (unsigned i = 0; i < distinct; ++i) t.cta_sectors.insert(sec[i]);
}

void close_instruction(Worker& w, const MemInstr& m) {
  Trace& t = *w.trace;
  CtaRecord& c = t.cta;
  Phase& ph = c.phase();
  const auto base = reinterpret_cast<std::uint64_t>(w.smem);
  const unsigned lanes = static_cast<unsigned>(__builtin_popcount(m.mask));
  auto shared_side = [&](int kind, const std::uint64_t* addr, std::uint32_t mask, unsigned width) {
    std::uint64_t off[32] = {};
    for (unsigned l = 0; l < 32; ++l)
      if (mask >> l & 1u) off[l] = addr[l] - base;
    const wavefronts::Cost cost = wavefronts::lane_access(off, mask, width);
    c.shared_instr[kind] += 1;
    c.shared_wf[kind] += cost.wavefronts;
    c.bank_conflicts += cost.wavefronts - cost.ideal;
    ph.shared_wavefronts += cost.wavefronts;
  };
  if (m.kind == 0) {
    shared_side(shared_kind_of(m.store, m.width), m.addr, m.mask, m.width);
    c.count(m.store ? Op::StShared : Op::LdShared, m.site);
  } else if (m.kind == 1) {
    const std::uint64_t bytes = std::uint64_t{lanes} * m.width;
    if (m.store) {
      c.store_bytes += bytes;
      ph.global_store_bytes += bytes;
    } else {
      c.load_bytes += bytes;
      ph.global_bytes += bytes;
    }
    add_sectors(t, c, m.addr, m.mask, m.width);
    c.count(m.store ? Op::StGlobal : Op::LdGlobal, m.site);
  } else if (m.kind == 4) {  // atom_global: a round trip to L2, its old value returned
    const std::uint64_t bytes = std::uint64_t{lanes} * m.width;
    c.load_bytes += bytes;
    ph.global_bytes += bytes;
    add_sectors(t, c, m.addr, m.mask, m.width);
    c.count(Op::AtomGlobal, m.site);
  } else if (m.kind == 3) {  // ld_cluster: served by the other CTAs' shared memory, over the cluster's network
    // One warp instruction whatever ranks its lanes read: a lane on the CTA's own shared memory is a local
    // access (its wavefronts), the others network bytes, the distinct bytes the warp's lanes read (lanes on
    // one address share one transfer, a broadcast).
    std::uint32_t local = 0;
    for (unsigned l = 0; l < 32; ++l)
      if ((m.mask >> l & 1u) && m.addr[l] >= base && m.addr[l] < base + w.smem_bytes) local |= 1u << l;
    if (local != 0) shared_side(shared_kind_of(false, m.width), m.addr, local, m.width);
    std::uint64_t lo[32];
    unsigned n = 0;
    for (unsigned l = 0; l < 32; ++l)
      if ((m.mask & ~local) >> l & 1u) lo[n++] = m.addr[l];
    std::sort(lo, lo + n);
    std::uint64_t bytes = 0, covered = 0;
    for (unsigned i = 0; i < n; ++i) {
      const std::uint64_t begin = std::max(lo[i], covered), end = lo[i] + m.width;
      if (end > begin) bytes += end - begin;
      covered = std::max(covered, end);
    }
    c.cluster_bytes += bytes;
    ph.cluster_bytes += bytes;
    c.count(Op::LdCluster, m.site);
  } else {
    shared_side(m.width == 16 ? kCpAsync16 : kCpAsync4, m.addr, m.mask, m.width);
    const std::uint64_t bytes = std::uint64_t{m.width} * static_cast<unsigned>(__builtin_popcount(m.valid));
    c.cp_async_bytes += bytes;
    ph.global_bytes += bytes;
    add_sectors(t, c, m.src, m.valid, m.width);
    c.count(Op::CpAsync, m.site);
  }
}

void flush_warp(Worker& w, unsigned warp) {
  Trace& t = *w.trace;
  WarpTrace& wt = t.warps[warp];
  if (wt.pending.empty()) return;
  for (const MemInstr& m : wt.pending) close_instruction(w, m);
  wt.pending.clear();
  for (std::uint16_t id : wt.touched) {
    SiteOcc& so = wt.occ[id];
    std::memset(so.count, 0, sizeof so.count);
    so.instr.clear();
    so.touched = false;
  }
  wt.touched.clear();
}

void flush_all(Worker& w) {
  for (unsigned wp = 0; wp < w.nthreads / 32; ++wp) flush_warp(w, wp);
}

void record_lane(Worker& w, const Fiber& f, std::uint16_t site, std::uint8_t kind, bool store, unsigned width,
                 std::uint64_t addr, std::uint64_t src, bool valid) {
  Trace& t = *w.trace;
  WarpTrace& wt = t.warps[f.view.warp];
  if (wt.pending.size() >= kMaxPending) {
    t.pending_overflow = true;
    flush_warp(w, f.view.warp);
  }
  if (wt.occ.size() <= site) wt.occ.resize(site + 1u);
  SiteOcc& so = wt.occ[site];
  if (!so.touched) {
    so.touched = true;
    wt.touched.push_back(site);
  }
  const unsigned lane = f.view.lane;
  const std::uint32_t k = so.count[lane]++;
  if (k == so.instr.size()) {
    so.instr.push_back(static_cast<std::uint32_t>(wt.pending.size()));
    MemInstr& m = wt.pending.emplace_back();
    m.site = site;
    m.kind = kind;
    m.store = store;
    m.width = static_cast<std::uint8_t>(width);
  }
  MemInstr& m = wt.pending[so.instr[k]];
  m.mask |= 1u << lane;
  m.addr[lane] = addr;
  if (kind == 2) {
    m.src[lane] = src;
    if (valid) m.valid |= 1u << lane;
  }
}

// --------------------------------------------------------------------------------- sanitizer --

AccessNow access_now(const Trace& t, const Fiber& f, std::uint16_t site) {
  AccessNow a;
  a.at.epoch1 = t.epoch + 1;
  a.at.warp_epoch = t.warps[f.view.warp].epoch;
  a.at.tid = static_cast<std::uint16_t>(f.view.tid);
  a.at.site = site;
  a.epoch_lo1 = a.at.epoch1;
  a.warp_epoch_lo = a.at.warp_epoch;
  return a;
}

void race_finding(Worker& w, const char* hazard, const ShadowAccess& prev, const AccessNow& now,
                  std::size_t offset, const char* what) {
  Trace& t = *w.trace;
  const std::string s1 = site_of(t, prev.site), s2 = site_of(t, now.at.site);
  const bool first_writes = hazard[0] == 'w';
  const bool second_writes = hazard[std::strlen(hazard) - 1] == 'e';
  std::string msg = fmt(
      "racecheck: %s hazard on shared memory offset %zu in %s: %s by warp %u lane %u at %s, then %s by warp %u "
      "lane %u at %s (%s), with no sync_block%s between",
      hazard, offset, block_str(w).c_str(), first_writes ? "written" : "read", prev.tid / 32u, prev.tid % 32u,
      s1.c_str(), second_writes ? "written" : "read", now.at.tid / 32u, now.at.tid % 32u, s2.c_str(), what,
      prev.tid / 32u == now.at.tid / 32u ? " or warp collective" : "");
  std::string body = fmt(
      "{\"check\": \"racecheck\", \"hazard\": \"%s\", \"kernel\": \"%s\", \"space\": \"shared\", \"offset\": %zu, "
      "\"cta\": [%u, %u, %u], \"first\": %s, \"second\": %s, \"message\": \"%s\"",
      hazard, json_escape(t.opt->kernel_name).c_str(), offset, w.bx, w.by, w.bz, who_json(prev.tid, s1).c_str(),
      who_json(now.at.tid, s2).c_str(), json_escape(msg).c_str());
  add_finding(w, fmt("race|%s|%s|%s", hazard, s1.c_str(), s2.c_str()), body);
}

// A race between two CTAs of a cluster on the shared memory of `w` (the CTA whose memory it is).
void remote_race_finding(Worker& w, const char* hazard, const ShadowAccess& first, unsigned first_rank,
                         const ShadowAccess& second, unsigned second_rank, std::size_t offset, const char* what) {
  Trace& t = *w.trace;
  const std::string s1 = site_of(t, first.site), s2 = site_of(t, second.site);
  const bool first_writes = hazard[0] == 'w';
  const bool second_writes = hazard[std::strlen(hazard) - 1] == 'e';
  std::string msg = fmt(
      "racecheck: %s hazard on shared memory offset %zu of cluster rank %u (%s): %s by rank %u warp %u lane %u at "
      "%s, then %s by rank %u warp %u lane %u at %s (%s), with no sync_cluster between",
      hazard, offset, w.cluster_rank, block_str(w).c_str(), first_writes ? "written" : "read", first_rank,
      first.tid / 32u, first.tid % 32u, s1.c_str(), second_writes ? "written" : "read", second_rank,
      second.tid / 32u, second.tid % 32u, s2.c_str(), what);
  std::string body = fmt(
      "{\"check\": \"racecheck\", \"hazard\": \"%s\", \"kernel\": \"%s\", \"space\": \"cluster shared\", "
      "\"offset\": %zu, \"cta\": [%u, %u, %u], \"first\": %s, \"second\": %s, \"message\": \"%s\"",
      hazard, json_escape(t.opt->kernel_name).c_str(), offset, w.bx, w.by, w.bz, who_json(first.tid, s1).c_str(),
      who_json(second.tid, s2).c_str(), json_escape(msg).c_str());
  add_finding(w, fmt("cluster-race|%s|%s|%s", hazard, s1.c_str(), s2.c_str()), body);
}

// Checks an access of [offset, offset + n) of shared memory, then records it. `what` names the access.
void shadow_access(Worker& w, const AccessNow& now, std::size_t offset, unsigned n, bool store, bool record,
                   const char* what) {
  Trace& t = *w.trace;
  ++t.shared_checked;
  bool raced_w = false, raced_r = false, uninit = false;
  for (std::size_t b = offset; b < offset + n && b < w.smem_bytes; ++b) {
    ShadowByte& sb = t.shadow.bytes[b];
    if (!raced_w && unordered(sb.write, now)) {
      race_finding(w, store ? "write-write" : "write-read", sb.write, now, b, what);
      raced_w = true;
    }
    if (store) {
      const ShadowAccess& other = sb.read1.tid != now.at.tid ? sb.read1 : sb.read2;
      if (!raced_r && unordered(other, now)) {
        race_finding(w, "read-write", other, now, b, what);
        raced_r = true;
      }
      if (!raced_r && sb.remote.epoch1 > t.cluster_epoch) {  // the read's release not acquired here
        remote_race_finding(w, "read-write", sb.remote, sb.remote_rank, now.at, w.cluster_rank, b, what);
        raced_r = true;
      }
      if (record) {
        sb.write = now.at;
        sb.read1 = sb.read2 = sb.remote = ShadowAccess{};
      }
    } else {
      if (sb.write.epoch1 == 0) uninit = true;
      if (record) {
        if (sb.read1.epoch1 != 0 && sb.read1.tid != now.at.tid) sb.read2 = sb.read1;
        sb.read1 = now.at;
      }
    }
  }
  if (uninit) {
    const std::string s = site_of(t, now.at.site);
    std::string msg = fmt(
        "initcheck: %s of %u bytes at shared memory offset %zu in %s by warp %u lane %u at %s reads bytes no thread "
        "of the block wrote (they hold the 0xCD fill)",
        what, n, offset, block_str(w).c_str(), now.at.tid / 32u, now.at.tid % 32u, s.c_str());
    std::string body =
        fmt("{\"check\": \"initcheck\", \"hazard\": \"uninitialized\", \"kernel\": \"%s\", \"space\": \"shared\", "
            "\"offset\": %zu, \"bytes\": %u, \"cta\": [%u, %u, %u], \"first\": %s, \"message\": \"%s\"",
            json_escape(t.opt->kernel_name).c_str(), offset, n, w.bx, w.by, w.bz, who_json(now.at.tid, s).c_str(),
            json_escape(msg).c_str());
    add_finding(w, "init|" + s, body);
  }
}

const Buffer* containing_buffer(const LaunchOptions& o, std::uint64_t a, unsigned n) {
  for (int i = 0; i < o.n_buffers; ++i) {
    const auto base = reinterpret_cast<std::uint64_t>(o.buffers[i].base);
    if (o.buffers[i].base != nullptr && a >= base && a + n <= base + o.buffers[i].bytes) return &o.buffers[i];
  }
  return nullptr;
}

// memcheck of a global access; false (and a finding) when it is outside every registered buffer.
bool check_global(Worker& w, const Fiber& f, std::uint16_t site, const void* p, unsigned n, bool store,
                  const char* what) {
  Trace& t = *w.trace;
  const LaunchOptions& o = *t.opt;
  if (o.n_buffers <= 0) return true;
  ++t.global_checked;
  const auto a = reinterpret_cast<std::uint64_t>(p);
  if (containing_buffer(o, a, n) != nullptr) return true;
  // Name the buffer the address is nearest to: the last one starting at or below it, else the first above.
  const Buffer* near = nullptr;
  for (int i = 0; i < o.n_buffers; ++i) {
    const auto base = reinterpret_cast<std::uint64_t>(o.buffers[i].base);
    if (o.buffers[i].base == nullptr) continue;
    if (base <= a && (near == nullptr || reinterpret_cast<std::uint64_t>(near->base) > a ||
                      base > reinterpret_cast<std::uint64_t>(near->base)))
      near = &o.buffers[i];
    else if (base > a && (near == nullptr || (reinterpret_cast<std::uint64_t>(near->base) > a &&
                                              base < reinterpret_cast<std::uint64_t>(near->base))))
      near = &o.buffers[i];
  }
  const std::string s = site_of(t, site);
  const char* name = near ? near->name : "?";
  const long long off = near ? static_cast<long long>(a - reinterpret_cast<std::uint64_t>(near->base)) : 0;
  const std::size_t size = near ? near->bytes : 0;
  std::string msg = fmt(
      "memcheck: out-of-range global %s of %u bytes at offset %lld of buffer '%s' (%zu bytes) in %s, %s, at %s",
      what, n, off, name, size, block_str(w).c_str(), thread_str(f).c_str(), s.c_str());
  std::string body = fmt(
      "{\"check\": \"memcheck\", \"hazard\": \"out-of-range\", \"kernel\": \"%s\", \"space\": \"global\", "
      "\"buffer\": \"%s\", \"buffer_bytes\": %zu, \"offset\": %lld, \"bytes\": %u, \"cta\": [%u, %u, %u], "
      "\"first\": %s, \"message\": \"%s\"",
      json_escape(o.kernel_name).c_str(), json_escape(name).c_str(), size, off, n, w.bx, w.by, w.bz,
      who_json(f.view.tid, s).c_str(), json_escape(msg).c_str());
  add_finding(w, fmt("mem|%s|%s|%d", s.c_str(), name, store ? 1 : 0), body);
  return false;
}

bool check_shared_range(Worker& w, const Fiber& f, std::uint16_t site, const void* p, unsigned n, const char* what) {
  const auto a = reinterpret_cast<std::uint64_t>(p), base = reinterpret_cast<std::uint64_t>(w.smem);
  if (a >= base && a + n <= base + w.smem_bytes) return true;
  Trace& t = *w.trace;
  const std::string s = site_of(t, site);
  const long long off = static_cast<long long>(a - base);
  std::string msg = fmt("memcheck: out-of-range shared %s of %u bytes at offset %lld of the %zu-byte dynamic shared "
                        "memory in %s, %s, at %s",
                        what, n, off, w.smem_bytes, block_str(w).c_str(), thread_str(f).c_str(), s.c_str());
  std::string body = fmt(
      "{\"check\": \"memcheck\", \"hazard\": \"out-of-range\", \"kernel\": \"%s\", \"space\": \"shared\", "
      "\"buffer\": \"shared\", \"buffer_bytes\": %zu, \"offset\": %lld, \"bytes\": %u, \"cta\": [%u, %u, %u], "
      "\"first\": %s, \"message\": \"%s\"",
      json_escape(t.opt->kernel_name).c_str(), w.smem_bytes, off, n, w.bx, w.by, w.bz,
      who_json(f.view.tid, s).c_str(), json_escape(msg).c_str());
  add_finding(w, fmt("mem|%s|shared", s.c_str()), body);
  return false;
}

void trace_block_start(Worker& w) {
  Trace& t = *w.trace;
  t.epoch = 0;
  t.cluster_epoch = 0;
  t.cluster_arrivals = 0;
  t.arrive_floor1.assign(1, 0);
  if (t.warps.size() < w.nthreads / 32) t.warps.resize(w.nthreads / 32);
  for (WarpTrace& wt : t.warps) {
    wt.pending.clear();
    for (std::uint16_t id : wt.touched) {
      std::memset(wt.occ[id].count, 0, sizeof wt.occ[id].count);
      wt.occ[id].instr.clear();
      wt.occ[id].touched = false;
    }
    wt.touched.clear();
    wt.epoch = 0;
  }
  t.cta = CtaRecord{};
  t.cta.x = w.bx;
  t.cta.y = w.by;
  t.cta.z = w.bz;
  t.cta.linear = w.bx + std::uint64_t{w.grid.x} * (w.by + std::uint64_t{w.grid.y} * w.bz);
  t.cta.weight = t.weight;
  t.cta_sectors.clear();
  if (t.sanitize) t.shadow.reset(w.smem_bytes);
}

void trace_block_end(Worker& w) {
  Trace& t = *w.trace;
  flush_all(w);
  if (!t.count) return;
  for (WaitRecord& r : t.cta.waits)
    r.late = r.bytes_completed > 0 && r.phases_ahead < t.opt->late_wait_phases;
  t.cta.unique_sectors = t.cta_sectors.size();
  t.launch_sectors.insert(t.cta_sectors.begin(), t.cta_sectors.end());
  for (const auto& [id, ops] : t.cta.site_ops) {
    auto& into = t.cta.sites[json_escape(site_of(t, id))];  // written into the JSON as it is
    for (int k = 0; k < kOps; ++k) into[k] += ops[k];
  }
  t.cta.site_ops.clear();
  t.done.push_back(std::move(t.cta));
}

// At the last lane's arrival, before the collective's effect: close the warp's instructions, count it.
void trace_collective(Worker& w, Coll kind, const WarpSlot& s, unsigned warp) {
  Trace& t = *w.trace;
  flush_warp(w, warp);
  const std::uint16_t site = intern_site(t, s.site);
  const int nmat = kind == Coll::LdmX4 || kind == Coll::LdmX4Trans ? 4
                   : kind == Coll::LdmX2 || kind == Coll::LdmX2Trans ? 2 : 0;
  if (nmat > 0 && t.sanitize) {
    for (unsigned l = 0; l < static_cast<unsigned>(8 * nmat); ++l) {
      Fiber& lf = *w.fibers[warp * 32 + l];
      const std::size_t off = static_cast<std::size_t>(static_cast<const char*>(s.args[l].in0) - w.smem);
      shadow_access(w, access_now(t, lf, site), off, 16, false, true, coll_name(kind));
    }
  }
  if (t.count) {
    Phase& ph = t.cta.phase();
    if (kind == Coll::Mma) {
      ++ph.mma;
      t.cta.count(Op::Mma, site);
    } else if (kind == Coll::ShflXor) {
      ++ph.shuffles;
      t.cta.count(Op::Shfl, site);
    } else if (nmat > 0) {
      std::uint64_t off[32] = {};
      for (unsigned l = 0; l < static_cast<unsigned>(8 * nmat); ++l)
        off[l] = static_cast<std::uint64_t>(static_cast<const char*>(s.args[l].in0) - w.smem);
      const wavefronts::Cost cost = wavefronts::ldmatrix(off, static_cast<unsigned>(nmat));
      const bool trans = kind == Coll::LdmX4Trans || kind == Coll::LdmX2Trans;
      const int k = (nmat == 4 ? kLdmX4 : kLdmX2) + (trans ? 1 : 0);
      t.cta.shared_instr[k] += 1;
      t.cta.shared_wf[k] += cost.wavefronts;
      t.cta.bank_conflicts += cost.wavefronts - cost.ideal;
      ph.shared_wavefronts += cost.wavefronts;
      t.cta.count(Op::Ldmatrix, site);
    }
  }
  ++t.warps[warp].epoch;
}

// The CTA arrives at a cluster barrier (after the block barrier that goes with it): what it accessed before
// is released to the cluster's CTAs that wait for that barrier.
void trace_cluster_arrival(Trace& t) {
  ++t.cluster_arrivals;
  t.arrive_floor1.push_back(t.epoch + 1);
}

// At the barrier's completion: the phase ends. A cluster barrier also orders this block's shared memory
// with the other CTAs' reads of it.
void trace_barrier(Worker& w, const Site& site, bool cluster = false) {
  Trace& t = *w.trace;
  flush_all(w);
  if (t.count) {
    t.cta.count(cluster ? Op::SyncCluster : Op::SyncBlock, intern_site(t, site), w.nthreads / 32);
    ++t.cta.barriers;
    if (cluster) ++t.cta.cluster_barriers;
    t.cta.phases.emplace_back();
  }
  ++t.epoch;
  if (cluster) {
    ++t.cluster_epoch;
    trace_cluster_arrival(t);
  }
}

// ------------------------------------------------------------------------------------ scheduling --

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

// -------------------------------------------------------------------------------- collectives --

inline float bf16_lo(std::uint32_t r) {
  const std::uint32_t u = r << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float bf16_hi(std::uint32_t r) {
  const std::uint32_t u = r & 0xffff0000u;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void compute_shfl(WarpSlot& s) {
  std::uint32_t in[32];
  for (int l = 0; l < 32; ++l) std::memcpy(&in[l], s.args[l].in0, 4);
  for (unsigned l = 0; l < 32; ++l) {
    unsigned j = l ^ s.args[l].u;  // shfl.sync.bfly, c = 0x1f: source lane out of [0, 31] -> own value
    if (j > 31) j = l;
    std::memcpy(s.args[l].out, &in[j], 4);
  }
}

// mma.m16n8k16 .row.col f32.bf16.bf16.f32 (PTX ISA 8.7, "Matrix Fragments for mma.m16n8k16 with
// floating point type"): gather A, B, C from the 32 lanes, D = A·B + C accumulating in fp32 in k
// order 0..15 starting from C (bf16 products are exact in fp32), scatter D.
void compute_mma(WarpSlot& s) {
  float A[16][16], B[16][8], C[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned g = l >> 2, t = l & 3u;
    const auto* a = static_cast<const std::uint32_t*>(s.args[l].in0);
    const auto* b = static_cast<const std::uint32_t*>(s.args[l].in1);
    const auto* c = static_cast<const float*>(s.args[l].in2);
    A[g][2 * t] = bf16_lo(a[0]);
    A[g][2 * t + 1] = bf16_hi(a[0]);
    A[g + 8][2 * t] = bf16_lo(a[1]);
    A[g + 8][2 * t + 1] = bf16_hi(a[1]);
    A[g][2 * t + 8] = bf16_lo(a[2]);
    A[g][2 * t + 9] = bf16_hi(a[2]);
    A[g + 8][2 * t + 8] = bf16_lo(a[3]);
    A[g + 8][2 * t + 9] = bf16_hi(a[3]);
    B[2 * t][g] = bf16_lo(b[0]);
    B[2 * t + 1][g] = bf16_hi(b[0]);
    B[2 * t + 8][g] = bf16_lo(b[1]);
    B[2 * t + 9][g] = bf16_hi(b[1]);
    C[g][2 * t] = c[0];
    C[g][2 * t + 1] = c[1];
    C[g + 8][2 * t] = c[2];
    C[g + 8][2 * t + 1] = c[3];
  }
  // Four rows at a time, columns as two 4-wide vectors: every element is still C + p0 + p1 + ... + p15
  // added in that order (no reassociation, no contraction: bf16 products are exact anyway).
  typedef float v4f __attribute__((vector_size(16)));
  float D[16][8];
  auto ld = [](const float* p) {
    v4f v;
    std::memcpy(&v, p, 16);
    return v;
  };
  auto st = [](float* p, v4f v) { std::memcpy(p, &v, 16); };
  for (int m = 0; m < 16; m += 4) {
    v4f c00 = ld(&C[m][0]), c01 = ld(&C[m][4]), c10 = ld(&C[m + 1][0]), c11 = ld(&C[m + 1][4]);
    v4f c20 = ld(&C[m + 2][0]), c21 = ld(&C[m + 2][4]), c30 = ld(&C[m + 3][0]), c31 = ld(&C[m + 3][4]);
    for (int k = 0; k < 16; ++k) {
      const v4f b0 = ld(&B[k][0]), b1 = ld(&B[k][4]);
      const float x0 = A[m][k], x1 = A[m + 1][k], x2 = A[m + 2][k], x3 = A[m + 3][k];
      const v4f a0 = {x0, x0, x0, x0}, a1 = {x1, x1, x1, x1}, a2 = {x2, x2, x2, x2}, a3 = {x3, x3, x3, x3};
      c00 += a0 * b0;
      c01 += a0 * b1;
      c10 += a1 * b0;
      c11 += a1 * b1;
      c20 += a2 * b0;
      c21 += a2 * b1;
      c30 += a3 * b0;
      c31 += a3 * b1;
    }
    st(&D[m][0], c00);
    st(&D[m][4], c01);
    st(&D[m + 1][0], c10);
    st(&D[m + 1][4], c11);
    st(&D[m + 2][0], c20);
    st(&D[m + 2][4], c21);
    st(&D[m + 3][0], c30);
    st(&D[m + 3][4], c31);
  }
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned g = l >> 2, t = l & 3u;
    auto* d = static_cast<float*>(s.args[l].out);  // may alias this lane's c: all of C was read above
    d[0] = D[g][2 * t];
    d[1] = D[g][2 * t + 1];
    d[2] = D[g + 8][2 * t];
    d[3] = D[g + 8][2 * t + 1];
  }
}

// True when [p, p+bytes) lies inside the block's shared memory and p is `bytes`-aligned; else says why.
bool check_smem(const Worker& w, const void* p, unsigned bytes, std::string* why) {
  const auto base = reinterpret_cast<std::uintptr_t>(w.smem);
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  const long long off = static_cast<long long>(addr - base);
  if (addr < base || addr - base + bytes > w.smem_bytes) {
    if (off > -(1ll << 30) && off < (1ll << 30))
      *why = fmt("offset %lld (+%u bytes) is outside the block's %zu-byte dynamic shared memory", off, bytes,
                 w.smem_bytes);
    else
      *why = fmt("address %p is not in the block's dynamic shared memory (%zu bytes at %p)", p, w.smem_bytes,
                 static_cast<void*>(w.smem));
    return false;
  }
  if (addr % bytes != 0) {
    *why = fmt("offset %lld is not %u-byte aligned", off, bytes);
    return false;
  }
  return true;
}

bool check_smem16(const Worker& w, const void* p, std::string* why) { return check_smem(w, p, 16, why); }

inline std::uint16_t load_b16(const char* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// ldmatrix.sync.aligned.m8n8.x{2,4}{.trans}.shared.b16 (PTX ISA 8.7, "Warp-level matrix load
// instruction: ldmatrix"): lane l addresses row l%8 of matrix l/8; register i of lane l receives
// row l/4, columns 2(l%4), 2(l%4)+1 of matrix i (of its transpose with .trans).
bool compute_ldmatrix(Worker& w, WarpSlot& s, int nmat, bool trans, unsigned warp) {
  const char* rows[32];
  std::string first_why;
  int first_bad = -1;
  std::uint32_t bad = 0;
  for (int i = 0; i < nmat * 8; ++i) {  // .x2: only lanes 0-15 supply addresses
    std::string why;
    if (!check_smem16(w, s.args[i].in0, &why)) {
      if (bad == 0) {
        first_why = why;
        first_bad = i;
      }
      bad |= 1u << i;
    }
    rows[i] = static_cast<const char*>(s.args[i].in0);
  }
  if (bad != 0) {
    fail(w, kMemoryError, fmt("%s at %s in %s, warp %u: bad row address from %s (lane %d: %s)", coll_name(s.kind),
                              site_str(s.site).c_str(), block_str(w).c_str(), warp, lanes_phrase(bad).c_str(),
                              first_bad, first_why.c_str()));
    return false;
  }
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned g = l >> 2, t = l & 3u;
    auto* r = static_cast<std::uint32_t*>(s.args[l].out);
    for (int i = 0; i < nmat; ++i) {
      const char* const* m = rows + 8 * i;
      std::uint16_t lo, hi;
      if (!trans) {
        lo = load_b16(m[g] + 2 * (2 * t));
        hi = load_b16(m[g] + 2 * (2 * t + 1));
      } else {
        lo = load_b16(m[2 * t] + 2 * g);
        hi = load_b16(m[2 * t + 1] + 2 * g);
      }
      r[i] = static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
    }
  }
  return true;
}

// ------------------------------------------------------------------------------- block running --

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

// One line per group of consecutive warps in the same state; which lanes wait where or have exited.
std::string deadlock_report(Worker& w) {
  const unsigned nwarps = w.nthreads / 32;
  bool any_warp_wait = false;
  for (unsigned i = 0; i < w.nthreads; ++i) {
    const FState st = w.fibers[i]->state;
    const Coll k = w.fibers[i]->wait_kind;
    if (st == FState::WaitWarp || (st == FState::Diverged && k != Coll::SyncBlock && k != Coll::SyncCluster))
      any_warp_wait = true;
  }
  const bool any_barrier = w.bar_arrived > 0;
  const bool any_cluster = w.cluster != nullptr && w.cluster->arrived > 0;
  const bool any_split = w.cluster != nullptr && std::count(w.cluster->split_waiting.begin(),
                                                            w.cluster->split_waiting.end(), &w) > 0;
  struct Line {
    unsigned warp;
    std::string text;
  };
  std::vector<Line> lines;
  for (unsigned wp = 0; wp < nwarps; ++wp) {
    struct Group {
      bool waiting;
      Coll kind;
      Site site;
      std::uint32_t mask;
    };
    std::vector<Group> groups;
    bool all_done = true;
    for (unsigned l = 0; l < 32; ++l) {
      const Fiber& f = *w.fibers[wp * 32 + l];
      const bool waiting = f.state != FState::Done;
      if (waiting) all_done = false;
      bool merged = false;
      for (Group& g : groups) {
        if (g.waiting != waiting) continue;
        if (waiting && (g.kind != f.wait_kind || !same_site(g.site, f.wait_site))) continue;
        g.mask |= 1u << l;
        merged = true;
        break;
      }
      if (!merged) groups.push_back({waiting, f.wait_kind, f.wait_site, 1u << l});
    }
    // A warp that finished is only worth naming when it is missing from a sync_block.
    if (all_done && !any_barrier && !any_cluster) continue;
    std::string d;
    for (const Group& g : groups) {
      if (!d.empty()) d += "; ";
      d += lanes_phrase(g.mask);
      if (!g.waiting)
        d += " exited";
      else
        d += fmt(" wait at %s (%s)", coll_name(g.kind), site_str(g.site).c_str());
    }
    lines.push_back({wp, std::move(d)});
  }
  // Collapse runs of consecutive warps with the same description.
  std::string body;
  for (std::size_t li = 0; li < lines.size();) {
    std::size_t e = li;
    while (e + 1 < lines.size() && lines[e + 1].text == lines[li].text && lines[e + 1].warp == lines[e].warp + 1) ++e;
    body += e == li ? fmt("\n  warp %u: ", lines[li].warp) : fmt("\n  warps %u-%u: ", lines[li].warp, lines[e].warp);
    body += lines[li].text;
    li = e + 1;
  }
  std::string head = fmt("deadlock in %s (%u threads): ", block_str(w).c_str(), w.nthreads);
  if (any_warp_wait)
    head += "divergence: a warp collective was not reached by all 32 lanes of its warp at the same call site";
  if (any_barrier) {
    if (any_warp_wait) head += "; ";
    head += fmt("sync_block (%s) reached by %u of %u threads", site_str(w.bar_site).c_str(), w.bar_arrived,
                w.nthreads);
  }
  if (any_cluster) {
    if (any_warp_wait || any_barrier) head += "; ";
    head += fmt("sync_cluster (%s) reached by %u of %zu threads of the cluster", site_str(w.cluster->site).c_str(),
                w.cluster->arrived, w.nthreads * w.cluster->blocks.size());
  }
  if (any_split) {
    if (any_warp_wait || any_barrier || any_cluster) head += "; ";
    head += fmt("cluster_wait (%s): %zu of the cluster's %zu CTAs arrived at its barrier",
                site_str(w.cluster_wait_site).c_str(), w.cluster->split_arrived, w.cluster->blocks.size());
  }
  if (!any_warp_wait && !any_barrier && !any_cluster && !any_split)
    head += "threads blocked at a sync_block call site that others did not reach";
  return head + body;
}

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

// A CTA's shared memory ends with the CTA: another CTA's read of it since the last cluster barrier may come
// after the exit (a race whichever order the emulation ran them in).
void check_exit_after_remote_reads(Worker& w) {
  Trace& t = *w.trace;
  for (std::size_t b = 0; b < w.smem_bytes; ++b) {
    const ShadowByte& sb = t.shadow.bytes[b];
    if (sb.remote.epoch1 <= t.cluster_epoch) continue;  // released by a barrier the CTA waited for
    const std::string where = site_of(t, sb.remote.site);
    std::string msg = fmt(
        "racecheck: read-exit hazard on shared memory offset %zu of cluster rank %u (%s): read by rank %u warp %u "
        "lane %u at %s (ld_cluster), then the CTA exited, with no sync_cluster between",
        b, w.cluster_rank, block_str(w).c_str(), sb.remote_rank, sb.remote.tid / 32u, sb.remote.tid % 32u,
        where.c_str());
    std::string body = fmt(
        "{\"check\": \"racecheck\", \"hazard\": \"read-exit\", \"kernel\": \"%s\", \"space\": \"cluster shared\", "
        "\"offset\": %zu, \"cta\": [%u, %u, %u], \"first\": %s, \"message\": \"%s\"",
        json_escape(t.opt->kernel_name).c_str(), b, w.bx, w.by, w.bz, who_json(sb.remote.tid, where).c_str(),
        json_escape(msg).c_str());
    add_finding(w, "cluster-exit|" + where, body);
    return;  // one finding a CTA
  }
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

std::mutex g_pool_mu;
std::vector<std::unique_ptr<Worker>> g_pool;

std::unique_ptr<Worker> acquire_worker() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  if (g_pool.empty()) return std::make_unique<Worker>();
  auto w = std::move(g_pool.back());
  g_pool.pop_back();
  return w;
}

void release_worker(std::unique_ptr<Worker> w) {
  w->failed = false;
  w->status = Status{};
  std::lock_guard<std::mutex> lock(g_pool_mu);
  g_pool.push_back(std::move(w));
}

int workers_from_env() {
  if (const char* s = std::getenv("DDK_EMU_WORKERS")) {
    const long v = std::strtol(s, nullptr, 10);
    if (v > 0) return static_cast<int>(v);
  }
  return 1;
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

inline Fiber* current_fiber(const char* what) {
  ThreadView* v = tl_view;
  if (v == nullptr) outside_launch(what);
  return static_cast<Fiber*>(v->owner);
}

}  // namespace

// ------------------------------------------------------------------------------ primitive entry --

void warp_collective(Coll kind, const LaneArgs& args, const Site& site) {
  Fiber* f = current_fiber(coll_name(kind));
  Worker& w = *f->worker;
  const unsigned warp = f->view.warp;
  WarpSlot& s = w.warps[warp];
  if (s.arrived == 0) {
    s.kind = kind;
    s.site = site;
  } else if (s.kind != kind || !same_site(s.site, site)) {
    // Another collective of this warp is pending elsewhere: neither can complete. Park this lane;
    // the deadlock report lists both groups once nothing else can run.
    f->state = FState::Diverged;
    f->wait_kind = kind;
    f->wait_site = site;
    switch_to_next(f);
    abort_to_main(f);
  }
  s.args[f->view.lane] = args;
  if (++s.arrived < 32) {
    f->state = FState::WaitWarp;
    f->wait_kind = kind;
    f->wait_site = site;
    switch_to_next(f);
    return;  // the last lane to arrive wrote this lane's result
  }
  if (w.trace != nullptr) trace_collective(w, kind, s, warp);
  bool ok = true;
  switch (kind) {
    case Coll::ShflXor: compute_shfl(s); break;
    case Coll::Mma: compute_mma(s); break;
    case Coll::LdmX4: ok = compute_ldmatrix(w, s, 4, false, warp); break;
    case Coll::LdmX4Trans: ok = compute_ldmatrix(w, s, 4, true, warp); break;
    case Coll::LdmX2: ok = compute_ldmatrix(w, s, 2, false, warp); break;
    case Coll::LdmX2Trans: ok = compute_ldmatrix(w, s, 2, true, warp); break;
    default: break;
  }
  if (!ok) abort_to_main(f);
  s.arrived = 0;
  s.kind = Coll::None;
  const unsigned base = warp * 32;
  for (unsigned l = 0; l < 32; ++l) {
    Fiber* g = w.fibers[base + l].get();
    if (g == f) continue;
    g->state = FState::Ready;
    g->wait_kind = Coll::None;
    w.push(g);
  }
}

void sync_block(const Site& site) {
  Fiber* f = current_fiber("sync_block");
  Worker& w = *f->worker;
  if (!arrive(f, w.bar_arrived, w.bar_site, w.nthreads, w.bar_waiting, Coll::SyncBlock, site)) return;
  if (w.trace != nullptr) trace_barrier(w, site);
  release(w.bar_waiting);
}

namespace {

// What a cp.async of `bytes` is called in findings: "cp_async_16" or "cp_async_4", and its two accesses.
const char* cp_name(unsigned bytes) { return bytes == 16 ? "cp_async_16" : "cp_async_4"; }
const char* cp_access(unsigned bytes, bool write) {
  if (bytes == 16) return write ? "cp_async_16 write" : "cp_async_16 read";
  return write ? "cp_async_4 write" : "cp_async_4 read";
}

}  // namespace

void cp_async(void* smem_dst, const void* gmem_src, unsigned bytes, bool valid, const Site& site) {
  Fiber* f = current_fiber("cp_async");
  Worker& w = *f->worker;
  std::string why;
  const char* op = cp_name(bytes);
  if (!check_smem(w, smem_dst, bytes, &why)) {
    fail(w, kMemoryError, fmt("%s at %s in %s, %s: shared destination %s", op, site_str(site).c_str(),
                              block_str(w).c_str(), thread_str(*f).c_str(), why.c_str()));
    abort_to_main(f);
  }
  if (valid && (gmem_src == nullptr || reinterpret_cast<std::uintptr_t>(gmem_src) % bytes != 0)) {
    fail(w, kMemoryError,
         fmt("%s at %s in %s, %s: global source %s", op, site_str(site).c_str(), block_str(w).c_str(),
             thread_str(*f).c_str(),
             gmem_src == nullptr ? "is a null pointer"
                                 : fmt("%p is not %u-byte aligned", gmem_src, bytes).c_str()));
    abort_to_main(f);
  }
  CpCopy c{smem_dst, gmem_src, valid, static_cast<std::uint8_t>(bytes)};
  if (w.trace == nullptr) {
    f->cp.push_back(c);
    return;
  }
  Trace& t = *w.trace;
  const std::uint16_t id = intern_site(t, site);
  if (t.sanitize) {
    // A source outside every buffer is refused: the copy becomes a zero fill and a finding.
    if (valid && !check_global(w, *f, id, gmem_src, bytes, false, cp_access(bytes, false))) valid = false;
    // The copy may land any time from now: check it against what other threads did so far.
    shadow_access(w, access_now(t, *f, id), static_cast<std::size_t>(static_cast<char*>(smem_dst) - w.smem),
                  bytes, true, false, cp_access(bytes, true));
  }
  if (t.count)
    record_lane(w, *f, id, 2, true, bytes, reinterpret_cast<std::uint64_t>(smem_dst),
                reinterpret_cast<std::uint64_t>(gmem_src), valid);
  c.valid = valid;
  c.issue_epoch1 = t.epoch + 1;
  c.issue_warp_epoch = t.warps[f->view.warp].epoch;
  c.site = id;
  f->cp.push_back(c);
}

void cp_async_commit() {
  Fiber* f = current_fiber("cp_async_commit");
  f->cp_groups.push_back(f->cp.size());
  if (f->worker->trace != nullptr) f->cp_group_epoch.push_back(f->worker->trace->epoch);
}

namespace {

// A traced wait: what it finds in flight and what it completes, into the CTA's wait record.
void trace_wait(Worker& w, Fiber& f, std::size_t last_group, bool completes) {
  Trace& t = *w.trace;
  if (!t.count) return;
  std::uint64_t in_flight = 0, completed = 0;
  for (std::size_t i = f.cp_head; i < f.cp.size(); ++i) in_flight += f.cp[i].valid ? f.cp[i].bytes : 0;
  long long ahead = -1;
  if (completes) {
    std::size_t begin = f.cp_head;
    for (std::size_t g = f.cp_group_head; g <= last_group; ++g) {
      std::uint64_t bytes = 0;
      for (std::size_t i = begin; i < f.cp_groups[g]; ++i) bytes += f.cp[i].valid ? f.cp[i].bytes : 0;
      if (f.cp_groups[g] > begin) begin = f.cp_groups[g];
      if (bytes == 0) continue;
      completed += bytes;
      const long long a = static_cast<long long>(t.epoch) - static_cast<long long>(f.cp_group_epoch[g]);
      if (ahead < 0 || a < ahead) ahead = a;
    }
  }
  if (t.cta.waits.size() <= f.wait_ordinal) t.cta.waits.resize(f.wait_ordinal + 1u);
  WaitRecord& r = t.cta.waits[f.wait_ordinal++];
  r.bytes_in_flight += in_flight;
  r.bytes_completed += completed;
  if (ahead >= 0 && (r.phases_ahead < 0 || ahead < r.phases_ahead)) r.phases_ahead = ahead;
}

// A traced copy landing: checked against every other thread's access since its issue, then recorded.
void trace_copy_lands(Worker& w, Fiber& f, const CpCopy& c) {
  Trace& t = *w.trace;
  if (!t.sanitize) return;
  AccessNow now = access_now(t, f, c.site);
  now.epoch_lo1 = c.issue_epoch1;
  now.warp_epoch_lo = c.issue_warp_epoch;
  shadow_access(w, now, static_cast<std::size_t>(static_cast<char*>(c.dst) - w.smem), c.bytes, true, true,
                cp_access(c.bytes, true));
}

}  // namespace

void cp_async_wait(int n, const Site&) {
  Fiber* f = current_fiber("cp_async_wait");
  const std::size_t committed = f->cp_groups.size() - f->cp_group_head;
  if (committed > static_cast<std::size_t>(n)) {
    const std::size_t last = f->cp_group_head + committed - static_cast<std::size_t>(n) - 1;
    const std::size_t upto = f->cp_groups[last];
    if (f->worker->trace != nullptr) trace_wait(*f->worker, *f, last, true);
    for (std::size_t i = f->cp_head; i < upto; ++i) {
      const CpCopy& c = f->cp[i];
      if (f->worker->trace != nullptr) trace_copy_lands(*f->worker, *f, c);
      if (c.valid)
        std::memcpy(c.dst, c.src, c.bytes);
      else
        std::memset(c.dst, 0, c.bytes);
    }
    if (upto > f->cp_head) f->cp_head = upto;
    f->cp_group_head = last + 1;
  } else if (f->worker->trace != nullptr) {
    trace_wait(*f->worker, *f, 0, false);
  }
  // Drop what is done so a pipeline that always keeps groups in flight uses bounded memory.
  if (f->cp_head == f->cp.size() && f->cp_group_head == f->cp_groups.size()) {
    f->cp.clear();
    f->cp_groups.clear();
    f->cp_group_epoch.clear();
    f->cp_head = 0;
    f->cp_group_head = 0;
  } else if (f->cp_head >= 64 && 2 * f->cp_head >= f->cp.size()) {
    const std::size_t h = f->cp_head;
    f->cp.erase(f->cp.begin(), f->cp.begin() + static_cast<std::ptrdiff_t>(h));
    f->cp_groups.erase(f->cp_groups.begin(), f->cp_groups.begin() + static_cast<std::ptrdiff_t>(f->cp_group_head));
    if (!f->cp_group_epoch.empty())
      f->cp_group_epoch.erase(f->cp_group_epoch.begin(),
                              f->cp_group_epoch.begin() + static_cast<std::ptrdiff_t>(f->cp_group_head));
    for (std::size_t& e : f->cp_groups) e = e >= h ? e - h : 0;
    f->cp_head = 0;
    f->cp_group_head = 0;
  }
}

void cp_async_wait_all(const Site& site) {
  cp_async_commit();
  cp_async_wait(0, site);
}

// The sanitizer's checks of one lane's shared access: in range, and no race (false: a finding stopped it).
bool shared_checked(Worker& w, const Fiber& f, std::uint16_t id, const void* p, unsigned bytes, bool store) {
  if (!check_shared_range(w, f, id, p, bytes, store ? "write" : "read")) return false;
  shadow_access(w, access_now(*w.trace, f, id), static_cast<std::size_t>(static_cast<const char*>(p) - w.smem), bytes,
                store, true, store ? "st_shared" : "ld_shared");
  return true;
}

bool mem_access(Space space, bool store, const void* p, unsigned bytes, const Site& site) {
  Fiber* f = current_fiber(store ? "st_shared/st_global" : "ld_shared/ld_global");
  Worker& w = *f->worker;
  if (w.trace == nullptr) return true;
  Trace& t = *w.trace;
  const std::uint16_t id = intern_site(t, site);
  if (t.sanitize) {
    if (space == Space::Global) {
      if (!check_global(w, *f, id, p, bytes, store, store ? "write" : "read")) return false;
    } else if (!shared_checked(w, *f, id, p, bytes, store)) {
      return false;
    }
  }
  if (t.count)
    record_lane(w, *f, id, space == Space::Shared ? 0 : 1, store, bytes, reinterpret_cast<std::uint64_t>(p), 0,
                false);
  return true;
}

bool atomic_access(const void* p, const Site& site) {
  Fiber* f = current_fiber("atomic_add_global");
  Worker& w = *f->worker;
  if (w.trace == nullptr) return true;
  Trace& t = *w.trace;
  const std::uint16_t id = intern_site(t, site);
  if (t.sanitize && !check_global(w, *f, id, p, 4, true, "atomic")) return false;
  if (t.count) record_lane(w, *f, id, 4, true, 4, reinterpret_cast<std::uint64_t>(p), 0, false);
  return true;
}

Space space_of(const void* p) {
  const Worker& w = *current_fiber("st_generic")->worker;
  const auto a = reinterpret_cast<std::uintptr_t>(p), base = reinterpret_cast<std::uintptr_t>(w.smem);
  return a >= base && a < base + w.smem_bytes ? Space::Shared : Space::Global;
}

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

namespace {

// racecheck and initcheck of another CTA's read of [offset, offset + n) of `target`'s shared memory.
void check_remote_read(Worker& target, const Worker& reader, const Fiber& f, const Site& site, std::size_t offset,
                       unsigned n) {
  Trace& t = *target.trace;
  ++t.shared_checked;
  // The read is released at the reader's next arrival (epoch1: that barrier's number); it sees the target's
  // writes released by the barriers the reader has waited for.
  const Trace& rt = *reader.trace;
  ShadowAccess now;
  now.epoch1 = rt.cluster_arrivals + 1;
  now.tid = static_cast<std::uint16_t>(f.view.tid);
  now.site = intern_site(t, site);
  const std::uint32_t floor1 = t.arrive_floor1[std::min<std::size_t>(rt.cluster_epoch, t.arrive_floor1.size() - 1)];
  bool raced = false, uninit = false;
  for (std::size_t b = offset; b < offset + n; ++b) {
    ShadowByte& sb = t.shadow.bytes[b];
    if (sb.write.epoch1 == 0) {
      uninit = true;
    } else if (!raced && sb.write.epoch1 >= floor1) {  // written after the arrival the reader acquired
      remote_race_finding(target, "write-read", sb.write, target.cluster_rank, now, reader.cluster_rank, b,
                          "ld_cluster");
      raced = true;
    }
    if (now.epoch1 >= sb.remote.epoch1) {  // the read a later barrier releases is the one a write may race
      sb.remote = now;
      sb.remote_rank = static_cast<std::uint16_t>(reader.cluster_rank);
    }
  }
  if (!uninit) return;
  const std::string where = site_of(t, now.site);
  std::string msg = fmt(
      "initcheck: ld_cluster of %u bytes at shared memory offset %zu of cluster rank %u (%s) by rank %u warp %u lane "
      "%u at %s reads bytes no thread of that CTA wrote (they hold the 0xCD fill)",
      n, offset, target.cluster_rank, block_str(target).c_str(), reader.cluster_rank, f.view.warp, f.view.lane,
      where.c_str());
  std::string body =
      fmt("{\"check\": \"initcheck\", \"hazard\": \"uninitialized\", \"kernel\": \"%s\", \"space\": \"cluster "
          "shared\", \"offset\": %zu, \"bytes\": %u, \"cta\": [%u, %u, %u], \"first\": %s, \"message\": \"%s\"",
          json_escape(t.opt->kernel_name).c_str(), offset, n, target.bx, target.by, target.bz,
          who_json(f.view.tid, where).c_str(), json_escape(msg).c_str());
  add_finding(target, "cluster-init|" + where, body);
}

}  // namespace

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

namespace {

// Everything the workers of a traced launch recorded, into the report.
void merge_traces(const std::vector<std::unique_ptr<Trace>>& traces, const LaunchOptions& o, Dim3 grid,
                  unsigned block_x, std::size_t smem_bytes) {
  Report& r = *o.report;
  if (o.count) {
    KernelCountersRecord rec;
    rec.name = o.kernel_name;
    rec.gx = grid.x;
    rec.gy = grid.y;
    rec.gz = grid.z;
    rec.threads = block_x;
    rec.smem = smem_bytes;
    rec.grid_ctas = std::uint64_t{grid.x} * grid.y * grid.z;
    rec.sampled = o.cta_subset != nullptr;
    std::unordered_set<std::uint64_t> sectors;
    for (const auto& t : traces) {
      for (const CtaRecord& c : t->done) rec.ctas.push_back(c);
      if (sectors.empty())
        sectors = t->launch_sectors;
      else
        sectors.insert(t->launch_sectors.begin(), t->launch_sectors.end());
    }
    std::sort(rec.ctas.begin(), rec.ctas.end(), [](const CtaRecord& a, const CtaRecord& b) { return a.linear < b.linear; });
    rec.unique_sectors = sectors.size();
    r.kernels.push_back(rec.json(o.group_shapes));
  }
  if (o.sanitize) {
    std::unordered_map<std::string, FindingRec> merged;
    std::uint64_t shared_checked = 0, global_checked = 0;
    bool overflow = false;
    for (const auto& t : traces) {
      shared_checked += t->shared_checked;
      global_checked += t->global_checked;
      overflow = overflow || t->pending_overflow;
      r.findings_total += t->findings_total;
      for (const FindingRec& f : t->findings) {
        auto it = merged.find(f.key);
        if (it == merged.end()) {
          merged.emplace(f.key, f);
          continue;
        }
        FindingRec& m = it->second;
        m.count += f.count;
        if (std::make_pair(f.cta_linear, f.seq) < std::make_pair(m.cta_linear, m.seq)) {
          m.json = f.json;
          m.cta_linear = f.cta_linear;
          m.seq = f.seq;
        }
      }
    }
    std::vector<const FindingRec*> order;
    for (const auto& [key, f] : merged) order.push_back(&f);
    std::sort(order.begin(), order.end(), [](const FindingRec* a, const FindingRec* b) {
      return std::make_tuple(a->cta_linear, a->seq, a->key) < std::make_tuple(b->cta_linear, b->seq, b->key);
    });
    for (const FindingRec* f : order) {
      if (r.findings.size() >= Report::kMaxFindings) break;
      r.findings.push_back(f->json + fmt(", \"count\": %llu}", static_cast<unsigned long long>(f->count)));
    }
    r.checked.push_back(fmt("{\"kernel\": \"%s\", \"ctas\": %llu, \"shared_accesses\": %llu, "
                            "\"global_accesses\": %llu, \"buffers\": %d}",
                            json_escape(o.kernel_name).c_str(),
                            static_cast<unsigned long long>(o.cta_subset != nullptr
                                                                ? o.n_cta_subset
                                                                : std::uint64_t{grid.x} * grid.y * grid.z),
                            static_cast<unsigned long long>(shared_checked),
                            static_cast<unsigned long long>(global_checked), o.n_buffers));
  }
}

}  // namespace

// ------------------------------------------------------------------------------------- launch --

Status launch_erased(KernelThunk thunk, const void* args, Dim3 grid, unsigned block_x, std::size_t smem_bytes,
                     const LaunchOptions& options) {
  Status bad;
  bad.code = kInvalidLaunch;
  if (tl_worker != nullptr || tl_view != nullptr) {
    bad.message = "ddk-emu: launch from inside an emulated kernel is not supported";
    return bad;
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
    bad.message = fmt("ddk-emu: invalid grid (%u,%u,%u): every dimension must be >= 1 (y, z <= 65535)", grid.x,
                      grid.y, grid.z);
    return bad;
  }
  if (block_x == 0 || block_x % 32 != 0 || block_x > 1024) {
    bad.message = fmt("ddk-emu: invalid block size %u: must be a multiple of 32 in [32, 1024]", block_x);
    return bad;
  }
  if (smem_bytes > kMaxSmem) {
    bad.message = fmt("ddk-emu: %zu bytes of dynamic shared memory requested; the per-block limit is %zu (sm_120)",
                      smem_bytes, kMaxSmem);
    return bad;
  }
  const std::uint64_t grid_blocks = std::uint64_t{grid.x} * grid.y * grid.z;
  const bool subset = options.cta_subset != nullptr;
  const std::uint64_t nblocks = subset ? options.n_cta_subset : grid_blocks;
  for (std::uint64_t i = 0; subset && i < nblocks; ++i) {
    if (options.cta_subset[i] >= grid_blocks || (i > 0 && options.cta_subset[i] <= options.cta_subset[i - 1])) {
      bad.message = fmt("ddk-emu: cta_subset[%llu] = %llu: indices must increase and lie in the %llu-CTA grid",
                        static_cast<unsigned long long>(i), static_cast<unsigned long long>(options.cta_subset[i]),
                        static_cast<unsigned long long>(grid_blocks));
      return bad;
    }
  }
  const unsigned cluster = options.cluster_x == 0 ? 1 : options.cluster_x;
  if (cluster > 8 || grid.x % cluster != 0) {
    bad.message = fmt("ddk-emu: invalid cluster of %u CTAs for grid (%u,%u,%u): 1 to 8 (the portable size), "
                      "dividing the grid's x",
                      cluster, grid.x, grid.y, grid.z);
    return bad;
  }
  for (std::uint64_t i = 0; subset && cluster > 1 && i < nblocks; ++i) {
    const std::uint64_t first = options.cta_subset[i - i % cluster];
    if (nblocks % cluster != 0 || first % cluster != 0 || options.cta_subset[i] != first + i % cluster) {
      bad.message = fmt("ddk-emu: cta_subset must hold whole clusters of %u CTAs (cta_subset[%llu] = %llu)", cluster,
                        static_cast<unsigned long long>(i), static_cast<unsigned long long>(options.cta_subset[i]));
      return bad;
    }
  }
  if (nblocks == 0) return Status{};
  const std::uint64_t nclusters = nblocks / cluster;
  std::uint64_t nworkers = static_cast<std::uint64_t>(options.workers > 0 ? options.workers : workers_from_env());
  if (nworkers > nclusters) nworkers = nclusters;
  if (nworkers > 256) nworkers = 256;

  const bool traced = options.count || options.sanitize;
  if (traced && options.report == nullptr) {
    bad.message = "ddk-emu: LaunchOptions::count or ::sanitize needs LaunchOptions::report";
    return bad;
  }
  std::vector<std::unique_ptr<Trace>> traces;
  if (traced) {
    for (std::uint64_t i = 0; i < nworkers * cluster; ++i) {
      auto t = std::make_unique<Trace>();
      t->opt = &options;
      t->count = options.count;
      t->sanitize = options.sanitize;
      traces.push_back(std::move(t));
    }
    g_traced_launches.fetch_add(1);
  }
  struct TracedGuard {
    bool on;
    ~TracedGuard() {
      if (on) g_traced_launches.fetch_sub(1);
    }
  } traced_guard{traced};
  std::atomic<std::uint64_t> next_trace{0};

  std::atomic<std::uint64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex err_mu;
  Status first_error;

  // Each worker runs whole clusters (of one CTA without clusters), one after another, on one Worker per rank.
  auto work = [&]() {
    std::vector<std::unique_ptr<Worker>> owned;
    Cluster cl;
    bool ready = true;
    for (unsigned k = 0; k < cluster; ++k) {
      owned.push_back(acquire_worker());
      Worker& w = *owned.back();
      w.trace = traced ? traces[next_trace.fetch_add(1)].get() : nullptr;
      w.thunk = thunk;
      w.args = args;
      w.grid = grid;
      w.cluster = &cl;
      w.cluster_rank = k;
      cl.blocks.push_back(&w);
      ready = ready && ensure_resources(w, block_x, smem_bytes);
    }
    tl_worker = cl.blocks[0];
    std::vector<std::array<unsigned, 3>> coords(cluster);
    while (ready && !stop.load(std::memory_order_relaxed)) {
      const std::uint64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= nclusters) break;
      for (unsigned k = 0; k < cluster; ++k) {
        const std::uint64_t j = i * cluster + k;
        const std::uint64_t b = subset ? options.cta_subset[j] : j;
        if (traced) cl.blocks[k]->trace->weight = subset && options.cta_weights ? options.cta_weights[j] : 1;
        coords[k] = {static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                     static_cast<unsigned>(b / (std::uint64_t{grid.x} * grid.y))};
      }
      run_cluster(cl, coords.data(), block_x);
      bool failed = false;
      for (Worker* w : cl.blocks) failed = failed || w->failed;
      if (failed) break;
    }
    for (Worker* w : cl.blocks) {
      if (!w->failed) continue;
      stop.store(true);
      std::lock_guard<std::mutex> lock(err_mu);
      if (first_error.ok()) first_error = w->status;
      break;
    }
    tl_worker = nullptr;
    for (auto& w : owned) {
      w->trace = nullptr;
      w->cluster = nullptr;
      w->cluster_rank = 0;
      release_worker(std::move(w));
    }
  };

  if (nworkers <= 1) {
    work();
  } else {
    std::vector<std::thread> threads;
    threads.reserve(nworkers);
    try {
      for (std::uint64_t i = 0; i < nworkers; ++i) threads.emplace_back(work);
    } catch (const std::exception& e) {
      stop.store(true);
      for (auto& t : threads) t.join();
      Status st;
      st.code = kInternal;
      st.message = fmt("ddk-emu: could not start worker threads: %s", e.what());
      return st;
    }
    for (auto& t : threads) t.join();
  }
  if (traced && first_error.ok()) merge_traces(traces, options, grid, block_x, smem_bytes);
  return first_error;
}

}  // namespace detail

// Round-trip time of the raw context switch, halved: two contexts on this OS thread ping-pong.
double measure_switch_ns(int rounds) {
  using namespace detail;
  struct Bench {
    Context main_ctx, fiber_ctx;
    Stack stack;
    static void loop(void* p) {
      context_started();
      auto* b = static_cast<Bench*>(p);
      for (;;) switch_ctx(&b->fiber_ctx, &b->main_ctx);
    }
  };
  auto b = std::make_unique<Bench>();
  if (!b->stack.allocate(128 * 1024)) return -1.0;
  init_context(b->fiber_ctx, b->stack.lo, b->stack.bytes, &Bench::loop, b.get());
  adopt_thread_stack(b->main_ctx);
  switch_ctx(&b->main_ctx, &b->fiber_ctx);  // warm up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) switch_ctx(&b->main_ctx, &b->fiber_ctx);
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / (2.0 * rounds);
}

}  // namespace ddk::emu
