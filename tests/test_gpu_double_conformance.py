"""The gpu_double emulation held to the real libraries, so it cannot drift from them.

The real ``nvmath.bindings.cutensor`` and ``cupy`` import without a GPU or a driver (the
test extra installs them); CuPy's cuBLAS bindings do not (they load libcublas), so their
signatures are read from the compiled module, where Cython keeps each docstring.
Checked: every emulated function's name, C signature and parameter names; every
enum's name -> value map; and every library call gpu_tc/cuda makes (found in its
source) exists, alike, in the real library and in the emulation.
"""

from __future__ import annotations

import ast
import enum
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any

import pytest
from gpu_double import cublas as emulated_cublas
from gpu_double import cutensor as emulated_cutensor
from gpu_double.launch import SITE
from gpu_double.signatures import declared

from gpu_tc.cuda.descriptors import COMPUTE_DESCRIPTORS

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "gpu_tc" / "cuda").glob("*.py"))
LIBRARIES = ("cupy", "cupy_backends", "nvmath")
CUBLAS = "cupy_backends.cuda.libs.cublas"
# Names gpu_tc builds at run time (getattr), which no source scan can see.
DYNAMIC = [f"nvmath.bindings.cutensor.ComputeDesc.{n}" for n in COMPUTE_DESCRIPTORS.values()] + [
    f"{CUBLAS}.{p}{call}" for p in "sdcz" for call in ("gemm", "gemmStridedBatched")
]


@pytest.fixture(scope="module")
def real_cutensor() -> Any:
    return importlib.import_module("nvmath.bindings.cutensor")


@pytest.fixture(scope="module")
def real_cublas_text() -> bytes:
    """The compiled cuBLAS bindings of the installed CuPy (not importable without CUDA)."""
    origin = importlib.util.find_spec("cupy_backends").submodule_search_locations[0]
    (library,) = (Path(origin) / "cuda" / "libs").glob("cublas.*so")
    return library.read_bytes()


