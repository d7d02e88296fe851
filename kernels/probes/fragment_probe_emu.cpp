// The fragment probe under the CPU emulation, behind a C ABI for ctypes.
#include "fragment_probe.cuh"

extern "C" int ddk_fragment_probe_emu(const uint32_t* a, const uint32_t* b, const float* c, float* d,
                                      const uint16_t* tiles, uint32_t* ldm, uint32_t* ldm_trans,
                                      const float* values, float* shuffled, uint32_t* packed, float* widened,
                                      int trials, char* error, int error_len) {
  const ddk_probe::ProbeParams p{a, b, c, d, tiles, ldm, ldm_trans, values, shuffled, packed, widened};
  const auto status = ddk::emu::launch(ddk_probe::fragment_probe_kernel, ddk::emu::Dim3(static_cast<unsigned>(trials)),
                                       32, ddk_probe::kTileBytes, p);
  return ddk::emu::copy_status(status, error, static_cast<std::size_t>(error_len));
}
