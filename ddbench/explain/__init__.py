"""`ddbench explain`: name the classic mistake that reproduces a failing output, and map the error."""

from ddbench.explain.diagnose import Diagnosis, Explainer, explain
from ddbench.explain.hypotheses import HYPOTHESES, find_hypothesis, mistaken_output

__all__ = ["HYPOTHESES", "Diagnosis", "Explainer", "explain", "find_hypothesis", "mistaken_output"]
