"""Suite files: schema, expansion into cases, semantic checks and case IDs."""

from ddbench.suite.load import load_suite, parse_suite
from ddbench.suite.model import Case, InputStyle, Layout, ModelSpec, ParityBound, Suite

__all__ = ["Case", "InputStyle", "Layout", "ModelSpec", "ParityBound", "Suite", "load_suite", "parse_suite"]
