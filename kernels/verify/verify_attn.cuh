// Tree-verify attention for absorbed MLA (DeepSeek-V3 / Kimi K2.x) on sm_80..sm_120, written once against the
// ddk primitives so the same source runs on the GPU (nvcc) and under the CPU emulation (g++ -DDDK_EMULATE).
//
// Work units are (request, row tile, 32-key tile) triples. Rows are (draft token, local head) pairs packed into
// the MMA M dimension, so each KV tile is read once per row tile for all its heads. The units of the whole
// batch, request-major, are cut into `num_ctas` equal contiguous ranges, one per CTA (a single wave sized to
// the GPU by the host): a long request of a ragged batch gets as many CTAs as its share of the work, and no CTA
// is left without keys. A CTA walks its range as segments of one row tile each; a segment that covers its row
// tile whole writes the output, one that covers part of it writes a partial (output in fp16, each row quarter
// scaled by a power of two, and its log-sum-exp) that the combine kernel merges with the other parts of that
// row tile. With `whole_row_tiles`, CTA c is row tile c whole (short prefixes: nothing to combine). Launched
// in thread-block clusters (sm_90+, `cluster` CTAs), a cluster whose ranges all lie in one row tile merges its
// parts through distributed shared memory instead (merge_cluster_parts): into the output when it covers the
// row tile, else into one part. With arrival counters (p.arrivals, the final merge) there is no combine
// kernel: each CTA that wrote a part arrives at its row tile's counters at its end (in a cluster that straddles
// row tiles, rank r for all of its cluster's parts, at lane r: arrive_for_cluster), and the last arrival at
// each lane merges the row tile's rows of that lane into the output (arrive_at_row_tile). Only keys at or
// after the prefix read the tree mask (bit words per draft row over the draft columns).
//
// 8 or 12 warps: warp w works on row group g = w / 4 (16 rows) and quarter c = w % 4. For S = Q K^T, the quarter is
// a 144-wide slice of the 576 dims (Q fragments stay in registers); the four partial S tiles of a row group
// meet in shared memory. For O += P V, the quarter is a 128-wide slice of the 512 output columns.
// A CTA holds 2 or 3 row groups (32 or 48 rows, 256 or 384 threads: `row_groups`, chosen by the host). 48 rows
// serve each KV tile brought through L2 to half as many rows again (a DDTree-8 step of 8 heads, 72 rows, is 2
// row tiles instead of 3), at the same registers per warp; 32 rows finish a short launch sooner.
#pragma once

#include <ddk/primitives.h>

#include <cstdint>

