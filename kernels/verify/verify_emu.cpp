// The verify kernel's own source under the CPU emulation (g++ -DDDK_EMULATE), behind a C ABI for ctypes.
// Same launch geometry and the same two kernels as verify_torch.cu.
#include "verify_attn.cuh"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

ddk_verify::VerifyParams make_params(const uint16_t* q, const uint16_t* kv, const uint16_t* kv_draft,
                                     const int64_t* kv_slots,
                                     const int32_t* slot_offsets, const int32_t* kv_offsets, const int32_t* q_offsets, const uint32_t* mask_words,
                                     uint16_t* out, float* lse, uint16_t* ws_o, float* ws_lse, float* ws_scale,
                                     int32_t* arrivals, int total_rows, int heads, int mask_words_per_row,
                                     int batch, int num_ctas, int whole_row_tiles, int row_groups,
                                     int combine_halves, int combine_rows, int cluster, float sm_scale) {
  ddk_verify::VerifyParams p{};
  p.q = q;
  p.kv = kv;
  p.kv_draft = kv_draft;
  p.kv_slots = kv_slots;
  p.slot_offsets = slot_offsets;
  p.kv_offsets = kv_offsets;
  p.q_offsets = q_offsets;
  p.mask_words = mask_words;
  p.out = out;
  p.lse = lse;
  p.ws_o = ws_o;
  p.ws_lse = ws_lse;
  p.ws_scale = ws_scale;
  p.arrivals = arrivals;
  p.total_rows = total_rows;
  p.heads = heads;
  p.mask_words_per_row = mask_words_per_row;
  p.batch = batch;
  p.num_ctas = num_ctas;
  p.whole_row_tiles = whole_row_tiles;
  p.row_groups = row_groups;
  p.combine_halves = combine_halves;
  p.combine_rows = combine_rows;
  p.cluster = cluster;
  p.scale_log2 = static_cast<float>(static_cast<double>(sm_scale) * 1.4426950408889634);
  return p;
}

// The verify launch, then the combine launch unless every CTA is a whole row tile or the verify kernel merges
// the parts itself (arrivals).
// A CTA subset (options.cta_subset) applies to the verify launch only; the combine always runs whole.
ddk::emu::Status launch_both(const ddk_verify::VerifyParams& p, ddk::emu::LaunchOptions options) {
  const bool groups_ok = p.row_groups == 2 || p.row_groups == ddk_verify::kMaxGroups;
  if (!groups_ok || (p.combine_halves != 1 && p.combine_halves != 2))
    return {ddk::emu::kInvalidLaunch, "row_groups must be 2 or 3 and combine_halves 1 or 2, not " +
                                          std::to_string(p.row_groups) + " and " + std::to_string(p.combine_halves)};
  if (!ddk_verify::valid_cluster(p.cluster, p.num_ctas, p.whole_row_tiles))
    return {ddk::emu::kInvalidLaunch, "cluster must be 1 to 8 CTAs dividing num_ctas, and 1 with whole row "
                                      "tiles, not " + std::to_string(p.cluster) + " of " + std::to_string(p.num_ctas)};
  if (p.combine_rows < 1 || p.combine_rows > ddk_verify::kCombineMaxRows)
    return {ddk::emu::kInvalidLaunch, "combine_rows must be 1 to " + std::to_string(ddk_verify::kCombineMaxRows) +
                                          ", not " + std::to_string(p.combine_rows)};
  if (p.whole_row_tiles == 0 && p.num_ctas > ddk_verify::kMaxListedCtas)
    return {ddk::emu::kInvalidLaunch, "a split row tile's merge lists at most " +
                                          std::to_string(ddk_verify::kMaxListedCtas) + " CTAs, not " +
                                          std::to_string(p.num_ctas)};
  const ddk::emu::Dim3 grid(static_cast<unsigned>(p.num_ctas));
  options.kernel_name = "verify";
  options.cluster_x = static_cast<unsigned>(p.cluster);
  const unsigned threads = ddk_verify::kGroupThreads * p.row_groups;
  ddk::emu::Status status = ddk::emu::launch_with(options, ddk_verify::verify_attention_kernel, grid, threads,
                                                  ddk_verify::smem_bytes(p.row_groups), p);
  options.cta_subset = nullptr;
  options.cta_weights = nullptr;
  options.n_cta_subset = 0;
  options.cluster_x = 1;
  if (status.ok() && p.whole_row_tiles == 0 && p.num_ctas > 1 && p.arrivals == nullptr) {
    options.kernel_name = "combine";
    const unsigned grid = static_cast<unsigned>((p.total_rows + p.combine_rows - 1) / p.combine_rows);
    status = ddk::emu::launch_with(options, ddk_verify::combine_parts_kernel, ddk::emu::Dim3(grid),
                                   ddk_verify::kCombineHalf * p.combine_halves,
                                   ddk_verify::combine_smem_bytes(p.num_ctas), p);
  }
  return status;
}

char* copy_out(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  if (out != nullptr) std::memcpy(out, s.c_str(), s.size() + 1);
  return out;
}

}  // namespace

