// ddk emulation runtime: a launch. It checks the configuration, hands whole clusters to worker OS threads
// (pooled Workers), and returns the first failure as its Status.
#include "runtime_internal.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

namespace ddk::emu {

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

constexpr std::size_t kMaxSmem = 101376;  // sm_120 per-block dynamic shared-memory limit

thread_local Worker* tl_worker = nullptr;

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

}  // namespace

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

}  // namespace ddk::emu
