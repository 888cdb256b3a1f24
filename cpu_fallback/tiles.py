"""The numba kernels of cpu_fallback.blocked: a tiled copy of words between two buffers.

Imported only by ``cpu_fallback.blocked`` on the first copy that needs it, since it
imports numba. :func:`copy` runs a TileLayout: it views both arrays' memory as words,
builds the kernel's offset tables and calls a kernel, which :func:`compiled` compiles
or loads from numba's on-disk cache (next to this file, or in the user's cache
directory, ~/.cache/numba, where this one is read-only). Each kernel is compiled once
per word type it meets (uint8, uint16, uint32, uint64).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from llvmlite import binding, ir
from numba.core import cgutils
from numba.extending import intrinsic

from . import numba_pool
from .tile_layout import Axis, TileLayout

# Runs this long (in words) are copied straight from source to destination: the buffer
# only pays for short runs.
_DIRECT_WORDS = 16
# LLVM 15 made pointers opaque, which renamed the overloaded prefetch intrinsic.
_PREFETCH = "llvm.prefetch.p0" if binding.llvm_version_info >= (15,) else "llvm.prefetch.p0i8"


def copy(layout: TileLayout, source: np.ndarray, destination: np.ndarray, chunks: int) -> None:
    """Run the copy ``layout`` describes; ``chunks`` > 0 shares its tiles among numba's
    threads in that many chunks, 0 runs it on the calling thread."""
    arguments = (
        _words(source, layout.word, layout.src_base, layout.src_span, writeable=False),
        _words(destination, layout.word, layout.dst_base, layout.dst_span, writeable=True),
        *_tables(layout),
        *_geometry(layout),
    )
    if chunks:
        numba_pool.launch(compiled(parallel=True), *arguments, chunks)
    else:
        compiled(parallel=False)(*arguments)


@functools.cache
def compiled(parallel: bool) -> Callable[..., None]:
    """copy_tiles_parallel (the tiles shared among numba's threads) or copy_tiles."""
    return numba_pool.jit(copy_tiles_parallel if parallel else copy_tiles, parallel)


_TYPESTR = {word: np.dtype(word).str for word in ("u1", "u2", "u4", "u8")}


class _Memory:
    """A NumPy array interface for a span of words, holding the array it lies under."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, owner: np.ndarray, address: int, span: int, word: str, writeable: bool):
        self.owner = owner
        self.__array_interface__ = {
            "data": (address, not writeable),
            "shape": (span,),
            "typestr": _TYPESTR[word],
            "version": 3,
        }


def _words(array: np.ndarray, word: str, base: int, span: int, *, writeable: bool) -> np.ndarray:
    """The memory under ``array`` as a 1-D array of ``span`` words from its lowest address
    (``base`` words before its element 0)."""
    address = array.__array_interface__["data"][0] - base * np.dtype(word).itemsize
    return np.asarray(_Memory(array, address, span, word, writeable))


@functools.lru_cache(maxsize=256)
def _tables(layout: TileLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernel's arrays: the outer axes (extent, source stride, destination stride);
    each row's offset in the source; each column's offset in the destination."""
    outer = np.array([(a.extent, a.src, a.dst) for a in layout.outer], np.int64).reshape(-1, 3)
    row_src = _offsets(layout.rows, lambda a: a.src)
    col_dst = _offsets(layout.cols, lambda a: a.dst)
    for table in (outer, row_src, col_dst):
        table.flags.writeable = False
    return outer, row_src, col_dst


def _offsets(group: tuple[Axis, ...], stride: Callable[[Axis], int]) -> np.ndarray:
    """The offset of each index of a group of axes (fastest first), by ``stride``."""
    offsets = np.zeros(1, np.int64)
    for axis in group:  # each new axis is slower: it varies across the previous block
        offsets = (np.arange(axis.extent, dtype=np.int64)[:, None] * stride(axis) + offsets).ravel()
    return offsets


def _geometry(layout: TileLayout) -> tuple[int, ...]:
    """The kernel's scalar arguments, in its order."""
    run = layout.run
    return (
        layout.src_start,
        layout.n_rows, layout.rows[0].dst, layout.n_cols, layout.cols[0].src,
        run.extent, run.src, run.dst, layout.tile_rows, layout.tile_cols,
    )  # fmt: skip


def _prefetch_codegen(write: int) -> Callable[..., Any]:
    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        array_type, index_type = sig.args
        array = context.make_array(array_type)(context, builder, args[0])
        i64 = ir.IntType(64)
        itemsize = context.get_abi_sizeof(context.get_data_type(array_type.dtype))
        index = context.cast(builder, args[1], index_type, numba.types.int64)
        address = builder.add(
            builder.ptrtoint(array.data, i64), builder.mul(index, ir.Constant(i64, itemsize))
        )
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), _PREFETCH
        )
        # (address, read 0 / write 1, locality 3: keep in all levels, data cache)
        builder.call(
            fn, [builder.inttoptr(address, i8p), *(ir.Constant(i32, v) for v in (write, 3, 1))]
        )
        return context.get_dummy_value()

    return codegen


