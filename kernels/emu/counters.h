// Exact per-CTA counters of an emulated launch and their JSON (the format kernels/emu/README.md and
// docs/emulation.md document). Internal to the runtime: included through runtime_internal.h only.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace ddk::emu::detail {

// Warp-instruction kinds counted per phase.
enum class Op : std::uint8_t {
  Mma, Shfl, Ldmatrix, LdShared, StShared, LdGlobal, StGlobal, CpAsync, SyncBlock, LdCluster, SyncCluster,
  AtomGlobal, kCount
};
constexpr int kOps = static_cast<int>(Op::kCount);

inline const char* op_key(int op) {
  static const char* const names[kOps] = {"mma",       "shfl",      "ldmatrix", "ld_shared",  "st_shared",
                                          "ld_global", "st_global", "cp_async", "sync_block", "ld_cluster",
                                          "sync_cluster", "atom_global"};
  return names[op];
}

// Shared-memory instruction kinds (the "shared" section's keys).
enum SharedKind : int {
  kLd8, kSt8, kLd16, kSt16, kLd32, kSt32, kLd64, kSt64, kLd128, kSt128,
  kLdmX1, kLdmX1Trans, kLdmX2, kLdmX2Trans, kLdmX4, kLdmX4Trans, kCpAsync16, kStmatrix, kCpAsync4, kSharedKinds
};

inline const char* shared_key(int k) {
  static const char* const names[kSharedKinds] = {
      "ld8",  "st8",  "ld16", "st16", "ld32", "st32", "ld64", "st64", "ld128", "st128", "ldmatrix_x1",
      "ldmatrix_x1_trans", "ldmatrix_x2", "ldmatrix_x2_trans", "ldmatrix_x4", "ldmatrix_x4_trans",
      "cp_async_16", "stmatrix", "cp_async_4"};
  return names[k];
}

inline int shared_kind_of(bool store, unsigned width) {
  const int base = width == 1 ? kLd8 : width == 2 ? kLd16 : width == 4 ? kLd32 : width == 8 ? kLd64 : kLd128;
  return base + (store ? 1 : 0);
}

// One interval between block barriers (the last one ends with the kernel).
struct Phase {
  std::uint64_t mma = 0, shared_wavefronts = 0, global_bytes = 0, global_store_bytes = 0, shuffles = 0;
  std::uint64_t cluster_bytes = 0;  // read from other CTAs' shared memory (ld_cluster)
  std::uint64_t cluster_arrives = 0;  // 1: the phase ends at a cluster_arrive (its wait comes later)
  std::uint64_t ops[kOps] = {};

  std::uint64_t warp_instructions() const {
    std::uint64_t n = 0;
    for (std::uint64_t v : ops) n += v;
    return n;
  }
};

// One CTA-level cp.async wait: the k-th wait of every thread of the CTA.
struct WaitRecord {
  std::uint64_t bytes_in_flight = 0;  // issued (valid copies), not yet complete, just before the wait
  std::uint64_t bytes_completed = 0;  // the bytes this wait made land
  long long phases_ahead = -1;        // fewest barriers between a completed group's commit and the wait
  bool late = false;
};

struct CtaRecord {
  unsigned x = 0, y = 0, z = 0;
  std::uint64_t linear = 0;
  std::uint64_t weight = 1;  // CTAs of the launch this one stands for (sampled launches)
  std::vector<Phase> phases{1};
  std::uint64_t barriers = 0, cluster_barriers = 0;  // a cluster barrier is a block barrier too
  std::uint64_t cluster_bytes = 0;
  std::uint64_t load_bytes = 0, store_bytes = 0, cp_async_bytes = 0, sectors = 0, unique_sectors = 0;
  std::uint64_t shared_instr[kSharedKinds] = {}, shared_wf[kSharedKinds] = {}, bank_conflicts = 0;
  std::vector<WaitRecord> waits;
  // Warp instructions by call site ("file:line"; a line's columns summed) and kind: what ties the SASS of
  // each site to how often a warp ran it (ddbench/kernel/sass_map.py, ddbench/model/sass_count.py).
  std::map<std::uint16_t, std::array<std::uint64_t, kOps>> site_ops;  // by site id, while the CTA runs
  std::map<std::string, std::array<std::uint64_t, kOps>> sites;       // by "file:line", once it ended

