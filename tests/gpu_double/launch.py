"""Run a command in a process whose ``cupy``, ``cupy_backends`` and ``nvmath`` are the
gpu_double emulation (a test double, never a GPU).

Example (from the repository root):
    python tests/gpu_double/launch.py --strict -- python -m pytest -m gpu -q
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
SITE = PACKAGE / "site"


def environment(strict: bool = False, missing: Sequence[str] = (), refuse: Sequence[str] = (),
                base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of an emulated process: the shadow packages first on its path.

    Args:
        strict: Only what cutensor.h documents, and descC must be descD.
        missing: Libraries that fail to load ("cutensor", "cublas").
        refuse: "kind:OPERATOR" pairs cuTENSOR answers NOT_SUPPORTED.
        base: The environment to extend (default: this process's).
    """
    env = dict(os.environ if base is None else base)
    path = [str(SITE), str(PACKAGE.parent)]
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(path)
    env["GPU_DOUBLE_STRICT"] = "1" if strict else ""
    env["GPU_DOUBLE_MISSING"] = ",".join(missing)
    env["GPU_DOUBLE_REFUSE"] = ",".join(refuse)
    return env


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strict", action="store_true", help="only what cutensor.h documents")
    parser.add_argument("--missing", action="append", default=[], help="library that fails to load")
    parser.add_argument("--refuse", action="append", default=[], help="kind:OPERATOR refused")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    env = environment(args.strict, args.missing, args.refuse)
    return subprocess.run(command or [sys.executable], env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
