"""Peak extra memory of one implementation on one case, measured in a fresh process.

Timings share one process, so a library's pools, caches and thread buffers made for an
earlier case or by another library would hide in its memory; the probe therefore runs
each implementation alone, in ``python -m gpu_tc.bench.memory_probe`` (the environment,
and with it the thread settings, inherited): it makes the case's inputs as the timing
run does, resets the kernel's peak resident-memory counter (``VmHWM``) and reads the
resident memory (``VmRSS``) as the baseline, builds the implementation's runner, makes a
cold call, drops its result, makes a warm call, and reads ``VmHWM``. The peak extra
memory is ``VmHWM - baseline - the result's bytes`` (at least 0): temporaries, pools,
caches, plans and buffers the library keeps, and the pages of code a first call loads.

Linux only (``/proc/self/status``); on the GPU the host's resident memory says nothing
of device memory, so nothing is measured there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .suites import Case

# The probe's answer is the one stdout line that starts with this (libraries may print).
PREFIX = "gpu-tc-memory: "
PROBE_MODULE = "gpu_tc.bench.memory_probe"
# Seconds a probe may take: imports, the inputs, the build, a cold and a warm call.
PROBE_TIMEOUT = 300.0
MIB = float(1 << 20)

METHOD = ("a fresh process per implementation; once the inputs exist the peak resident "
          "memory (VmHWM) is reset and VmRSS read; then the runner is built and called cold "
          "and warm; peak extra = VmHWM - that baseline - the result's bytes")


@dataclass(frozen=True)
class Footprint:
    """What a probe found for one implementation and case.

    Attributes:
        peak_extra_bytes: Peak resident bytes above the baseline less the result's
            (at least 0); None when not measured.
        result_bytes: The warm call's result, in bytes.
        baseline_bytes: Resident bytes once the inputs exist (VmRSS).
        peak_bytes: Peak resident bytes of the process over both calls (VmHWM).
        hwm_reset: Whether the peak counter was reset before the calls (writing 5 to
            ``/proc/self/clear_refs``); where it could not be, VmHWM is read before too.
        exact: False when the counter was not reset and the calls did not pass the peak
            reached before them (making the inputs): ``peak_extra_bytes`` is then an
            upper bound of the calls' own peak.
        reason: Why nothing was measured (None when measured).
    """

    peak_extra_bytes: int | None = None
    result_bytes: int | None = None
    baseline_bytes: int | None = None
    peak_bytes: int | None = None
    hwm_reset: bool | None = None
    exact: bool | None = None
    reason: str | None = None

    @classmethod
    def of(cls, peak: int, baseline: int, result: int, reset: bool,
           peak_before: int = 0) -> Footprint:
        """The footprint of a probe's readings (``peak_before``: VmHWM before the calls)."""
        extra = max(0, peak - baseline - result)
        return cls(extra, result, baseline, peak, reset, reset or peak > peak_before)

    @classmethod
    def missing(cls, reason: str) -> Footprint:
        """Nothing measured, and why."""
        return cls(reason=reason)

    def as_dict(self) -> dict[str, Any]:
        """Plain data for the report's JSON."""
        return asdict(self)


def unavailable(backend: str, platform: str = sys.platform) -> str | None:
    """Why peak memory cannot be measured for ``backend`` here, or None when it can.

    Example:
        >>> unavailable("gpu", "linux")
        'not measured on the gpu backend: host resident memory does not measure device memory'
    """
    if backend != "cpu":
        return (f"not measured on the {backend} backend: host resident memory does not "
                "measure device memory")
    if not platform.startswith("linux"):
        return f"n/a on {platform}: the probe reads Linux's /proc/self/status"
    return None


def command(case: Case, name: str, backend: str, warm: bool = False) -> list[str]:
    """The probe's command line for implementation ``name`` on ``case``."""
    return [sys.executable, "-m", PROBE_MODULE, "--peer", name, "--backend", backend,
            "--case", json.dumps(asdict(case)), *(["--warm"] if warm else [])]


def _root() -> Path:
    """The directory that holds this gpu_tc (its checkout, or site-packages)."""
    return Path(__file__).resolve().parents[2]


