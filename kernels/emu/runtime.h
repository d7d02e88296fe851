// ddk emulation runtime: executes kernels written against <ddk/primitives.h> on the host.
//
// Model (see kernels/emu/README.md and kernels/include/ddk/primitives.h):
//   * blocks of a grid run one after another on each worker OS thread (default one worker: the
//     caller's thread; `LaunchOptions::workers` or the DDK_EMU_WORKERS environment variable for more);
//   * the threads of a block are cooperative fibers (hand-written x86-64 context switch; ucontext
//     elsewhere or with -DDDK_EMU_UCONTEXT) that run until they block at a rendezvous or exit;
//   * warp collectives (shfl, mma, ldmatrix) are rendezvous of the 32 lanes of a warp at the same
//     primitive AND the same call site; sync_block is a rendezvous of every thread of the block;
//   * the CTAs of a thread-block cluster (`LaunchOptions::cluster_x`) run together on one worker:
//     sync_cluster is a rendezvous of every thread of the cluster, and ld_cluster reads another CTA's
//     shared memory directly (memcheck, racecheck and counters see it);
//   * cp.async copies are queued per thread and performed only when a wait releases their group;
//   * divergence, deadlock, out-of-range shared-memory accesses, a bad launch configuration or an
//     exception escaping the kernel stop the launch and come back as a Status (code + message).
//
// The launch entry point is `ddk::emu::launch(kernel, grid, block_x, smem_bytes, args...)` where
// `kernel` is a plain function `void kernel(P...)` (P by value or by const reference); the arguments
// are converted to P once and shared (read-only) by all threads, like kernel parameters on a GPU.
// The implementation lives in the runtime's files under kernels/emu/ (README.md, "Files"), which must be
// linked into the same shared library (ddbench.kernel.build.build_emulation_library adds them all).
#pragma once

