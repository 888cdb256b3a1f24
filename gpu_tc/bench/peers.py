"""gpu_tc and the libraries it is measured against, each behind one adapter.

An adapter turns a case and its operands (NumPy or CuPy arrays) into a
:class:`Runner`: a call with no arguments, its device synchronise, and a way to
bring its result to the host for checking. Every peer is optional: it is found with
``importlib.util.find_spec`` and imported only when a case needs it. A peer that
has nothing to offer for a kind of case (numpy.einsum returns a *view* for a
permutation, so it is no copy to time) gives no runner for that kind.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .suites import KINDS, Case
from .timing import no_sync

ALL_KINDS = frozenset({"einsum", "permute", "trace", "reduce"})


@dataclass
class Runner:
    """One implementation of one case, ready to time.

    Attributes:
        call: Does the work once and returns the result.
        host: Brings a result to the host as a NumPy array.
        sync: Waits for queued device work.
        close: Releases held resources (plans) after timing.
        route: How gpu_tc runs the case (its plan's route, asked after the timed calls:
            a measured plan's route is the variant it settled on); None for peers.
        reason: Why, with the timings a measured plan chose by (its plan's reason,
            asked after the timed calls); None for peers.
    """

    call: Callable[[], Any]
    host: Callable[[Any], np.ndarray] = np.asarray
    sync: Callable[[], None] = no_sync
    close: Callable[[], None] = no_sync
    route: Callable[[], str | None] = lambda: None
    reason: Callable[[], str | None] = lambda: None


@dataclass(frozen=True)
class Peer:
    """An implementation that can be timed.

    Attributes:
        name: The name used by ``--peers`` and in reports.
        title: What exactly is called.
        device: "cpu" or "gpu".
        module: The module that must be importable (e.g. "nvmath.tensor").
        kinds: The kinds of case it runs.
        build: Makes the runner for a case and its operands.
        suites: The suites it joins by default (None: every suite).
        operands: The number of operands it takes (None: any).
        twin_of: For a twin (see :func:`twin`), the peer it copies; None otherwise.
    """

    name: str
    title: str
    device: str
    module: str
    kinds: frozenset[str]
    build: Callable[[Case, list[Any]], Runner] = field(repr=False)
    suites: frozenset[str] | None = None
    operands: int | None = None
    twin_of: str | None = None

    def missing(self) -> str | None:
        """Why the peer cannot run here, or None when its module is importable."""
        try:
            found = importlib.util.find_spec(self.module) is not None
        except ModuleNotFoundError:  # the parent package of a dotted name is missing
            found = False
        return None if found else f"skipping {self.name}: module {self.module!r} is not installed"


def _permutation(case: Case) -> tuple[int, ...]:
    term = case.terms[0]
    return tuple(term.index(x) for x in case.output)


def _output_shape(case: Case) -> tuple[int, ...]:
    return tuple(case.sizes[x] for x in case.output)


def _summed_axes(case: Case) -> tuple[int, ...]:
    return tuple(i for i, x in enumerate(case.terms[0]) if x not in case.output)


# --- gpu_tc -------------------------------------------------------------------------


def _gpu_tc(case: Case, ops: list[Any]) -> Runner:
    import gpu_tc

    host, sync = _device_helpers(ops)
    if case.kind in ("permute", "reduce"):
        if case.kind == "permute":
            out = _empty_like_output(case, ops)
            call = lambda: gpu_tc.permute(case.expr, ops[0], out=out)  # noqa: E731
        else:
            call = lambda: gpu_tc.reduce(case.expr, ops[0])  # noqa: E731
        # Their calls hold no plan to ask; a plan of the same problem, made when asked,
        # shares the calls' cached primitive plan, so its route is the one they settled on.
        return Runner(call, host, sync, route=lambda: gpu_tc.prepare(case.expr, ops[0]).route,
                      reason=lambda: gpu_tc.prepare(case.expr, ops[0]).reason)
    args = (case.expr, *ops)
    return Runner(lambda: gpu_tc.einsum(*args), host, sync,
                  route=lambda: _cached(args, "route"), reason=lambda: _cached(args, "reason"))


def _cached(args: tuple[Any, ...], attribute: str) -> str | None:
    """``attribute`` (route, reason) of the plan gpu_tc.einsum(*args) runs from gpu_tc's
    plan cache."""
    from gpu_tc.backend import backend_of_type
    from gpu_tc.cache import PLAN_CACHE

    backend = backend_of_type(type(args[1]))
    key = None if backend is None else backend.warm_key(args)
    plan = None if key is None else PLAN_CACHE.programs.peek(key)
    return None if plan is None else str(getattr(plan, attribute))


def _device_helpers(ops: list[Any]) -> tuple[Callable[[Any], np.ndarray], Callable[[], None]]:
    if ops and type(ops[0]).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy.asnumpy, cupy.cuda.get_current_stream().synchronize
    return np.asarray, no_sync


def _empty_like_output(case: Case, ops: list[Any]) -> Any:
    module = type(ops[0]).__module__.split(".")[0]
    xp: Any = importlib.import_module("cupy") if module == "cupy" else np
    return xp.empty(_output_shape(case), dtype=case.dtype)


GPU_TC = Peer("gpu_tc", "gpu_tc.einsum / permute / reduce", "any", "gpu_tc", ALL_KINDS, _gpu_tc)


# --- CPU peers -----------------------------------------------------------------------


def _numpy(case: Case, ops: list[Any]) -> Runner:
    if case.kind == "permute":
        out = np.empty(_output_shape(case), case.dtype)
        view = ops[0].transpose(_permutation(case))

        def copy() -> np.ndarray:
            np.copyto(out, view)
            return out

        return Runner(copy)
    if case.kind == "reduce":
        axes = _summed_axes(case)
        return Runner(lambda: ops[0].sum(axis=axes))
    return Runner(lambda: np.einsum(case.expr, *ops, optimize=True))


def _numpy_noopt(case: Case, ops: list[Any]) -> Runner:
    return Runner(lambda: np.einsum(case.expr, *ops, optimize=False))


def _opt_einsum(case: Case, ops: list[Any]) -> Runner:
    import opt_einsum

    return Runner(lambda: opt_einsum.contract(case.expr, *ops))


def _torch(case: Case, ops: list[Any]) -> Runner:
    import torch

    tensors = [torch.from_numpy(x) for x in ops]
    return _torch_runner(torch, case, tensors, lambda t: t.numpy(), no_sync)


def _torch_runner(
    torch: Any, case: Case, tensors: list[Any], host: Callable[[Any], np.ndarray], sync: Any
) -> Runner:
    if case.kind == "permute":
        source = tensors[0].permute(_permutation(case))
        out = torch.empty(_output_shape(case), dtype=source.dtype, device=source.device)
        return Runner(lambda: out.copy_(source), host, sync)
    if case.kind == "reduce":
        axes = _summed_axes(case)
        return Runner(lambda: torch.sum(tensors[0], dim=axes), host, sync)
    return Runner(lambda: torch.einsum(case.expr, *tensors), host, sync)


def _pytblis(case: Case, ops: list[Any]) -> Runner:
    import pytblis

    if case.kind == "einsum" and len(ops) == 2:
        return Runner(lambda: pytblis.contract(case.expr, ops[0], ops[1]))
    if case.kind == "einsum":
        return Runner(lambda: pytblis.einsum(case.expr, *ops))
    if case.kind == "permute":
        out = np.empty(_output_shape(case), case.dtype)
        return Runner(lambda: pytblis.transpose_add(case.expr, ops[0], out=out))
    return Runner(lambda: pytblis.transpose_add(case.expr, ops[0]))


# --- GPU peers -----------------------------------------------------------------------


def _cupy(case: Case, ops: list[Any]) -> Runner:
    import cupy

    host, sync = cupy.asnumpy, cupy.cuda.get_current_stream().synchronize
    if case.kind == "permute":
        out = cupy.empty(_output_shape(case), case.dtype)
        view = ops[0].transpose(_permutation(case))

        def copy() -> Any:
            cupy.copyto(out, view)
            return out

        return Runner(copy, host, sync)
    if case.kind == "reduce":
        axes = _summed_axes(case)
        return Runner(lambda: ops[0].sum(axis=axes), host, sync)
    return Runner(lambda: cupy.einsum(case.expr, *ops), host, sync)


def _nvmath_held(case: Case, ops: list[Any]) -> Runner:
    import cupy
    from nvmath import tensor

    contraction = tensor.BinaryContraction(case.expr, ops[0], ops[1])
    contraction.plan()
    sync = cupy.cuda.get_current_stream().synchronize
    return Runner(contraction.execute, cupy.asnumpy, sync, close=contraction.free)


def _nvmath_function(case: Case, ops: list[Any]) -> Runner:
    import cupy
    from nvmath import tensor

    sync = cupy.cuda.get_current_stream().synchronize
    return Runner(lambda: tensor.binary_contraction(case.expr, ops[0], ops[1]), cupy.asnumpy, sync)


def _torch_cuda(case: Case, ops: list[Any]) -> Runner:
    import torch

    tensors = [torch.from_dlpack(x) for x in ops]
    return _torch_runner(
        torch, case, tensors, lambda t: t.cpu().numpy(), torch.cuda.synchronize
    )


_BINARY = frozenset({"einsum"})
_EINSUM_LIKE = frozenset({"einsum", "trace", "reduce"})
_OVERHEAD_ONLY = frozenset({"overhead"})

PEERS: dict[str, Peer] = {
    peer.name: peer
    for peer in (
        Peer("numpy", "numpy.einsum(optimize=True); transpose copy; ndarray.sum", "cpu", "numpy",
             ALL_KINDS, _numpy),
        Peer("numpy-noopt", "numpy.einsum(optimize=False)", "cpu", "numpy", _EINSUM_LIKE,
             _numpy_noopt, _OVERHEAD_ONLY),
        Peer("opt_einsum", "opt_einsum.contract", "cpu", "opt_einsum", _EINSUM_LIKE, _opt_einsum),
        Peer("torch", "torch.einsum (CPU); permute copy_; torch.sum", "cpu", "torch", ALL_KINDS,
             _torch),
        Peer("pytblis", "pytblis.contract / einsum / transpose_add (TBLIS)", "cpu", "pytblis",
             ALL_KINDS, _pytblis),
        Peer("cupy", "cupy.einsum; transpose copy; ndarray.sum", "gpu", "cupy", ALL_KINDS, _cupy),
        Peer("nvmath", "nvmath.tensor.BinaryContraction, planned once", "gpu", "nvmath.tensor",
             _BINARY, _nvmath_held, operands=2),
        Peer("nvmath-fn", "nvmath.tensor.binary_contraction (function form)", "gpu",
             "nvmath.tensor", _BINARY, _nvmath_function, _OVERHEAD_ONLY, operands=2),
        Peer("torch-cuda", "torch.einsum on CUDA tensors", "gpu", "torch", ALL_KINDS, _torch_cuda),
    )
}


TWIN_SUFFIX = "-twin"


def twin_name(name: str) -> str:
    """The name of peer ``name``'s twin: ``<name>-twin``."""
    return name + TWIN_SUFFIX


def twin(name: str) -> Peer:
    """A second, identical copy of peer ``name``, named ``<name>-twin``.

    It calls exactly what the peer calls, so the difference between the two in one run
    is the host's and the runner's: the noise floor (:mod:`gpu_tc.bench.noise`).

    Raises:
        KeyError: no peer has that name.
    """
    peer = PEERS[name]
    return dataclasses.replace(peer, name=twin_name(name), twin_of=name,
                               title=f"{peer.title}: a second copy, timed in the same rounds")


def lookup(name: str) -> Peer:
    """The peer of that name, a twin's (``<peer>-twin``) included.

    Raises:
        KeyError: no peer, nor a twin of one, has that name.
    """
    if name.endswith(TWIN_SUFFIX) and name not in PEERS:
        return twin(name.removesuffix(TWIN_SUFFIX))
    return PEERS[name]


def default_peers(backend: str, suite: str) -> list[str]:
    """The peers a suite runs against on ``backend`` when ``--peers`` is not given."""
    return [
        p.name for p in PEERS.values()
        if p.device == backend and KINDS[suite] in p.kinds
        and (p.suites is None or suite in p.suites)
    ]


def runs_case(peer: Peer, case: Case) -> bool:
    """Whether ``peer`` has an implementation for ``case`` (nvmath: binary only)."""
    if case.kind not in peer.kinds:
        return False
    return peer.operands is None or peer.operands == len(case.terms)
