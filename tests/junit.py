"""Read a pytest junit report: what passed, failed, erred, was skipped or xfailed."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Report:
    """Outcomes by test ("classname::name"); messages cut to 300 characters."""

    passed: list[str] = field(default_factory=list)
    failures: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    skips: dict[str, str] = field(default_factory=dict)
    xfails: dict[str, str] = field(default_factory=dict)

    def names(self) -> set[str]:
        """Every test in the report."""
        return {*self.passed, *self.failures, *self.errors, *self.skips, *self.xfails}

    def problems(self) -> str:
        """Every failure and error, one per line."""
        return "\n".join(f"{name}: {message}"
                         for name, message in {**self.failures, **self.errors}.items())


def read(path: Path) -> Report:
    """The outcomes in the junit report at ``path``."""
    report = Report()
    for case in ElementTree.parse(path).iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcome = next((x for x in case if x.tag not in ("system-out", "system-err")), None)
        message = "" if outcome is None else outcome.get("message", "")[:300]
        if outcome is None:
            report.passed.append(name)
        elif outcome.tag == "failure":
            report.failures[name] = message
        elif outcome.tag == "error":
            report.errors[name] = message
        elif outcome.get("type") == "pytest.xfail":
            report.xfails[name] = message
        else:
            report.skips[name] = message
    return report
