"""End-to-end generation: a small absorbed-MLA model decoded greedily with tree speculation in SGLang's
layout, every verify call through a backend's protocol (docs/e2e.md)."""