  Phase& phase() { return phases.back(); }
  void count(Op op, std::uint16_t site, std::uint64_t n = 1) {
    phase().ops[static_cast<int>(op)] += n;
    site_ops[site][static_cast<int>(op)] += n;
  }
};

inline void json_u(std::string& out, const char* key, std::uint64_t v, bool comma = true) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s\"%s\": %llu", comma ? ", " : "", key, static_cast<unsigned long long>(v));
  out += buf;
}

inline std::string phase_json(const Phase& p) {
  std::string s = "{";
  json_u(s, "mma", p.mma, false);
  json_u(s, "shared_wavefronts", p.shared_wavefronts);
  json_u(s, "global_bytes", p.global_bytes);
  json_u(s, "global_store_bytes", p.global_store_bytes);
  json_u(s, "shuffles", p.shuffles);
  json_u(s, "cluster_bytes", p.cluster_bytes);
  json_u(s, "cluster_arrives", p.cluster_arrives);
  json_u(s, "warp_instructions", p.warp_instructions());
  s += ", \"instructions\": {";
  for (int k = 0; k < kOps; ++k) json_u(s, op_key(k), p.ops[k], k > 0);
  return s + "}}";
}

inline std::string wait_json(const WaitRecord& w) {
  std::string s = "{";
  json_u(s, "bytes_in_flight", w.bytes_in_flight, false);
  json_u(s, "bytes_completed", w.bytes_completed);
  char buf[64];
  std::snprintf(buf, sizeof buf, ", \"phases_ahead\": %lld, \"late\": %s}", w.phases_ahead, w.late ? "true" : "false");
  return s + buf;
}

// Everything of a CTA except where it sits in the grid: equal texts = the same work shape.
inline std::string cta_shape_json(const CtaRecord& c) {
  std::string s = "\"phases\": [";
  for (std::size_t i = 0; i < c.phases.size(); ++i) s += (i ? ", " : "") + phase_json(c.phases[i]);
  s += "]";
  json_u(s, "barriers", c.barriers);
  json_u(s, "cluster_barriers", c.cluster_barriers);
  json_u(s, "cluster_bytes", c.cluster_bytes);
  json_u(s, "global_bytes", c.load_bytes + c.store_bytes + c.cp_async_bytes);
  json_u(s, "load_bytes", c.load_bytes);
  json_u(s, "store_bytes", c.store_bytes);
  json_u(s, "cp_async_bytes", c.cp_async_bytes);
  json_u(s, "sectors", c.sectors);
  json_u(s, "unique_sectors", c.unique_sectors);
  std::uint64_t wf = 0;
  for (std::uint64_t v : c.shared_wf) wf += v;
  json_u(s, "shared_wavefronts", wf);
  json_u(s, "bank_conflicts", c.bank_conflicts);
  s += ", \"cp_async_waits\": [";
  for (std::size_t i = 0; i < c.waits.size(); ++i) s += (i ? ", " : "") + wait_json(c.waits[i]);
  s += "], \"sites\": {";
  bool first_site = true;
  for (const auto& [where, ops] : c.sites) {
    s += (first_site ? "\"" : ", \"") + where + "\": {";
    first_site = false;
    bool first_op = true;
    for (int k = 0; k < kOps; ++k)
      if (ops[k] != 0) {
        json_u(s, op_key(k), ops[k], !first_op);
        first_op = false;
      }
    s += "}";
  }
  return s + "}";
}

struct KernelCountersRecord {
  std::string name;
  unsigned gx = 1, gy = 1, gz = 1, threads = 0;
  std::uint64_t smem = 0;
  std::vector<CtaRecord> ctas;       // every emulated CTA, sorted by linear index
  std::uint64_t unique_sectors = 0;  // over the emulated CTAs
  std::uint64_t grid_ctas = 0;
  bool sampled = false;

