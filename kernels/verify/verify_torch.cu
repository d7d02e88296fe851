// PyTorch binding of the verify kernel for a CUDA machine (built JIT by ddbench/kernel/cuda_build.py).
// No host synchronisation and no .item(): the launch geometry comes from the caller, sized from shapes.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <set>

#include "verify_attn.cuh"

namespace {

void check(const at::Tensor& t, const char* name, at::ScalarType dtype, const at::Device& device) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.device() == device, name, " is on ", t.device(), ", q on ", device);
  TORCH_CHECK(t.scalar_type() == dtype, name, " has dtype ", t.scalar_type(), ", expected ", dtype);
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

void check_aligned(const at::Tensor& t, const char* name, uintptr_t bytes) {
  TORCH_CHECK(reinterpret_cast<uintptr_t>(t.data_ptr()) % bytes == 0, name, " must be ", bytes,
              "-byte aligned (cp.async and vector accesses), its data starts at ", t.data_ptr());
}

// The dynamic shared-memory opt-ins (97 KB, and the combine's list of parts) are per-device attributes: set
// them once on every device the kernels run on.
void allow_shared_memory(int device) {
  static std::mutex lock;
  static std::set<int> configured;
  const std::lock_guard<std::mutex> guard(lock);
  if (configured.count(device) != 0) return;
  C10_CUDA_CHECK(cudaFuncSetAttribute(ddk_verify::verify_attention_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, ddk_verify::kMaxSmemBytes));
  C10_CUDA_CHECK(cudaFuncSetAttribute(ddk_verify::combine_parts_kernel,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, ddk_verify::kCombineSmemBytes));
  configured.insert(device);
}

// Whether a device runs thread-block clusters (sm_90 and later), asked once per device.
bool has_clusters(int device) {
  static std::mutex lock;
  static std::map<int, bool> known;
  const std::lock_guard<std::mutex> guard(lock);
  const auto it = known.find(device);
  if (it != known.end()) return it->second;
  int major = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return known[device] = major >= 9;
}

cudaLaunchConfig_t verify_config(int64_t num_ctas, int64_t row_groups, cudaStream_t stream,
                                 cudaLaunchAttribute* cluster_attribute, int64_t cluster) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(num_ctas));
  config.blockDim = dim3(ddk_verify::kGroupThreads * static_cast<unsigned>(row_groups));
  config.dynamicSmemBytes = ddk_verify::smem_bytes(static_cast<int>(row_groups));
  config.stream = stream;
  cluster_attribute->id = cudaLaunchAttributeClusterDimension;
  cluster_attribute->val.clusterDim.x = static_cast<unsigned>(cluster);
  cluster_attribute->val.clusterDim.y = 1;
  cluster_attribute->val.clusterDim.z = 1;
  config.attrs = cluster_attribute;
  config.numAttrs = cluster > 1 ? 1 : 0;
  return config;
}

// How many clusters of `cluster` verify CTAs the current device runs at once (a cluster needs its CTAs'
// SMs in one GPC, so it can be fewer than SMs / cluster); 0 where it has no clusters.
int64_t max_active_clusters(int64_t cluster, int64_t row_groups) {
  TORCH_CHECK(cluster >= 1 && cluster <= ddk_verify::kMaxCluster &&
                  (row_groups == 2 || row_groups == ddk_verify::kMaxGroups),
              "max_active_clusters: cluster 1 to 8 and row_groups 2 or 3, not ", cluster, " and ", row_groups);
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  if (!has_clusters(device)) return 0;
  allow_shared_memory(device);
  cudaLaunchAttribute attribute{};
  cudaLaunchConfig_t config = verify_config(cluster, row_groups, nullptr, &attribute, cluster);
  config.numAttrs = 1;
  int clusters = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, ddk_verify::verify_attention_kernel, &config));
  return clusters;
}