@intrinsic
def _prefetch_read(typingctx: Any, array: Any, index: Any) -> Any:
    """Start loading the cache line of array[index]; never faults, even out of range."""
    return numba.types.none(array, index), _prefetch_codegen(0)


@intrinsic
def _prefetch_write(typingctx: Any, array: Any, index: Any) -> Any:
    """Start fetching the cache line of array[index] for writing (prefetchw)."""
    return numba.types.none(array, index), _prefetch_codegen(1)


def copy_tiles(
    src: Any, dst: Any, outer: Any, row_src: Any, col_dst: Any, src_off: int,
    nr: int, dr: int, nc: int, sc: int, ev: int, sv: int, dv: int, tr: int, tc: int,
) -> None:  # fmt: skip
    """dst[...] = src[...] over word buffers, tile by tile, on the calling thread.

    Element (r, c, v) of the copy, for r < ``nr`` rows, c < ``nc`` columns and v < ``ev``
    words of a run, lies at ``row_src[r] + c * sc + v * sv`` words into the source and
    at ``r * dr + col_dst[c] + v * dv`` words into the destination, shifted by the
    outer axes (the rows of ``outer``: extent, source stride, destination stride,
    outermost first) and, in the source, by ``src_off``. Tiles are ``tr`` rows by
    ``tc`` columns (see cpu_fallback.tile_layout.TileLayout).
    """
    jobs = _jobs(outer, nr, nc, tr, tc)
    _copy_jobs(
        src, dst, outer, row_src, col_dst, src_off, nr, dr, nc, sc, ev, sv, dv, tr, tc, 0, jobs
    )


def copy_tiles_parallel(
    src: Any, dst: Any, outer: Any, row_src: Any, col_dst: Any, src_off: int,
    nr: int, dr: int, nc: int, sc: int, ev: int, sv: int, dv: int, tr: int, tc: int,
    chunks: int,
) -> None:  # fmt: skip
    """copy_tiles with the tiles dealt in order to ``chunks`` chunks, run by numba's
    threads (a few chunks per thread even out their speeds)."""
    jobs = _jobs(outer, nr, nc, tr, tc)
    chunks = min(chunks, jobs)
    for chunk in numba.prange(chunks):
        _copy_jobs(
            src, dst, outer, row_src, col_dst, src_off, nr, dr, nc, sc, ev, sv, dv, tr, tc,
            chunk * jobs // chunks, (chunk + 1) * jobs // chunks,
        )  # fmt: skip