#if !defined(DDK_EMULATE)
#error "kernels/emu/runtime.h is the host emulation runtime: compile with -DDDK_EMULATE"
#endif

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace ddk::emu {

using Site = std::source_location;

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr Dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// Status codes of a launch. 0 is success; every other code comes with a message.
enum StatusCode : int {
  kOk = 0,
  kInvalidLaunch = 1,    // grid/block/shared-memory configuration rejected before running anything
  kDivergence = 2,       // deadlock: a warp collective or sync_block that not every thread reached
  kMemoryError = 3,      // ldmatrix / cp.async address outside the block's shared memory, misaligned,
                         // or a write detected past either end of the shared-memory buffer
  kKernelException = 4,  // a C++ exception escaped the kernel function
  kInternal = 5,         // the emulator itself failed (e.g. could not allocate fiber stacks)
};

struct Status {
  int code = kOk;
  std::string message;
  bool ok() const { return code == kOk; }
};

// A global-memory buffer the launch was given, for memcheck: [base, base + bytes) is in range.
struct Buffer {
  const char* name = "";
  const void* base = nullptr;
  std::size_t bytes = 0;
};

// What instrumented launches leave behind, accumulated over the launches that share it (a verify
// kernel and its split combine). JSON texts, the formats kernels/emu/README.md documents.
struct Report {
  std::vector<std::string> kernels;   // one counters object per launch with LaunchOptions::count
  std::vector<std::string> findings;  // sanitizer findings, distinct ones, at most kMaxFindings
  std::uint64_t findings_total = 0;   // every finding, repeats and those past the cap included
  std::vector<std::string> checked;   // one line per sanitized launch: the kernel and what was checked
  static constexpr std::size_t kMaxFindings = 64;

  std::string counters_json() const;   // {"kernels": [...]}
  std::string sanitizer_json() const;  // {"clean": bool, "findings_total": n, "findings": [...], ...}
};

struct LaunchOptions {
  int workers = 0;  // OS threads running blocks; 0: DDK_EMU_WORKERS if set, else 1
  // Instrumentation (off by default: plain launches pay one load of a global per traced access).
  Report* report = nullptr;        // required when count or sanitize is set
  bool count = false;              // exact counters of every CTA
  bool group_shapes = false;       // counters: CTAs with identical counts become one entry with a count
  int late_wait_phases = 1;        // a cp.async wait is late when data it waits for was committed fewer
                                   // than this many block barriers earlier
  bool sanitize = false;           // racecheck, memcheck, uninitialised shared reads
  const char* kernel_name = "kernel";  // the name in the counters and findings
  const Buffer* buffers = nullptr;     // memcheck extents of global memory (none: globals unchecked)
  int n_buffers = 0;
  // Emulate only these CTAs (linear indices x + gx * (y + gy * z), increasing), each standing for
  // cta_weights[i] CTAs of the same work shape (nullptr: 1 each). The rest of the grid does not run.
  const std::uint64_t* cta_subset = nullptr;
  const std::uint64_t* cta_weights = nullptr;
  std::size_t n_cta_subset = 0;
  // Thread-block clusters of this many consecutive CTAs along x (1: none; at most 8, the portable size; the
  // grid's x a multiple of it; a CTA subset whole clusters). A cluster's CTAs run together on one worker, so
  // sync_cluster and ld_cluster between them are exact.
  unsigned cluster_x = 1;
};

// Copies `status.message` (NUL-terminated, truncated to fit) into buf when buf && len > 0 and
// returns status.code: the usual tail of an extern "C" wrapper around a launch.
int copy_status(const Status& status, char* buf, std::size_t len);

namespace detail {

// The per-thread state that primitives read directly. First member of the runtime's fiber record.
struct ThreadView {
  unsigned tid = 0, lane = 0, warp = 0;
  unsigned bx = 0, by = 0, bz = 0;
  unsigned block_dim = 0;
  unsigned gx = 1, gy = 1, gz = 1;
  unsigned cluster_rank = 0, cluster_size = 1;
  char* smem = nullptr;
  void* owner = nullptr;  // the runtime's fiber record
  bool traced = false;    // this launch counts or sanitizes: memory accessors report to the runtime
};

// Instrumented launches running now, in the whole process: the accessors' fast path reads only this.
inline std::atomic<int> g_traced_launches{0};

inline thread_local ThreadView* tl_view = nullptr;

[[noreturn]] void outside_launch(const char* what);

inline ThreadView& view(const char* what) {
  ThreadView* v = tl_view;
  if (v == nullptr) outside_launch(what);
  return *v;
}

enum class Coll : std::uint8_t {
  None = 0,
  ShflXor,
  Mma,
  LdmX4,
  LdmX4Trans,
  LdmX2,
  LdmX2Trans,
  SyncBlock,
  SyncCluster,
  ClusterArrive,
  ClusterWait,
};

// What one lane hands to a warp collective: pointers into its own (suspended) stack.
struct LaneArgs {
  const void* in0 = nullptr;
  const void* in1 = nullptr;
  const void* in2 = nullptr;
  void* out = nullptr;
  std::uint32_t u = 0;
};

void warp_collective(Coll kind, const LaneArgs& args, const Site& site);

enum class Space : std::uint8_t { Shared, Global };
// A traced load or store of `bytes` at p by the calling thread. False: memcheck refused it (out of
// range, recorded as a finding) and the access must not happen; a load then yields zeros.
bool mem_access(Space space, bool store, const void* p, unsigned bytes, const Site& site);
// Shared when p lies in the calling thread's block's dynamic shared memory, else global.
Space space_of(const void* p);
// A traced atomic read-modify-write of the 4 bytes at global p (memcheck, counted as atom_global); false as
// for mem_access.
bool atomic_access(const void* p, const Site& site);

inline bool traced_now() {
  if (g_traced_launches.load(std::memory_order_relaxed) == 0) return false;
  const ThreadView* v = tl_view;
  return v != nullptr && v->traced;
}

void sync_block(const Site& site);
void sync_cluster(const Site& site);
// sync_cluster in two halves: a block barrier, then the CTA's arrival (its threads' shared-memory accesses
// before it released to the cluster); and the wait for every CTA's arrival (the others' released accesses
// acquired). A CTA arrives once before each wait.
void cluster_arrive(const Site& site);
void cluster_wait(const Site& site);
// The address of `bytes` at p's offset in the shared memory of CTA `rank` of the caller's cluster, after
// memcheck (rank, range, alignment, a CTA that has exited) and, in traced launches, racecheck and counting.
const void* cluster_map(const void* p, unsigned rank, unsigned bytes, const Site& site);
void cp_async(void* smem_dst, const void* gmem_src, unsigned bytes, bool valid, const Site& site);  // 4 or 16
void cp_async_commit();
void cp_async_wait(int n, const Site& site);
void cp_async_wait_all(const Site& site);

using KernelThunk = void (*)(const void* args);
Status launch_erased(KernelThunk thunk, const void* args, Dim3 grid, unsigned block_x,
                     std::size_t smem_bytes, const LaunchOptions& options);

template <class... P>
struct KernelPack {
  void (*fn)(P...);
  std::tuple<std::remove_cvref_t<P>...> args;

  static void thunk(const void* self) {
    auto* pack = static_cast<const KernelPack*>(self);
    std::apply([pack](const auto&... a) { pack->fn(a...); }, pack->args);
  }
};

}  // namespace detail

// Runs kernel over the grid with `block_x` threads per block (a multiple of 32, at most 1024) and
// `smem_bytes` of dynamic shared memory per block (at most 101,376). Never throws for kernel-side
// problems: they come back in the Status.
template <class... P, class... A>
Status launch_with(const LaunchOptions& options, void (*kernel)(P...), Dim3 grid, unsigned block_x,
                   std::size_t smem_bytes, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "launch: argument count does not match the kernel");
  detail::KernelPack<P...> pack{kernel, std::tuple<std::remove_cvref_t<P>...>(std::forward<A>(args)...)};
  return detail::launch_erased(&detail::KernelPack<P...>::thunk, &pack, grid, block_x, smem_bytes, options);
}

template <class... P, class... A>
Status launch(void (*kernel)(P...), Dim3 grid, unsigned block_x, std::size_t smem_bytes, A&&... args) {
  return launch_with(LaunchOptions{}, kernel, grid, block_x, smem_bytes, std::forward<A>(args)...);
}

// Timing helpers for the self-measurements (probes); not needed by kernels.
double measure_switch_ns(int rounds);

}  // namespace ddk::emu
