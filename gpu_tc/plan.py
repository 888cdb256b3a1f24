"""Plan: a held einsum plan with execute / free and a context manager."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from .backend import UNSCALED, Backend
from .call import Call, adopt, check_out
from .compose import EinsumPlan, relabel
from .errors import OutputError, PlanStateError, ShapeError
from .expression import expand, parse
from .memory import nbytes
from .problem import OperandLayout
from .run import ASIDE, check_room, run
from .strides import same_layout

# The most layouts of ``out`` a held plan keeps plans for (then it starts again).
MOST_OUT_LAYOUTS = 8


class Plan:
    """An einsum planned for operands of fixed shapes, strides and dtypes.

    Made by :func:`gpu_tc.prepare`. ``route`` and ``reason`` say how each stage runs.
    After :meth:`free` the plan refuses to execute. A plan made without ``out`` writes
    an ``out`` laid out otherwise than its new results through a plan of its own for
    that layout, built at the first such call and held with this one, as
    ``einsum(..., out=out)`` would (not through a temporary and a copy).

    Example:
        >>> import numpy as np, gpu_tc
        >>> a = np.ones((2, 2))
        >>> plan = gpu_tc.prepare("ij,jk->ik", a, a)
        >>> plan.route
        'blas:small'
        >>> plan.free()
    """

    def __init__(
        self,
        subscripts: str,
        plan: EinsumPlan,
        backend: Backend,
        layouts: Sequence[OperandLayout],
        out: Any,
        plan_for: Callable[[Call], EinsumPlan],
        out_overlaps: bool = False,
    ) -> None:
        """``plan_for(call)``: the plan of the same einsum and keywords for a call with
        an ``out``; ``out_overlaps``: ``out`` shares memory with an operand.

        Raises:
            MemoryLimitError: ``out`` cannot take the result in place, and the result
                set aside does not fit the plan's ``memory_limit``.
        """
        self.subscripts = subscripts
        self.backend = backend.name
        self._plan: EinsumPlan | None = plan
        self._backend = backend
        self._layouts = tuple(layouts)
        self._out_layout = None if out is None else backend.layout(out)
        self._out_aside = self._out_layout is not None and (
            out_overlaps
            or not same_layout(plan.output, self._out_layout.strides)
            or self._out_layout.dtype != plan.output.dtype
        )
        if self._out_aside:
            check_room(plan, nbytes(plan.output), ASIDE)
        # The cached plan may have been built for equivalent subscripts with other letters.
        built = plan.program.expression.labels
        mine = expand(parse(subscripts), tuple(len(x.shape) for x in layouts)).labels
        self._names = dict(zip(built, mine))
        # The backend's layout keys of operands that passed the checks as they were given
        # (no conversion): a call whose operands have these keys skips the checks.
        self._checked_keys: tuple[Any, ...] | None = None
        self._plan_for = plan_for
        self._by_out: dict[Hashable, EinsumPlan] = {}  # plans for an out, by its layout key

    @property
    def route(self) -> str:
        """The route of each stage, joined by "+"."""
        return self._live().route

    @property
    def reason(self) -> str:
        """Why each stage takes its route, naming labels as ``subscripts`` does."""
        return relabel(self._live().reason, self._names)

    @property
    def temporary_bytes(self) -> int:
        """The most memory one execution takes besides its result and ``out``: copies of
        operands, intermediates, workspace (predicted when the plan was made; an ``out``
        the plan cannot write in place, or one that overlaps an operand, adds a
        result-sized temporary)."""
        plan = self._live()
        return plan.temporary_bytes + (nbytes(plan.output) if self._out_aside else 0)

    def execute(self, *operands: Any, out: Any = None) -> Any:
        """Run the plan on operands laid out like the ones it was prepared for.

        Raises:
            ShapeError: an operand's shape, strides or dtype differ from the plan's.
            OutputError: ``out`` differs from the ``out`` the plan was prepared with.
            PlanStateError: the plan was freed.
        """
        plan = self._live()
        backend = self._backend
        keys = self._checked_keys
        if out is None and keys is not None and len(operands) == len(keys):
            array_type, layout_key = backend.array_type, backend.layout_key
            if all(type(x) is array_type and layout_key(x) == key
                   for x, key in zip(operands, keys)):
                return run(plan, backend, operands, None, UNSCALED, None)
        arrays = adopt(backend, operands)
        if len(arrays) != len(self._layouts):
            raise ShapeError(
                f"the plan for {self.subscripts!r} takes {len(self._layouts)} operand(s), "
                f"got {len(arrays)}"
            )
        for index, (x, expected) in enumerate(zip(arrays, self._layouts)):
            got = backend.layout(x)
            if got != expected:
                raise ShapeError(
                    f"operand {index} has shape {got.shape}, strides {got.strides} and dtype "
                    f"{got.dtype!r} but the plan for {self.subscripts!r} was prepared for "
                    f"{expected.shape}, {expected.strides} and {expected.dtype!r}"
                )
        if out is not None:
            check_out(backend, out, f"Plan({self.subscripts!r}).execute")
        given = None if out is None else backend.layout(out)
        if given != self._out_layout and not (given is not None and self._out_layout is None):
            raise OutputError(
                f"out does not match the out the plan for {self.subscripts!r} was prepared with"
            )
        if given is not None and self._out_layout is None:
            if given.shape != plan.output.extents or backend.dtype(out) != plan.result:
                raise OutputError(
                    f"out has shape {given.shape} and dtype {backend.dtype(out)} but the plan "
                    f"for {self.subscripts!r} gives {plan.output.extents} and {plan.result}"
                )
        if out is None and all(type(x) is backend.array_type and x is given_x
                               for x, given_x in zip(arrays, operands)):
            self._checked_keys = tuple(backend.layout_key(x) for x in arrays)
        if given is not None and self._out_layout is None:
            plan = self._writing(plan, arrays, out, given)
        return run(plan, backend, arrays, out, UNSCALED, None)

    def _writing(self, plan: EinsumPlan, arrays: list[Any], out: Any,
                 layout: OperandLayout) -> EinsumPlan:
        """``plan`` where it writes ``out``'s layout, else the plan built for it."""
        if same_layout(plan.output, layout.strides):
            return plan
        key = self._backend.layout_key(out)
        held = self._by_out.get(key)
        if held is None:
            if len(self._by_out) >= MOST_OUT_LAYOUTS:
                self._by_out.clear()
            context = f"Plan({self.subscripts!r}).execute"
            held = self._by_out[key] = self._plan_for(
                Call(context, self._backend, arrays, out))
        return held

    def autotune(self, iterations: int = 8) -> int:
        """Opt in to autotuning: the next ``iterations`` executions try other kernels.

        Only cuTENSOR stages tune (cuTENSOR's incremental autotuning: each try is
        timed, later executions use the fastest); BLAS and cuBLAS stages have no
        kernel choice to make.

        Returns:
            How many stages will tune (0 on the CPU backend).
        """
        return sum(stage.autotune(iterations) for stage in self._live().stages)

    def free(self) -> None:
        """Release the plan's resources; the plan cannot execute afterwards."""
        self._plan = None
        self._by_out.clear()

    def __enter__(self) -> Plan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    def __repr__(self) -> str:
        if self._plan is None:
            return f"Plan({self.subscripts!r}, backend={self.backend!r}, freed)"
        return (
            f"Plan({self.subscripts!r}, backend={self.backend!r}, route={self.route!r}, "
            f"reason={self.reason!r})"
        )

    def _live(self) -> EinsumPlan:
        if self._plan is None:
            raise PlanStateError(f"the plan for {self.subscripts!r} was freed")
        return self._plan
