"""Emulated cuTENSOR: handles, tensor descriptors and operation descriptors.

Each create call checks what ``cutensor.h`` states for it (see the rule in each
error) and what the real library was seen to refuse (unary operators, in ``_term``);
where the header leaves support open, default mode accepts and strict mode
(``GPU_DOUBLE_STRICT=1``) refuses with NOT_SUPPORTED.
"""

from __future__ import annotations

import numpy as np

from . import cutensor_objects as objects
from . import memory, runtime
from .cutensor_objects import Handle, Operation, Tensor, Term
from .cutensor_types import (
    BINARY,
    BINARY_OPS,
    COMPUTE_BY_ADDRESS,
    CONTRACTION,
    DTYPES,
    PERMUTATION,
    REAL_ONLY,
    REDUCE_OPS,
    REDUCTION,
    TRINARY,
    UNARY,
    Operator,
    Status,
    fail,
)
from .signatures import binding

INVALID, UNSUPPORTED = Status.INVALID_VALUE, Status.NOT_SUPPORTED
COMPLEX_UNARY = frozenset({Operator.OP_IDENTITY, Operator.OP_CONJ})


@binding("create() -> intptr_t")
def create() -> int:
    objects.require_library()
    return objects.new("handle", Handle(runtime.current_device()))


@binding("destroy(intptr_t handle)")
def destroy(handle: int) -> None:
    objects.destroy(handle, "handle")


@binding(
    "create_tensor_descriptor(intptr_t handle, uint32_t num_modes, extent, stride, "
    "int data_type, uint32_t alignment_requirement) -> intptr_t"
)
def create_tensor_descriptor(handle, num_modes, extent, stride, data_type, alignment_requirement):
    objects.get(handle, "handle", "handle")
    extents = memory.host_ints(extent, num_modes, "int64")
    if stride == 0:  # NULL: packed, generalized column-major
        strides = tuple(int(s) for s in np.cumprod((1,) + extents[:-1]))[:num_modes]
    else:
        strides = memory.host_ints(stride, num_modes, "int64")
    if len(extents) != num_modes or len(strides) != num_modes:
        raise fail(INVALID, f"num_modes={num_modes} but {len(extents)} extents, "
                            f"{len(strides)} strides")
    if any(e <= 0 for e in extents):
        raise fail(INVALID, f"every extent must be larger than zero, got {extents}")
    if any(s <= 0 for s in strides):
        raise fail(INVALID, f"every stride must be larger than zero (omit a mode to broadcast), "
                            f"got {strides}")
    if data_type not in DTYPES:
        raise fail(UNSUPPORTED, f"data type {data_type} is not emulated")
    if alignment_requirement <= 0:
        raise fail(INVALID, f"alignment_requirement {alignment_requirement} is not positive")
    if objects.STRICT and alignment_requirement & (alignment_requirement - 1):
        raise fail(UNSUPPORTED, f"alignment_requirement {alignment_requirement} is not a power "
                                "of two (strict: cutensor.h is silent)")
    return objects.new("tensor descriptor", Tensor(handle, extents, strides, data_type,
                                                    alignment_requirement))


@binding("destroy_tensor_descriptor(intptr_t desc)")
def destroy_tensor_descriptor(desc: int) -> None:
    objects.destroy(desc, "tensor descriptor")


def _term(kind: str, role: str, desc: int, modes: object, op: int) -> Term:
    tensor = objects.get(desc, "tensor descriptor", f"desc_{role.lower()}")
    count = len(tensor.extents)
    values = memory.host_ints(modes, count, "int32")  # type: ignore[arg-type]
    if len(values) != count:
        raise fail(INVALID, f"mode_{role.lower()} has {len(values)} modes, its descriptor {count}")
    if len(set(values)) != count:
        raise fail(INVALID, "each mode may appear in each tensor at most once: "
                            f"mode_{role.lower()}={values}")
    if op not in UNARY:
        raise fail(INVALID, f"op_{role.lower()}={op} is not a unary operator")
    # What cuTENSOR 2.8.0 answered on an H200 (gpu_tc issue #11): complex data takes
    # IDENTITY and CONJ only, real data every unary operator but CONJ.
    complex_data = DTYPES[tensor.data_type].kind == "c"
    if complex_data and Operator(op) not in COMPLEX_UNARY:
        raise fail(INVALID, f"{Operator(op).name} of complex {role}")
    if not complex_data and Operator(op) is Operator.OP_CONJ:
        raise fail(INVALID, f"CONJ of real {role}")
    if (kind, op) in objects.REFUSED:
        raise fail(UNSUPPORTED, f"{Operator(op).name} in a {kind} (GPU_DOUBLE_REFUSE)")
    return Term(desc, tensor, values, op)