namespace ddk_verify {

constexpr int kDimQK = 576;          // [512 latent || 64 rope]
constexpr int kDimV = 512;           // V = the latent part of the same pool row
constexpr int kRowBytes = kDimQK * 2;
constexpr int kChunksPerRow = kRowBytes / 16;  // 72 chunks of 16 bytes
constexpr int kGroupRows = 16;       // rows (token x head) per row group: the mma M
constexpr int kGroupThreads = 128;   // 4 warps per row group
constexpr int kMaxGroups = 3;        // 48 rows, 384 threads: what registers are fitted to
constexpr int kMaxThreads = kMaxGroups * kGroupThreads;
constexpr int kBlockN = 32;          // keys per tile
constexpr int kStages = 2;
constexpr int kDimSlice = kDimQK / 4;   // 144 dims of S per warp
constexpr int kKSteps = kDimSlice / 16; // 9 mma k-steps per slice
constexpr int kColSlice = kDimV / 4;    // 128 output columns per warp
constexpr int kOutTiles = kColSlice / 8; // 16 n8 tiles of O per warp
constexpr int kSmemRowBytes = kRowBytes + 16;  // 1,168: see smem_offset
constexpr int kStageBytes = kBlockN * kSmemRowBytes;  // 37,376
// Shared memory, in this order: the slot indices of two tiles and the cursor (where the CTA is in its range of
// work units, see verify_attention_kernel), the two stages, every row group's partial S, every row's mask
// words. The kernel's `smem` is the first stage, and the slot indices and the cursor lie at constant offsets
// below it, whatever the row groups: their addresses take no register through the kernel (at the end of the
// buffer, they took one that ptxas spilled once the tile loop needed one more).
// Partial S of a (row group, quarter): 16 rows x 32 keys of fp32, as the mma leaves them: for each of the 4
// n-tiles, each lane's 4 accumulators (its two rows' two keys) as one 16-byte unit, lane by lane. A lane stores
// its accumulators as they are and loads its own units back from each quarter, one base address and constant
// offsets (no moves, no per-tile address arithmetic: 31 instructions a warp and tile went to the old
// row-major stores' addresses and moves on sm_90), and a warp's 32 units are 512 contiguous bytes (4
// wavefronts per instruction, none wasted). A warp reads every quarter of its group in 16 such loads a tile.
constexpr int kReduceBytesPerGroup = 4 * kGroupRows * kBlockN * 4;  // 8,192
constexpr int kQuarterUnits = kGroupRows * kBlockN / 4;  // a quarter's partial S in 16-byte units: 128
constexpr int kMaskBytesPerGroup = 2 * kGroupRows * 2 * 4;  // two words a row, for two tiles: 256
constexpr int kMaxCluster = 8;       // CTAs of a thread-block cluster at most: the portable size
constexpr int kCursorBytes = 12 * 16;  // two cursors and their requests' extents, the range, two segment slots
                                       // and the CTA's cluster merge (see cluster_merge), then the CTA's parts
                                       // for the final merge (PartTail)
constexpr int kSlotBytes = kStages * kBlockN * 4;  // two tiles' KV slot indices, staged ahead (load_tile)
static_assert(kSlotBytes % 16 == 0, "the cursor after the slot indices stays 16-byte aligned");
constexpr int kHeaderBytes = kSlotBytes + kCursorBytes;  // below the stages: 448, a multiple of 16
constexpr int kSmemFixedBytes = kStages * kStageBytes + kHeaderBytes;  // 75,200
constexpr int kSmemBytesPerGroup = kReduceBytesPerGroup + kMaskBytesPerGroup;
constexpr int kMaxSmemBytes = kSmemFixedBytes + kMaxGroups * kSmemBytesPerGroup;  // 100,544 <= 101,376
DDK_HOST_DEVICE constexpr int smem_bytes(int groups) { return kSmemFixedBytes + groups * kSmemBytesPerGroup; }
// Q is staged over stage 1 and the partial-S buffer, both free until the first tile's scores.
static_assert(2 * kGroupRows * kSmemRowBytes <= kStageBytes + 2 * kReduceBytesPerGroup, "Q staging, 32 rows");
static_assert(3 * kGroupRows * kSmemRowBytes <= kStageBytes + 3 * kReduceBytesPerGroup, "Q staging, 48 rows");
static_assert(kMaxSmemBytes <= 101376, "sm_120 allows 99 KB of shared memory per block");

constexpr float kNegInf = -__builtin_huge_valf();
constexpr float kLn2 = 0.69314718055994530942f;

// Four fp16 (two pairs) moved as one 64-bit access, four fp32 values as one 128-bit access.
struct alignas(8) Half4 {
  uint32_t lo, hi;
};
struct alignas(16) Float4 {
  float x, y, z, w;
};

struct VerifyParams {
  const uint16_t* q;            // (T, H, 576) bf16
  const uint16_t* kv;           // (pool, 576) bf16
  const uint16_t* kv_draft;     // (T, 576) bf16: the draft tokens' keys (k_extend, the same rows as the pool's
                                // at their slots), read in place: no slot index in front of them
  const int64_t* kv_slots;      // pool slots of the prefix keys: request r's from slot_offsets[r] (SGLang's
                                // kv_indices as it passes them: entries past the last request's are never read)
  const int32_t* slot_offsets;  // (bs + 1) where each request's prefix slots start in kv_slots (kv_indptr)
  const int32_t* kv_offsets;    // (bs + 1) keys of each request, prefix then drafts (kv_indptr + qo_indptr)
  const int32_t* q_offsets;     // (bs + 1)
  const uint32_t* mask_words;   // (T, mask_words_per_row): bit j of row t = draft column j visible
  uint16_t* out;                // (T, H, 512) bf16
  float* lse;                   // (T, H) natural-log LSE, or nullptr
  uint16_t* ws_o;               // (2 * num_ctas, block_m, 512) fp16 partial outputs of split row tiles, laid
                                // out as part_column() says, each row quarter divided by its ws_scale
  float* ws_scale;              // (2 * num_ctas, block_m, 4) the power of two each row quarter was divided by
  float* ws_lse;                // (2 * num_ctas, block_m) their LSE in log2 units
  int* arrivals;                // (num_ctas, kMaxCluster) zeros, left zero: the verify kernel merges split row
                                // tiles itself (the final merge); nullptr: the combine kernel merges them
  int total_rows;               // T * H
  int heads;
  int mask_words_per_row;
  int batch;
  int num_ctas;                 // the verify grid
  int whole_row_tiles;          // > 0: CTA c = row tile c % whole_row_tiles of request c / whole_row_tiles, whole
  int row_groups;               // 2 or 3: 16 rows and 128 threads each (the launch's block is 128 * row_groups)
  int combine_halves;           // 1 or 2: the combine's block is 128 * combine_halves threads
  int combine_rows;             // rows a combine CTA merges: its grid is ceil(total_rows / combine_rows)
  int cluster;                  // CTAs per thread-block cluster of the verify launch (1: none; sm_90 and later)
  float scale_log2;             // sm_scale * log2(e): scores live in the exp2 domain
};

// Byte offset of 16-byte chunk `chunk` of smem row `row`. Rows are padded by 16 bytes: the 8 rows one
// ldmatrix reads at one column then start in 8 different 16-byte bank groups, and an address is a row's base
// plus a constant (an XOR swizzle needed a register per k-step, and 168 registers leave none spare).
DDK_HOST_DEVICE int smem_offset(int row, int chunk) { return row * kSmemRowBytes + chunk * 16; }

// A CTA's range of units and where it stands in it, kept in shared memory between segments rather than in
// registers: the tile loop needs all 168 (65,536 / 384 threads). Thread 0 writes the next segment's cursor
// into one copy while every thread reads this segment's from the other; the segment's barriers order them.
// Thread 0 finds the first segment's from the offsets (first_range); a later segment loads a request's offsets
// only when it crosses into the next request.
struct alignas(16) Cursor {
  int64_t request_base;  // the first unit of `request`, counted over the batch
  int32_t unit;          // counted from request_base
  int32_t request;
};
struct alignas(16) Extent {  // `request`'s, from the offsets
  int32_t q_base, q_len, slot_base, keys;
};
struct alignas(16) Range {
  int64_t begin, end;
};
// A part the CTA wrote, kept for its arrival at the end (the final merge): its row tile's first unit over the
// batch, key tiles and index in its request, and that request's first token and rows (in shared memory as
// a 16-byte place and an 8-byte extent).
struct alignas(16) PartPlace {
  int64_t tile_base;
  int32_t tiles, row_tile;
};
struct alignas(8) PartRows {
  int32_t q_base, rows;
};
struct PartRecord {
  PartPlace place;
  PartRows rows;
};
struct alignas(16) PartTail {
  PartPlace places[2];  // by slot: the part that starts the CTA's range, the one that ends it
  PartRows rows[2];
  int64_t units;             // the batch's work units
  int32_t parts;             // bit k: slot k holds a part
  int32_t won;               // this CTA's arrival completed its lane of the row tile being merged
};
static_assert(6 * 16 + sizeof(PartTail) <= kCursorBytes, "the cursor area holds the part tail");

// One request's extent, read from the offsets (uniform over the CTA).
struct Request {
  int q_base, q_len, slot_base, keys, prefix, rows, tiles, row_tiles;
};

DDK_DEVICE Request request_of(const VerifyParams& p, Extent e) {
  Request g;
  g.q_base = e.q_base;
  g.q_len = e.q_len;
  g.slot_base = e.slot_base;
  g.keys = e.keys;
  g.prefix = g.keys - g.q_len;
  g.rows = g.q_len * p.heads;
  g.tiles = (g.keys + kBlockN - 1) / kBlockN;
  const int block_m = kGroupRows * p.row_groups;
  g.row_tiles = (g.rows + block_m - 1) / block_m;
  return g;
}

DDK_DEVICE Request request_at(const VerifyParams& p, int r) {
  const int q_base = ddk::ld_global(p.q_offsets + r), key_base = ddk::ld_global(p.kv_offsets + r);
  return request_of(p, Extent{q_base, ddk::ld_global(p.q_offsets + (r + 1)) - q_base,
                              ddk::ld_global(p.slot_offsets + r), ddk::ld_global(p.kv_offsets + (r + 1)) - key_base});
}

// Work units of the whole batch: every row tile of every request times its key tiles.
DDK_DEVICE int64_t total_units(const VerifyParams& p) {
  int64_t units = 0;
  for (int r = 0; r < p.batch; ++r) {
    const Request g = request_at(p, r);
    units += static_cast<int64_t>(g.row_tiles) * g.tiles;
  }
  return units;
}

// A warp's sum of one value per lane (a butterfly: every lane ends with the sum).
DDK_DEVICE int warp_sum(int v) {
  for (int k = 16; k > 0; k /= 2) v += ddk::shfl_xor(v, k);
  return v;
}

DDK_DEVICE int64_t warp_sum(int64_t v) {
  for (int k = 16; k > 0; k /= 2) {
    const uint32_t lo = static_cast<uint32_t>(ddk::shfl_xor(static_cast<int>(static_cast<uint32_t>(v)), k));
    const uint32_t hi = static_cast<uint32_t>(ddk::shfl_xor(static_cast<int>(v >> 32), k));
    v += static_cast<int64_t>((static_cast<uint64_t>(hi) << 32) | lo);
  }
  return v;
}

// Where a (token, head) row's work is: the batch's units, the first unit of the row's tile, that tile's key
// tiles, the row's place in it (unit0 < 0: the token is past the batch) and the request's rows from it on.
// Each warp reads the requests 32 at a time, lane r request r (coalesced loads, no barrier), and sums over its
// lanes: the units of every request, those of the requests before the token's, and the one lane's own that
// holds the token.
struct RowPlace {
  int64_t units, unit0;
  int tiles, m, left;
};

DDK_DEVICE RowPlace place_row(const VerifyParams& p, int token, int head) {
  const int block_m = kGroupRows * p.row_groups;
  int64_t units = 0, before = 0;
  int tiles = 0, local1 = 0, rows = 0;  // from the lane that holds the token: its key tiles, its row + 1 (0: none
                                        // yet), its rows
  for (int first = 0; first < p.batch; first += 32) {
    const int r = first + static_cast<int>(ddk::lane_id());
    int64_t mine = 0, mine_before = 0;
    int mine_tiles = 0, mine_local1 = 0, mine_rows = 0;
    if (r < p.batch) {
      const Request g = request_at(p, r);
      mine = static_cast<int64_t>(g.row_tiles) * g.tiles;
      if (token >= g.q_base + g.q_len) {
        mine_before = mine;
      } else if (token >= g.q_base) {
        mine_tiles = g.tiles;
        mine_local1 = (token - g.q_base) * p.heads + head + 1;
        mine_rows = g.rows;
      }
    }
    units += warp_sum(mine);
    before += warp_sum(mine_before);
    tiles += warp_sum(mine_tiles);
    local1 += warp_sum(mine_local1);
    rows += warp_sum(mine_rows);
  }
  if (local1 == 0) return RowPlace{units, -1, 0, 0, 0};
  const int local = local1 - 1;
  return RowPlace{units, before + static_cast<int64_t>(local / block_m) * tiles, tiles, local % block_m,
                  rows - local};
}

// First unit of CTA c's range: the units are cut into num_ctas ranges as equal as integers allow.
DDK_HOST_DEVICE int64_t range_start(int64_t c, int64_t units, int64_t ctas) { return c * units / ctas; }

// The CTA whose range holds unit u: the last c with range_start(c) <= u (empty ranges come before it).
DDK_HOST_DEVICE int64_t cta_of_unit(int64_t u, int64_t units, int64_t ctas) { return ((u + 1) * ctas - 1) / units; }

// How a cluster's CTAs finish: each writes its own part (none), or, when the cluster's units [begin, end) lie
// in one row tile [tile_base, tile_base + tiles), they stage their parts in shared memory and merge them
// through distributed shared memory into one part of the workspace (part) or, covering the row tile, into
// the output (whole). Every CTA of the cluster and the combine decide it by the same arithmetic.
enum ClusterMerge : int { kMergeNone = 0, kMergePart = 1, kMergeWhole = 2 };

DDK_HOST_DEVICE int cluster_merge(int64_t begin, int64_t end, int64_t tile_base, int64_t tiles) {
  if (begin < tile_base || end > tile_base + tiles) return kMergeNone;
  return begin == tile_base && end == tile_base + tiles ? kMergeWhole : kMergePart;
}

// A launch's cluster size is 1 to kMaxCluster CTAs dividing its grid, and 1 when row tiles run whole (both
// launchers refuse anything else).
DDK_HOST_DEVICE bool valid_cluster(int64_t cluster, int64_t num_ctas, int64_t whole_row_tiles) {
  return cluster >= 1 && cluster <= kMaxCluster && num_ctas % cluster == 0 &&
         (cluster == 1 || whole_row_tiles == 0);
}

// The units of the cluster holding CTA c, [begin, end); only with clusters and no empty range (units >= ctas).
DDK_HOST_DEVICE bool cluster_units(int64_t c, int64_t units, int64_t ctas, int64_t cluster, int64_t& begin,
                                   int64_t& end) {
  if (cluster <= 1 || units < ctas) return false;
  const int64_t c0 = c - c % cluster;
  begin = range_start(c0, units, ctas);
  end = range_start(c0 + cluster, units, ctas);
  return true;
}

// A prefix tile's copies of one column, keys j0, j0 + kRows, ... (j0 < kRows): every key valid, its slot index
// at slots[j] (staged in shared memory, or, for a segment's first tile, the pool's in global memory). The slots
// are all read before the first copy is issued: a copy's asm orders memory, so a slot read between two copies
// waited for its load each time (ncu, sm_90: 15 instructions and 13-17 % of the samples of the long launches
// in that loop, most of them stalled on the shared load; a global one is a round trip to L2). The first
// kBlockN / kRows keys exist for every j0 < kRows, only the last depends on j0: one test, not one a key. A
// source address is one multiply-add of the slot into the column's byte address, and a destination the row's
// address plus a constant (in SASS, 3 address instructions a copy fewer).
template <int kRows, typename Slot, int kAlways = kBlockN / kRows>  // keys every thread copies
DDK_DEVICE void copy_prefix_column(char* dst, const char* column, const Slot* slots, int j0) {
  const bool one_more = j0 < kBlockN % kRows;
  int32_t slot[kAlways + 1];
  for (int i = 0; i <= kAlways; ++i) {
    const Slot* at = slots + (j0 + i * kRows);
    // int64 slots are the pool's (global memory), int32 ones those staged in shared memory
    if constexpr (sizeof(Slot) == 8)
      slot[i] = i < kAlways || one_more ? static_cast<int32_t>(ddk::ld_global(at)) : 0;
    else
      slot[i] = i < kAlways || one_more ? ddk::ld_shared(at) : 0;
  }
  char* row = dst + j0 * kSmemRowBytes;
  for (int i = 0; i <= kAlways; ++i)
    if (i < kAlways || one_more)
      ddk::cp_async_16(row + i * kRows * kSmemRowBytes, column + static_cast<int64_t>(slot[i]) * kRowBytes, true);
}

// 32 keys x 72 chunks: with n = threads / 72 (3 or 5), thread t < 72n copies chunk t % 72 of keys t / 72,
// t / 72 + n, ...; consecutive threads take consecutive chunks of a row (coalesced), and each thread's
// addresses step by a constant, so nothing but its column stays in registers through the tile loop. Keys past
// the end are zero-filled (0 * garbage would be NaN). After a segment's first tile the keys' slot indices come
// from shared memory (`staged`), staged there a tile ahead (fetch_slot): no global load waits in front of the
// copies, and the pool's indices are read once a tile (4 or 5 sectors) instead of once per chunk. The first
// tile, with nothing staged yet, reads them from global memory in front of its copies, while Q is in flight.
// Draft keys need no index: they are the request's rows of kv_draft, so a tree tile's copies wait for nothing.
// kStaged: the tile loop's calls, whose slot indices are staged (`staged` is never null there, which the
// compiler could not prove of a shared-memory pointer: the test cost 12 instructions a warp and tile on sm_90).
template <bool kStaged>
DDK_DEVICE void load_tile(char* stage, const VerifyParams& p, const Request& g, const int32_t* staged,
                          int first_key) {
  const int t = ddk::thread_idx_x(), rows_at_once = kGroupThreads * p.row_groups / kChunksPerRow;
  if (t >= rows_at_once * kChunksPerRow) return;
  const int chunk = t % kChunksPerRow;
  // A tile of prefix keys (uniform over the CTA). A segment's first (nothing staged) takes this path in a
  // launch of 32-row CTAs only: with both sizes' global variants, ptxas spilled 4 bytes through sm_90's tile
  // loop, and the first tile weighs most in the short launches, which 32-row CTAs serve.
  static_assert(kGroupThreads * 2 / kChunksPerRow == 3 && kGroupThreads * 3 / kChunksPerRow == 5, "rows at once");
  if (first_key + kBlockN <= g.prefix && (kStaged || rows_at_once == 3)) {
    const char* column = reinterpret_cast<const char*>(p.kv) + chunk * 16;
    char* dst = stage + smem_offset(0, chunk);
    const int j0 = t / kChunksPerRow;
    if (!kStaged)
      copy_prefix_column<3>(dst, column, p.kv_slots + (g.slot_base + first_key), j0);
    else if (rows_at_once == 5)
      copy_prefix_column<5>(dst, column, staged, j0);
    else
      copy_prefix_column<3>(dst, column, staged, j0);
    return;
  }
  for (int j = t / kChunksPerRow; j < kBlockN; j += rows_at_once) {
    const int key = first_key + j;
    const bool valid = key < g.keys;
    const uint16_t* src = p.kv;
    if (valid && key >= g.prefix) {
      src = p.kv_draft + static_cast<int64_t>(g.q_base + (key - g.prefix)) * kDimQK + chunk * 8;
    } else if (valid) {
      const int32_t slot = kStaged ? ddk::ld_shared(staged + j)
                                    : static_cast<int32_t>(ddk::ld_global(p.kv_slots + (g.slot_base + key)));
      src += static_cast<int64_t>(slot) * kDimQK + chunk * 8;
    }
    ddk::cp_async_16(stage + smem_offset(j, chunk), src, valid);
  }
}

// A CTA's `block_m` rows of Q from `row0` (rows (token, head) one after another in q) into stage 1 and the
// partial-S buffer after it, as a prefix tile's keys are copied: thread t < 72 * n (n = `threads` / 72) copies
// chunk t % 72 of rows t / 72, t / 72 + n, ..., stepping both addresses by a constant (a loop over one index
// had spent about 10 instructions a copy dividing it by 72 and rebuilding the addresses). Rows past the
// request's are zero-filled from q's first row (a source past q's end is never handed to the copy).
DDK_DEVICE void copy_q_rows(char* smem, const VerifyParams& p, const Request& g, int row0, int block_m,
                            int threads) {
  const char* q_rows = reinterpret_cast<const char*>(p.q + (static_cast<int64_t>(g.q_base) * p.heads + row0) * kDimQK);
  const int t = ddk::thread_idx_x(), rows_at_once = threads / kChunksPerRow;
  if (t < rows_at_once * kChunksPerRow) {
    const int m0 = t / kChunksPerRow, chunk = t % kChunksPerRow;
    char* dst = smem + (kStageBytes + smem_offset(m0, chunk));
    const char* src = q_rows + (m0 * kRowBytes + chunk * 16);
    for (int m = m0; m < block_m; m += rows_at_once) {
      const bool valid = row0 + m < g.rows;
      ddk::cp_async_16(dst, valid ? src : reinterpret_cast<const char*>(p.q), valid);
      dst += rows_at_once * kSmemRowBytes;
      src += rows_at_once * kRowBytes;
    }
  }
}

// The slot indices of the key tile a segment reaches `tile_in_segment` tiles in: two buffers, by its parity.
DDK_DEVICE int32_t* slot_buffer(char* smem, int tile_in_segment) {
  return reinterpret_cast<int32_t*>(smem - kHeaderBytes) + (tile_in_segment % kStages) * kBlockN;
}

// Thread j < 32 fetches the slot index of key j of the tile at `first_key` (0 past the prefix: draft keys have
// none to read), and stages it once it is needed.
DDK_DEVICE int32_t fetch_slot(const VerifyParams& p, const Request& g, int first_key) {
  const int t = ddk::thread_idx_x(), key = first_key + t;
  return t < kBlockN && key < g.prefix ? static_cast<int32_t>(ddk::ld_global(p.kv_slots + (g.slot_base + key))) : 0;
}

DDK_DEVICE void stage_slot(int32_t* slots, int32_t slot) {
  const int t = ddk::thread_idx_x();
  if (t < kBlockN) ddk::st_shared(slots + t, slot);
}

// The two mask words a tile's draft keys can fall in, for each of the CTA's rows, copied into shared memory
// with the tile's keys (cp.async, in the same commit group: a tile ahead, so their latency hides behind the
// scores of the tile before, and never a round trip of its own) and read from there when the scores are
// masked. The words of key tile `tile` start at draft column (tile * 32 - prefix) / 32; 0 where nothing is
// read. A tile of prefix keys copies none.
DDK_HOST_DEVICE int mask_slot(int row, int word) { return row * 2 + word; }  // u32 index in the mask words
// Two buffers of them, for alternate tiles: the next tile's are staged while this one's are read.
DDK_DEVICE int mask_buffer(const VerifyParams& p, int tile_in_segment) {
  return (tile_in_segment % 2) * 2 * kGroupRows * p.row_groups;
}

DDK_DEVICE int first_mask_word(const Request& g, int tile) {
  return tile * kBlockN > g.prefix ? (tile * kBlockN - g.prefix) / 32 : 0;
}

// Which of key tile `tile`'s 32 keys a row sees (bit i: key tile * 32 + i), from its two staged mask words:
// every prefix key, a draft key where its bit is set, no key past the request's end. One word a row, built
// once a tile, so that each score's test is a bit of it: a draft key's own word and bit cost ~14 instructions
// a score (SASS, sm_120), 16 scores a lane.
DDK_DEVICE uint32_t visible_keys(const Request& g, int tile, uint32_t word0, uint32_t word1) {
  const int j0 = tile * kBlockN - g.prefix;  // the first key's draft column (< 0: a prefix key)
  const uint64_t words = static_cast<uint64_t>(word1) << 32 | word0;  // columns from first_mask_word's
  const uint32_t seen = j0 >= 0 ? static_cast<uint32_t>(words >> (j0 & 31))
                                : static_cast<uint32_t>((static_cast<uint64_t>(word0) << 32 | ~0u) >> (32 + j0));
  const int keys = g.keys - tile * kBlockN;  // >= 1 for a tile < g.tiles (the caller's): 1u << keys is defined
  return keys >= kBlockN ? seen : seen & ((1u << keys) - 1u);
}

DDK_DEVICE void load_mask_words(const VerifyParams& p, const Request& g, uint32_t* mask_words, int row0,
                                int tile) {
  const int t = ddk::thread_idx_x();
  if (tile * kBlockN + kBlockN <= g.prefix || t >= 2 * kGroupRows * p.row_groups) return;
  const int r = row0 + t / 2, word = first_mask_word(g, tile) + t % 2;
  const int last_key = tile * kBlockN + kBlockN < g.keys ? tile * kBlockN + kBlockN - 1 : g.keys - 1;
  const bool read = r < g.rows && word <= (last_key - g.prefix) / 32;  // past the prefix: last_key >= prefix
  const uint32_t* src =
      p.mask_words + (read ? static_cast<int64_t>(g.q_base + r / p.heads) * p.mask_words_per_row + word : 0);
  ddk::cp_async_4(mask_words + mask_slot(t / 2, t % 2), src, read);
}

// A part's row quarter is stored as fp16 divided by a power of two that brings its largest finite |value|
// into [2^14, 2^15): every element down to 2^-28 of that largest keeps fp16's 11 significant bits (an error
// of at most 2^-11 of itself, an eighth of what the output's bf16 rounding allows), whatever the values'
// range; a latent of 1e5 would overflow fp16 unscaled. Half the bytes of fp32 parts, written and read back
// by the combine. An Inf or NaN element stays one (it does not set the scale).
constexpr int kPartQuarters = kDimV / kColSlice;  // one scale per warp's 128 columns of a part row

// |x| where x is finite, NaN where not (Inf * 0 is NaN), which fmaxf leaves out: a largest finite |value| at
// one fused multiply-add an element, not a compare and a select.
DDK_DEVICE float finite_abs(float x) {
  const float a = fabsf(x);
  return a * 0.f + a;
}

struct PartScale {
  float unit, inverse;  // unit = 2^k; largest / unit in [2^14, 2^15) for a normal largest
};

DDK_DEVICE PartScale part_scale(float largest) {
  const int exponent = static_cast<int>((ddk::float_bits(largest) >> 23) & 0xffu) - 127;  // floor(log2)
  const int k = exponent - 14 < -126 ? -126 : (exponent - 14 > 113 ? 113 : exponent - 14);
  return {ddk::bits_float(static_cast<uint32_t>(k + 127) << 23), ddk::bits_float(static_cast<uint32_t>(127 - k) << 23)};
}

// The part's 512 columns are stored lane-major: lane `lc` of a quad writes its two C-fragment pairs of
// n-tiles 2j and 2j+1 as 8 contiguous bytes, so each quad fills whole 32-byte sectors. Stored position
// (quarter, j, lc, e) holds column quarter*128 + (2j + e/2)*8 + 2lc + e%2.
DDK_HOST_DEVICE int part_column(int position) {
  const int quarter = position / kColSlice, j = position % kColSlice / 16, lc = position % 16 / 4, e = position % 4;
  return quarter * kColSlice + (2 * j + e / 2) * 8 + 2 * lc + e % 2;
}

constexpr int kCombineHalf = 128;  // threads of a combine half (a CTA of one row merges it by halves)
constexpr int kGatherBatch = 4;  // parts whose loads (4 positions each) a merge of a row a warp issues at once

// A merging cluster's CTAs stage their parts over the stages (free after the last tile), in the workspace's
// layout but for the row stride: block_m rows of 512 fp16 (part_column order) 32 bytes apart more than the
// workspace's, so that the 4 rows of a half-warp's 8-byte stores fall on different banks (2 wavefronts, not
// 8), then every row's 4 quarter scales, then its LSE.
constexpr int kStagedRow = kDimV + 16;  // fp16 per staged row
DDK_DEVICE uint16_t* staged_o(char* smem) { return reinterpret_cast<uint16_t*>(smem); }
DDK_DEVICE float* staged_scale(char* smem, int block_m) {
  return reinterpret_cast<float*>(smem + block_m * kStagedRow * 2);
}
DDK_DEVICE float* staged_lse(char* smem, int block_m) { return staged_scale(smem, block_m) + block_m * kPartQuarters; }
static_assert(kMaxGroups * kGroupRows * (kStagedRow * 2 + kPartQuarters * 4 + 4) <= kStages * kStageBytes,
              "a staged part fits in the stages");

DDK_DEVICE float warp_max(float v) {
  for (int k = 16; k > 0; k /= 2) v = fmaxf(v, ddk::shfl_xor(v, k));
  return v;
}

// One part's four stored values into a row's sums, weighted by wu = its weight times its quarter's 2^k: the
// combine's and the cluster merge's one arithmetic (a whole merge is the combine's result bit for bit).
DDK_DEVICE void add_part(float (&acc)[4], float wu, Half4 v) {
  acc[0] += wu * ddk::f16_to_float(static_cast<uint16_t>(v.lo & 0xffffu));
  acc[1] += wu * ddk::f16_to_float(static_cast<uint16_t>(v.lo >> 16));
  acc[2] += wu * ddk::f16_to_float(static_cast<uint16_t>(v.hi & 0xffffu));
  acc[3] += wu * ddk::f16_to_float(static_cast<uint16_t>(v.hi >> 16));
}

// add_part of a part whose weight w and w times each quarter's 2^k (wu: of the kQuarters stored positions
// the lane adds, v) lane `from` of the warp holds: the merges load a part's LSE and scales and take its
// weight once a warp, lane by lane, not once a lane, and every lane adds the parts in order with the same
// bits (a butterfly shuffle by lane ^ from broadcasts).
template <int kQuarters>
DDK_DEVICE void add_part_of_lane(float (&acc)[kQuarters][4], float& weight_sum, float w, const float (&wu)[kQuarters],
                                 int from, const Half4 (&v)[kQuarters]) {
  const int mask = static_cast<int>(ddk::lane_id()) ^ from;
  const float w_from = ddk::shfl_xor(w, mask);
  float wu_from[kQuarters];
  for (int j = 0; j < kQuarters; ++j) wu_from[j] = ddk::shfl_xor(wu[j], mask);
  weight_sum += w_from;
  if (w_from != 0.f)
    for (int j = 0; j < kQuarters; ++j) add_part(acc[j], wu_from[j], v[j]);
}

// A merged (token, head) row's four values at stored `position` to the output, and its LSE (one thread).
DDK_DEVICE void write_merged_row(const VerifyParams& p, int64_t row, int position, const float (&acc)[4],
                                 float weight_sum, float base, bool writes_lse) {
  const float inv = weight_sum > 0.f ? 1.f / weight_sum : 0.f;
  uint32_t* dst = reinterpret_cast<uint32_t*>(p.out + (row * kDimV + part_column(position)));
  ddk::st_global(dst + 0, ddk::pack_bf16x2(acc[0] * inv, acc[1] * inv));  // columns c, c + 1
  ddk::st_global(dst + 4, ddk::pack_bf16x2(acc[2] * inv, acc[3] * inv));  // columns c + 8, c + 9
  if (p.lse != nullptr && writes_lse)
    ddk::st_global(p.lse + row, weight_sum > 0.f ? (base + log2f(weight_sum)) * kLn2 : kNegInf);
}

// A row merged a warp a row (4 stored positions of each quarter a lane, from 4 * lane) to the output, its
// LSE by lane 0.
DDK_DEVICE void write_merged_quarters(const VerifyParams& p, int64_t row, const float (&acc)[kPartQuarters][4],
                                      float weight_sum, float base) {
  const int position = 4 * static_cast<int>(ddk::lane_id());
  for (int j = 0; j < kPartQuarters; ++j)
    write_merged_row(p, row, position + j * kColSlice, acc[j], weight_sum, base, position == 0 && j == 0);
}

constexpr int kRanksAtOnce = 4;  // ranks whose values a cluster merge loads before it adds them

// Rank r of a merging cluster merges rows r, r + C, ... of the row tile from every CTA's staged part, in rank
// order and with the combine's arithmetic, into the output (whole: bit for bit what the combine makes of
// those parts) or into one part of the workspace, the slot of the cluster's first CTA. A warp a row (16
// stored positions a lane, 4 of each quarter), so that a row's LSEs and scales are read and weighed once, not
// once a quarter, and the warps' rows go out side by side.
// Out of line, its arguments by value (a reference would copy the kernel's parameters to the stack): its
// registers stay out of the tile loop's, which has none to spare on sm_90.
DDK_DEVICE_NOINLINE void merge_cluster_parts(const VerifyParams p, char* smem, const Request g, int row_tile,
                                             bool whole) {
  const int block_m = kGroupRows * p.row_groups;
  const int rank = static_cast<int>(ddk::cluster_ctarank()), size = static_cast<int>(ddk::cluster_nctarank());
  const int rows = g.rows - row_tile * block_m < block_m ? g.rows - row_tile * block_m : block_m;
  const uint16_t* so = staged_o(smem);
  const Float4* scales = reinterpret_cast<const Float4*>(staged_scale(smem, block_m));  // a row's 4 quarters
  const float* lses = staged_lse(smem, block_m);
  const int lane = static_cast<int>(ddk::lane_id()), warp = ddk::thread_idx_x() / 32, position = 4 * lane;
  const int64_t first_part = static_cast<int64_t>(2 * (static_cast<int>(ddk::block_idx_x()) - rank)) * block_m;
  const unsigned held = ddk::lane_id() % kMaxCluster;  // the rank whose LSE and scales this lane loads
  for (int m = rank + size * warp; m < rows; m += size * kGroupThreads / 32 * p.row_groups) {  // uniform per warp
    const bool holds = static_cast<int>(held) < size;
    const float lse = holds ? ddk::ld_cluster(lses + m, held) : kNegInf;
    const Float4 unit = holds ? ddk::ld_cluster(scales + m, held) : Float4{0.f, 0.f, 0.f, 0.f};
    float best = fmaxf(kNegInf, lse);  // a NaN LSE left out, as by every max here
    for (int k = 1; k < kMaxCluster; k *= 2) best = fmaxf(best, ddk::shfl_xor(best, k));
    const float base = best == kNegInf ? 0.f : best;
    const float w = ddk::fast_exp2(lse - base);
    const float wu[kPartQuarters] = {w * unit.x, w * unit.y, w * unit.z, w * unit.w};
    float weight_sum = 0.f, acc[kPartQuarters][4] = {};
    // kRanksAtOnce ranks' values loaded before any is added (whatever its weight, so that the loads go out
    // together and do not depend on the data: ncu saw them one after another, each behind its weight's
    // branch); all 8 at once made the verify kernel spill
    for (int q0 = 0; q0 < size; q0 += kRanksAtOnce) {
      Half4 v[kRanksAtOnce][kPartQuarters];
      for (int q = 0; q < kRanksAtOnce; ++q) {  // unrolled: the values stay in registers
        if (q0 + q >= size) break;
        for (int j = 0; j < kPartQuarters; ++j)
          v[q][j] = ddk::ld_cluster(reinterpret_cast<const Half4*>(so + (m * kStagedRow + position + j * kColSlice)),
                                    static_cast<unsigned>(q0 + q));
      }
      for (int q = 0; q < kRanksAtOnce; ++q) {
        if (q0 + q >= size) break;
        add_part_of_lane(acc, weight_sum, w, wu, q0 + q, v[q]);
      }
    }
    if (whole) {
      const int64_t row = static_cast<int64_t>(g.q_base) * p.heads + row_tile * block_m + m;
      write_merged_quarters(p, row, acc, weight_sum, base);
      continue;
    }
    const float inv = weight_sum > 0.f ? 1.f / weight_sum : 0.f;
    const int64_t part = first_part + m;
    for (int j = 0; j < kPartQuarters; ++j) {
      float largest = 0.f;
      for (int e = 0; e < 4; ++e) largest = fmaxf(largest, finite_abs(acc[j][e] * inv));
      const PartScale scale = part_scale(warp_max(largest));
      const float s = inv * scale.inverse;
      const float(&sum)[4] = acc[j];
      ddk::st_global(reinterpret_cast<Half4*>(p.ws_o + (part * kDimV + position + j * kColSlice)),
                     Half4{ddk::pack_f16x2(sum[0] * s, sum[1] * s), ddk::pack_f16x2(sum[2] * s, sum[3] * s)});
      if (lane == 0) ddk::st_global(p.ws_scale + (part * kPartQuarters + j), scale.unit);
    }
    const bool seen = weight_sum > 0.f || weight_sum != weight_sum;  // NaN reaches the combine
    if (lane == 0) ddk::st_global(p.ws_lse + part, seen ? base + log2f(weight_sum) : kNegInf);
  }
}

// run_segment's steps, in the order it takes them. Each is inlined where it is called (DDK_DEVICE is
// __forceinline__ under nvcc) and nvcc's code for the kernel is the same as with the steps written out in
// run_segment: an array a step accumulates into (acc, tile_max) is declared and initialised by run_segment. A
// step that declared it itself changed the order of nvcc's code in the tile loop, and ptxas then spilled on sm_120.

// Q (staged in stage 1 and the partial-S buffer), the first KV tile (stage 0), its mask words and the second
// tile's slot indices are in flight together (a short launch is a chain of round trips), the copies under one
// wait. Where the first tile holds draft keys only (no prefix), nothing waits for an index: the offsets are the
// launch's one round trip before it.
DDK_DEVICE void load_segment_start(char* smem, const VerifyParams& p, const Request& g, uint32_t* mask_words,
                                   int row0, int block_m, int threads, int tile_begin, int tile_end) {
  copy_q_rows(smem, p, g, row0, block_m, threads);
  load_tile<false>(smem, p, g, nullptr, tile_begin * kBlockN);
  load_mask_words(p, g, mask_words + mask_buffer(p, 0), row0, tile_begin);
  ddk::cp_async_commit();
  const int32_t second_slot = tile_begin + 1 < tile_end ? fetch_slot(p, g, (tile_begin + 1) * kBlockN) : 0;
  stage_slot(slot_buffer(smem, 1), second_slot);
  ddk::cp_async_wait<0>();
  ddk::sync_block();
}

// Each warp keeps its 16 rows x 144 dims of Q in registers, as A fragments of the score mma's k-steps.
DDK_DEVICE void load_q_fragments(uint32_t (&qf)[kKSteps][4], const char* smem, int group, int quarter, int lane) {
  for (int ks = 0; ks < kKSteps; ++ks) {
    const int chunk = quarter * (kDimSlice / 8) + ks * 2 + lane / 16;
    ddk::ldmatrix_x4(qf[ks], smem + (kStageBytes + smem_offset(group * 16 + lane % 16, chunk)));
  }
  ddk::sync_block();  // stage 1 is about to hold keys
}

// The next tile's keys (and its mask words) into the other stage, committed as one group even when there is no
// next tile (the wait at the end of the tile counts groups); returns the slot indices of the tile after it,
// which are staged once this tile's scores are out.
DDK_DEVICE int32_t prefetch_next_tile(char* smem, const VerifyParams& p, const Request& g, uint32_t* mask_words,
                                      int row0, int tile, int it, int tile_end) {
  const bool more = tile + 1 < tile_end;
  if (more) {
    char* next = smem + ((it + 1) % kStages) * kStageBytes;
    load_tile<true>(next, p, g, slot_buffer(smem, it + 1), (tile + 1) * kBlockN);
    // into the buffers the last tile read
    load_mask_words(p, g, mask_words + mask_buffer(p, it + 1), row0, tile + 1);
  }
  ddk::cp_async_commit();
  return tile + 2 < tile_end ? fetch_slot(p, g, (tile + 2) * kBlockN) : 0;
}

// Partial S over this warp's 144 dims, the tile's two 16-key pairs (n8 tiles 2 * pair, 2 * pair + 1) accumulated
// side by side into acc: four independent mma chains (two chains of nine, one pair after the other, waited out the
// accumulator's latency between steps), their 16 accumulators beside Q and O in 168 registers without a spill.
DDK_DEVICE void partial_scores(float (&acc)[2][2][4], const char* stage, const uint32_t (&qf)[kKSteps][4], int quarter,
                               int lane) {
  for (int ks = 0; ks < kKSteps; ++ks)
    for (int pair = 0; pair < 2; ++pair) {
      uint32_t b[4];
      const int m = lane / 8;
      const int key = pair * 16 + (m / 2) * 8 + lane % 8;
      const int chunk = quarter * (kDimSlice / 8) + ks * 2 + m % 2;  // ks's part a constant offset, not a division
      ddk::ldmatrix_x4(b, stage + smem_offset(key, chunk));
      const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      ddk::mma_bf16_m16n8k16(acc[pair][0], qf[ks], b0, acc[pair][0]);
      ddk::mma_bf16_m16n8k16(acc[pair][1], qf[ks], b1, acc[pair][1]);
    }
}

// The accumulators as the mma leaves them, a 16-byte unit per n-tile, into this warp's part of the reduce buffer.
DDK_DEVICE void store_partial_scores(Float4* mine, const float (&acc)[2][2][4]) {
  for (int n = 0; n < 4; ++n) {
    const float(&c)[4] = acc[n / 2][n % 2];
    ddk::st_shared(mine + n * 32, Float4{c[0], c[1], c[2], c[3]});
  }
}

// Keys past the request's end and draft keys a row does not see, to -inf, from the staged mask words of this
// lane's two rows.
DDK_DEVICE void mask_invisible_keys(float (&s)[4][4], const VerifyParams& p, const Request& g,
                                    const uint32_t* mask_words, int tile, int it, int group, int lr, int lc) {
  for (int h = 0; h < 2; ++h) {
    const int row = group * 16 + lr + 8 * h;
    const uint32_t seen = visible_keys(
        g, tile, ddk::ld_shared(mask_words + (mask_buffer(p, it) + mask_slot(row, 0))),
        ddk::ld_shared(mask_words + (mask_buffer(p, it) + mask_slot(row, 1)))) >> (2 * lc);
    for (int n = 0; n < 4; ++n)
      for (int e = 0; e < 2; ++e)
        if (!((seen >> (n * 8 + e)) & 1u)) s[n][2 * h + e] = kNegInf;  // key n * 8 + 2 * lc + e
  }
}

// The largest of this lane's scores of each of its two rows (a NaN score left out), into tile_max.
DDK_DEVICE void tile_row_max(float (&tile_max)[2], const float (&s)[4][4]) {
  for (int n = 0; n < 4; ++n)
    for (int h = 0; h < 2; ++h)
      for (int e = 0; e < 2; ++e) tile_max[h] = fmaxf(tile_max[h], s[n][2 * h + e]);
}

// The online softmax's step for one row: the running maximum takes the tile's (over the quad's lanes), the running
// sum is rescaled to it, scale_old says by how much O must follow, and use_max is the maximum the tile's
// probabilities are taken against.
DDK_DEVICE void online_max_step(float& scale_old, float& use_max, float& row_max, float& row_sum, float tile_max) {
  tile_max = fmaxf(tile_max, ddk::shfl_xor(tile_max, 1));
  tile_max = fmaxf(tile_max, ddk::shfl_xor(tile_max, 2));
  const float new_max = fmaxf(row_max, tile_max);
  use_max = new_max == kNegInf ? 0.f : new_max;  // nothing visible yet: avoid (-inf) - (-inf)
  scale_old = ddk::fast_exp2(row_max - use_max);
  row_max = new_max;
  row_sum *= scale_old;
}

// A row whose maximum held keeps its scale of exactly 1 (ex2 of 0), and a product by 1 changes no number: on a
// long prefix the maxima settle within a few tiles, and a warp whose 16 rows all held skips the 64 products (a
// branch per lane: the warp runs the block when any of its lanes needs it).
DDK_DEVICE void rescale_output(float (&o)[kOutTiles][4], const float (&scale_old)[2]) {
  if (scale_old[0] != 1.f || scale_old[1] != 1.f)
    for (int n = 0; n < kOutTiles; ++n) {
      o[n][0] *= scale_old[0];
      o[n][1] *= scale_old[0];
      o[n][2] *= scale_old[1];
      o[n][3] *= scale_old[1];
    }
}

// P rounded to bf16 before P.V (as the A fragments of its two k-steps), and the row sums taken of the rounded
// values.
DDK_DEVICE void probabilities(uint32_t (&pf)[2][4], float (&row_sum)[2], const float (&s)[4][4],
                              const float (&use_max)[2]) {
  for (int n = 0; n < 4; ++n)
    for (int h = 0; h < 2; ++h) {
      const uint32_t packed = ddk::pack_bf16x2(ddk::fast_exp2(s[n][2 * h] - use_max[h]),
                                               ddk::fast_exp2(s[n][2 * h + 1] - use_max[h]));
      row_sum[h] += ddk::bf16_to_float(static_cast<uint16_t>(packed & 0xffffu)) +
                    ddk::bf16_to_float(static_cast<uint16_t>(packed >> 16));
      pf[n / 2][(n % 2) * 2 + h] = packed;  // C fragments of n-tiles 2j, 2j+1 -> A fragment of k-step j
    }
}

// O += P.V over this warp's 128 columns of the tile's values, from this lane's row of V for the ldmatrix (v_rows):
// each k-step and pair of n-tiles a constant offset from it.
DDK_DEVICE void accumulate_pv(float (&o)[kOutTiles][4], const uint32_t (&pf)[2][4], const char* v_rows) {
  for (int kstep = 0; kstep < 2; ++kstep)
    for (int pair = 0; pair < kOutTiles / 2; ++pair) {
      uint32_t b[4];
      ddk::ldmatrix_x4_trans(b, v_rows + smem_offset(kstep * 16, pair * 2));
      const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
      ddk::mma_bf16_m16n8k16(o[2 * pair], pf[kstep], b0, o[2 * pair]);
      ddk::mma_bf16_m16n8k16(o[2 * pair + 1], pf[kstep], b1, o[2 * pair + 1]);
    }
}

// Row sums were kept per lane; the 4 lanes of a quad hold the rest of each row.
DDK_DEVICE void sum_over_quad(float (&row_sum)[2]) {
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += ddk::shfl_xor(row_sum[h], 1);
    row_sum[h] += ddk::shfl_xor(row_sum[h], 2);
  }
}

