"""gpu_double: a host emulation of the GPU libraries gpu_tc calls. A TEST DOUBLE, NOT A GPU.

It stands in for the slice of CuPy, ``cupy_backends.cuda.libs.cublas`` and
``nvmath.bindings.cutensor`` that gpu_tc's GPU backend and its tests call, so that the
backend's own code (descriptors, plans, workspace, the cuBLAS route, streams, the
out-of-memory fallback) runs on every CI run. Device memory is host memory addressed
by real pointers; the libraries check what cuTENSOR 2.x (``cutensor.h``) and
column-major cuBLAS document at create and execute time, then compute with NumPy.

What it cannot prove: the real libraries' support matrix (which operator, shape or
layout a given cuTENSOR version accepts), timing, asynchrony (everything runs at once,
in call order) and numerics (NumPy's rounding, not a GPU kernel's). A test that passes
here ran on this double, never on a GPU.

Layout: :mod:`.runtime` (devices, streams, memory pool), :mod:`.memory` (allocations
and pointer checks), :mod:`.array` (the ``cupy.ndarray`` stand-in), :mod:`.cutensor`
and :mod:`.cublas` (the library stand-ins, declared by the C signatures of the real
bindings), and ``site/`` (the shadow packages ``cupy``, ``cupy_backends`` and
``nvmath`` that a process gets by putting ``site/`` first on its path; see
:mod:`.launch`).
"""
