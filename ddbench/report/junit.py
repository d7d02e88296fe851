"""JUnit XML for CI systems: one testcase per case and judged pair."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from ddbench.atomic import write_atomic
from ddbench.metrics import ERROR, FAIL, SKIPPED
from ddbench.results.case_result import CaseResult


def junit_xml(results: Sequence[CaseResult], suite_name: str = "ddbench") -> str:
    root = ET.Element("testsuites", name=suite_name)
    by_suite: dict[str, list[CaseResult]] = {}
    for r in results:
        by_suite.setdefault(r.case.suite, []).append(r)
    for name, group in by_suite.items():
        suite = ET.SubElement(root, "testsuite", name=name)
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for r in group:
            pairs = r.pairs or [None]
            for pair in pairs:
                label = f"{r.case.id}[{pair.candidate} vs {pair.against}]" if pair else r.case.id
                case = ET.SubElement(suite, "testcase", classname=name, name=label, time=f"{r.seconds:.3f}")
                counts["tests"] += 1
                status = pair.verdict.status if pair else (ERROR if r.error else SKIPPED)
                message = "; ".join(pair.verdict.reasons) if pair else (r.error or "no bound judged")
                if status == FAIL:
                    ET.SubElement(case, "failure", message=message).text = message
                    counts["failures"] += 1
                elif status == ERROR:
                    ET.SubElement(case, "error", message=message).text = message
                    counts["errors"] += 1
                elif status == SKIPPED:
                    ET.SubElement(case, "skipped", message=message)
                    counts["skipped"] += 1
                if pair and pair.figures:
                    f = pair.figures
                    ET.SubElement(case, "system-out").text = (
                        f"max_row_ulp={f.max_row_ulp:.3f} mean_row_ulp={f.mean_row_ulp:.4f} "
                        f"p999_ulp={f.p999_ulp:.1f} max_abs={f.max_abs:.3g} rel_l2={f.rel_l2:.3g}"
                    )
        for key, value in counts.items():
            suite.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(path: str | Path, results: Sequence[CaseResult]) -> None:
    write_atomic(path, junit_xml(results))