// The two rows' 1 / sum (0 for a fully masked row, not NaN) and, for a part (slot >= 0), the power of two each
// row's quarter is stored divided by (part_scale); a whole row tile keeps the scale 1.
DDK_DEVICE void row_normalizers(float (&inv)[2], PartScale (&scale)[2], const float (&o)[kOutTiles][4],
                                const float (&row_sum)[2], int slot) {
  for (int h = 0; h < 2; ++h) {
    inv[h] = row_sum[h] > 0.f ? 1.f / row_sum[h] : 0.f;
    if (slot < 0) continue;  // uniform over the CTA: the whole warp shuffles
    float largest = 0.f;
    for (int n = 0; n < kOutTiles; ++n)
      largest = fmaxf(largest, fmaxf(finite_abs(o[n][2 * h]), finite_abs(o[n][2 * h + 1])));
    largest = fmaxf(largest, ddk::shfl_xor(largest, 1));
    largest = fmaxf(largest, ddk::shfl_xor(largest, 2));
    scale[h] = part_scale(largest * inv[h]);
  }
}

// Request-local row r of a whole row tile, this warp's quarter of its columns, to the output in bf16, and its
// natural-log LSE.
DDK_DEVICE void write_output_row(const VerifyParams& p, const Request& g, const float (&o)[kOutTiles][4], int h, int r,
                                 int quarter, int lc, float inv, float lse2) {
  const int64_t grow = static_cast<int64_t>(g.q_base) * p.heads + r;
  uint32_t* dst = reinterpret_cast<uint32_t*>(p.out + grow * kDimV + quarter * kColSlice);
  for (int n = 0; n < kOutTiles; ++n)
    ddk::st_global(dst + (n * 8 + 2 * lc) / 2, ddk::pack_bf16x2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv));
  if (p.lse != nullptr && (ddk::thread_idx_x_here() & 0x63u) == 0)  // quarter 0, lc 0 (see write_part_row)
    ddk::st_global(p.lse + grow, lse2 * kLn2);
}

