"""The cache-blocked copy kernel (cpu_fallback.blocked) against numpy.copyto.

Most cases shrink the kernel's size threshold and tile buffer so that small arrays take
the compiled path with many partial tiles; a few run at full size with the defaults.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

import gpu_tc
from cpu_fallback import blocked, kernels, openmp
from cpu_fallback.permute import copy_permuted, copy_route
from gpu_tc import reference

# Every word the kernel moves: 1-byte (bool, int8), 2-byte, 4-byte and 8-byte items, and
# items of two words.
DTYPES = ["bool", "int8", "float16", "float32", "float64", "complex64", "complex128"]


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if np.dtype(dtype).kind in "biu":
        return rng.integers(-100, 100, shape).astype(dtype)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _destination(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: str
) -> tuple[np.ndarray, np.ndarray]:
    """A view of ``shape`` into a sentinel-filled buffer: axes in random memory order,
    some reversed, with gaps between elements. Returns (view, buffer)."""
    rank = len(shape)
    order = rng.permutation(rank)
    buffer = np.full(tuple(shape[i] for i in order) + (2,), 7, dtype)
    view = buffer[..., 0].transpose(np.argsort(order))
    flips = tuple(slice(None, None, -1) if f else slice(None) for f in rng.integers(0, 2, rank))
    return view[flips], buffer


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint8)


def _check(source: np.ndarray, destination: np.ndarray, buffer: np.ndarray) -> None:
    """copy_permuted writes what numpy.copyto writes, bit for bit, and nothing else."""
    copy_permuted(source, destination)
    np.testing.assert_array_equal(_bits(destination), _bits(source))
    sentinel = np.array(7).astype(buffer.dtype)  # True for bool; int8 checks 1-byte words
    assert (buffer[..., 1] == sentinel).all(), "wrote outside the destination view"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("perm", list(itertools.permutations(range(4))))
def test_every_rank4_permutation(small_tiles, rng, dtype, perm):
    source = _random(rng, (5, 3, 7, 4), dtype).transpose(perm)
    destination, buffer = _destination(rng, source.shape, dtype)
    _check(source, destination, buffer)
    contiguous = np.empty(source.shape, dtype)
    copy_permuted(source, contiguous)
    np.testing.assert_array_equal(contiguous, source)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5, 6])
def test_random_views(small_tiles, rng, dtype, rank):
    """Sliced, reversed and permuted sources into permuted, reversed, gapped targets."""
    for _ in range(20):
        shape = tuple(int(x) for x in rng.integers(1, 8, rank))
        steps = tuple(int(x) for x in rng.choice([-2, -1, 1, 2, 3], rank))
        big = _random(rng, tuple(e * abs(s) for e, s in zip(shape, steps)), dtype)
        source = big[tuple(slice(None, None, s) for s in steps)]
        source = source.transpose(rng.permutation(rank))
        destination, buffer = _destination(rng, source.shape, dtype)
        _check(source, destination, buffer)


@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_source(small_tiles, rng, dtype):
    """Zero source strides: a row broadcast down the columns of a transposed target."""
    row = _random(rng, (9,), dtype)
    source = np.broadcast_to(row, (6, 9))
    destination = np.empty((9, 6), dtype).T
    copy_permuted(source, destination)
    np.testing.assert_array_equal(destination, np.broadcast_to(row, (6, 9)))
    scalar = np.broadcast_to(row[:1].reshape(1, 1), (6, 9))
    copy_permuted(scalar, destination)
    np.testing.assert_array_equal(destination, np.full((6, 9), row[0]))


def test_bit_exact_with_nan_payloads(small_tiles, rng):
    """Words are moved, not values: every NaN payload and signed zero survives."""
    bits = rng.integers(0, 2**64, size=(33, 17, 9), dtype=np.uint64, endpoint=False)
    source = bits.view(np.float64).transpose(2, 0, 1)
    destination = np.empty(source.shape)
    copy_permuted(source, destination)
    np.testing.assert_array_equal(destination.view(np.uint64), bits.transpose(2, 0, 1))


@pytest.mark.parametrize("shape", [(0, 5), (5, 0, 3), (0,)])
def test_zero_size(small_tiles, shape):
    source = np.ones(shape)
    destination = np.empty(shape[::-1]).T
    assert not blocked.copy_tiled(source, destination)
    copy_permuted(source, destination)
    assert destination.shape == shape


@pytest.mark.parametrize("dtype, word", [
    ("bool", "u1"), ("int8", "u1"), ("int16", "u2"), ("float16", "u2"), ("float32", "u4"),
    ("int64", "u8"), ("complex128", "u8"),
])
def test_the_word_is_the_item_or_its_largest_part_of_8_bytes_or_less(dtype, word):
    itemsize = np.dtype(dtype).itemsize
    layout = blocked.tile_layout((64, 32), (itemsize, 64 * itemsize), (32 * itemsize, itemsize),
                                 itemsize)
    assert layout is not None and layout.word == word


@pytest.mark.parametrize("dtype", ["float64", "complex64", "complex128"])
def test_misaligned_words(small_tiles, rng, dtype):
    """Items not aligned to 8 bytes move as 4-byte words; the result is the same."""
    itemsize = np.dtype(dtype).itemsize
    shape = (6, 7, 5)
    raw = np.zeros(itemsize * 210 + 4, np.uint8)
    source = raw[4:].view(dtype).reshape(shape)
    source[...] = _random(rng, shape, dtype)
    layout = blocked.tile_layout(
        source.shape, source.strides, (7 * itemsize, itemsize, 42 * itemsize), itemsize,
        (source.ctypes.data, 0),
    )  # fmt: skip
    assert layout is not None and layout.word == "u4"
    destination = np.empty((5, 6, 7), dtype).transpose(1, 2, 0)
    copy_permuted(source, destination)
    np.testing.assert_array_equal(destination, source)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("perm", [(3, 2, 1, 0), (0, 3, 2, 1), (1, 0, 3, 2), (2, 0, 3, 1)])
def test_full_size_defaults(rng, dtype, perm):
    """Default threshold and tiles: arrays large enough for the compiled path."""
    a = _random(rng, (40, 33, 24, 65), dtype)
    assert a.size >= blocked.MIN_ELEMENTS
    source = a.transpose(perm)
    destination = np.empty(source.shape, dtype)
    assert blocked.copy_tiled(source, destination)
    np.testing.assert_array_equal(destination, np.transpose(a, perm))


def test_permute_api_uses_kernel(rng):
    a = rng.standard_normal((64, 32, 16, 33))
    result = gpu_tc.permute("abcd->dcba", a)
    np.testing.assert_array_equal(result, a.transpose(3, 2, 1, 0))
    assert "cache-blocked" in gpu_tc.prepare("abcd->dcba", a).reason
    assert "numpy.copyto" in gpu_tc.prepare("abcd->dcba", a[:2, :2]).reason


@pytest.mark.parametrize("op", [gpu_tc.UnaryOp.CONJ, gpu_tc.UnaryOp.NEG])
def test_permute_with_op_and_alpha(rng, op):
    a = _random(rng, (64, 32, 16, 33), "complex128")
    result = gpu_tc.permute("abcd->cadb", a, op_a=op, alpha=0.5)
    expected = 0.5 * (np.conj(a) if op is gpu_tc.UnaryOp.CONJ else -a).transpose(2, 0, 3, 1)
    np.testing.assert_allclose(result, expected, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["float64", "bool", "int8", "int16"])
def test_packing_through_kernel(small_tiles, rng, dtype):
    """A contraction whose operands and result are packed/unpacked through the kernel
    (1- and 2-byte items too: bool, int8, int16)."""
    a = _random(rng, (6, 5, 7, 4), dtype)
    b = _random(rng, (4, 5, 3, 6), dtype)
    result = gpu_tc.einsum("abcd,dbea->ec", a, b)
    if dtype == "float64":
        expected = reference.einsum("abcd,dbea->ec", a, b)
        np.testing.assert_allclose(result, expected, rtol=1e-12)
    else:  # numpy's integer and bool results, overflow wrapping included
        expected = np.einsum("abcd,dbea->ec", a, b)
        assert result.dtype == expected.dtype
        np.testing.assert_array_equal(result, expected)


def test_falls_back_where_it_must(rng):
    a = rng.standard_normal((128, 128, 64))
    destination = np.empty((64, 128, 128)).transpose(2, 1, 0)
    assert blocked.copy_tiled(a, destination)  # the control: this one tiles
    np.testing.assert_array_equal(destination, a)
    assert not blocked.copy_tiled(a, np.empty_like(a))  # same order: streams
    assert not blocked.copy_tiled(a, a.transpose(2, 1, 0)[::-1].T)  # overlapping
    read_only = destination.view()
    read_only.flags.writeable = False
    assert not blocked.copy_tiled(a, read_only)
    assert not blocked.copy_tiled(a, destination.astype(np.float32))  # dtypes differ
    assert not blocked.copy_tiled(a[:8], destination[:8])  # small: numpy.copyto
    ints = np.arange(a.size, dtype=np.int64).reshape(a.shape)
    int_destination = np.empty_like(destination, np.int64)
    assert blocked.copy_tiled(ints, int_destination)
    np.testing.assert_array_equal(int_destination, ints)
    overlapping = np.lib.stride_tricks.as_strided(np.empty(200), (64, 64), (16, 8))
    assert not blocked.copy_tiled(a[0, :64, :64].T, overlapping)  # writes would collide
    objects = np.empty(a.shape, object)
    assert not blocked.copy_tiled(objects, np.empty(objects.shape[::-1], object).T)


def test_layout_of_a_4d_reversal():
    shape, item = (64, 64, 64, 64), 8
    strides = tuple(item * 64**k for k in (3, 2, 1, 0))
    layout = blocked.tile_layout(shape, strides[::-1], strides, item)
    assert layout is not None
    assert layout.rows == (blocked.Axis(64, 64**3, 1),)
    assert layout.cols == (blocked.Axis(64, 1, 64**3),)
    assert [(a.src, a.dst) for a in layout.outer] == [(64, 64**2), (64**2, 64)]
    assert layout.tile_rows * layout.tile_cols * item <= blocked.BUFFER_BYTES
    wide = tuple(2 * s for s in strides)
    complex_layout = blocked.tile_layout(shape, wide[::-1], wide, 16)
    assert complex_layout is not None and complex_layout.run.extent == 2  # two words


def test_short_axes_are_grouped_into_long_tiles():
    """Extents of 6: three axes make a tile's rows (contiguous in the destination) and
    three its columns (contiguous in the source)."""
    shape, item = (6,) * 6, 8
    strides = tuple(item * 6**k for k in range(5, -1, -1))
    layout = blocked.tile_layout(shape, strides[::-1], strides, item)
    assert layout is not None
    assert [a.dst for a in layout.rows] == [1, 6, 36]
    assert [a.src for a in layout.cols] == [1, 6, 36]
    assert layout.outer == ()
    assert (layout.n_rows, layout.n_cols) == (216, 216)


def test_long_runs_go_to_numpy_unless_threaded():
    """A run of 4 KiB contiguous in both arrays streams well through numpy.copyto on one
    thread; a copy large enough for threads still takes the kernel."""
    shape, item = (64, 64, 512), 8
    src = (item * 512, item * 512 * 64, item)  # the two outer axes swapped, runs kept
    dst = (item * 512 * 64, item * 512, item)
    layout = blocked.tile_layout(shape, src, dst, item)
    assert layout is not None and layout.run.extent == 512
    assert blocked.pays(layout, blocked.PARALLEL_BYTES - 1, 2) is None
    assert blocked.pays(layout, blocked.PARALLEL_BYTES, 1) is None
    assert blocked.pays(layout, blocked.PARALLEL_BYTES, 2) is True
    short = blocked.tile_layout((64, 64, 8), (64, 4096, 8), (4096, 64, 8), item)
    assert short is not None and blocked.pays(short, 1 << 20, 2) is False


def test_route_names_the_kernel():
    extents = (64, 64, 64, 64)
    c_order = (64**3, 64**2, 64, 1)
    assert copy_route(extents, c_order[::-1], c_order, "d").startswith("cache-blocked")
    reversed_32 = ((32, 32, 32, 32), (1, 32, 32**2, 32**3), (32**3, 32**2, 32, 1))
    threaded = ", threaded" if (os.cpu_count() or 1) > 1 else ""
    assert copy_route(*reversed_32, "d") == f"cache-blocked 64x64 tiles (C kernel{threaded})"
    assert copy_route(*reversed_32, "f") == "cache-blocked 80x96 tiles (C kernel)"
    assert copy_route(extents, c_order, c_order, "d") == "numpy.copyto"
    assert copy_route((4, 4), (1, 4), (4, 1), "d") == "numpy.copyto"


def test_the_compiled_kernel_is_built():
    """gpu_tc's install builds cpu_fallback._tile_copy (setup.py); every test above
    needs it, and without it large copies run at numpy.copyto's speed."""
    assert kernels.built("_tile_copy"), "cpu_fallback._tile_copy was not built"
    from cpu_fallback import tiles

    assert tiles.threads() >= 1


