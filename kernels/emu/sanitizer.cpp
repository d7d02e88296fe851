// ddk emulation runtime: the sanitizer (racecheck, memcheck, initcheck) of traced launches, on the shadow
// memory of sanitizer.h; its findings, each kept once with a count.
#include "runtime_internal.h"

#include <algorithm>

namespace ddk::emu::detail {

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

namespace {

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

}  // namespace

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

namespace {

const Buffer* containing_buffer(const LaunchOptions& o, std::uint64_t a, unsigned n) {
  for (int i = 0; i < o.n_buffers; ++i) {
    const auto base = reinterpret_cast<std::uint64_t>(o.buffers[i].base);
    if (o.buffers[i].base != nullptr && a >= base && a + n <= base + o.buffers[i].bytes) return &o.buffers[i];
  }
  return nullptr;
}

}  // namespace

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

namespace {

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

}  // namespace

// The sanitizer's checks of one lane's shared access: in range, and no race (false: a finding stopped it).
bool shared_checked(Worker& w, const Fiber& f, std::uint16_t id, const void* p, unsigned bytes, bool store) {
  if (!check_shared_range(w, f, id, p, bytes, store ? "write" : "read")) return false;
  shadow_access(w, access_now(*w.trace, f, id), static_cast<std::size_t>(static_cast<const char*>(p) - w.smem), bytes,
                store, true, store ? "st_shared" : "ld_shared");
  return true;
}

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

}  // namespace ddk::emu::detail
