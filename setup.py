"""The compiled part of gpu_tc: cpu_fallback._tile_copy (the cache-blocked copy kernel),
cpu_fallback._sums (the strided and pairwise sum kernels) and cpu_fallback._small_k (the
GEMM of a small inner extent).

Everything else is in pyproject.toml. The extensions are optional: where they do not
build (no C compiler), large permuted copies fall back to numpy.copyto, sums to NumPy's
reductions and small-K products to BLAS, with a warning.
"""

from setuptools import Extension, setup


def kernel(name: str, source: str) -> Extension:
    """An optional C extension of cpu_fallback, with OpenMP."""
    return Extension(
        f"cpu_fallback.{name}",
        sources=[f"cpu_fallback/{source}"],
        depends=["cpu_fallback/kernel_common.h"],
        extra_compile_args=["-O3", "-fopenmp", "-std=c11"],
        extra_link_args=["-fopenmp"],
        optional=True,
    )


setup(ext_modules=[
    kernel("_tile_copy", "tile_copy.c"),
    kernel("_sums", "sums.c"),
    kernel("_small_k", "small_k.c"),
])
