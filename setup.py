"""The compiled part of gpu_tc: cpu_fallback._tile_copy (the cache-blocked copy kernel),
cpu_fallback._sums and cpu_fallback._pairwise (the strided and the pairwise sum
kernels), cpu_fallback._small_k (the GEMM of a small inner extent) and gpu_tc._warm
(einsum's warm calls of NumPy arrays).

Everything else is in pyproject.toml. The extensions are optional: where they do not
build (no C compiler), large permuted copies fall back to numpy.copyto, sums to NumPy's
reductions and small-K products to BLAS, with a warning, and einsum's warm calls run
in Python.
"""

from setuptools import Extension, setup


def kernel(name: str, source: str) -> Extension:
    """An optional C extension of cpu_fallback, with OpenMP."""
    return Extension(
        f"cpu_fallback.{name}",
        sources=[f"cpu_fallback/{source}"],
        depends=["cpu_fallback/kernel_common.h", "cpu_fallback/nontemporal.h",
                 "cpu_fallback/transpose_blocks.h", "cpu_fallback/streamed_rows.h",
                 "cpu_fallback/register_rows.h", "cpu_fallback/strided_loops.h",
                 "cpu_fallback/pairwise_pieces.h", "cpu_fallback/small_k_tiles.h"],
        extra_compile_args=["-O3", "-fopenmp", "-std=c11"],
        extra_link_args=["-fopenmp"],
        optional=True,
    )


setup(ext_modules=[
    Extension("gpu_tc._warm", sources=["gpu_tc/_warm.c"], extra_compile_args=["-O2"],
              optional=True),
    kernel("_tile_copy", "tile_copy.c"),
    kernel("_sums", "sums.c"),
    kernel("_pairwise", "pairwise.c"),
    kernel("_small_k", "small_k.c"),
])