  std::string json(bool group_shapes) const {
    std::uint64_t barriers = 0, mma = 0, ldm = 0, shfl = 0, ld = 0, st = 0, cp = 0, sectors = 0, bank = 0;
    std::uint64_t cluster_barriers = 0, cluster_bytes = 0;
    std::uint64_t si[kSharedKinds] = {}, swf[kSharedKinds] = {}, waits = 0, late = 0;
    std::string in_flight;
    for (const CtaRecord& c : ctas) {
      const std::uint64_t n = c.weight;
      barriers += n * c.barriers;
      cluster_barriers += n * c.cluster_barriers;
      cluster_bytes += n * c.cluster_bytes;
      for (const Phase& p : c.phases) {
        mma += n * p.mma;
        shfl += n * p.shuffles;
        ldm += n * p.ops[static_cast<int>(Op::Ldmatrix)];
      }
      ld += n * c.load_bytes;
      st += n * c.store_bytes;
      cp += n * c.cp_async_bytes;
      sectors += n * c.sectors;
      bank += n * c.bank_conflicts;
      for (int k = 0; k < kSharedKinds; ++k) {
        si[k] += n * c.shared_instr[k];
        swf[k] += n * c.shared_wf[k];
      }
      for (std::uint64_t rep = 0; rep < n; ++rep)
        for (const WaitRecord& w : c.waits) {
          ++waits;
          late += w.late ? 1 : 0;
          if (!in_flight.empty()) in_flight += ", ";
          in_flight += std::to_string(w.bytes_in_flight);
        }
    }
    char head[512];
    std::snprintf(head, sizeof head,
                  "{\"name\": \"%s\", \"grid\": [%u, %u, %u], \"threads_per_cta\": %u, \"ctas\": %llu, "
                  "\"emulated_ctas\": %llu, \"dynamic_smem_bytes\": %llu, \"cta_detail\": \"%s\", \"totals\": {",
                  name.c_str(), gx, gy, gz, threads, static_cast<unsigned long long>(grid_ctas),
                  static_cast<unsigned long long>(ctas.size()), static_cast<unsigned long long>(smem),
                  sampled ? "sampled" : group_shapes ? "shapes" : "all");
    std::string s = head;
    json_u(s, "barriers", barriers, false);
    json_u(s, "mma", mma);
    json_u(s, "ldmatrix", ldm);
    json_u(s, "shuffles", shfl);
    json_u(s, "cluster_barriers", cluster_barriers);
    json_u(s, "cluster_bytes", cluster_bytes);
    s += ", \"global\": {";
    json_u(s, "load_bytes", ld, false);
    json_u(s, "store_bytes", st);
    json_u(s, "cp_async_bytes", cp);
    json_u(s, "sectors", sectors);
    json_u(s, "unique_sectors", unique_sectors);
    s += "}, \"shared\": {\"instructions\": {";
    for (int k = 0; k < kSharedKinds; ++k) json_u(s, shared_key(k), si[k], k > 0);
    s += "}, \"wavefronts\": {";
    for (int k = 0; k < kSharedKinds; ++k) json_u(s, shared_key(k), swf[k], k > 0);
    s += "}";
    json_u(s, "bank_conflicts", bank);
    s += "}, \"cp_async\": {";
    json_u(s, "waits", waits, false);
    s += ", \"bytes_in_flight_at_wait\": [" + in_flight + "]";
    json_u(s, "late_waits", late);
    s += "}}, \"cta_shapes\": [";
    // Shapes in order of their first CTA; each CTA its own entry unless grouping.
    std::vector<std::string> order;
    std::map<std::string, std::pair<std::size_t, std::uint64_t>> shapes;  // text -> (first cta, count)
    bool first = true;
    for (std::size_t i = 0; i < ctas.size(); ++i) {
      std::string text = cta_shape_json(ctas[i]);
      if (group_shapes) {
        auto it = shapes.find(text);
        if (it != shapes.end()) {
          it->second.second += ctas[i].weight;
          continue;
        }
        shapes.emplace(text, std::make_pair(i, ctas[i].weight));
        order.push_back(std::move(text));
        continue;
      }
      char e[160];
      std::snprintf(e, sizeof e, "%s{\"count\": %llu, \"example_cta\": [%u, %u, %u], ", first ? "" : ", ",
                    static_cast<unsigned long long>(ctas[i].weight), ctas[i].x, ctas[i].y, ctas[i].z);
      s += e + text + "}";
      first = false;
    }
    for (const std::string& text : order) {
      const auto& [idx, count] = shapes[text];
      char e[160];
      std::snprintf(e, sizeof e, "%s{\"count\": %llu, \"example_cta\": [%u, %u, %u], ", first ? "" : ", ",
                    static_cast<unsigned long long>(count), ctas[idx].x, ctas[idx].y, ctas[idx].z);
      s += e + text + "}";
      first = false;
    }
    return s + "]}";
  }
};

}  // namespace ddk::emu::detail
