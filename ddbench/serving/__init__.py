"""ddbench inside an SGLang server: the custom kernel served with a live check against Triton.

`plugin.register` is the `sglang.srt.plugins` entry point; `hook.ApplyHook` decides who serves each
target-verify call and judges the sampled ones; `breaker`, `comparison`, `breach` and `apply_log` are its
parts. How to use it: docs/serving.md.
"""
