"""The custom verify kernel: launch planning, input marshalling and builds (CUDA and the host emulation)."""
