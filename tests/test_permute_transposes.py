"""The copy kernel's register transposes (cpu_fallback/transpose_blocks.h): tiles of
one-word elements whose sides are whole blocks move through vector registers, plain or
streamed, and write what numpy.copyto writes at every alignment; ragged tiles beside
them keep the loops."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from cpu_fallback import blocked, kernels

pytestmark = pytest.mark.skipif(
    not kernels.built("_tile_copy"),
    reason="the compiled copy kernel (cpu_fallback._tile_copy) is not built",
)

SENTINEL = 7
# Tiles of 16 x 32 8-byte words and 32 x 32 4-byte ones: whole blocks of 8 x 8 and 4 x 4.
BUFFER_BYTES = 4096


@pytest.fixture(params=["serial", "parallel"])
def block_tiles(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Small arrays take the kernel, serial or parallel, with tiles of whole blocks."""
    monkeypatch.setattr(blocked, "MIN_ELEMENTS", 0)
    monkeypatch.setattr(blocked, "PARALLEL_BYTES", 0 if request.param == "parallel" else 1 << 62)
    monkeypatch.setattr(blocked, "BUFFER_BYTES", BUFFER_BYTES)
    blocked._layout.cache_clear()
    yield
    blocked._layout.cache_clear()


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    bits = rng.integers(0, 256, (*shape, np.dtype(dtype).itemsize), dtype=np.uint8)
    return bits.view(dtype).reshape(shape)  # any bit pattern: NaN payloads included


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint8)


def test_the_transposes_are_the_build_the_other_kernels_run():
    from cpu_fallback import small_k, tiles

    if not kernels.built("_small_k"):
        pytest.skip("cpu_fallback._small_k was not built: no build to compare with")
    assert tiles._tile_copy.isa() == small_k.isa()


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64", "complex64", "int64"])
@pytest.mark.parametrize(
    ("shape", "perm"),
    [((64, 96), (1, 0)), ((37, 53), (1, 0)), ((6, 8, 40), (2, 1, 0)), ((24, 5, 48), (2, 1, 0)),
     ((16, 40, 8, 24), (1, 0, 3, 2))],
)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("shift", [0, 1, 3])
def test_transposed_tiles_write_what_numpy_writes(block_tiles, rng, dtype, shape, perm, stream,
                                                  shift):
    """Whole tiles and ragged ones at the edges, rows of the source that lie apart (the
    short axes grouped), a destination ``shift`` items past a 64-byte line: every
    element's bits, and nothing written outside the destination."""
    source = _random(rng, shape, dtype).transpose(perm)
    itemsize = np.dtype(dtype).itemsize
    buffer = np.full(source.size + 64 // itemsize + shift + 5, SENTINEL, dtype)
    start = (-buffer.ctypes.data % 64) // itemsize + shift
    destination = buffer[start:start + source.size].reshape(source.shape)
    layout = blocked.tile_layout(source.shape, source.strides, destination.strides,
                                 source.itemsize, (source.ctypes.data, destination.ctypes.data))
    assert layout is not None and layout.rows_contiguous and layout.run.extent == 1
    assert layout.tile_rows % 8 == 0 and layout.tile_cols % 8 == 0
    assert layout.n_rows >= layout.tile_rows and layout.n_cols >= layout.tile_cols
    assert blocked.copy_tiled(source, destination, stream=stream)
    np.testing.assert_array_equal(_bits(destination), _bits(source))
    sentinel = np.array(SENTINEL).astype(dtype)
    assert (buffer[:start] == sentinel).all() and (buffer[start + source.size:] == sentinel).all()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_large_transpose_at_default_tiles(rng, dtype, stream):
    """Default tiles and threads: 64 x 64 tiles of a 1536 x 1000 transpose, whose last
    column of tiles is ragged."""
    a = _random(rng, (1000, 1536), dtype)
    destination = np.empty((1536, 1000), dtype)
    assert blocked.copy_tiled(a.T, destination, stream=stream)
    np.testing.assert_array_equal(_bits(destination), _bits(a.T))
