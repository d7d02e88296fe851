// ddk emulation runtime: the counters. A closed warp instruction's shared wavefronts and bank conflicts, global
// bytes and sectors, cluster bytes and cp.async traffic, into the CTA's record (counters.h).
#include "runtime_internal.h"

#include <algorithm>

namespace ddk::emu::detail {

namespace {

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

}  // namespace

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

}  // namespace ddk::emu::detail
