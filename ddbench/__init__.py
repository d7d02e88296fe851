"""ddbench: parity and latency suites for the tree-speculative-decoding verify attention kernel."""

__version__ = "0.1.0"
