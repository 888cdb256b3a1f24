"""The CPU NumPy/BLAS backend of gpu_tc; it depends only on the gpu_tc core."""
