"""gpu_tc past one machine, on dask.distributed.

* :func:`gpu_tc.einsum`, :func:`gpu_tc.contract` and :func:`gpu_tc.tensordot` accept
  dask arrays and return lazy dask arrays (:mod:`gpu_tc.distributed.arrays`).
* :func:`plan` and :func:`contract` run a tensor network in slices, each small enough
  for a worker's memory, and sum them (:mod:`gpu_tc.distributed.slicing`).

Needs the ``distributed`` extra (dask, distributed, cotengra); ``import gpu_tc`` does
not import them.
"""

from .slicing import SlicedPlan, contract, plan

__all__ = ["SlicedPlan", "contract", "plan"]
