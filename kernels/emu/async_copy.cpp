// ddk emulation runtime: cp.async. A copy is queued by its thread and performed only when a wait releases its
// commit group; traced, each issue, wait and landing is checked and counted.
#include "runtime_internal.h"

#include <cstdint>

namespace ddk::emu::detail {

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

}  // namespace ddk::emu::detail
