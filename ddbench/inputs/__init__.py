"""Inputs in SGLang's extend layout: the layout itself, its invariants, and the seeded generator."""

from ddbench.inputs.check import check_inputs
from ddbench.inputs.generate import generate_inputs
from ddbench.inputs.layout import VerifyInputs

__all__ = ["VerifyInputs", "check_inputs", "generate_inputs"]
