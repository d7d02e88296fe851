"""Running cases: the Session (one run path for every command), one case's execution, its sinks."""

from ddbench.runner.execute import run_case
from ddbench.runner.session import RunOutcome, Session, SessionOptions

__all__ = ["RunOutcome", "Session", "SessionOptions", "run_case"]
