// ddk emulation runtime: the words of its errors and findings (formatting, call sites, lane lists, JSON
// strings) and the failure of a block.
#include "runtime_internal.h"

#include <cstdarg>
#include <cstdio>

namespace ddk::emu::detail {

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

std::string who_json(unsigned tid, const std::string& site) {
  return fmt("{\"site\": \"%s\", \"thread\": %u, \"warp\": %u, \"lane\": %u}", json_escape(site).c_str(), tid,
             tid / 32, tid % 32);
}

}  // namespace ddk::emu::detail
