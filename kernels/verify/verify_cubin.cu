// Compiled alone by `make kernel-check` (nvcc -cubin --resource-usage) for sm_120 and sm_90: the kernels of
// verify_attn.cuh with no host code, so the resource report is exactly theirs.
#include "verify_attn.cuh"
