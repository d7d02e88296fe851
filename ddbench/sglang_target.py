"""Where SGLang keeps the kernel under test (sglang 0.5.23). Imports nothing, so the capture hook that runs
at every interpreter start can use it."""

EXTEND_ATTENTION_MODULE = "sglang.kernels.ops.attention.extend_attention"