// Row 8 * h of this lane's rows as a part: for the combine (the workspace's `slot`), or staged in shared memory
// for the cluster's merge (the same layout at row m, rows padded), one store path through generic addresses.
DDK_DEVICE void write_part_row(const VerifyParams& p, char* smem, const int* merge_word, const float (&o)[kOutTiles][4],
                               int h, int slot, int block_m, int quarter, int lc, float inv, PartScale scale,
                               float lse2) {
  const bool staged = ddk::ld_shared(merge_word) != kMergeNone;
  // (this lane's row of the tile, group * 16 + lr, from the thread index read here: kept from the start, the
  // compiler spilled it through the tile loop on sm_120)
  const unsigned here = ddk::thread_idx_x_here();
  const int64_t part = (staged ? 0 : static_cast<int64_t>(slot) * block_m) +
                       static_cast<int>((here >> 7) * 16 + (here >> 2) % 8) + 8 * h;
  const float s = inv * scale.inverse;  // a power of two times inv: the same bits as two products
  uint16_t* o_base = staged ? staged_o(smem) : p.ws_o;
  Half4* dst = reinterpret_cast<Half4*>(o_base + (part * (staged ? kStagedRow : kDimV) + quarter * kColSlice));
  for (int j = 0; j < kOutTiles / 2; ++j)
    ddk::st_generic(dst + (j * 4 + lc),
                    Half4{ddk::pack_f16x2(o[2 * j][2 * h] * s, o[2 * j][2 * h + 1] * s),
                          ddk::pack_f16x2(o[2 * j + 1][2 * h] * s, o[2 * j + 1][2 * h + 1] * s)});
  // lc == 0 is t % 4 == 0, quarter == 0 as well t & 0x63 == 0: tested on the thread index read here, since
  // predicates derived from it at the start would take registers (or spill) through the tile loop.
  const unsigned t = ddk::thread_idx_x_here();
  float* scales = staged ? staged_scale(smem, block_m) : p.ws_scale;
  float* lses = staged ? staged_lse(smem, block_m) : p.ws_lse;
  if ((t & 3u) == 0) ddk::st_generic(scales + (part * kPartQuarters + quarter), scale.unit);
  if ((t & 0x63u) == 0) ddk::st_generic(lses + part, lse2);
}

