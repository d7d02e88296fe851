// ddk emulation runtime: the report of a block that can go no further (divergence, a barrier not every thread
// reached, a cluster barrier short of CTAs), warp by warp.
#include "runtime_internal.h"

#include <algorithm>

namespace ddk::emu::detail {

// One line per group of consecutive warps in the same state; which lanes wait where or have exited.
std::string deadlock_report(Worker& w) {
  const unsigned nwarps = w.nthreads / 32;
  bool any_warp_wait = false;
  for (unsigned i = 0; i < w.nthreads; ++i) {
    const FState st = w.fibers[i]->state;
    const Coll k = w.fibers[i]->wait_kind;
    if (st == FState::WaitWarp || (st == FState::Diverged && k != Coll::SyncBlock && k != Coll::SyncCluster))
      any_warp_wait = true;
  }
  const bool any_barrier = w.bar_arrived > 0;
  const bool any_cluster = w.cluster != nullptr && w.cluster->arrived > 0;
  const bool any_split = w.cluster != nullptr && std::count(w.cluster->split_waiting.begin(),
                                                            w.cluster->split_waiting.end(), &w) > 0;
  struct Line {
    unsigned warp;
    std::string text;
  };
  std::vector<Line> lines;
  for (unsigned wp = 0; wp < nwarps; ++wp) {
    struct Group {
      bool waiting;
      Coll kind;
      Site site;
      std::uint32_t mask;
    };
    std::vector<Group> groups;
    bool all_done = true;
    for (unsigned l = 0; l < 32; ++l) {
      const Fiber& f = *w.fibers[wp * 32 + l];
      const bool waiting = f.state != FState::Done;
      if (waiting) all_done = false;
      bool merged = false;
      for (Group& g : groups) {
        if (g.waiting != waiting) continue;
        if (waiting && (g.kind != f.wait_kind || !same_site(g.site, f.wait_site))) continue;
        g.mask |= 1u << l;
        merged = true;
        break;
      }
      if (!merged) groups.push_back({waiting, f.wait_kind, f.wait_site, 1u << l});
    }
    // A warp that finished is only worth naming when it is missing from a sync_block.
    if (all_done && !any_barrier && !any_cluster) continue;
    std::string d;
    for (const Group& g : groups) {
      if (!d.empty()) d += "; ";
      d += lanes_phrase(g.mask);
      if (!g.waiting)
        d += " exited";
      else
        d += fmt(" wait at %s (%s)", coll_name(g.kind), site_str(g.site).c_str());
    }
    lines.push_back({wp, std::move(d)});
  }
  // Collapse runs of consecutive warps with the same description.
  std::string body;
  for (std::size_t li = 0; li < lines.size();) {
    std::size_t e = li;
    while (e + 1 < lines.size() && lines[e + 1].text == lines[li].text && lines[e + 1].warp == lines[e].warp + 1) ++e;
    body += e == li ? fmt("\n  warp %u: ", lines[li].warp) : fmt("\n  warps %u-%u: ", lines[li].warp, lines[e].warp);
    body += lines[li].text;
    li = e + 1;
  }
  std::string head = fmt("deadlock in %s (%u threads): ", block_str(w).c_str(), w.nthreads);
  if (any_warp_wait)
    head += "divergence: a warp collective was not reached by all 32 lanes of its warp at the same call site";
  if (any_barrier) {
    if (any_warp_wait) head += "; ";
    head += fmt("sync_block (%s) reached by %u of %u threads", site_str(w.bar_site).c_str(), w.bar_arrived,
                w.nthreads);
  }
  if (any_cluster) {
    if (any_warp_wait || any_barrier) head += "; ";
    head += fmt("sync_cluster (%s) reached by %u of %zu threads of the cluster", site_str(w.cluster->site).c_str(),
                w.cluster->arrived, w.nthreads * w.cluster->blocks.size());
  }
  if (any_split) {
    if (any_warp_wait || any_barrier || any_cluster) head += "; ";
    head += fmt("cluster_wait (%s): %zu of the cluster's %zu CTAs arrived at its barrier",
                site_str(w.cluster_wait_site).c_str(), w.cluster->split_arrived, w.cluster->blocks.size());
  }
  if (!any_warp_wait && !any_barrier && !any_cluster && !any_split)
    head += "threads blocked at a sync_block call site that others did not reach";
  return head + body;
}

}  // namespace ddk::emu::detail
