// ddk emulation runtime: what traced launches leave in their Report (counters and sanitizer JSON), merged from
// every worker's trace.
#include "runtime_internal.h"

#include <algorithm>
#include <tuple>

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

namespace detail {

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

}  // namespace detail

}  // namespace ddk::emu