def _check(kind: str, terms: dict[str, Term], subsets: str) -> None:
    """Rules every operation shares: one extent per mode, each "XY" of ``subsets`` means
    X's modes appear in Y, and C's modes and descriptor are identical to D's."""
    extents: dict[int, tuple[str, int]] = {}
    for role, term in terms.items():
        for mode, extent in zip(term.modes, term.tensor.extents):
            seen = extents.setdefault(mode, (role, extent))
            if seen[1] != extent:
                raise fail(INVALID, f"mode {mode} has extent {seen[1]} in {seen[0]} but {extent} "
                                    f"in {role}")
    for small, big in subsets.split():
        if not set(terms[small].modes) <= set(terms[big].modes):
            raise fail(INVALID, f"modes of {small} must also appear in {big} ({kind})")
    if "C" in terms and "D" in terms:
        c, d = terms["C"], terms["D"]
        if c.modes != d.modes:
            raise fail(INVALID, f"mode_c must be identical to mode_d: {c.modes} != {d.modes}")
        if objects.STRICT and c.desc != d.desc:
            raise fail(INVALID, "descC must be identical to descD (strict: the same descriptor)")
        if c.tensor != d.tensor:
            raise fail(INVALID, f"descC must be identical to descD: {c.tensor} != {d.tensor}")
    if objects.STRICT:
        for role, term in terms.items():
            if not term.modes and not (kind == "reduction" and role in "CD"):
                raise fail(UNSUPPORTED, f"{role} has no modes: cutensor.h documents 0-mode "
                                        f"tensors only as a reduction's C and D")


def _compute(desc_compute: int) -> str:
    name = COMPUTE_BY_ADDRESS.get(desc_compute)
    if name is None:
        raise fail(INVALID, f"desc_compute {desc_compute:#x} is not a compute descriptor")
    return name


def _scalar(table: dict, key: tuple, kind: str) -> int:
    scalar = table.get(key)
    if scalar is None:
        raise fail(UNSUPPORTED, f"data types and compute {key} are not a documented {kind} "
                                "combination")
    return scalar


def _binary_op(op: int, terms: dict[str, Term], name: str) -> int:
    if op not in BINARY_OPS:
        raise fail(INVALID, f"{name}={op} is not a binary operator")
    if Operator(op) in REAL_ONLY and any(DTYPES[t.tensor.data_type].kind == "c"
                                         for t in terms.values()):
        raise fail(UNSUPPORTED, f"{name}={Operator(op).name} of complex data")
    return op


@binding(
    "create_contraction(intptr_t handle, intptr_t desc_a, mode_a, int op_a, intptr_t desc_b, "
    "mode_b, int op_b, intptr_t desc_c, mode_c, int op_c, intptr_t desc_d, mode_d, "
    "intptr_t desc_compute) -> intptr_t"
)
def create_contraction(handle, desc_a, mode_a, op_a, desc_b, mode_b, op_b, desc_c, mode_c, op_c,
                       desc_d, mode_d, desc_compute):
    objects.get(handle, "handle", "handle")
    k = "contraction"
    terms = {"A": _term(k, "A", desc_a, mode_a, op_a), "B": _term(k, "B", desc_b, mode_b, op_b),
             "C": _term(k, "C", desc_c, mode_c, op_c), "D": _term(k, "D", desc_d, mode_d, 1)}
    _check(k, terms, "")
    a, b, d = (set(terms[r].modes) for r in "ABD")
    if not d <= a | b or not a <= b | d or not b <= a | d:
        raise fail(INVALID, "every mode must appear in two of A, B and D")
    if op_c != Operator.OP_IDENTITY:
        raise fail(UNSUPPORTED, "op_c: currently only CUTENSOR_OP_IDENTITY is supported")
    for role, op in (("A", op_a), ("B", op_b)):
        if op not in (Operator.OP_IDENTITY, Operator.OP_CONJ):
            raise fail(UNSUPPORTED, f"op_{role.lower()}={Operator(op).name} in a contraction")
    if objects.STRICT and not a & b - d:
        raise fail(UNSUPPORTED, "no contracted mode: cutensor.h documents none without one")
    compute = _compute(desc_compute)
    key = (*(terms[r].tensor.data_type for r in "ABC"), compute)
    scalar = _scalar(CONTRACTION, key, k)
    return objects.new("operation descriptor", Operation(k, handle, terms, (), compute, scalar))


