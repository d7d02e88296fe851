// PyTorch binding of the verify kernel for a CUDA machine (built JIT by ddbench/kernel/cuda_build.py).
// No host synchronisation and no .item(): the launch geometry comes from the caller, sized from shapes.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include "verify_attn.cuh"

namespace {

void check(const at::Tensor& t, const char* name, at::ScalarType dtype) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == dtype, name, " has dtype ", t.scalar_type(), ", expected ", dtype);
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

void verify(const at::Tensor& q, const at::Tensor& kv, const at::Tensor& kv_slots, const at::Tensor& kv_offsets,
            const at::Tensor& q_offsets, const at::Tensor& mask_words, at::Tensor& out,
            const c10::optional<at::Tensor>& lse, at::Tensor& ws_o, at::Tensor& ws_lse, double sm_scale,
            int64_t num_splits, int64_t row_tiles) {
  check(q, "q", at::kBFloat16);
  check(kv, "kv", at::kBFloat16);
  check(kv_slots, "kv_slots", at::kInt);
  check(kv_offsets, "kv_offsets", at::kInt);
  check(q_offsets, "q_offsets", at::kInt);
  check(mask_words, "mask_words", at::kInt);
  check(out, "out", at::kBFloat16);
  TORCH_CHECK(q.dim() == 3 && q.size(2) == ddk_verify::kDimQK, "q must be (T, H, 576)");
  TORCH_CHECK(kv.dim() == 2 && kv.size(1) == ddk_verify::kDimQK, "kv must be (pool, 576)");
  TORCH_CHECK(num_splits >= 1 && row_tiles >= 1, "bad launch geometry");
  const at::cuda::CUDAGuard guard(q.device());

  ddk_verify::VerifyParams p{};
  p.q = reinterpret_cast<const uint16_t*>(q.data_ptr());
  p.kv = reinterpret_cast<const uint16_t*>(kv.data_ptr());
  p.kv_slots = kv_slots.data_ptr<int32_t>();
  p.kv_offsets = kv_offsets.data_ptr<int32_t>();
  p.q_offsets = q_offsets.data_ptr<int32_t>();
  p.mask_words = reinterpret_cast<const uint32_t*>(mask_words.data_ptr<int32_t>());
  p.out = reinterpret_cast<uint16_t*>(out.data_ptr());
  p.lse = lse.has_value() ? lse->data_ptr<float>() : nullptr;
  p.ws_o = num_splits > 1 ? ws_o.data_ptr<float>() : nullptr;
  p.ws_lse = num_splits > 1 ? ws_lse.data_ptr<float>() : nullptr;
  p.total_rows = static_cast<int>(q.size(0) * q.size(1));
  p.heads = static_cast<int>(q.size(1));
  p.mask_words_per_row = static_cast<int>(mask_words.size(1));
  p.num_splits = static_cast<int>(num_splits);
  p.scale_log2 = static_cast<float>(sm_scale * 1.4426950408889634);

  static bool configured = false;
  if (!configured) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(ddk_verify::verify_attention_kernel,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, ddk_verify::kSmemBytes));
    configured = true;
  }
  const int batch = static_cast<int>(q_offsets.size(0) - 1);
  if (p.total_rows == 0 || batch == 0) return;
  auto stream = at::cuda::getCurrentCUDAStream();
  const dim3 grid(static_cast<unsigned>(num_splits), static_cast<unsigned>(row_tiles), static_cast<unsigned>(batch));
  ddk_verify::verify_attention_kernel<<<grid, ddk_verify::kThreads, ddk_verify::kSmemBytes, stream>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (num_splits > 1) {
    ddk_verify::combine_splits_kernel<<<p.total_rows, ddk_verify::kCombineThreads, 0, stream>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("verify", &verify, "Tree-verify MLA attention (SGLang layout marshaled by ddbench.kernel.marshal)");
}
