"""The compiled part of gpu_tc: cpu_fallback._tile_copy (the cache-blocked copy kernel).

Everything else is in pyproject.toml. The extension is optional: where it does not build
(no C compiler), large permuted copies fall back to numpy.copyto, with a warning.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "cpu_fallback._tile_copy",
            sources=["cpu_fallback/tile_copy.c"],
            extra_compile_args=["-O3", "-fopenmp", "-std=c11"],
            extra_link_args=["-fopenmp"],
            optional=True,
        )
    ]
)