void verify(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& kv_draft, const at::Tensor& kv_slots,
            const at::Tensor& slot_offsets, const at::Tensor& kv_offsets,
            const at::Tensor& q_offsets, const at::Tensor& mask_words, at::Tensor& out,
            const c10::optional<at::Tensor>& lse, at::Tensor& ws_o, at::Tensor& ws_lse, at::Tensor& ws_scale,
            const c10::optional<at::Tensor>& arrivals, double sm_scale,
            int64_t num_ctas, int64_t whole_row_tiles, int64_t row_groups, int64_t combine_halves,
            int64_t combine_rows, int64_t cluster) {
  TORCH_CHECK(q.is_cuda(), "q must be a CUDA tensor");
  const at::Device device = q.device();
  check(q, "q", at::kBFloat16, device);
  check(kv, "kv", at::kBFloat16, device);
  check(kv_draft, "kv_draft", at::kBFloat16, device);
  check(kv_slots, "kv_slots", at::kLong, device);  // SGLang's kv_indices, tail and all: never copied
  check(slot_offsets, "slot_offsets", at::kInt, device);
  check(kv_offsets, "kv_offsets", at::kInt, device);
  check(q_offsets, "q_offsets", at::kInt, device);
  check(mask_words, "mask_words", at::kInt, device);
  check(out, "out", at::kBFloat16, device);
  TORCH_CHECK(q.dim() == 3 && q.size(2) == ddk_verify::kDimQK, "q must be (T, H, 576)");
  TORCH_CHECK(kv.dim() == 2 && kv.size(1) == ddk_verify::kDimQK, "kv must be (pool, 576)");
  TORCH_CHECK(kv_draft.dim() == 2 && kv_draft.size(0) == q.size(0) && kv_draft.size(1) == ddk_verify::kDimQK,
              "kv_draft must be (T, 576) like q's tokens");
  TORCH_CHECK(out.dim() == 3 && out.size(0) == q.size(0) && out.size(1) == q.size(1) &&
                  out.size(2) == ddk_verify::kDimV,
              "out must be (T, H, 512) like q");
  TORCH_CHECK(kv_offsets.dim() == 1 && q_offsets.dim() == 1 && slot_offsets.dim() == 1 &&
                  kv_offsets.size(0) == q_offsets.size(0) && slot_offsets.size(0) == q_offsets.size(0) &&
                  q_offsets.size(0) >= 1,
              "slot_offsets, kv_offsets and q_offsets must all be (bs + 1)");
  TORCH_CHECK(mask_words.dim() == 2 && mask_words.size(0) == q.size(0), "mask_words must be (T, words)");
  const int batch = static_cast<int>(q_offsets.size(0) - 1);
  if (q.size(0) * q.size(1) == 0 || batch == 0) return;  // nothing to compute (the plan gives 0 CTAs)
  // Workspace slots are 2 * cta + 1 in 32-bit arithmetic.
  TORCH_CHECK(num_ctas >= 1 && num_ctas < (int64_t{1} << 30) && whole_row_tiles >= 0, "bad launch geometry");
  TORCH_CHECK(row_groups == 2 || row_groups == ddk_verify::kMaxGroups, "row_groups must be 2 or 3, not ", row_groups);
  TORCH_CHECK(combine_halves == 1 || combine_halves == 2, "combine_halves must be 1 or 2, not ", combine_halves);
  TORCH_CHECK(combine_rows >= 1 && combine_rows <= ddk_verify::kCombineMaxRows, "combine_rows must be 1 to ",
              ddk_verify::kCombineMaxRows, ", not ", combine_rows);
  TORCH_CHECK(ddk_verify::valid_cluster(cluster, num_ctas, whole_row_tiles), "cluster must be 1 to ",
              ddk_verify::kMaxCluster, " CTAs dividing num_ctas (", num_ctas, "), and 1 with whole row tiles, not ",
              cluster);
  const int64_t block_m = ddk_verify::kGroupRows * row_groups;
  check_aligned(q, "q", 16);
  check_aligned(kv, "kv", 16);
  check_aligned(kv_draft, "kv_draft", 16);
  check_aligned(out, "out", 4);
  if (lse.has_value()) {
    check(*lse, "lse", at::kFloat, device);
    TORCH_CHECK(lse->numel() == q.size(0) * q.size(1), "lse must hold T * H values");
  }
  const bool splits = whole_row_tiles == 0 && num_ctas > 1;  // clusters may merge every row tile, or not
  // With arrival counters the verify kernel merges split row tiles itself (the final merge), else the combine.
  const bool final_merge = splits && arrivals.has_value();
  if (whole_row_tiles > 0)
    TORCH_CHECK(num_ctas == batch * whole_row_tiles, "whole row tiles: num_ctas must be bs * row tiles");
  if (final_merge) {
    check(*arrivals, "arrivals", at::kInt, device);
    TORCH_CHECK(arrivals->numel() >= num_ctas * ddk_verify::kMaxCluster, "arrivals holds ", arrivals->numel(),
                " counters, the launch needs num_ctas * ", ddk_verify::kMaxCluster, " (zeros, left zero)");
  }
  if (splits) {
    TORCH_CHECK(num_ctas <= ddk_verify::kMaxListedCtas, "a split row tile's merge lists at most ",
                ddk_verify::kMaxListedCtas, " CTAs, not ", num_ctas);
    check(ws_o, "ws_o", at::kHalf, device);
    check(ws_lse, "ws_lse", at::kFloat, device);
    check(ws_scale, "ws_scale", at::kFloat, device);
    check_aligned(ws_o, "ws_o", 8);
    check_aligned(ws_scale, "ws_scale", 16);  // a part row's four scales, one 128-bit load
    TORCH_CHECK(ws_o.numel() >= 2 * num_ctas * block_m * ddk_verify::kDimV, "ws_o holds ", ws_o.numel(),
                " halves, the launch needs 2 * num_ctas * ", block_m, " * 512");
    TORCH_CHECK(ws_lse.numel() >= 2 * num_ctas * block_m, "ws_lse holds ", ws_lse.numel(),
                " floats, the launch needs 2 * num_ctas * ", block_m);
    TORCH_CHECK(ws_scale.numel() >= 2 * num_ctas * block_m * 4, "ws_scale holds ", ws_scale.numel(),
                " floats, the launch needs 2 * num_ctas * ", block_m, " * 4");
  }
  const at::cuda::CUDAGuard guard(device);

  ddk_verify::VerifyParams p{};
  p.q = reinterpret_cast<const uint16_t*>(q.data_ptr());
  p.kv = reinterpret_cast<const uint16_t*>(kv.data_ptr());
  p.kv_draft = reinterpret_cast<const uint16_t*>(kv_draft.data_ptr());
  p.kv_slots = kv_slots.data_ptr<int64_t>();
  p.slot_offsets = slot_offsets.data_ptr<int32_t>();
  p.kv_offsets = kv_offsets.data_ptr<int32_t>();
  p.q_offsets = q_offsets.data_ptr<int32_t>();
  p.mask_words = reinterpret_cast<const uint32_t*>(mask_words.data_ptr<int32_t>());
  p.out = reinterpret_cast<uint16_t*>(out.data_ptr());
  p.lse = lse.has_value() ? lse->data_ptr<float>() : nullptr;
  p.ws_o = splits ? reinterpret_cast<uint16_t*>(ws_o.data_ptr()) : nullptr;
  p.ws_lse = splits ? ws_lse.data_ptr<float>() : nullptr;
  p.ws_scale = splits ? ws_scale.data_ptr<float>() : nullptr;
  p.arrivals = final_merge ? arrivals->data_ptr<int32_t>() : nullptr;
  p.total_rows = static_cast<int>(q.size(0) * q.size(1));
  p.heads = static_cast<int>(q.size(1));
  p.mask_words_per_row = static_cast<int>(mask_words.size(1));
  p.batch = batch;
  p.num_ctas = static_cast<int>(num_ctas);
  p.whole_row_tiles = static_cast<int>(whole_row_tiles);
  p.row_groups = static_cast<int>(row_groups);
  p.combine_halves = static_cast<int>(combine_halves);
  p.combine_rows = static_cast<int>(combine_rows);
  p.cluster = static_cast<int>(cluster);
  p.scale_log2 = static_cast<float>(sm_scale * 1.4426950408889634);

  allow_shared_memory(device.index());
  auto stream = at::cuda::getCurrentCUDAStream();
  TORCH_CHECK(cluster == 1 || has_clusters(device.index()), "thread-block clusters need sm_90 or later");
  cudaLaunchAttribute attribute{};
  const cudaLaunchConfig_t config = verify_config(num_ctas, row_groups, stream, &attribute, cluster);
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, ddk_verify::verify_attention_kernel, p));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (splits && !final_merge) {
    const int grid = (p.total_rows + p.combine_rows - 1) / p.combine_rows;
    ddk_verify::combine_parts_kernel<<<grid, ddk_verify::kCombineHalf * p.combine_halves,
                                       ddk_verify::combine_smem_bytes(p.num_ctas), stream>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("verify", &verify, "Tree-verify MLA attention (SGLang layout marshaled by ddbench.kernel.marshal)");
  m.def("max_active_clusters", &max_active_clusters, "Clusters of verify CTAs the current device runs at once");
}
