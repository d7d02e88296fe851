// ddk emulation runtime: warp collectives (shfl_xor, mma, ldmatrix), rendezvous of the 32 lanes of a warp at
// one call site; the last lane to arrive computes every lane's result.
#include "runtime_internal.h"

namespace ddk::emu::detail {

namespace {

inline float bf16_lo(std::uint32_t r) {
  const std::uint32_t u = r << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float bf16_hi(std::uint32_t r) {
  const std::uint32_t u = r & 0xffff0000u;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void compute_shfl(WarpSlot& s) {
  std::uint32_t in[32];
  for (int l = 0; l < 32; ++l) std::memcpy(&in[l], s.args[l].in0, 4);
  for (unsigned l = 0; l < 32; ++l) {
    unsigned j = l ^ s.args[l].u;  // shfl.sync.bfly, c = 0x1f: source lane out of [0, 31] -> own value
    if (j > 31) j = l;
    std::memcpy(s.args[l].out, &in[j], 4);
  }
}

// mma.m16n8k16 .row.col f32.bf16.bf16.f32 (PTX ISA 8.7, "Matrix Fragments for mma.m16n8k16 with
// floating point type"): gather A, B, C from the 32 lanes, D = A·B + C accumulating in fp32 in k
// order 0..15 starting from C (bf16 products are exact in fp32), scatter D.
void compute_mma(WarpSlot& s) {
  float A[16][16], B[16][8], C[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned g = l >> 2, t = l & 3u;
    const auto* a = static_cast<const std::uint32_t*>(s.args[l].in0);
    const auto* b = static_cast<const std::uint32_t*>(s.args[l].in1);
    const auto* c = static_cast<const float*>(s.args[l].in2);
    A[g][2 * t] = bf16_lo(a[0]);
    A[g][2 * t + 1] = bf16_hi(a[0]);
    A[g + 8][2 * t] = bf16_lo(a[1]);
    A[g + 8][2 * t + 1] = bf16_hi(a[1]);
    A[g][2 * t + 8] = bf16_lo(a[2]);
    A[g][2 * t + 9] = bf16_hi(a[2]);
    A[g + 8][2 * t + 8] = bf16_lo(a[3]);
    A[g + 8][2 * t + 9] = bf16_hi(a[3]);
    B[2 * t][g] = bf16_lo(b[0]);
    B[2 * t + 1][g] = bf16_hi(b[0]);
    B[2 * t + 8][g] = bf16_lo(b[1]);
    B[2 * t + 9][g] = bf16_hi(b[1]);
    C[g][2 * t] = c[0];
    C[g][2 * t + 1] = c[1];
    C[g + 8][2 * t] = c[2];
    C[g + 8][2 * t + 1] = c[3];
  }
  // Four rows at a time, columns as two 4-wide vectors: every element is still C + p0 + p1 + ... + p15
  // added in that order (no reassociation, no contraction: bf16 products are exact anyway).
  typedef float v4f __attribute__((vector_size(16)));
  float D[16][8];
  auto ld = [](const float* p) {
    v4f v;
    std::memcpy(&v, p, 16);
    return v;
  };
  auto st = [](float* p, v4f v) { std::memcpy(p, &v, 16); };
  for (int m = 0; m < 16; m += 4) {
    v4f c00 = ld(&C[m][0]), c01 = ld(&C[m][4]), c10 = ld(&C[m + 1][0]), c11 = ld(&C[m + 1][4]);
    v4f c20 = ld(&C[m + 2][0]), c21 = ld(&C[m + 2][4]), c30 = ld(&C[m + 3][0]), c31 = ld(&C[m + 3][4]);
    for (int k = 0; k < 16; ++k) {
      const v4f b0 = ld(&B[k][0]), b1 = ld(&B[k][4]);
      const float x0 = A[m][k], x1 = A[m + 1][k], x2 = A[m + 2][k], x3 = A[m + 3][k];
      const v4f a0 = {x0, x0, x0, x0}, a1 = {x1, x1, x1, x1}, a2 = {x2, x2, x2, x2}, a3 = {x3, x3, x3, x3};
      c00 += a0 * b0;
      c01 += a0 * b1;
      c10 += a1 * b0;
      c11 += a1 * b1;
      c20 += a2 * b0;
      c21 += a2 * b1;
      c30 += a3 * b0;
      c31 += a3 * b1;
    }
    st(&D[m][0], c00);
    st(&D[m][4], c01);
    st(&D[m + 1][0], c10);
    st(&D[m + 1][4], c11);
    st(&D[m + 2][0], c20);
    st(&D[m + 2][4], c21);
    st(&D[m + 3][0], c30);
    st(&D[m + 3][4], c31);
  }
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned g = l >> 2, t = l & 3u;
    auto* d = static_cast<float*>(s.args[l].out);  // may alias this lane's c: all of C was read above
    d[0] = D[g][2 * t];
    d[1] = D[g][2 * t + 1];
    d[2] = D[g + 8][2 * t];
    d[3] = D[g + 8][2 * t + 1];
  }
}

}  // namespace

// True when [p, p+bytes) lies inside the block's shared memory and p is `bytes`-aligned; else says why.
bool check_smem(const Worker& w, const void* p, unsigned bytes, std::string* why) {
  const auto base = reinterpret_cast<std::uintptr_t>(w.smem);
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  const long long off = static_cast<long long>(addr - base);
  if (addr < base || addr - base + bytes > w.smem_bytes) {
    if (off > -(1ll << 30) && off < (1ll << 30))
      *why = fmt("offset %lld (+%u bytes) is outside the block's %zu-byte dynamic shared memory", off, bytes,
                 w.smem_bytes);
    else
      *why = fmt("address %p is not in the block's dynamic shared memory (%zu bytes at %p)", p, w.smem_bytes,
                 static_cast<void*>(w.smem));
    return false;
  }
  if (addr % bytes != 0) {
    *why = fmt("offset %lld is not %u-byte aligned", off, bytes);
    return false;
  }
  return true;
}

namespace {

bool check_smem16(const Worker& w, const void* p, std::string* why) { return check_smem(w, p, 16, why); }

inline std::uint16_t load_b16(const char* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// ldmatrix.sync.aligned.m8n8.x{2,4}{.trans}.shared.b16 (PTX ISA 8.7, "Warp-level matrix load
// instruction: ldmatrix"): lane l addresses row l%8 of matrix l/8; register i of lane l receives
// row l/4, columns 2(l%4), 2(l%4)+1 of matrix i (of its transpose with .trans).
bool compute_ldmatrix(Worker& w, WarpSlot& s, int nmat, bool trans, unsigned warp) {
  const char* rows[32];
  std::string first_why;
  int first_bad = -1;
  std::uint32_t bad = 0;
  for (int i = 0; i < nmat * 8; ++i) {  // .x2: only lanes 0-15 supply addresses
    std::string why;
    if (!check_smem16(w, s.args[i].in0, &why)) {
      if (bad == 0) {
        first_why = why;
        first_bad = i;
      }
      bad |= 1u << i;
    }
    rows[i] = static_cast<const char*>(s.args[i].in0);
  }
  if (bad != 0) {
    fail(w, kMemoryError, fmt("%s at %s in %s, warp %u: bad row address from %s (lane %d: %s)", coll_name(s.kind),
                              site_str(s.site).c_str(), block_str(w).c_str(), warp, lanes_phrase(bad).c_str(),
                              first_bad, first_why.c_str()));
    return false;
  }
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned g = l >> 2, t = l & 3u;
    auto* r = static_cast<std::uint32_t*>(s.args[l].out);
    for (int i = 0; i < nmat; ++i) {
      const char* const* m = rows + 8 * i;
      std::uint16_t lo, hi;
      if (!trans) {
        lo = load_b16(m[g] + 2 * (2 * t));
        hi = load_b16(m[g] + 2 * (2 * t + 1));
      } else {
        lo = load_b16(m[2 * t] + 2 * g);
        hi = load_b16(m[2 * t + 1] + 2 * g);
      }
      r[i] = static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
    }
  }
  return true;
}

// ------------------------------------------------------------------------------- block running --

}  // namespace

void warp_collective(Coll kind, const LaneArgs& args, const Site& site) {
  Fiber* f = current_fiber(coll_name(kind));
  Worker& w = *f->worker;
  const unsigned warp = f->view.warp;
  WarpSlot& s = w.warps[warp];
  if (s.arrived == 0) {
    s.kind = kind;
    s.site = site;
  } else if (s.kind != kind || !same_site(s.site, site)) {
    // Another collective of this warp is pending elsewhere: neither can complete. Park this lane;
    // the deadlock report lists both groups once nothing else can run.
    f->state = FState::Diverged;
    f->wait_kind = kind;
    f->wait_site = site;
    switch_to_next(f);
    abort_to_main(f);
  }
  s.args[f->view.lane] = args;
  if (++s.arrived < 32) {
    f->state = FState::WaitWarp;
    f->wait_kind = kind;
    f->wait_site = site;
    switch_to_next(f);
    return;  // the last lane to arrive wrote this lane's result
  }
  if (w.trace != nullptr) trace_collective(w, kind, s, warp);
  bool ok = true;
  switch (kind) {
    case Coll::ShflXor: compute_shfl(s); break;
    case Coll::Mma: compute_mma(s); break;
    case Coll::LdmX4: ok = compute_ldmatrix(w, s, 4, false, warp); break;
    case Coll::LdmX4Trans: ok = compute_ldmatrix(w, s, 4, true, warp); break;
    case Coll::LdmX2: ok = compute_ldmatrix(w, s, 2, false, warp); break;
    case Coll::LdmX2Trans: ok = compute_ldmatrix(w, s, 2, true, warp); break;
    default: break;
  }
  if (!ok) abort_to_main(f);
  s.arrived = 0;
  s.kind = Coll::None;
  const unsigned base = warp * 32;
  for (unsigned l = 0; l < 32; ++l) {
    Fiber* g = w.fibers[base + l].get();
    if (g == f) continue;
    g->state = FState::Ready;
    g->wait_kind = Coll::None;
    w.push(g);
  }
}

}  // namespace ddk::emu::detail