// Row tile `row_tile` of request g over key tiles [tile_begin, tile_end). slot < 0: the segment is the row tile
// whole and writes the output; else it writes partial `slot` of the workspace for the combine, or, in a
// merging cluster (*merge_word), stages it in shared memory and merges it with the cluster's others.
DDK_DEVICE void run_segment(const VerifyParams& p, char* smem, const Request& g, int row_tile, int tile_begin,
                            int tile_end, const int* slot_word, const int* merge_word) {
  float* reduce = reinterpret_cast<float*>(smem + kStages * kStageBytes);
  const int block_m = kGroupRows * p.row_groups, threads = kGroupThreads * p.row_groups;
  uint32_t* mask_words =
      reinterpret_cast<uint32_t*>(smem + (kStages * kStageBytes + p.row_groups * kReduceBytesPerGroup));
  const int warp = ddk::warp_id(), lane = ddk::lane_id();
  const int group = warp / 4, quarter = warp % 4;
  const int lr = lane / 4, lc = lane % 4;  // PTX groupID and threadID_in_group
  const int row0 = row_tile * block_m;

  // The two rows this lane owns in every C fragment (request-local): my_row and my_row + 8. Their validity and
  // global index are recomputed where used: 168 registers (65,536 / 384 threads) leave none to keep them.
  const int my_row = row0 + group * 16 + lr;

  load_segment_start(smem, p, g, mask_words, row0, block_m, threads, tile_begin, tile_end);
  uint32_t qf[kKSteps][4];
  load_q_fragments(qf, smem, group, quarter, lane);

  float o[kOutTiles][4];  // zeroed only now: nothing else lives through the prologue's loads
  for (int n = 0; n < kOutTiles; ++n)
    for (int k = 0; k < 4; ++k) o[n][k] = 0.f;
  float row_max[2] = {kNegInf, kNegInf}, row_sum[2] = {0.f, 0.f};

  // Two barriers a tile: the next tile's keys (and its mask words, and the slot indices of the tile after) are
  // issued with this tile's scores, whose tensor work hides the copies' shared-memory writes, and waited for at
  // the end of its P.V.
  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int it = tile - tile_begin;
    char* stage = smem + (it % kStages) * kStageBytes;
    const int32_t later_slot = prefetch_next_tile(smem, p, g, mask_words, row0, tile, it, tile_end);
    Float4* mine = reinterpret_cast<Float4*>(reduce) + (group * 4 + quarter) * kQuarterUnits + lane;
    float acc[2][2][4] = {};
    partial_scores(acc, stage, qf, quarter, lane);
    store_partial_scores(mine, acc);
    stage_slot(slot_buffer(smem, it + 2), later_slot);
    ddk::sync_block();

    // Full S (the four quarters summed in a fixed order, so every warp of the group agrees bit for bit), scaled
    // into the exp2 domain. Written out here: as a function of its own, nvcc's code for the tile loop changed
    // (and spilled on sm_120).
    float s[4][4];
    const Float4* sums = reinterpret_cast<const Float4*>(reduce) + group * 4 * kQuarterUnits + lane;
    for (int n = 0; n < 4; ++n) {
      // from quarter 0's values, not 0 + them: the compiler keeps 0 + x (it turns -0 into +0), and a score's
      // zero sign reaches nothing (its max and exp2(s - max) are the same)
      const Float4 first = ddk::ld_shared(sums + n * 32);
      float v[4] = {first.x, first.y, first.z, first.w};
      for (int qq = 1; qq < 4; ++qq) {
        const Float4 part = ddk::ld_shared(sums + (qq * kQuarterUnits + n * 32));
        v[0] += part.x;
        v[1] += part.y;
        v[2] += part.z;
        v[3] += part.w;
      }
      for (int e = 0; e < 4; ++e) s[n][e] = v[e] * p.scale_log2;
    }
    // Only a tile that holds draft keys is masked: a tile of prefix keys (a branch uniform over the CTA) is
    // visible to every row and skips the test of each score: on the H200 the tile loop is bound by the
    // instructions it issues (ncu: 7 a counted primitive), and nearly every tile is of the prefix.
    if (tile * kBlockN + kBlockN > g.prefix) mask_invisible_keys(s, p, g, mask_words, tile, it, group, lr, lc);
    float tile_max[2] = {kNegInf, kNegInf};
    tile_row_max(tile_max, s);
    float scale_old[2], use_max[2];
    for (int h = 0; h < 2; ++h) online_max_step(scale_old[h], use_max[h], row_max[h], row_sum[h], tile_max[h]);
    rescale_output(o, scale_old);
    uint32_t pf[2][4];
    probabilities(pf, row_sum, s, use_max);
    // this lane's row of V for the ldmatrix: key (m % 2) * 8 + lane % 8, chunk m / 2 of the quarter's columns
    const char* v_rows = stage + smem_offset((lane / 8 % 2) * 8 + lane % 8, quarter * (kColSlice / 8) + lane / 16);
    accumulate_pv(o, pf, v_rows);
    ddk::cp_async_wait<0>();
    ddk::sync_block();  // the next tile is in; this stage and the reduce buffer are rewritten next
  }

  sum_over_quad(row_sum);
  const int slot = ddk::ld_shared(slot_word);  // read here, not kept in a register through the tiles
  float inv[2];
  PartScale scale[2] = {{1.f, 1.f}, {1.f, 1.f}};
  row_normalizers(inv, scale, o, row_sum, slot);
  for (int h = 0; h < 2; ++h) {
    if (!(my_row + 8 * h < g.rows)) continue;
    // NaN (a poisoned key was read) must reach the combine and the output, never hide as an empty part.
    const bool seen = row_sum[h] > 0.f || row_sum[h] != row_sum[h];
    const float lse2 = seen ? row_max[h] + log2f(row_sum[h]) : kNegInf;
    if (slot < 0)
      write_output_row(p, g, o, h, my_row + 8 * h, quarter, lc, inv[h], lse2);
    else
      write_part_row(p, smem, merge_word, o, h, slot, block_m, quarter, lc, inv[h], scale[h], lse2);
  }
}

