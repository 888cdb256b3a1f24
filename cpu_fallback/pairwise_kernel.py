"""The numba kernel of pairwise row sums (cpu_fallback.sum_layout.RowLayout describes the rows).

Each row's sum follows NumPy's pairwise summation step for step (blocks of up to 128
elements in eight running sums, longer stretches halved at a multiple of 8 and the
halves' sums added), so a row summed whole gives NumPy's bits. A threaded plan cuts
each row into pieces at the first halvings of that recursion, sums the pieces on
numba's threads and adds their sums in the recursion's order: the same bits again.
Imported only when a sum uses it, since it imports numba.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

from . import numba_pool
from .sum_kernel import memory
from .sum_layout import RowLayout

# NumPy's block: stretches of at most this many elements are summed in eight running sums.
BLOCK = 128


def run(source: np.ndarray, destination: np.ndarray, layout: RowLayout,
        pieces: tuple[np.ndarray, np.ndarray], parallel: bool) -> None:
    """Write into ``destination`` the pairwise sum of each row ``layout`` describes of
    ``source``, each row cut into ``pieces`` (starts and lengths: see
    cpu_fallback.sum_layout.cuts); ``parallel`` shares the pieces among numba's threads."""
    src = memory(source, layout.src_base, layout.src_span, writeable=False)
    dst = memory(destination, layout.dst_base, layout.dst_span, writeable=True)
    starts, lengths = pieces
    count = starts.size
    partial = np.empty(layout.row_src.size * count if count > 1 else 0, destination.dtype)
    arguments = (src, dst, layout.row_src, layout.row_dst, starts, lengths, partial,
                 destination.dtype.type(0))
    if parallel:
        numba_pool.launch(compiled(parallel=True), *arguments)
    else:
        compiled(parallel=False)(*arguments)


@functools.cache
def compiled(parallel: bool) -> Callable[..., None]:
    """_rows_threaded (the pieces shared among numba's threads) or _rows."""
    return numba_pool.jit(_rows_threaded if parallel else _rows, parallel)


def _rows(src: Any, dst: Any, row_src: Any, row_dst: Any, starts: Any, lengths: Any,
          partial: Any, zero: Any) -> None:
    """Every piece's sum (:func:`_piece`), one after another, then the rows'."""
    for task in range(row_src.shape[0] * starts.shape[0]):
        _piece(task, src, dst, row_src, row_dst, starts, lengths, partial, zero)
    _combine(dst, row_dst, starts.shape[0], partial)


def _rows_threaded(src: Any, dst: Any, row_src: Any, row_dst: Any, starts: Any,
                   lengths: Any, partial: Any, zero: Any) -> None:
    """Every piece's sum (:func:`_piece`), shared among numba's threads, then the rows'."""
    for task in numba.prange(row_src.shape[0] * starts.shape[0]):
        _piece(task, src, dst, row_src, row_dst, starts, lengths, partial, zero)
    _combine(dst, row_dst, starts.shape[0], partial)


@numba.njit(inline="always")
def _piece(task: int, src: Any, dst: Any, row_src: Any, row_dst: Any, starts: Any,
           lengths: Any, partial: Any, zero: Any) -> None:
    """The sum of piece ``task`` % P of row ``task`` // P (P pieces a row): the row's
    result when P is 1, else partial[task]."""
    count = starts.shape[0]
    row = task // count
    piece = task - row * count
    total = _pairwise(src, row_src[row] + starts[piece], lengths[piece], zero)
    if count == 1:
        dst[row_dst[row]] = total
    else:
        partial[task] = total


@numba.njit(inline="always")
def _combine(dst: Any, row_dst: Any, count: int, partial: Any) -> None:
    """Where rows were cut (``count`` > 1 pieces, a power of two), each row's piece
    sums added pairwise, neighbours first, as the halvings that cut them nest; the
    total written to the row's element."""
    if count == 1:
        return
    for row in range(row_dst.shape[0]):
        base = row * count
        width = count
        while width > 1:
            width //= 2
            for i in range(width):
                partial[base + i] = partial[base + 2 * i] + partial[base + 2 * i + 1]
        dst[row_dst[row]] = partial[base]