@binding(
    "create_reduction(intptr_t handle, intptr_t desc_a, mode_a, int op_a, intptr_t desc_c, "
    "mode_c, int op_c, intptr_t desc_d, mode_d, int op_reduce, intptr_t desc_compute) "
    "-> intptr_t"
)
def create_reduction(handle, desc_a, mode_a, op_a, desc_c, mode_c, op_c, desc_d, mode_d,
                     op_reduce, desc_compute):
    objects.get(handle, "handle", "handle")
    k = "reduction"
    terms = {"A": _term(k, "A", desc_a, mode_a, op_a), "C": _term(k, "C", desc_c, mode_c, op_c),
             "D": _term(k, "D", desc_d, mode_d, 1)}
    _check(k, terms, "DA")
    if op_reduce not in REDUCE_OPS:
        raise fail(INVALID, f"op_reduce={op_reduce} is not ADD, MUL, MAX or MIN")
    _binary_op(op_reduce, terms, "op_reduce")
    compute = _compute(desc_compute)
    scalar = _scalar(REDUCTION, (terms["A"].tensor.data_type, terms["C"].tensor.data_type,
                                 compute), k)
    return objects.new("operation descriptor",
                       Operation(k, handle, terms, (op_reduce,), compute, scalar))


@binding(
    "create_permutation(intptr_t handle, intptr_t desc_a, mode_a, int op_a, intptr_t desc_b, "
    "mode_b, intptr_t desc_compute) -> intptr_t"
)
def create_permutation(handle, desc_a, mode_a, op_a, desc_b, mode_b, desc_compute):
    objects.get(handle, "handle", "handle")
    k = "permutation"
    terms = {"A": _term(k, "A", desc_a, mode_a, op_a), "B": _term(k, "B", desc_b, mode_b, 1)}
    _check(k, terms, "AB")
    compute = _compute(desc_compute)
    scalar = _scalar(PERMUTATION, (terms["A"].tensor.data_type, terms["B"].tensor.data_type,
                                   compute), k)
    return objects.new("operation descriptor", Operation(k, handle, terms, (), compute, scalar))


@binding(
    "create_elementwise_binary(intptr_t handle, intptr_t desc_a, mode_a, int op_a, "
    "intptr_t desc_c, mode_c, int op_c, intptr_t desc_d, mode_d, int op_ac, "
    "intptr_t desc_compute) -> intptr_t"
)
def create_elementwise_binary(handle, desc_a, mode_a, op_a, desc_c, mode_c, op_c, desc_d, mode_d,
                              op_ac, desc_compute):
    objects.get(handle, "handle", "handle")
    k = "elementwise"
    terms = {"A": _term(k, "A", desc_a, mode_a, op_a), "C": _term(k, "C", desc_c, mode_c, op_c),
             "D": _term(k, "D", desc_d, mode_d, 1)}
    _check(k, terms, "AD")
    _binary_op(op_ac, terms, "op_ac")
    compute = _compute(desc_compute)
    scalar = _scalar(BINARY, (terms["A"].tensor.data_type, terms["C"].tensor.data_type,
                              compute), k)
    return objects.new("operation descriptor",
                       Operation("binary", handle, terms, (op_ac,), compute, scalar))


@binding(
    "create_elementwise_trinary(intptr_t handle, intptr_t desc_a, mode_a, int op_a, "
    "intptr_t desc_b, mode_b, int op_b, intptr_t desc_c, mode_c, int op_c, intptr_t desc_d, "
    "mode_d, int op_ab, int op_abc, intptr_t desc_compute) -> intptr_t"
)
def create_elementwise_trinary(handle, desc_a, mode_a, op_a, desc_b, mode_b, op_b, desc_c,
                               mode_c, op_c, desc_d, mode_d, op_ab, op_abc, desc_compute):
    objects.get(handle, "handle", "handle")
    k = "elementwise"
    terms = {"A": _term(k, "A", desc_a, mode_a, op_a), "B": _term(k, "B", desc_b, mode_b, op_b),
             "C": _term(k, "C", desc_c, mode_c, op_c), "D": _term(k, "D", desc_d, mode_d, 1)}
    _check(k, terms, "AD BD")
    ops = (_binary_op(op_ab, terms, "op_ab"), _binary_op(op_abc, terms, "op_abc"))
    compute = _compute(desc_compute)
    key = (*(terms[r].tensor.data_type for r in "ABC"), compute)
    scalar = _scalar(TRINARY, key, k)
    return objects.new("operation descriptor", Operation("trinary", handle, terms, ops, compute,
                                                         scalar))


@binding("destroy_operation_descriptor(intptr_t desc)")
def destroy_operation_descriptor(desc: int) -> None:
    objects.destroy(desc, "operation descriptor")
