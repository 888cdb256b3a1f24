"""The numba kernel of pairwise row sums (cpu_fallback.sum_layout.RowLayout describes the rows).

Each row's sum follows NumPy's pairwise summation step for step (blocks of up to 128
elements in eight running sums, longer stretches halved at a multiple of 8 and the
halves' sums added), so a row summed whole gives NumPy's bits. A threaded plan cuts
each row into pieces at the first halvings of that recursion, sums the pieces on
numba's threads and adds their sums in the recursion's order: the same bits again.
The recursion itself is flattened at plan time (cpu_fallback.sum_layout.LeafProgram):
the kernel walks a piece's blocks in address order and adds partial sums on a short
stack as the program says. The halving rule so lives in one place, next to the cuts,
and the kernel compiles in 3.9 s instead of the recursive one's 5.0 (both forms,
float64); it sums as fast (a 2^24-element row on one thread: float32 4.7 ms, float64
8.9, the recursive kernel 4.6 and 8.7, NumPy 4.7-5.4 and 8.3-9.3; 2-core Zen 3).
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

from . import numba_pool, openmp
from .sum_kernel import memory
from .sum_layout import LeafProgram, RowLayout

# Partial sums a piece may hold at once: one per level of halving, and one more.
STACK = 64
# Chunks of pieces per thread, each chunk with its own stack.
CHUNKS_PER_THREAD = 4


def run(source: np.ndarray, destination: np.ndarray, layout: RowLayout,
        program: LeafProgram, parallel: bool) -> None:
    """Write into ``destination`` the pairwise sum of each row ``layout`` describes of
    ``source``, each row cut into the pieces whose recursions ``program`` spells out
    (see cpu_fallback.sum_layout.cuts); ``parallel`` shares the pieces among numba's
    threads, except in a forked child (openmp.forked), which sums on its own thread:
    the same bits."""
    src = memory(source, layout.src_base, layout.src_span, writeable=False)
    dst = memory(destination, layout.dst_base, layout.dst_span, writeable=True)
    count = program.offsets.size
    tasks = layout.row_src.size * count
    partial = np.empty(tasks if count > 1 else 0, destination.dtype)
    arguments = (src, dst, layout.row_src, layout.row_dst, program.offsets, program.lengths,
                 program.adds, program.entries, partial, destination.dtype.type(0))
    if parallel and not openmp.forked():
        chunks = min(tasks, CHUNKS_PER_THREAD * numba_pool.threads())
        numba_pool.launch(compiled(parallel=True), *arguments, chunks)
    else:
        compiled(parallel=False)(*arguments, 1)


@functools.cache
def compiled(parallel: bool) -> Callable[..., None]:
    """_rows_threaded (the pieces shared among numba's threads) or _rows."""
    return numba_pool.jit(_rows_threaded if parallel else _rows, parallel)


def _rows(src: Any, dst: Any, row_src: Any, row_dst: Any, offsets: Any, lengths: Any,
          adds: Any, entries: Any, partial: Any, zero: Any, chunks: int) -> None:
    """Every piece's sum (:func:`_pieces`), one after another, then the rows'."""
    for chunk in range(chunks):
        _pieces(chunk, chunks, src, dst, row_src, row_dst, offsets, lengths, adds, entries,
                partial, zero)
    _combine(dst, row_dst, offsets.shape[0], partial)


def _rows_threaded(src: Any, dst: Any, row_src: Any, row_dst: Any, offsets: Any,
                   lengths: Any, adds: Any, entries: Any, partial: Any, zero: Any,
                   chunks: int) -> None:
    """Every piece's sum (:func:`_pieces`), the chunks shared among numba's threads,
    then the rows'."""
    for chunk in numba.prange(chunks):
        _pieces(chunk, chunks, src, dst, row_src, row_dst, offsets, lengths, adds, entries,
                partial, zero)
    _combine(dst, row_dst, offsets.shape[0], partial)


@numba.njit(inline="always")
def _pieces(chunk: int, chunks: int, src: Any, dst: Any, row_src: Any, row_dst: Any,
            offsets: Any, lengths: Any, adds: Any, entries: Any, partial: Any,
            zero: Any) -> None:
    """The sums of chunk ``chunk`` of ``chunks`` of the pieces (piece ``task`` % P of
    row ``task`` // P, P pieces a row): each the row's result when P is 1, else
    partial[task]."""
    count = offsets.shape[0]
    tasks = row_src.shape[0] * count
    stack = np.full(STACK, zero)
    for task in range(chunk * tasks // chunks, (chunk + 1) * tasks // chunks):
        row = task // count
        piece = task - row * count
        total = _piece_sum(src, row_src[row] + offsets[piece], lengths, adds,
                           entries[piece], entries[piece + 1], stack, zero)
        if count == 1:
            dst[row_dst[row]] = total
        else:
            partial[task] = total


@numba.njit(inline="always")
def _piece_sum(src: Any, start: int, lengths: Any, adds: Any, first: int, end: int,
               stack: Any, zero: Any) -> Any:
    """NumPy's pairwise sum of the piece at ``start`` whose blocks are program entries
    ``first`` to ``end`` - 1: each block's sum pushed, then the additions that follow it
    (top of the stack into the one below)."""
    top = 0
    offset = start
    for entry in range(first, end):
        n = lengths[entry]
        stack[top] = _block(src, offset, n, zero)
        offset += n
        for _ in range(adds[entry]):
            top -= 1
            stack[top] = stack[top] + stack[top + 1]
        top += 1
    return stack[0]


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


@numba.njit(inline="always")
def _block(src: Any, start: int, n: int, zero: Any) -> Any:
    """NumPy's sum of a block, src[start:start + n] (n <= 128): under 8 elements one
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
