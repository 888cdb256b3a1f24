"""The benchmark suites: their cases, the work each case does, and quick (shrunk) sizes.

Suites:
    tccg: the 48 TCCG contractions (``tccg.json``; ``expr_rowmajor`` on C-ordered
        arrays, ``sizes`` for float64 and ``sizes_float32_variant`` for float32), GFLOP/s.
    overhead: warm per-call time of tiny einsums (microseconds per call).
    permute: out-of-place permutations, GB/s (bytes read + written).
    trace: traces and partial traces, GB/s of the elements read + written.
    reduce: sums over some labels, GB/s.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np

from ..expression import expand, parse

SUITES = ("tccg", "overhead", "permute", "trace", "reduce")
DTYPES = ("float32", "float64", "complex64", "complex128")

# Quick mode shrinks every extent by one factor until the work fits under these.
QUICK_FLOPS = 2e7
QUICK_ELEMENTS = 1 << 15


@dataclass(frozen=True)
class Metric:
    """How a suite's time per call is shown.

    Attributes:
        unit: "GFLOP/s", "GB/s" or "us/call".
        higher_is_better: False for times.
    """

    unit: str
    higher_is_better: bool

    def value(self, seconds: float, work: float) -> float:
        """The shown number for one call of ``seconds`` doing ``work`` (FLOPs or bytes)."""
        if self.unit == "us/call":
            return seconds * 1e6
        return work / seconds / 1e9


GFLOPS = Metric("GFLOP/s", True)
GBPS = Metric("GB/s", True)
MICROSECONDS = Metric("us/call", False)


@dataclass(frozen=True)
class Case:
    """One benchmark case.

    Attributes:
        suite: The suite's name.
        id: 1-based, stable within the suite.
        name: A short name (TCCG's ``C-A-B`` name for tccg).
        kind: "einsum", "permute", "trace" or "reduce": what the peers are asked to do.
        expr: The einsum expression every implementation evaluates.
        sizes: Extent of each label.
        dtype: NumPy dtype name.
        work: FLOPs (real arithmetic) or bytes moved per call.
    """

    suite: str
    id: int
    name: str
    kind: str
    expr: str
    sizes: dict[str, int] = field(hash=False)
    dtype: str
    work: float

    @property
    def terms(self) -> list[str]:
        """The operands' labels."""
        return self.expr.split("->")[0].split(",")

    @property
    def output(self) -> str:
        """The output's labels."""
        return self.expr.split("->")[1]

    @property
    def shapes(self) -> list[tuple[int, ...]]:
        """The operands' shapes."""
        return [tuple(self.sizes[x] for x in term) for term in self.terms]

    def footprint(self, outputs: int = 1) -> int:
        """Bytes of the operands and of ``outputs`` outputs."""
        output = math.prod(self.sizes[x] for x in self.output)
        elements = sum(math.prod(shape) for shape in self.shapes) + outputs * output
        return np.dtype(self.dtype).itemsize * elements

    def operands(self, seed: int = 0) -> list[np.ndarray]:
        """C-ordered random host operands in [-1, 1) (complex: both parts)."""
        rng = np.random.default_rng(seed + self.id)
        dtype = np.dtype(self.dtype)
        arrays = []
        for shape in self.shapes:
            x = rng.uniform(-1, 1, shape)
            if dtype.kind == "c":
                x = x + 1j * rng.uniform(-1, 1, shape)
            arrays.append(x.astype(dtype))
        return arrays


# What the peers are asked to do in each suite.
KINDS = {"tccg": "einsum", "overhead": "einsum", "permute": "permute", "trace": "trace",
         "reduce": "reduce"}


def metric(suite: str) -> Metric:
    """The metric a suite reports."""
    return {"tccg": GFLOPS, "overhead": MICROSECONDS}.get(suite, GBPS)


@lru_cache(maxsize=1)
def tccg_table() -> list[dict[str, Any]]:
    """The 48 TCCG entries as stored in the package's copy of ``tccg.json``."""
    text = resources.files("gpu_tc.bench").joinpath("tccg.json").read_text(encoding="utf-8")
    return json.loads(text)


def _einsum_flops(expr: str, sizes: dict[str, int], dtype: str) -> float:
    """2 * product of all distinct extents (x4 for complex: one complex FMA = 8 real ops)."""
    labels = set(expr.replace(",", "").replace("->", ""))
    flops = 2.0 * math.prod(sizes[x] for x in labels)
    return flops * 4 if np.dtype(dtype).kind == "c" else flops


def shrink(sizes: dict[str, int], limit: float, measure: Any) -> dict[str, int]:
    """Scale every extent by one factor (each at least 2) until ``measure(sizes) <= limit``."""
    current = dict(sizes)
    factor = 1.0
    while measure(current) > limit and any(n > 2 for n in current.values()):
        factor *= 0.9
        current = {x: max(2, round(n * factor)) for x, n in sizes.items()}
    return current


def scaled(sizes: dict[str, int], factor: float) -> dict[str, int]:
    """Every extent times ``factor``, rounded half up, at least 1.

    Example:
        >>> scaled({"a": 5, "b": 1, "c": 48}, 0.5)
        {'a': 3, 'b': 1, 'c': 24}
    """
    return {x: max(1, math.floor(n * factor + 0.5)) for x, n in sizes.items()}


def tccg_cases(
    dtype: str, quick: bool = False, flops_limit: float = QUICK_FLOPS, scale: float = 1.0
) -> list[Case]:
    """The TCCG suite in ``dtype``, every extent times ``scale``.

    ``quick`` then shrinks each case to ``flops_limit`` FLOPs.
    """
    cases = []
    for entry in tccg_table():
        expr = entry["expr_rowmajor"]
        sizes = entry["sizes_float32_variant" if dtype in ("float32", "complex64") else "sizes"]
        if scale != 1.0:
            sizes = scaled(sizes, scale)
        if quick:
            sizes = shrink(sizes, flops_limit, lambda s, e=expr: _einsum_flops(e, s, dtype))
        cases.append(
            Case("tccg", entry["id"], entry["tccg"], "einsum", expr, dict(sizes), dtype,
                 _einsum_flops(expr, sizes, dtype))
        )
    return cases


# (name, expression, sizes): tiny problems where per-call overhead dominates.
_OVERHEAD = (
    ("4x4 matmul", "ij,jk->ik", {"i": 4, "j": 4, "k": 4}),
    ("dot 8", "i,i->", {"i": 8}),
    ("4^3 x 4^2", "ijk,kl->ijl", {"i": 4, "j": 4, "k": 4, "l": 4}),
    ("3 x 4x4 chain", "ij,jk,kl->il", {"i": 4, "j": 4, "k": 4, "l": 4}),
    ("trace 4x4", "ii->", {"i": 4}),
    ("batched 2x4x4", "bij,bjk->bik", {"b": 2, "i": 4, "j": 4, "k": 4}),
    ("4^4 tensor", "abcd,dbea->ec", {x: 4 for x in "abcde"}),
)

_PERMUTE = (
    ("64^4 reverse", "abcd->dcba", {x: 64 for x in "abcd"}),
    ("64^4 swap middle", "abcd->acbd", {x: 64 for x in "abcd"}),
    ("64^4 swap pairs", "abcd->badc", {x: 64 for x in "abcd"}),
    ("4096^2 transpose", "ab->ba", {"a": 4096, "b": 4096}),
    ("16^6 reverse", "abcdef->fedcba", {x: 16 for x in "abcdef"}),
    ("256^3 rotate", "abc->cab", {x: 256 for x in "abc"}),
)

_TRACE = (
    ("4096^2 trace", "ii->", {"i": 4096}),
    ("batched 4096 x 64^2", "bii->b", {"b": 4096, "i": 64}),
    ("64^4 partial trace", "ijkj->ik", {x: 64 for x in "ijk"}),
    ("64^4 double trace", "iijj->", {"i": 64, "j": 64}),
)

_REDUCE = (
    ("64^4 sum middle", "abcd->ad", {x: 64 for x in "abcd"}),
    ("64^4 sum trailing", "abcd->a", {x: 64 for x in "abcd"}),
    ("64^4 sum leading", "abcd->d", {x: 64 for x in "abcd"}),
    ("4096^2 sum all", "ab->", {"a": 4096, "b": 4096}),
)


def _moved_bytes(expr: str, sizes: dict[str, int], dtype: str) -> float:
    """Bytes of the elements each operand reads (diagonals count once) plus the output."""
    itemsize = np.dtype(dtype).itemsize
    expression = expand(parse(expr), tuple(len(t) for t in expr.split("->")[0].split(",")))
    read = sum(math.prod(sizes[x] for x in set(term)) for term in expression.terms)
    written = math.prod(sizes[x] for x in expression.output)
    return float((read + written) * itemsize)


def _table_cases(
    suite: str, kind: str, table: tuple, dtype: str, quick: bool, work: Any
) -> list[Case]:
    cases = []
    for index, (name, expr, sizes) in enumerate(table, start=1):
        if quick:
            sizes = shrink(sizes, QUICK_ELEMENTS, lambda s, e=expr: _largest_operand(e, s))
        work_done = work(expr, sizes, dtype)
        cases.append(Case(suite, index, name, kind, expr, dict(sizes), dtype, work_done))
    return cases


def _largest_operand(expr: str, sizes: dict[str, int]) -> int:
    terms = expr.replace("->", ",").split(",")
    return max(math.prod(sizes[x] for x in term) for term in terms)


def cases(suite: str, dtype: str, quick: bool = False, scale: float = 1.0) -> list[Case]:
    """Every case of ``suite`` in ``dtype`` (shrunk when ``quick``).

    Args:
        suite: One of :data:`SUITES`.
        dtype: One of :data:`DTYPES`.
        quick: Shrink every case to a smoke test's size.
        scale: Every extent times this (tccg only; 0.5: half extents).

    Raises:
        ValueError: an unknown suite, or a ``scale`` other than 1 outside tccg.

    Example:
        >>> [c.expr for c in cases("overhead", "float64")][:2]
        ['ij,jk->ik', 'i,i->']
    """
    if suite == "tccg":
        return tccg_cases(dtype, quick, scale=scale)
    if scale != 1.0:
        raise ValueError(f"scale applies to the tccg suite only, not to {suite!r}")
    if suite == "overhead":
        return _table_cases(suite, KINDS[suite], _OVERHEAD, dtype, False, _einsum_flops)
    tables = {"permute": _PERMUTE, "trace": _TRACE, "reduce": _REDUCE}
    if suite not in tables:
        raise ValueError(f"unknown suite {suite!r}; the suites are {', '.join(SUITES)}")
    return _table_cases(suite, KINDS[suite], tables[suite], dtype, quick, _moved_bytes)