def _environment() -> dict[str, str]:
    """This process's environment, with this gpu_tc's checkout first on the import path.

    The probe must measure the code that was timed, even when another gpu_tc is installed
    (it also runs in that directory: ``python -m`` puts its working directory first on
    the import path, and another checkout there would be measured instead).
    """
    env = dict(os.environ)
    root = str(_root())
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return env


def measure(case: Case, name: str, backend: str, timeout: float = PROBE_TIMEOUT,
            warm: bool = False) -> Footprint:
    """Probe implementation ``name`` (gpu_tc or a peer of ``PEERS``) on ``case``.

    Never raises for a failing probe: a crash, a timeout or an unreadable answer comes
    back as a :class:`Footprint` with its ``reason``.

    Args:
        case: The case, exactly as timed (its operands are made again from its seed).
        name: "gpu_tc" or a peer's name.
        backend: "cpu" (measured) or "gpu" (not measured, with the reason).
        timeout: Seconds before the probe is stopped.
        warm: Call a few times before the baseline (see memory_probe.probe): what the
            calls of a process that already ran the case add, without its one-time costs.
    """
    why = unavailable(backend)
    if why is not None:
        return Footprint.missing(why)
    try:
        done = subprocess.run(command(case, name, backend, warm), capture_output=True, text=True,
                              timeout=timeout, env=_environment(), cwd=_root(),
                              check=False)
    except subprocess.TimeoutExpired:
        return Footprint.missing(f"probe timed out after {timeout:g} s")
    except OSError as err:
        return Footprint.missing(f"probe could not start: {err}")
    return parse(done.stdout, done.stderr, done.returncode)


def parse(stdout: str, stderr: str, returncode: int) -> Footprint:
    """The probe's answer from its output (a reason when there is none).

    Example:
        >>> parse('gpu-tc-memory: {"peak_extra_bytes": 8}', "", 0).peak_extra_bytes
        8
        >>> parse("", "Traceback ...\\nMemoryError", 1).reason
        'probe failed (exit status 1): MemoryError'
    """
    answers = [line[len(PREFIX):] for line in stdout.splitlines() if line.startswith(PREFIX)]
    if returncode == 0 and answers:
        try:
            return Footprint(**json.loads(answers[-1]))
        except (ValueError, TypeError) as err:
            return Footprint.missing(f"probe answered something unreadable: {err}")
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    text = f"probe failed (exit status {returncode})" + (f": {last}" if last else "")
    return Footprint.missing(text if len(text) <= 300 else text[:297] + "...")


def mib(value: int | None) -> float | None:
    """Bytes as MiB (None stays None)."""
    return None if value is None else value / MIB


def peak(case: dict[str, Any], name: str) -> int | None:
    """An implementation's peak extra bytes in a report's case (None: not measured)."""
    entry = (case.get("memory") or {}).get(name)
    return None if entry is None else entry.get("peak_extra_bytes")


def least_peer(case: dict[str, Any], peers: Iterable[str]) -> str | None:
    """The peer with the least peak extra memory whose result matched gpu_tc's."""
    measured = {p: b for p in peers if (b := peak(case, p)) is not None
                and not (case["results"].get(p) or {}).get("mismatch")}
    return min(measured, key=measured.__getitem__) if measured else None


def totals(cases: list[dict[str, Any]], names: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each implementation's peak extra bytes summed over the cases it was measured on.

    Example:
        >>> cases = [{"memory": {"a": {"peak_extra_bytes": 2}}},
        ...          {"memory": {"a": {"peak_extra_bytes": 3, "reason": None}}}]
        >>> totals(cases, ["a", "b"])
        {'a': {'total_extra_bytes': 5, 'cases': 2}, 'b': {'total_extra_bytes': None, 'cases': 0}}
    """
    found = {}
    for name in names:
        values = [b for case in cases if (b := peak(case, name)) is not None]
        found[name] = {"total_extra_bytes": sum(values) if values else None,
                       "cases": len(values)}
    return found


def failures(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The probes that were asked for and measured nothing, with their reasons."""
    return [{"case": case["id"], "implementation": name, "reason": entry["reason"]}
            for case in cases for name, entry in (case.get("memory") or {}).items()
            if entry.get("peak_extra_bytes") is None and entry.get("reason")]