@numba.njit(nogil=True)
def _pairwise(src: Any, start: int, n: int, zero: Any) -> Any:
    """The sum of src[start:start + n] by NumPy's pairwise summation: stretches of
    more than BLOCK elements halved at a multiple of 8, each half's sum added. The
    first two levels of halving run here, calls only below them: one call per 128
    elements cost a fifth of the time on two threads."""
    if n <= BLOCK:
        return _block(src, start, n, zero)
    half = _half(n)
    return _halved(src, start, half, zero) + _halved(src, start + half, n - half, zero)


@numba.njit(inline="always")
def _halved(src: Any, start: int, n: int, zero: Any) -> Any:
    """:func:`_pairwise`'s sum of one half: a block, or its own halves' sums, each a
    block or a call."""
    if n <= BLOCK:
        return _block(src, start, n, zero)
    half = _half(n)
    if half <= BLOCK:
        left = _block(src, start, half, zero)
    else:
        left = _pairwise(src, start, half, zero)
    if n - half <= BLOCK:
        right = _block(src, start + half, n - half, zero)
    else:
        right = _pairwise(src, start + half, n - half, zero)
    return left + right


@numba.njit(inline="always")
def _half(n: int) -> int:
    """Where NumPy's pairwise sum cuts n elements: half, less its remainder modulo 8
    (cpu_fallback.sum_layout.cuts cuts rows the same way)."""
    half = n // 2
    return half - half % 8


@numba.njit(inline="always")
def _block(src: Any, start: int, n: int, zero: Any) -> Any:
    """NumPy's sum of a block, src[start:start + n] (n <= BLOCK): under 8 elements one
    running sum; else eight (:func:`_eight_sums`) over the multiple of 8, the rest added
    one by one."""
    if n < 8:
        total = zero
        for i in range(start, start + n):
            total += src[i]
        return total
    end = start + n - n % 8
    total = _eight_sums(src, start, end)  # type: ignore[call-arg]
    for i in range(end, start + n):
        total += src[i]
    return total


@intrinsic
def _eight_sums(typingctx: Any, src: Any, start: Any, end: Any) -> Any:
    """NumPy's block sum of src[start:end] (a multiple of 8 elements, at least 8):
    eight running sums (element i into sum i % 8), then ((s0 + s1) + (s2 + s3)) +
    ((s4 + s5) + (s6 + s7)). The eight sums are one vector register, added a vector
    load at a time: the same additions in the same order, four times fewer
    instructions (numba leaves LLVM's SLP vectoriser off, so written out they ran at
    two thirds of memory speed)."""
    signature = src.dtype(src, numba.types.int64, numba.types.int64)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        array = context.make_array(sig.args[0])(context, builder, args[0])
        first, end = args[1], args[2]
        element = context.get_data_type(sig.args[0].dtype)
        vector = ir.VectorType(element, 8)
        align = context.get_abi_sizeof(element)

        def load(index: Any) -> Any:
            address = builder.gep(array.data, [index])
            return builder.load(builder.bitcast(address, vector.as_pointer()), align=align)

        i64 = ir.IntType(64)
        sums = cgutils.alloca_once_value(builder, load(first))
        step = ir.Constant(i64, 8)
        with cgutils.for_range_slice(builder, builder.add(first, step), end, step) as (index, _):
            builder.store(builder.fadd(builder.load(sums), load(index)), sums)
        lanes = builder.load(sums)
        s = [builder.extract_element(lanes, ir.Constant(ir.IntType(32), j)) for j in range(8)]
        add = builder.fadd
        return add(add(add(s[0], s[1]), add(s[2], s[3])), add(add(s[4], s[5]), add(s[6], s[7])))

    return signature, codegen