extern "C" int ddk_verify_emu(const uint16_t* q, const uint16_t* kv, const uint16_t* kv_draft,
                              const int64_t* kv_slots, const int32_t* slot_offsets,
                              const int32_t* kv_offsets, const int32_t* q_offsets, const uint32_t* mask_words,
                              uint16_t* out, float* lse, uint16_t* ws_o, float* ws_lse, float* ws_scale,
                              int32_t* arrivals, int total_rows, int heads, int mask_words_per_row, int batch,
                              int num_ctas, int whole_row_tiles, int row_groups, int combine_halves, int combine_rows,
                              int cluster, float sm_scale, int workers, char* error, int error_len) {
  const ddk_verify::VerifyParams p =
      make_params(q, kv, kv_draft, kv_slots, slot_offsets, kv_offsets, q_offsets, mask_words, out, lse, ws_o, ws_lse, ws_scale,
                  arrivals, total_rows, heads, mask_words_per_row, batch, num_ctas, whole_row_tiles, row_groups,
                  combine_halves, combine_rows, cluster, sm_scale);
  if (total_rows == 0 || batch == 0) return 0;
  ddk::emu::LaunchOptions options;
  options.workers = workers;
  return ddk::emu::copy_status(launch_both(p, options), error, static_cast<std::size_t>(error_len));
}

// The same launch with counters (flags bit 0), the sanitizer (bit 1) and CTAs grouped by work shape (bit 2).
// buffer_bytes: the sizes of the fourteen buffers, in argument order (q .. arrivals), for memcheck. n_subset
// > 0: emulate only those verify CTAs (increasing linear indices), each counted `weights[i]` times. On success the
// counters and sanitizer JSON documents come back in *counters_json / *sanitizer_json (free them with
// ddk_emu_free); a part not asked for comes back as nullptr.
extern "C" int ddk_verify_emu_traced(const uint16_t* q, const uint16_t* kv, const uint16_t* kv_draft,
                                     const int64_t* kv_slots,
                                     const int32_t* slot_offsets, const int32_t* kv_offsets, const int32_t* q_offsets,
                                     const uint32_t* mask_words, uint16_t* out, float* lse, uint16_t* ws_o,
                                     float* ws_lse, float* ws_scale, int32_t* arrivals, int total_rows, int heads,
                                     int mask_words_per_row,
                                     int batch, int num_ctas, int whole_row_tiles, int row_groups,
                                     int combine_halves, int combine_rows, int cluster, float sm_scale, int workers,
                                     int flags, int late_wait_phases, const int64_t* buffer_bytes,
                                     const uint64_t* subset, const uint64_t* weights, int64_t n_subset,
                                     char** counters_json, char** sanitizer_json, char* error, int error_len) {
  *counters_json = nullptr;
  *sanitizer_json = nullptr;
  const ddk_verify::VerifyParams p =
      make_params(q, kv, kv_draft, kv_slots, slot_offsets, kv_offsets, q_offsets, mask_words, out, lse, ws_o, ws_lse, ws_scale,
                  arrivals, total_rows, heads, mask_words_per_row, batch, num_ctas, whole_row_tiles, row_groups,
                  combine_halves, combine_rows, cluster, sm_scale);
  constexpr int kBuffers = 14;
  const void* bases[kBuffers] = {q,         kv,         kv_draft, kv_slots, slot_offsets, kv_offsets, q_offsets,
                                 mask_words, out,       lse,      ws_o,     ws_lse,       ws_scale,   arrivals};
  static const char* const names[kBuffers] = {"q",          "kv",         "kv_draft",  "kv_slots",   "slot_offsets",
                                              "kv_offsets", "q_offsets",  "mask_words", "out",       "lse",
                                              "ws_o",       "ws_lse",     "ws_scale",  "arrivals"};
  ddk::emu::Buffer buffers[kBuffers];
  int n = 0;
  for (int i = 0; i < kBuffers; ++i) {
    if (bases[i] == nullptr) continue;
    buffers[n].name = names[i];
    buffers[n].base = bases[i];
    buffers[n].bytes = static_cast<std::size_t>(buffer_bytes[i]);
    ++n;
  }
  ddk::emu::Report report;
  ddk::emu::LaunchOptions options;
  options.workers = workers;
  options.report = &report;
  options.count = (flags & 1) != 0;
  options.sanitize = (flags & 2) != 0;
  options.group_shapes = (flags & 4) != 0;
  options.late_wait_phases = late_wait_phases;
  options.buffers = buffers;
  options.n_buffers = n;
  if (n_subset > 0) {
    options.cta_subset = subset;
    options.cta_weights = weights;
    options.n_cta_subset = static_cast<std::size_t>(n_subset);
  }
  ddk::emu::Status status;
  if (total_rows != 0 && batch != 0) status = launch_both(p, options);
  if (status.ok()) {
    if (options.count) *counters_json = copy_out(report.counters_json());
    if (options.sanitize) *sanitizer_json = copy_out(report.sanitizer_json());
  }
  return ddk::emu::copy_status(status, error, static_cast<std::size_t>(error_len));
}

extern "C" void ddk_emu_free(char* p) { std::free(p); }