// The workspace slot CTA c (first <= c, the CTA holding the row tile's first unit) holds of the row tile of
// units [unit0, unit0 + tiles), or -1: CTA `first` holds it in slot 1 unless the row tile starts its range,
// later CTAs in slot 0 (their range starts inside the row tile); a CTA with an empty range (more CTAs than
// units) holds none, nor does a CTA of a merging cluster but its first, which holds the cluster's merge.
DDK_DEVICE int64_t part_slot(const VerifyParams& p, int64_t c, int64_t first, int64_t units, int64_t unit0,
                             int64_t tiles) {
  if (units < p.num_ctas && range_start(c + 1, units, p.num_ctas) == range_start(c, units, p.num_ctas)) return -1;
  int64_t cluster_begin, cluster_end;
  if (cluster_units(c, units, p.num_ctas, p.cluster, cluster_begin, cluster_end) &&
      cluster_merge(cluster_begin, cluster_end, unit0, tiles) != kMergeNone)
    return c % p.cluster == 0 ? 2 * c : -1;
  return 2 * c + (c == first && range_start(first, units, p.num_ctas) != unit0 ? 1 : 0);
}

// How many of the parts of the row tile of units [unit0, unit0 + tiles) (CTAs first..last, first < last)
// CTAs first..c - 1 hold, what part_slot finds CTA by CTA, in closed form (part_slot costs 64-bit
// divisions; every CTA that arrives needs the row tile's count, c = last + 1, and the final merge each
// part's place in CTA order): a CTA holds one unless its range is empty (fewer units than CTAs: a range is
// one unit, so they are the units before c's), less C - 1 for each merging cluster, the whole clusters of C
// CTAs from the first CTA starting in the row tile (lo) to one past the last ending in it (hi), and for a c
// inside one less the CTAs of it before c but its first (no caller asks at such a c today; the count holds
// for every c).
DDK_DEVICE int parts_before(const VerifyParams& p, int64_t c, int64_t first, int64_t last, int64_t units,
                            int64_t unit0, int64_t tiles) {
  if (units < p.num_ctas)
    return static_cast<int>(c > last ? tiles : range_start(c, units, p.num_ctas) - unit0);
  int64_t parts = c - first;
  if (p.cluster > 1) {
    const int64_t size = p.cluster;
    const int64_t lo = first + (range_start(first, units, p.num_ctas) == unit0 ? 0 : 1);
    const int64_t hi = last + (range_start(last + 1, units, p.num_ctas) == unit0 + tiles ? 1 : 0);
    const int64_t merging = (c < hi ? c : hi) / size - (lo + size - 1) / size;
    if (merging > 0) parts -= merging * (size - 1);
    const int64_t cluster_start = c - c % size;  // c inside a merging cluster: only its first CTA holds one
    if (cluster_start < c && cluster_start >= lo && cluster_start + size <= hi) parts -= c - cluster_start - 1;
  }
  return static_cast<int>(parts);
}

// The final merge's list of the row tile's parts (each one's first row, see part_row) in CTA order, built by
// the whole CTA in the stages (free by then), each CTA's at its place (parts_before), so that each row's loops
// read only the parts.
constexpr int kMaxListedCtas = kStages * kStageBytes / 4;  // 18,688: the launchers refuse a larger split grid

// Row m of the i-th listed part, counted over the workspace: the list holds each part's first row (slot times
// block_m), and every index of the workspace fits 32 bits (the launchers' largest split grid, 2 parts a CTA of
// 48 rows of 512 columns), so that a part's three addresses cost a multiply-add each, not 64-bit products.
static_assert(2LL * kMaxListedCtas * kMaxGroups * kGroupRows * kDimV < (1LL << 31), "workspace indices fit 32 bits");
DDK_DEVICE uint32_t part_row(const int* listed, int i, int m) {
  return static_cast<uint32_t>(ddk::ld_shared(listed + i) + m);
}

// Lists a split row tile's parts (CTAs first..last) for its merge: each part's first row in the workspace
// (slot times block_m) at its place in CTA order, one thread a CTA (part_slot's and parts_before's 64-bit
// divisions side by side, not chained before each load). The final merge and the combine share it.
DDK_DEVICE void list_parts(const VerifyParams& p, int* listed, int threads, int64_t units, int64_t first,
                           int64_t last, int64_t tile_base, int tiles) {
  const int ctas = static_cast<int>(last - first + 1), block_m = kGroupRows * p.row_groups;
  for (int i = ddk::thread_idx_x(); i < ctas; i += threads) {
    const int64_t slot = part_slot(p, first + i, first, units, tile_base, tiles);
    if (slot >= 0)
      ddk::st_shared(listed + parts_before(p, first + i, first, last, units, tile_base, tiles),
                     static_cast<int>(slot) * block_m);
  }
}

// Row m of a row tile merged from its n parts (`listed`: their first rows in CTA order) with the combine's
// arithmetic: the largest LSE first, then every part's stored values weighted by 2^(lse - largest) times its
// quarter's scale. A lane adds kQuarters stored positions: `position` (1), or position + 128 j of each quarter
// j (4: a warp a row). The sums in acc, the weights' sum in weight_sum; returns the base LSE. Only the parts
// part0, part0 + step, ... are added (two halves of a CTA each merge every other part of a row, then add up);
// the base is every part's. Loads bypass L1: the parts were written by other CTAs.
template <int kBatch, int kQuarters>
DDK_DEVICE float gather_listed_parts(const VerifyParams& p, const int* listed, int n, int m, int position,
                                     float (&acc)[kQuarters][4], float& weight_sum, int part0, int step) {
  static_assert(kQuarters == 1 || kQuarters == kPartQuarters, "one stored position a lane, or one a quarter");
  const int lane = static_cast<int>(ddk::lane_id());
  float best = kNegInf, lse = kNegInf;  // lse: the lane's first part's, kept for its weight
  for (int i = lane; i < n; i += 32) {
    const float l = ddk::ld_global_cg(p.ws_lse + part_row(listed, i, m));
    if (i == lane) lse = l;
    best = fmaxf(best, l);
  }
  best = warp_max(best);
  const float base = best == kNegInf ? 0.f : best;
  // 32 parts at a time, lane b holding the weights of part i0 + b (add_part_of_lane); kBatch parts' values
  // loaded before they are added in order, whatever the weight, so that the loads do not depend on the data
  // (a sampled launch counts them exactly); added only where the weight is not 0
  for (int i0 = 0; i0 < n; i0 += 32) {
    float w = 0.f, wu[kQuarters] = {};
    if (i0 + lane < n) {
      const uint32_t part = part_row(listed, i0 + lane, m);
      if (i0 > 0) lse = ddk::ld_global_cg(p.ws_lse + part);
      w = ddk::fast_exp2(lse - base);  // an empty part has lse -inf
      if constexpr (kQuarters == 1) {
        wu[0] = w * ddk::ld_global_cg(p.ws_scale + (part * kPartQuarters + position / kColSlice));
      } else {
        const Float4 scale = ddk::ld_global_cg(reinterpret_cast<const Float4*>(p.ws_scale) + part);
        wu[0] = w * scale.x, wu[1] = w * scale.y, wu[2] = w * scale.z, wu[3] = w * scale.w;
      }
    }
    const int count = n - i0 < 32 ? n - i0 : 32;
    for (int i = part0; i < count; i += kBatch * step) {
      Half4 v[kBatch][kQuarters];
      for (int b = 0; b < kBatch; ++b) {  // unrolled: the loads go out together, into registers
        const int k = i + b * step;
        if (k >= count) break;
        const uint32_t part = part_row(listed, i0 + k, m);
        const Half4* values = reinterpret_cast<const Half4*>(p.ws_o + (part * kDimV + position));
        for (int j = 0; j < kQuarters; ++j) v[b][j] = ddk::ld_global_cg(values + j * kColSlice / 4);
      }
      for (int b = 0; b < kBatch; ++b) {
        const int k = i + b * step;
        if (k >= count) break;
        add_part_of_lane(acc, weight_sum, w, wu, k, v[b]);
      }
    }
  }
  return base;
}