@numba.njit(inline="always")
def _jobs(outer: Any, nr: int, nc: int, tr: int, tc: int) -> int:
    """How many tiles the copy has."""
    jobs = ((nr + tr - 1) // tr) * ((nc + tc - 1) // tc)
    for k in range(outer.shape[0]):
        jobs *= outer[k, 0]
    return jobs


@numba.njit(inline="always")
def _copy_jobs(
    src: Any, dst: Any, outer: Any, row_src: Any, col_dst: Any, src_off: int,
    nr: int, dr: int, nc: int, sc: int, ev: int, sv: int, dv: int, tr: int, tc: int,
    first: int, last: int,
) -> None:  # fmt: skip
    """Copy tiles ``first`` to ``last`` - 1 (the destination's rows advance fastest).

    Each tile is read row by row into a buffer (in L1), then written column by column;
    while it is copied, the lines of the next tile are prefetched. An odometer steps
    from tile to tile. Indices are cast to unsigned so that numba skips its
    negative-index wraparound: every index is in range by construction.
    """
    nbr = (nr + tr - 1) // tr
    nbc = (nc + tc - 1) // tc
    n_outer = outer.shape[0]
    line = max(1, 64 // src.itemsize)
    width = tc * ev
    buf = np.empty(tr * width, src.dtype)
    # The odometer: tile (br, bc) at the outer position idx, which starts at (so0, do0).
    idx = np.empty(n_outer, np.int64)
    br = first % nbr
    rest = first // nbr
    bc = rest % nbc
    rest = rest // nbc
    so0 = src_off
    do0 = 0
    for k in range(n_outer - 1, -1, -1):
        idx[k] = rest % outer[k, 0]
        rest = rest // outer[k, 0]
        so0 += idx[k] * outer[k, 1]
        do0 += idx[k] * outer[k, 2]
    fast = sv == 1 and dv == 1 and sc == ev and dr == ev
    for job in range(first, last):
        r0 = br * tr
        c0 = bc * tc
        so = so0
        do = do0
        mr = min(tr, nr - r0)
        mc = min(tc, nc - c0)
        br += 1  # the next tile along the destination's rows first
        if br == nbr:
            br = 0
            bc += 1
            if bc == nbc:
                bc = 0
                k = n_outer - 1
                while k >= 0:
                    idx[k] += 1
                    so0 += outer[k, 1]
                    do0 += outer[k, 2]
                    if idx[k] < outer[k, 0]:
                        break
                    idx[k] = 0
                    so0 -= outer[k, 0] * outer[k, 1]
                    do0 -= outer[k, 0] * outer[k, 2]
                    k -= 1
        if fast and ev >= _DIRECT_WORDS:
            # Long runs: each is a contiguous copy already, no buffer needed.
            for i in range(mr):
                for j in range(mc):
                    s = so + row_src[r0 + i] + (c0 + j) * ev
                    d = do + (r0 + i) * ev + col_dst[c0 + j]
                    for v in range(ev):
                        dst[np.uint64(d + v)] = src[np.uint64(s + v)]
        elif fast:
            # The common case: rows contiguous in the destination and columns in the
            # source, runs included. Prefetch the next tile (none after the last).
            nr0 = br * tr
            nc0 = bc * tc
            pr = min(tr, nr - nr0) if job + 1 < last else 0
            pc = min(tc, nc - nc0) if job + 1 < last else 0
            for i in range(mr):
                row = so + row_src[r0 + i] + c0 * ev
                if i < pr:
                    nxt = so0 + row_src[nr0 + i] + nc0 * ev
                    for x in range(0, pc * ev, line):
                        _prefetch_read(src, nxt + x)  # type: ignore[call-arg]
                for x in range(mc * ev):
                    buf[np.uint64(i * width + x)] = src[np.uint64(row + x)]
            for j in range(mc):
                row = do + col_dst[c0 + j] + r0 * ev
                if j < pc:
                    nxt = do0 + col_dst[nc0 + j] + nr0 * ev
                    for x in range(0, pr * ev, line):
                        _prefetch_write(dst, nxt + x)  # type: ignore[call-arg]
                if ev == 1:
                    for i in range(mr):
                        dst[np.uint64(row + i)] = buf[np.uint64(i * width + j)]
                elif ev == 2:
                    for i in range(mr):
                        b = i * width + 2 * j
                        dst[np.uint64(row + 2 * i)] = buf[np.uint64(b)]
                        dst[np.uint64(row + 2 * i + 1)] = buf[np.uint64(b + 1)]
                else:
                    for i in range(mr):
                        b = i * width + j * ev
                        for v in range(ev):
                            dst[np.uint64(row + i * ev + v)] = buf[np.uint64(b + v)]
        else:
            for i in range(mr):
                for j in range(mc):
                    s = so + row_src[r0 + i] + (c0 + j) * sc
                    b = i * width + j * ev
                    for v in range(ev):
                        buf[np.uint64(b + v)] = src[np.uint64(s + v * sv)]
            for j in range(mc):
                for i in range(mr):
                    d = do + (r0 + i) * dr + col_dst[c0 + j]
                    b = i * width + j * ev
                    for v in range(ev):
                        dst[np.uint64(d + v * dv)] = buf[np.uint64(b + v)]
