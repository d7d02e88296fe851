// ddk emulation runtime: what every traced launch (LaunchOptions::count / sanitize) records. The memory
// accessors' entry (mem_access, atomic_access), call sites, warp instructions, and the epochs of barriers and
// collectives that the counters (counting.cpp) and the sanitizer (sanitizer.cpp) read.
//
// Memory accesses of one warp are grouped into warp instructions the SIMT way: the k-th execution of a call
// site by each lane of a warp is one instruction, whose active lanes are those that executed it. Instructions
// are closed when their warp meets at a collective or the block at a barrier (every lane of the warp is then
// past them), and at the end of the block.
#include "runtime_internal.h"

namespace ddk::emu::detail {

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
void trace_barrier(Worker& w, const Site& site, bool cluster) {
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

}  // namespace ddk::emu::detail