// The final merge (p.arrivals): parts arrive at their row tile's counters, one per lane j (kMaxCluster of
// them from the row tile's first CTA; lane j stands for rows m = j mod p.cluster), `count` parts at a time:
// without clusters a CTA's part at lane 0; rank r of a merging cluster (rows r, r + C, ... of the cluster's
// part) at lane r; rank r of a straddling cluster every part its CTAs wrote in the row tile at lane r
// (arrive_for_cluster). The arrival that completes a lane's count resets the counter and merges that lane's
// rows into the output, reading every part in CTA order: the same bits whichever CTA arrives last. Fenced on
// both sides (see ddk::atomic_add_global). Out of line, arguments by value (see merge_cluster_parts).
// `cluster_arrived`: the CTA has arrived at a cluster barrier and not waited: the others may still read its
// staged part, where the merge lists its parts; the winner waits first (and says so).
DDK_DEVICE_NOINLINE bool arrive_at_row_tile(const VerifyParams p, char* smem, PartTail* tail, const PartRecord r,
                                            int lane, int count, bool cluster_arrived) {
  const int64_t units = ddk::ld_shared(&tail->units);
  const PartPlace at = r.place;
  const int64_t first = cta_of_unit(at.tile_base, units, p.num_ctas);
  const int64_t last = cta_of_unit(at.tile_base + at.tiles - 1, units, p.num_ctas);
  const int t = ddk::thread_idx_x();
  const int expected = parts_before(p, last + 1, first, last, units, at.tile_base, at.tiles);
  if (t == lane) {
    int* counter = p.arrivals + (first * kMaxCluster + t);
    ddk::fence_gpu();  // the parts (ordered before by the caller's barrier) before the arrival
    const int before = ddk::atomic_add_global(counter, count);
    if (before + count > expected) ddk::trap("verify: more arrivals at a row tile than it has parts");
    const bool won = before + count == expected;
    if (won) {
      ddk::fence_gpu();  // every other part, before this CTA reads them
      ddk::st_global(counter, 0);
    }
    ddk::st_shared(&tail->won, won ? 1 : 0);
  }
  ddk::sync_block();
  if (ddk::ld_shared(&tail->won) == 0) return false;  // uniform over the CTA
  if (cluster_arrived) ddk::cluster_wait();
  int* listed = reinterpret_cast<int*>(smem);
  const int block_m = kGroupRows * p.row_groups;
  list_parts(p, listed, kGroupThreads * p.row_groups, units, first, last, at.tile_base, at.tiles);
  ddk::sync_block();
  const int left = r.rows.rows - at.row_tile * block_m, rows = left < block_m ? left : block_m;
  const int position = 4 * static_cast<int>(ddk::lane_id()), warps = kGroupThreads / 32 * p.row_groups;
  // The counter lane's rows, m = lane + C * k, a warp each (k = warp, warp + warps, ...)
  for (int m = lane + p.cluster * (t / 32); m < rows; m += p.cluster * warps) {  // uniform per warp
    float acc[kPartQuarters][4] = {}, weight_sum = 0.f;
    const float base =
        gather_listed_parts<kGatherBatch, kPartQuarters>(p, listed, expected, m, position, acc, weight_sum, 0, 1);
    write_merged_quarters(p, static_cast<int64_t>(r.rows.q_base) * p.heads + at.row_tile * block_m + m, acc,
                          weight_sum, base);
  }
  return cluster_arrived;
}

// The CTA's end under the final merge: its arrival at the row tile of each part it wrote (rank `lane` of a
// merging cluster, or lane 0 without clusters), after a barrier that orders every thread's part stores
// before it.
DDK_DEVICE bool arrive_at_parts(const VerifyParams& p, char* smem, PartTail* tail, int lane, bool cluster_arrived) {
  ddk::sync_block();
  const int parts = ddk::ld_shared(&tail->parts);
  bool waited = false;
  for (int k = 0; k < 2; ++k) {
    if (((parts >> k) & 1) == 0) continue;  // uniform over the CTA
    waited |= arrive_at_row_tile(p, smem, tail,
                                 PartRecord{ddk::ld_shared(tail->places + k), ddk::ld_shared(tail->rows + k)}, lane,
                                 1, cluster_arrived && !waited);
    ddk::sync_block();  // the list and the win are rewritten by the next part's arrival
  }
  return waited;
}

// The row tiles a straddling cluster's parts fall in, in CTA order, with how many parts each: built by every
// CTA of the cluster from the others' part tails, in its partial-S buffer (free after the last tile).
struct alignas(16) ClusterRowTile {
  PartPlace place;
  PartRows rows;
  int32_t parts, unused;
};
constexpr int kMaxClusterRowTiles = 2 * kMaxCluster;  // two parts a CTA at most
static_assert((kMaxClusterRowTiles + 1) * sizeof(ClusterRowTile) <= 2 * kReduceBytesPerGroup,
              "the list fits in the partial-S buffer of 32 rows");

// The end of a CTA of a straddling cluster (its units in more than one row tile: a ragged batch, or ranges
// that do not fall on row tiles) under the final merge. Its CTAs wrote their parts whole; after a cluster
// barrier rank r arrives at lane r of each row tile they fall in, for all of them at once, so that the ranks
// of the last cluster to arrive share the row tile's merge, as a merging cluster's do, instead of its last
// CTA merging every row alone. Out of line, arguments by value (see merge_cluster_parts).
DDK_DEVICE_NOINLINE void arrive_for_cluster(const VerifyParams p, char* smem, PartTail* tail) {
  if (ddk::cluster_nctarank() != static_cast<unsigned>(p.cluster))
    ddk::trap("verify: launched in clusters of another size than p.cluster");
  ddk::sync_cluster();  // every CTA's parts are written and its part tail complete
  ClusterRowTile* list = reinterpret_cast<ClusterRowTile*>(smem + kStages * kStageBytes);
  int* listed_row_tiles = reinterpret_cast<int*>(list + kMaxClusterRowTiles);
  if (ddk::thread_idx_x() == 0) {
    int n = 0;
    for (int q = 0; q < p.cluster; ++q) {
      const int parts = ddk::ld_cluster(&tail->parts, static_cast<unsigned>(q));
      for (int k = 0; k < 2; ++k) {
        if (((parts >> k) & 1) == 0) continue;
        const PartPlace place = ddk::ld_cluster(tail->places + k, static_cast<unsigned>(q));
        if (n > 0 && ddk::ld_shared(&list[n - 1].place.tile_base) == place.tile_base) {  // CTA order: adjacent
          ddk::st_shared(&list[n - 1].parts, ddk::ld_shared(&list[n - 1].parts) + 1);
          continue;
        }
        ddk::st_shared(&list[n].place, place);
        ddk::st_shared(&list[n].rows, ddk::ld_cluster(tail->rows + k, static_cast<unsigned>(q)));
        ddk::st_shared(&list[n].parts, 1);
        ++n;
      }
    }
    ddk::st_shared(listed_row_tiles, n);
  }
  ddk::sync_cluster();  // no CTA leaves while another still reads its part tail
  const int n = ddk::ld_shared(listed_row_tiles), rank = static_cast<int>(ddk::cluster_ctarank());
  for (int i = 0; i < n; ++i) {
    arrive_at_row_tile(p, smem, tail, PartRecord{ddk::ld_shared(&list[i].place), ddk::ld_shared(&list[i].rows)},
                       rank, ddk::ld_shared(&list[i].parts), false);
    ddk::sync_block();  // the merge's list of parts and the win are rewritten by the next arrival
  }
}

// The CTA's range of units, where its first segment starts and that segment's request, from the offsets (the
// same loads in every CTA).
DDK_DEVICE void first_range(const VerifyParams& p, int cta, Range& range, Cursor& at, Request& g, int& merge,
                            int64_t& units) {
  merge = kMergeNone;
  units = 0;
  if (p.whole_row_tiles > 0) {  // one row tile whole, its units counted from its request's first
    const int request = cta / p.whole_row_tiles, row_tile = cta % p.whole_row_tiles;
    g = request_at(p, request);
    const bool busy = row_tile < g.row_tiles;  // a request with fewer rows than the longest leaves CTAs idle
    const int begin = busy ? row_tile * g.tiles : 0;
    range = Range{begin, busy ? begin + g.tiles : 0};
    at = Cursor{0, begin, request};
    return;
  }
  units = total_units(p);
  const int64_t begin = range_start(cta, units, p.num_ctas);
  int request = 0;  // the request holding `begin`, by a pass over every request
  int64_t request_base = 0, before = 0;
  for (int r = 0; r < p.batch; ++r) {
    const Request h = request_at(p, r);
    before += static_cast<int64_t>(h.row_tiles) * h.tiles;
    if (before <= begin && r + 1 < p.batch) {
      request = r + 1;
      request_base = before;
    }
  }
  range = Range{begin, range_start(cta + 1, units, p.num_ctas)};
  at = Cursor{request_base, static_cast<int32_t>(begin - request_base), request};
  g = request_at(p, request);
  int64_t cluster_begin, cluster_end;
  if (g.tiles > 0 && cluster_units(cta, units, p.num_ctas, p.cluster, cluster_begin, cluster_end)) {
    const int64_t tile_base = request_base + (begin - request_base) / g.tiles * g.tiles;  // begin's row tile
    merge = cluster_merge(cluster_begin, cluster_end, tile_base, g.tiles);
  }
}

// The segment a CTA's walk over its range reaches at cursor `at` (its range ending at unit `range_end`): past
// the requests whose units are done, the row tile holding the cursor's unit and its key tiles [tile_begin,
// tile_end) up to the range's end. g: the cursor's request on entry, the segment's on return. The kernel's walk
// and the tests' probe of it (kernels/verify/split_probe_emu.cpp) take each segment from here; its slot stays
// in the walk (as a function of its own, even one line, nvcc's code for the kernel changed).
struct SegmentAt {
  int64_t request_base, row_tile_base;  // the segment's request's first unit and its row tile's, over the batch
  int request, row_tile, tile_begin, tile_end;
};

DDK_DEVICE SegmentAt segment_at(const VerifyParams& p, Cursor at, int64_t range_end, Request& g) {
  int64_t request_base = at.request_base;
  int unit = at.unit, request = at.request;  // a request's units fit 32 bits: 32-bit divisions below
  while (unit == g.row_tiles * g.tiles) {  // past this request's units
    request_base += unit;
    unit = 0;
    g = request_at(p, ++request);
  }
  const int row_tile = unit / g.tiles, tile_begin = unit % g.tiles;
  const int64_t row_tile_base = request_base + static_cast<int64_t>(row_tile) * g.tiles;
  const int64_t stop = range_end - row_tile_base;
  const int tile_end = stop < g.tiles ? static_cast<int>(stop) : g.tiles;
  return SegmentAt{request_base, row_tile_base, request, row_tile, tile_begin, tile_end};
}

