"""The GPU backend (CuPy, cuTENSOR 2.x, cuBLAS); imported only when CuPy arrays arrive."""
