// The fragment probe on the GPU (PyTorch binding, built JIT by ddbench/device/fragments.py).
#include <ATen/cuda/CUDAContext.h>
#include <torch/extension.h>

#include "fragment_probe.cuh"

namespace {

template <class T>
T* ptr(const at::Tensor& t) {
  TORCH_CHECK(t.is_cuda() && t.is_contiguous(), "probe tensors must be contiguous CUDA tensors");
  return reinterpret_cast<T*>(t.data_ptr());
}

void probe(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, at::Tensor& d, const at::Tensor& tiles,
           at::Tensor& ldm, at::Tensor& ldm_trans, const at::Tensor& values, at::Tensor& shuffled,
           at::Tensor& packed, at::Tensor& widened) {
  const ddk_probe::ProbeParams p{ptr<const uint32_t>(a), ptr<const uint32_t>(b), ptr<const float>(c), ptr<float>(d),
                                 ptr<const uint16_t>(tiles), ptr<uint32_t>(ldm), ptr<uint32_t>(ldm_trans),
                                 ptr<const float>(values), ptr<float>(shuffled), ptr<uint32_t>(packed),
                                 ptr<float>(widened)};
  const auto trials = static_cast<unsigned>(a.size(0));
  ddk_probe::fragment_probe_kernel<<<trials, 32, ddk_probe::kTileBytes, at::cuda::getCurrentCUDAStream()>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("probe", &probe, "ddk fragment probe"); }