@pytest.fixture(scope="module")
def emulated_cupy() -> Any:
    """The shadow ``cupy`` package, loaded under another name beside the real CuPy."""
    name = "gpu_double_shadow_cupy"
    spec = importlib.util.spec_from_file_location(
        name, SITE / "cupy" / "__init__.py", submodule_search_locations=[str(SITE / "cupy")]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _parameters(function: Any) -> list[str]:
    """Parameter names, from the signature or, for compiled code, the docstring's first line."""
    try:
        return [n for n in inspect.signature(function).parameters if n != "self"]
    except (TypeError, ValueError):
        line = function.__doc__.splitlines()[0]
        inside = line[line.index("(") + 1 : line.index(")")]
        names = [part.split("=")[0].split()[-1].lstrip("\\*") for part in inside.split(",")
                 if part.strip()]
        return [name for name in names if name.isidentifier() and name != "self"]


def test_every_emulated_cutensor_function_is_the_real_binding(real_cutensor):
    functions = declared(emulated_cutensor)
    assert len(functions) >= 25
    for name, signature in functions.items():
        real = getattr(real_cutensor, name, None)
        assert real is not None, f"nvmath.bindings.cutensor has no {name}"
        assert real.__doc__.splitlines()[0] == signature, name
        emulated = list(inspect.signature(getattr(emulated_cutensor, name)).parameters)
        assert emulated == list(inspect.signature(real).parameters), name


def test_every_emulated_enum_has_the_real_names_and_values(real_cutensor):
    enums = {n: e for n, e in vars(emulated_cutensor).items()
             if isinstance(e, type) and issubclass(e, enum.IntEnum)}
    assert len(enums) == 10
    for name, emulated in enums.items():
        real = getattr(real_cutensor, name)
        assert {m.name: int(m) for m in emulated} == {m.name: int(m) for m in real}, name


def test_compute_descriptors_errors_and_attribute_types_match(real_cutensor):
    names = {n for n in dir(real_cutensor.ComputeDesc) if n.startswith("COMPUTE_")}
    assert names == {n for n in dir(emulated_cutensor.ComputeDesc) if n.startswith("COMPUTE_")}
    real_error = real_cutensor.cuTENSORError(15)
    emulated_error = emulated_cutensor.cuTENSORError(15)
    assert real_error.status == emulated_error.status == 15
    assert str(real_error) == str(emulated_error)
    for getter, attributes in [
        ("get_operation_descriptor_attribute_dtype", real_cutensor.OperationDescriptorAttribute),
        ("get_plan_preference_attribute_dtype", real_cutensor.PlanPreferenceAttribute),
        ("get_plan_attribute_dtype", real_cutensor.PlanAttribute),
    ]:
        for attribute in attributes:
            real = getattr(real_cutensor, getter)(attribute)
            assert getattr(emulated_cutensor, getter)(int(attribute)) is real, (getter, attribute)


def test_every_emulated_cublas_function_is_cupys(real_cublas_text):
    functions = declared(emulated_cublas)
    assert len(functions) == 15
    for signature in functions.values():
        assert signature.encode() in real_cublas_text, f"CuPy's cuBLAS has no {signature}"
    for constant in ("CUBLAS_OP_N", "CUBLAS_OP_T", "CUBLAS_POINTER_MODE_HOST", "CUBLASError"):
        assert constant.encode() in real_cublas_text


class _Calls(ast.NodeVisitor):
    """Dotted names of library attributes a module uses, through its import aliases."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        self.found: set[str] = set()
        self._inner: set[int] = set()

    def visit_Import(self, node: ast.Import) -> None:  # noqa: N802 - ast's name
        for alias in node.names:
            if alias.name.split(".")[0] in LIBRARIES:
                self.aliases[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:  # noqa: N802
        if node.module and node.module.split(".")[0] in LIBRARIES:
            for alias in node.names:
                path = f"{node.module}.{alias.name}"
                self.aliases[alias.asname or alias.name] = path
                self.found.add(path)

    def visit_Attribute(self, node: ast.Attribute) -> None:  # noqa: N802
        if id(node) not in self._inner:
            parts, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                self._inner.add(id(value))
                parts.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in self.aliases:
                self.found.add(".".join([self.aliases[value.id], *reversed(parts)]))
        self.generic_visit(node)


def _calls() -> list[str]:
    found: set[str] = set(DYNAMIC)
    for source in SOURCES:
        visitor = _Calls()
        visitor.visit(ast.parse(source.read_text()))
        found |= visitor.found
    return sorted(found)


def _resolve(path: str, roots: dict[str, Any]) -> Any:
    """The object at dotted ``path``, its leading module taken from ``roots``."""
    for prefix in sorted(roots, key=len, reverse=True):
        if path == prefix or path.startswith(prefix + "."):
            value = roots[prefix]
            for part in path[len(prefix) + 1 :].split(".") if path != prefix else []:
                value = getattr(value, part)
            return value
    raise AssertionError(f"no root for {path}")


def test_every_library_call_gpu_tc_makes_is_real_and_emulated(real_cutensor, emulated_cupy):
    calls = _calls()
    assert "cupy.cuda.runtime.getDevice" in calls and "nvmath.bindings.cutensor.contract" in calls
    real_roots = {"cupy": importlib.import_module("cupy"),
                  "nvmath.bindings.cutensor": real_cutensor}
    emulated_roots = {"cupy": emulated_cupy, "nvmath.bindings.cutensor": emulated_cutensor,
                      CUBLAS: emulated_cublas}
    for path in calls:
        emulated = _resolve(path, emulated_roots)
        if path.startswith(CUBLAS):  # signatures compared above, from the compiled module
            continue
        real = _resolve(path, real_roots)
        if inspect.isclass(real) or not callable(real):
            continue
        assert _parameters(emulated) == _parameters(real), path


def test_the_emulated_ndarray_and_memory_pointer_are_cupys(emulated_cupy):
    real_cupy = importlib.import_module("cupy")
    for emulated, real in [(emulated_cupy.ndarray, real_cupy.ndarray),
                           (emulated_cupy.cuda.MemoryPointer, real_cupy.cuda.MemoryPointer)]:
        names = [n for n in vars(emulated) if not n.startswith("_")]
        assert len(names) >= 4
        for name in names:
            assert hasattr(real, name), f"{real.__name__} has no {name}"
            mine = inspect.getattr_static(emulated, name)
            if inspect.isfunction(mine):
                assert _parameters(mine) == _parameters(getattr(real, name)), name
