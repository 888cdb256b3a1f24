"""Run a pytest suite in a process of its own and read its junit report: what passed,
failed, erred, was skipped or xfailed."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# A test stuck this long dumps every thread's stack (faulthandler) before the run's
# own timeout kills it, so a hang names where it hangs.
STACK_DUMP_AFTER = 300


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


def run_pytest(
    arguments: Sequence[str], report: Path, cwd: Path, env: Mapping[str, str],
    timeout: int = 1200,
) -> tuple[subprocess.CompletedProcess[str], Report]:
    """``python -m pytest *arguments`` with a junit report at ``report``; fails the
    calling test, with the output's tail, if it times out or writes no report."""
    command = [sys.executable, "-m", "pytest", *arguments, f"--junitxml={report}",
               "-o", f"faulthandler_timeout={STACK_DUMP_AFTER}"]
    try:
        result = subprocess.run(command, cwd=cwd, env=dict(env), capture_output=True,
                                text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as err:
        tail = [(x or b"")[-6000:] for x in (err.stdout, err.stderr)]
        text = [x.decode(errors="replace") if isinstance(x, bytes) else x for x in tail]
        pytest.fail(f"pytest ran past {timeout} s:\n{text[0]}\n{text[1]}")
    if not report.exists():
        pytest.fail(result.stdout[-4000:] + result.stderr[-4000:])
    return result, read(report)