DDK_GLOBAL DDK_LAUNCH_BOUNDS(kMaxThreads, 1) void verify_attention_kernel(const VerifyParams p) {
  char* smem = ddk::dynamic_smem() + kHeaderBytes;  // the first stage (see kHeaderBytes)
  const int cta = ddk::block_idx_x();
  Cursor* cursor = reinterpret_cast<Cursor*>(smem - kCursorBytes);
  Extent* extent = reinterpret_cast<Extent*>(cursor + 2);
  Range* range = reinterpret_cast<Range*>(extent + 2);
  int* slot_words = reinterpret_cast<int*>(range + 1);  // two segment slots, the cluster merge, the row tile
  PartTail* tail = reinterpret_cast<PartTail*>(slot_words + 4);
  if (ddk::thread_idx_x() == 0) {
    Range first;
    Cursor at;
    Request g;
    int merge;
    int64_t units;
    first_range(p, cta, first, at, g, merge, units);
    if (p.arrivals != nullptr) {  // the final merge's: the units, and no part yet
      ddk::st_shared(&tail->units, units);
      ddk::st_shared(&tail->parts, 0);
    }
    ddk::st_shared(slot_words + 2, merge);
    ddk::st_shared(range, first);
    ddk::st_shared(cursor, at);
    ddk::st_shared(extent, Extent{g.q_base, g.q_len, g.slot_base, g.keys});
  }
  ddk::sync_block();
  for (int k = 0, segment = 0;; k ^= 1, ++segment) {
    const Cursor at = ddk::ld_shared(cursor + k);
    const Range whole_range = ddk::ld_shared(range);
    if (at.request_base + at.unit >= whole_range.end) {  // (a merging cluster's CTAs return after their merge)
      if (p.arrivals != nullptr && p.cluster > 1) arrive_for_cluster(p, smem, tail);
      else if (p.arrivals != nullptr) arrive_at_parts(p, smem, tail, 0, false);
      return;
    }
    Request g = request_of(p, ddk::ld_shared(extent + k));
    const SegmentAt s = segment_at(p, at, whole_range.end, g);
    const int64_t request_base = s.request_base, row_tile_base = s.row_tile_base;
    const int request = s.request, row_tile = s.row_tile, tile_begin = s.tile_begin, tile_end = s.tile_end;
    const bool whole = tile_begin == 0 && tile_end == g.tiles;
    // A part that starts the CTA's range is its slot 0; only its last segment can be another part (slot 1).
    const int slot = whole ? -1 : 2 * cta + (segment == 0 ? 0 : 1);
    if (ddk::thread_idx_x() == 0) {
      ddk::st_shared(cursor + (k ^ 1), Cursor{request_base, row_tile * g.tiles + tile_end, request});
      ddk::st_shared(extent + (k ^ 1), Extent{g.q_base, g.q_len, g.slot_base, g.keys});
      ddk::st_shared(slot_words + k, slot);  // rewritten two segments on, after this one's barriers
      ddk::st_shared(slot_words + 3, row_tile);  // for the cluster merge
      if (slot >= 0 && p.arrivals != nullptr && ddk::ld_shared(slot_words + 2) != kMergeWhole) {
        // the part, for the arrival at the CTA's end (read there after a barrier)
        ddk::st_shared(tail->places + (slot & 1), PartPlace{row_tile_base, g.tiles, row_tile});
        ddk::st_shared(tail->rows + (slot & 1), PartRows{g.q_base, g.rows});
        ddk::st_shared(&tail->parts, ddk::ld_shared(&tail->parts) | (1 << (slot & 1)));
      }
    }
    // Nothing of the segment lives through it but what shared memory holds: the tile loop needs every register.
    run_segment(p, smem, g, row_tile, tile_begin, tile_end, slot_words + k, slot_words + 2);
    const int merge = ddk::ld_shared(slot_words + 2);
    if (merge != kMergeNone) {  // uniform over the cluster; its CTAs have this one segment
      if (ddk::cluster_nctarank() != static_cast<unsigned>(p.cluster))
        ddk::trap("verify: launched in clusters of another size than p.cluster");
      ddk::sync_cluster();  // every CTA's part is staged
      merge_cluster_parts(p, smem, request_of(p, ddk::ld_shared(extent + (k ^ 1))), ddk::ld_shared(slot_words + 3),
                          merge == kMergeWhole);
      // Done reading the others' parts. No CTA may leave, nor reuse its staged part, while another still reads
      // it: each waits for every arrival, but only where it must (its final merge, or its end), so that the
      // barrier's latency hides behind its arrival at the final merge.
      ddk::cluster_arrive();
      bool waited = false;
      if (merge == kMergePart && p.arrivals != nullptr)  // the rows of its rank
        waited = arrive_at_parts(p, smem, tail, static_cast<int>(ddk::cluster_ctarank()), true);
      if (!waited) ddk::cluster_wait();
      return;
    }
  }
}

// Combine the parts of split row tiles: CTA b merges rows [b R, b R + R) of the batch (R = p.combine_rows, so
// that the index arithmetic of finding a row tile and listing its parts is paid once for its rows, not once a
// row), a segment of one row tile's rows at a time. Warp 0 places the segment (place_row, the row tile's CTAs
// and parts: what the verify kernel decided, from the same unit arithmetic), the CTA lists its parts
// (list_parts, as the final merge does), then each warp merges a row (16 stored positions a lane, 4 of each
// quarter: columns c, c+1, c+8, c+9, see part_column) with the final merge's gather, the parts in CTA order,
// so that the result does not depend on which CTA finished first. A CTA of one row merges it with 128
// threads, a stored position each, or with two such halves (row tiles of many parts: twice the bytes in
// flight) that each merge every other part; the halves then add up in shared memory, half 0's sum first.
// Every part's value loads of a batch go out before they are added: measured on an H200 (q9 p32k), 63 µs of
// load-use chains, one part after the other, for 10 MB; 11.0 µs with 8 parts' values a batch (run 7: 33
// parts a half, 5 round trips); 12 parts (kCombineBatch) take about the same registers, as do a warp's 4
// parts of 4 positions (kGatherBatch).
constexpr int kCombineBatch = 12;
constexpr int kCombineMaxRows = 64;  // rows a combine CTA merges at most (the launchers refuse more)
// The segment warp 0 places for the CTA, in shared memory (16-byte pieces: one access each).
struct alignas(16) SegmentUnits {
  int64_t units, tile_base;  // the batch's units, the row tile's first
};
struct alignas(16) SegmentCtas {
  int64_t first, last;  // the row tile's CTAs
};
struct alignas(16) SegmentRows {
  int32_t tiles, m, rows, parts;  // rows: the segment's, from row m; parts: the row tile's, 0 where none to merge
};
struct CombineSegment {
  SegmentUnits units;
  SegmentCtas ctas;
  SegmentRows rows;
};
constexpr int kCombineSegmentBytes = 48;
static_assert(sizeof(CombineSegment) == kCombineSegmentBytes, "the segment's place in the combine's smem");
// The segment, half 1's sums (4 values and a weight a thread), then the list of a row tile's parts: at most
// one a CTA of the launch.
constexpr int kCombineFixedBytes = kCombineSegmentBytes + 5 * kCombineHalf * 4;
DDK_HOST_DEVICE constexpr int combine_smem_bytes(int num_ctas) { return kCombineFixedBytes + 4 * num_ctas; }
constexpr int kCombineSmemBytes = kCombineFixedBytes + 4 * kMaxListedCtas;  // the launchers' largest

// Warp 0's part of the combine: where the row at `row` is, how many of the CTA's rows to `end` its row tile
// holds, and that row tile's parts (0 where one CTA, or one cluster, wrote it whole, or no row is there).
DDK_DEVICE void place_segment(const VerifyParams& p, CombineSegment* segment, int64_t row, int64_t end) {
  const RowPlace at = place_row(p, static_cast<int>(row / p.heads), static_cast<int>(row % p.heads));
  if (ddk::lane_id() != 0) return;
  int rows = 1, parts = 0;  // a row of no request (offsets that leave tokens out): skipped alone
  int64_t first = 0, last = 0;
  if (at.unit0 >= 0) {
    const int block_m = kGroupRows * p.row_groups, in_tile = block_m - at.m < at.left ? block_m - at.m : at.left;
    rows = end - row < in_tile ? static_cast<int>(end - row) : in_tile;
  }
  if (at.unit0 >= 0 && at.tiles > 0) {
    first = cta_of_unit(at.unit0, at.units, p.num_ctas);
    last = cta_of_unit(at.unit0 + at.tiles - 1, at.units, p.num_ctas);
    int64_t cluster_begin, cluster_end;
    const bool whole = first == last || (cluster_units(first, at.units, p.num_ctas, p.cluster, cluster_begin,
                                                       cluster_end) &&
                                         cluster_merge(cluster_begin, cluster_end, at.unit0, at.tiles) == kMergeWhole);
    if (!whole) parts = parts_before(p, last + 1, first, last, at.units, at.unit0, at.tiles);
  }
  ddk::st_shared(&segment->units, SegmentUnits{at.units, at.unit0});
  ddk::st_shared(&segment->ctas, SegmentCtas{first, last});
  ddk::st_shared(&segment->rows, SegmentRows{at.tiles, at.m, rows, parts});
}

DDK_GLOBAL void combine_parts_kernel(const VerifyParams p) {
  if (p.whole_row_tiles > 0) return;
  char* smem = ddk::dynamic_smem();
  CombineSegment* segment = reinterpret_cast<CombineSegment*>(smem);
  float* other = reinterpret_cast<float*>(smem + kCombineSegmentBytes);  // [5][kCombineHalf]: half 1's sums
  int* listed = reinterpret_cast<int*>(other + 5 * kCombineHalf);
  const int t = ddk::thread_idx_x(), half = t / kCombineHalf, halves = p.combine_halves;
  const int position = t % kCombineHalf * 4, lane_of_half = t % kCombineHalf;
  const bool by_warp = p.combine_rows > 1;  // uniform: rows dealt to warps, else the CTA's one row to a half
  const int64_t begin = static_cast<int64_t>(ddk::block_idx_x()) * p.combine_rows;
  const int64_t end = begin + p.combine_rows < p.total_rows ? begin + p.combine_rows : p.total_rows;
  for (int64_t row = begin; row < end;) {  // uniform: a segment a row tile the CTA's rows fall in
    if (t < 32) place_segment(p, segment, row, end);
    ddk::sync_block();
    const SegmentRows s = ddk::ld_shared(&segment->rows);
    if (s.parts > 0) {  // uniform
      const SegmentUnits u = ddk::ld_shared(&segment->units);
      const SegmentCtas c = ddk::ld_shared(&segment->ctas);
      list_parts(p, listed, kCombineHalf * halves, u.units, c.first, c.last, u.tile_base, s.tiles);
      ddk::sync_block();
      if (!by_warp) {  // the CTA's one row (s.rows is 1: combine_rows is), every other part a half
        float acc[1][4] = {{0.f, 0.f, 0.f, 0.f}}, weight_sum = 0.f;
        const float base = gather_listed_parts<kCombineBatch, 1>(p, listed, s.parts, s.m, position, acc,
                                                                 weight_sum, half, halves);
        if (halves == 2) {  // half 1's sums to half 0
          if (half == 1) {
            for (int e = 0; e < 4; ++e) ddk::st_shared(other + (e * kCombineHalf + lane_of_half), acc[0][e]);
            ddk::st_shared(other + (4 * kCombineHalf + lane_of_half), weight_sum);
          }
          ddk::sync_block();
          if (half == 0) {
            for (int e = 0; e < 4; ++e) acc[0][e] += ddk::ld_shared(other + (e * kCombineHalf + lane_of_half));
            weight_sum += ddk::ld_shared(other + (4 * kCombineHalf + lane_of_half));
          }
        }
        if (half == 0) write_merged_row(p, row, position, acc[0], weight_sum, base, lane_of_half == 0);
      } else {
        const int warp = t / 32, warps = kCombineHalf * halves / 32, lane = static_cast<int>(ddk::lane_id());
        for (int k = warp; k < s.rows; k += warps) {
          float acc[kPartQuarters][4] = {}, weight_sum = 0.f;
          const float base = gather_listed_parts<kGatherBatch, kPartQuarters>(p, listed, s.parts, s.m + k, 4 * lane,
                                                                              acc, weight_sum, 0, 1);
          write_merged_quarters(p, row + k, acc, weight_sum, base);
        }
      }
    }
    ddk::sync_block();  // the next segment rewrites the place and the list
    row += s.rows;
  }
}

}  // namespace ddk_verify
