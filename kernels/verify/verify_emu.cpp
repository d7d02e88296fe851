// The verify kernel's own source under the CPU emulation (g++ -DDDK_EMULATE), behind a C ABI for ctypes.
// Same launch geometry and the same two kernels as verify_torch.cu.
#include "verify_attn.cuh"

#include <cstdint>

extern "C" int ddk_verify_emu(const uint16_t* q, const uint16_t* kv, const int32_t* kv_slots,
                              const int32_t* kv_offsets, const int32_t* q_offsets, const uint32_t* mask_words,
                              uint16_t* out, float* lse, float* ws_o, float* ws_lse, int total_rows, int heads,
                              int mask_words_per_row, int num_splits, int row_tiles, int batch, float sm_scale,
                              int workers, char* error, int error_len) {
  ddk_verify::VerifyParams p{};
  p.q = q;
  p.kv = kv;
  p.kv_slots = kv_slots;
  p.kv_offsets = kv_offsets;
  p.q_offsets = q_offsets;
  p.mask_words = mask_words;
  p.out = out;
  p.lse = lse;
  p.ws_o = ws_o;
  p.ws_lse = ws_lse;
  p.total_rows = total_rows;
  p.heads = heads;
  p.mask_words_per_row = mask_words_per_row;
  p.num_splits = num_splits;
  p.scale_log2 = static_cast<float>(static_cast<double>(sm_scale) * 1.4426950408889634);
  if (total_rows == 0 || batch == 0) return 0;

  ddk::emu::LaunchOptions options;
  options.workers = workers;
  const ddk::emu::Dim3 grid(static_cast<unsigned>(num_splits), static_cast<unsigned>(row_tiles),
                            static_cast<unsigned>(batch));
  ddk::emu::Status status = ddk::emu::launch_with(options, ddk_verify::verify_attention_kernel, grid,
                                                  ddk_verify::kThreads, ddk_verify::kSmemBytes, p);
  if (status.ok() && num_splits > 1) {
    status = ddk::emu::launch_with(options, ddk_verify::combine_splits_kernel,
                                   ddk::emu::Dim3(static_cast<unsigned>(total_rows)), ddk_verify::kCombineThreads,
                                   0, p);
  }
  return ddk::emu::copy_status(status, error, static_cast<std::size_t>(error_len));
}
