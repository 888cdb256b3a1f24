"""Cache-blocked copy between two strided views of one shape (permutation, packing).

NumPy's strided copy walks the destination in order and reads the source with its
strides, so when the two arrays' fastest axes differ, every read lands on another cache
line and often another page: a transposed 64^4 copy runs ~20x slower than a contiguous
one. This kernel copies tile by tile instead. A tile's rows run along the
destination's fastest axes and its columns along the source's (several short axes
grouped when extents are small; a short run contiguous in both rides inside each
element); it is read along the source's rows into a buffer that stays in L1, then
written along the destination's rows, so every cache line on either side is used
whole (with ``stream``, by non-temporal stores where those rows are contiguous: see
NONTEMPORAL_MIN_BYTES). The other axes loop outside in the destination's order, so
that consecutive tiles continue the destination's rows, and while one tile is copied
the lines of the next are prefetched (the hardware prefetcher cannot follow rows that
far apart). Large copies share their tiles among OpenMP's threads.

The kernel moves raw words (the largest of 8, 4, 2 or 1 bytes that the items, strides
and addresses allow; a complex128 element is two 8-byte words, a bool or int8 one
byte), so one compiled specialisation per word type serves every dtype, and the copy
is bit-exact. One-byte and two-byte items used to go to numpy.copyto: a reversed 64^4
bool copy took 165 ms there against 11 ms here (int16: 342 against 9; 2-core Zen 3).
The kernel is C (cpu_fallback/tile_copy.c, built when gpu_tc is installed), loaded on
the first copy that uses it: ``import gpu_tc`` and small copies never load
it. Where it was not built, copies fall back to numpy.copyto, with a warning.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from . import kernels
from .tile_layout import Axis, TileLayout

# Below this many elements numpy.copyto is about as fast: its strided walk finds the
# data in cache (measured: ~0.6-2x either way from 0.5 to 4 Mi elements; 2-9x wins
# for the kernel above, where numpy's walk misses the caches and the TLB).
MIN_ELEMENTS = 1 << 20
# A run contiguous in both arrays this long streams through numpy.copyto as fast as
# through the kernel on one thread (measured on 128 MiB: numpy 0.8x at 4 KiB, the
# kernel 1.1-1.5x from 128 B to 2 KiB and 2-5x below).
STREAM_BYTES = 2048
# From this many bytes the tiles are shared among OpenMP's threads (measured on 2 cores:
# 1.0-1.9x at 4 MiB, 1.4-2.6x from 8 MiB). Smaller copies stay on the calling thread,
# where waking the others costs more, and where on a busy host a descheduled thread
# would stall the copy for a scheduler tick.
PARALLEL_BYTES = 1 << 23
# Tiles are cut into this many chunks per thread, each chunk with its own buffer, taken
# by the threads as they come free (TCCG case 20 x0.5, a packed GEMM route, mean pack
# 2.0-2.2 ms against 2.5-2.9 dealt out statically; 16 chunks a thread no better).
CHUNKS_PER_THREAD = 4
# The tile buffer: 32 KiB, inside L1 with room for the rows being read and written.
BUFFER_BYTES = 1 << 15
# From this many bytes of destination, a copy whose rows are contiguous there may write
# them with non-temporal stores, which skip reading each line into the cache first: that
# pays once the copy far outgrows the last-level cache, and costs while it would stay
# there (the kernel on a 2-core EPYC with 32 MiB of L3, medians of 15-21, streamed
# against plain: 'abcd->acbd' 1.54 ms against 1.02 at 20 MiB, 'abcd->badc' 3.00 against
# 3.40 at 40 and 9.60 against 12.55 at 128, but 21.6 against 21.4 at 256). Where and for
# which layouts it pays depends on the host, so a permutation plan
# (cpu_fallback.backend) times both from here.
NONTEMPORAL_MIN_BYTES = 1 << 24


def tile_layout(
    shape: tuple[int, ...],
    src_strides: tuple[int, ...],
    dst_strides: tuple[int, ...],
    itemsize: int,
    addresses: tuple[int, int] = (0, 0),
) -> TileLayout | None:
    """The tiled form of a copy between two views, or None where numpy.copyto does as well.

    Args:
        shape: The common shape.
        src_strides, dst_strides: Strides in bytes (any sign; the source's may be 0).
        itemsize: Bytes per element.
        addresses: The data addresses of the two views (for the word alignment).

    Returns:
        None when the copy is empty, the arrays walk their fastest axes in the same
        order (beyond a run contiguous in both), the words would be misaligned, or the
        destination may hold an element twice (then the order of writes would matter).
    """
    return _layout(
        tuple(shape),
        tuple(src_strides),
        tuple(dst_strides),
        itemsize,
        (addresses[0] | addresses[1]) & 7,
    )


@functools.lru_cache(maxsize=256)
def _layout(
    shape: tuple[int, ...],
    src_strides: tuple[int, ...],
    dst_strides: tuple[int, ...],
    itemsize: int,
    address_bits: int,
) -> TileLayout | None:
    """tile_layout, memoised: packing repeats the same few layouts on every call."""
    word = _word_size(itemsize, (address_bits, *src_strides, *dst_strides))
    if word is None or 0 in shape:
        return None
    per_item = itemsize // word
    axes = [
        Axis(e, s // itemsize * per_item, d // itemsize * per_item)
        for e, s, d in zip(shape, src_strides, dst_strides)
        if e != 1
    ]
    if per_item > 1:
        axes.append(Axis(per_item, 1, 1))
    src_base = sum((a.extent - 1) * -a.src for a in axes if a.src < 0)
    dst_base = sum((a.extent - 1) * -a.dst for a in axes if a.dst < 0)
    src_span = 1 + sum((a.extent - 1) * abs(a.src) for a in axes)
    dst_span = 1 + sum((a.extent - 1) * abs(a.dst) for a in axes)
    # Walk the destination forwards: flip its negative axes (its offset becomes 0).
    src_start = src_base + sum((a.extent - 1) * a.src for a in axes if a.dst < 0)
    axes = [Axis(a.extent, -a.src, -a.dst) if a.dst < 0 else a for a in axes]
    axes = _merged(sorted(axes, key=lambda a: -a.dst))
    if not _distinct(axes):
        return None
    run = Axis(1, 1, 1)  # no run: one word, unit strides (the kernel's fast path)
    if axes and axes[-1] is _src_fastest(axes):
        run = axes.pop()
    if not axes:
        return None
    first_col = _src_fastest(axes[:-1])
    if first_col is None or _src_fastest(axes) is axes[-1]:
        return None  # both walk their fastest axes in the same order: numpy does well
    rows, cols = [axes[-1]], [first_col]
    budget = BUFFER_BYTES // (word * run.extent)
    side = max(1, math.isqrt(budget))
    _grow(rows, axes, cols, side, lambda a: a.dst)
    _grow(cols, axes, rows, side, lambda a: a.src)
    n_rows = math.prod(a.extent for a in rows)
    n_cols = math.prod(a.extent for a in cols)
    # Tile sides in whole cache lines where they can be, so tiles share no line.
    line = max(1, 64 // (word * run.extent))
    tile_rows = min(n_rows, _whole(side, line))
    tile_cols = min(n_cols, _whole(budget // tile_rows, line))
    tile_rows = min(n_rows, _whole(budget // tile_cols, line))
    # Outer axes in the destination's order: consecutive tiles continue its rows.
    outer = [a for a in axes if all(a is not b for b in rows + cols)]
    return TileLayout(
        f"u{word}", tuple(outer), tuple(rows), tuple(cols), run, tile_rows, tile_cols,
        src_base, dst_base, src_start, src_span, dst_span,
    )  # fmt: skip


def copy_tiled(source: np.ndarray, destination: np.ndarray, stream: bool = False) -> bool:
    """Copy ``source`` into ``destination`` with the tiled kernel, where it pays.

    Args:
        source: Any view.
        destination: A writable view of the same shape and dtype, not overlapping
            ``source``.
        stream: Write the destination's rows with non-temporal stores where they are
            contiguous (see NONTEMPORAL_MIN_BYTES).

    Returns:
        True when the copy is done; False when numpy.copyto should do it (a small or
        streaming copy, overlapping or read-only arrays, dtypes that differ or are not
        numbers, or the compiled kernel not built).
    """
    if source.size < MIN_ELEMENTS or source.dtype != destination.dtype:
        return False
    if source.dtype.kind not in "bfciu":  # a bit copy must not duplicate object pointers
        return False
    if not destination.flags.writeable or np.may_share_memory(source, destination):
        return False
    layout = tile_layout(
        source.shape,
        source.strides,
        destination.strides,
        source.itemsize,
        (source.ctypes.data, destination.ctypes.data),
    )
    if layout is None:
        return False
    tiles = kernels.load("tiles", "large permuted copies fall back to numpy.copyto")
    if tiles is None:
        return False
    workers = tiles.threads()
    parallel = pays(layout, source.nbytes, workers)
    if parallel is None:
        return False
    tiles.copy(layout, source, destination, CHUNKS_PER_THREAD * workers if parallel else 0,
               stream)
    return True


def may_stream(layout: TileLayout, nbytes: int, workers: int) -> bool:
    """Whether a copy of ``nbytes`` by ``layout`` on ``workers`` threads is worth timing
    with non-temporal stores: the kernel takes it (see pays), its rows are contiguous in
    the destination, it is NONTEMPORAL_MIN_BYTES or larger, and the kernel is built and
    can stream."""
    if (nbytes < NONTEMPORAL_MIN_BYTES or not layout.rows_contiguous
            or pays(layout, nbytes, workers) is None):
        return False
    tiles = kernels.load("tiles", "large permuted copies fall back to numpy.copyto")
    return tiles is not None and tiles.streams()


def pays(layout: TileLayout, nbytes: int, workers: int) -> bool | None:
    """Whether the kernel runs on ``workers`` threads (True) or one (False), or None
    where numpy.copyto is as fast: a run contiguous in both arrays of STREAM_BYTES or
    more streams well through numpy, unless the copy is large enough for threads."""
    parallel = nbytes >= PARALLEL_BYTES and workers > 1
    if not parallel and layout.run.extent * int(layout.word[1:]) >= STREAM_BYTES:
        return None
    return parallel


def _word_size(itemsize: int, values: tuple[int, ...]) -> int | None:
    """The largest word (8, 4, 2 or 1 bytes) that divides the item size, addresses and
    strides."""
    for word in (8, 4, 2, 1):
        if itemsize % word == 0 and all(v % word == 0 for v in values):
            return word
    return None


def _distinct(axes: list[Axis]) -> bool:
    """Whether the destination's elements are distinct: each axis (slowest first, positive
    strides) steps past everything the faster axes reach."""
    reach = 0
    for axis in reversed(axes):
        if axis.dst <= reach:
            return False
        reach += (axis.extent - 1) * axis.dst
    return True


def _merged(axes: list[Axis]) -> list[Axis]:
    """Fuse neighbours (outermost first) that are contiguous in both arrays."""
    out: list[Axis] = []
    for axis in axes:
        if out and out[-1].dst == axis.dst * axis.extent and out[-1].src == axis.src * axis.extent:
            outer = out.pop()
            axis = Axis(outer.extent * axis.extent, axis.src, axis.dst)
        out.append(axis)
    return out


def _whole(n: int, line: int) -> int:
    """``n`` rounded down to whole lines of ``line`` elements (at least 1)."""
    return max(1, n // line * line if n >= line else n)


def _grow(
    group: list[Axis],
    axes: list[Axis],
    other: list[Axis],
    target: int,
    stride: Callable[[Axis], int],
) -> None:
    """Extend ``group`` with the axes that continue it contiguously (by ``stride``: one
    array's strides) until it holds ``target`` elements, leaving ``other``'s axes."""
    size = math.prod(a.extent for a in group)
    while size < target:
        reach = stride(group[-1]) * group[-1].extent
        nxt = [a for a in axes if stride(a) == reach and all(a is not b for b in group + other)]
        if not nxt:
            return
        group.append(nxt[0])
        size *= nxt[0].extent


def _src_fastest(axes: list[Axis]) -> Axis | None:
    """The axis with the smallest non-zero source stride (the last one on ties)."""
    moving = [a for a in axes if a.src != 0]
    return min(reversed(moving), key=lambda a: abs(a.src)) if moving else None