def test_copies_need_no_kernel_for_small_arrays():
    """``import gpu_tc`` and small copies load no kernel; a large copy loads the compiled
    one."""
    code = (
        "import sys, numpy as np, gpu_tc\n"
        "gpu_tc.permute('ij->ji', np.ones((3, 4)))\n"
        "assert 'cpu_fallback._tile_copy' not in sys.modules, 'kernel loaded'\n"
        "a = np.arange(64.0**4).reshape(64, 64, 64, 64)\n"
        "r = gpu_tc.permute('abcd->dcba', a)\n"
        "assert (r == a.transpose(3, 2, 1, 0)).all()\n"
        "assert 'cpu_fallback._tile_copy' in sys.modules, 'kernel not loaded'\n"
        "print(gpu_tc.prepare('abcd->dcba', a).reason)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "cache-blocked" in out.stdout and "C kernel" in out.stdout


def test_without_the_compiled_kernel_copies_warn_once_and_fall_back():
    """An install that could not build the extension (no C compiler): one warning, then
    numpy.copyto, with the right result."""
    code = (
        "import sys, warnings, numpy as np\n"
        "sys.modules['cpu_fallback._tile_copy'] = None\n"
        "from cpu_fallback import blocked\n"
        "from cpu_fallback.permute import copy_permuted\n"
        "a = np.arange(2.0**20).reshape(2**10, 2**10)\n"
        "b = np.empty_like(a)\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    copy_permuted(a.T, b)\n"
        "    copy_permuted(a.T, b)\n"
        "assert (b == a.T).all()\n"
        "assert not blocked.copy_tiled(a.T, b)\n"
        "print(len(caught), caught[0].message)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("1 the compiled kernel cpu_fallback._tile_copy"), out.stdout
    assert "large permuted copies fall back to numpy.copyto" in out.stdout


def test_the_kernel_refuses_a_layout_that_reaches_outside_its_buffers():
    """The kernel checks the reach of its tables against the buffers' lengths: a wrong
    layout is a ValueError, not a write past the destination."""
    from cpu_fallback import _tile_copy, tiles

    a = np.arange(64.0 * 64).reshape(64, 64)
    b = np.zeros((64, 64))
    layout = blocked.tile_layout(a.T.shape, a.T.strides, b.strides, 8)
    assert layout is not None
    src = tiles._words(a.T, layout.word, layout.src_base, layout.src_span, writeable=False)
    dst = tiles._words(b, layout.word, layout.dst_base, layout.dst_span, writeable=True)
    geometry = tiles._geometry(layout)
    arguments = (src, dst, 8, *tiles._tables(layout))
    _tile_copy.copy(*arguments, *geometry, 0, 1)  # the control
    np.testing.assert_array_equal(b, a.T)
    with pytest.raises(ValueError, match="outside the buffers"):
        _tile_copy.copy(src, dst[:-1], 8, *tiles._tables(layout), *geometry, 0, 1)
    with pytest.raises(ValueError, match="outside the buffers"):
        _tile_copy.copy(*arguments, geometry[0] + 1, *geometry[1:], 0, 1)  # source shifted
    with pytest.raises(ValueError, match="word"):
        _tile_copy.copy(src, dst, 3, *tiles._tables(layout), *geometry, 0, 1)
    with pytest.raises(TypeError):  # a read-only destination
        _tile_copy.copy(src, src, 8, *tiles._tables(layout), *geometry, 0, 1)


def test_concurrent_copies_from_threads():
    """Parallel copies launched from several Python threads at once (one OpenMP launch
    at a time, the GIL released while each copies)."""
    code = (
        "import threading, numpy as np\n"
        "from cpu_fallback.permute import copy_permuted\n"
        "a = np.random.default_rng(0).standard_normal((128, 128, 128))\n"
        "outs = [np.empty((128, 128, 128)) for _ in range(4)]\n"
        "threads = [threading.Thread(target=copy_permuted, args=(a.transpose(2, 1, 0), o))\n"
        "           for o in outs]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "assert all((o == a.transpose(2, 1, 0)).all() for o in outs)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


@pytest.mark.parametrize(
    "user_env",
    [{}, {"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "PASSIVE"}, {"GOMP_SPINCOUNT": "5"}],
    ids=["unset", "active", "passive", "spincount"],
)
def test_openmp_loads_with_a_short_spin_and_the_environment_is_left_as_found(user_env):
    """The compiled copy loads libgomp with GOMP_SPINCOUNT=SPIN_COUNT (libgomp's longer
    default spin slows the next BLAS call; sleeping at once wakes late on a VM), set only
    while libgomp loads and reads it; a user's OMP_WAIT_POLICY or GOMP_SPINCOUNT wins."""
    code = (
        "import os, sys, numpy as np\n"
        "names = ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')\n"
        "seen = []\n"
        "class Spy:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'cpu_fallback._tile_copy':\n"
        "            seen.append([os.environ.get(n) for n in names])\n"
        "        return None\n"
        "sys.meta_path.insert(0, Spy())\n"
        "from cpu_fallback import blocked\n"
        "assert 'libgomp' not in open('/proc/self/maps').read()\n"
        "a = np.arange(2.0**22).reshape(2**11, 2**11)\n"
        "b = np.empty_like(a)\n"
        "assert blocked.copy_tiled(a.T, b) and (b == a.T).all()\n"
        "maps = open('/proc/self/maps').read()\n"
        "print(*seen[0], *[os.environ.get(n) for n in names], 'libgomp' in maps)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(user_env)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=env)
    policy, spins, policy_after, spins_after, loaded = out.stdout.split()
    # What libgomp read when it loaded with the kernel ...
    assert policy == user_env.get("OMP_WAIT_POLICY", "None")
    expected_spins = str(openmp.SPIN_COUNT) if not user_env else "None"
    assert spins == user_env.get("GOMP_SPINCOUNT", expected_spins)
    # ... and the environment is as the user left it.
    assert policy_after == user_env.get("OMP_WAIT_POLICY", "None")
    assert spins_after == user_env.get("GOMP_SPINCOUNT", "None")
    assert loaded == "True"


def test_a_forked_child_copies_on_its_own_thread():
    """libgomp is not fork-safe: after the parent's threaded copy, a forked child's
    parallel region would wait forever on threads it lacks. The child copies on its
    calling thread instead, with the right result (the timeout catches a hang)."""
    code = (
        "import os, numpy as np\n"
        "from cpu_fallback import tiles\n"
        "from cpu_fallback.permute import copy_permuted\n"
        "a = np.random.default_rng(0).standard_normal((256, 256, 256))\n"
        "b = np.empty_like(a)\n"
        "copy_permuted(a.transpose(2, 1, 0), b)  # the parent's threads are started\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    c = np.empty_like(a)\n"
        "    copy_permuted(a.transpose(2, 1, 0), c)\n"
        "    ok = (c == a.transpose(2, 1, 0)).all() and tiles.threads() == 1\n"
        "    os._exit(0 if ok else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "print(os.waitstatus_to_exitcode(status), tiles.threads() >= 1)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.split() == ["0", "True"]
