"""Bad input raises one specific gpu_tc error, a subclass of the built-in a caller would
catch, with a message that names the expression and the culprit."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import gpu_tc
from gpu_tc import BinaryOp, ReduceOp, UnaryOp

A = np.ones((2, 3))
B = np.ones((3, 4))


def _read_only() -> np.ndarray:
    out = np.zeros((2, 4))
    out.setflags(write=False)
    return out


def case(name: str, call: Callable[[], Any], error: type, builtin: type, *patterns: str) -> Any:
    """A call that must raise ``error`` (a ``builtin`` subclass) matching every pattern."""
    return pytest.param(call, error, builtin, patterns, id=name)


CASES = [
    # operand count
    case(
        "too-few-operands",
        lambda: gpu_tc.einsum("ij,jk->ik", A),
        gpu_tc.ExpressionError,
        ValueError,
        r"'ij,jk->ik'",
        r"2 term\(s\) but 1 operand\(s\)",
    ),
    case(
        "too-many-operands",
        lambda: gpu_tc.einsum("ij->ji", A, B),
        gpu_tc.ExpressionError,
        ValueError,
        r"'ij->ji'",
        r"1 term\(s\) but 2 operand\(s\)",
    ),
    case(
        "no-operand",
        lambda: gpu_tc.einsum("ij"),
        gpu_tc.ExpressionError,
        ValueError,
        r"'ij'",
        r"no operand",
    ),
    case(
        "no-arguments", lambda: gpu_tc.einsum(), gpu_tc.ExpressionError, ValueError, r"subscripts"
    ),
    # extents
    case(
        "extent-mismatch",
        lambda: gpu_tc.einsum("abcd,dbea->ec", np.ones((2, 4, 3, 2)), np.ones((2, 5, 2, 2))),
        gpu_tc.ShapeError,
        ValueError,
        re.escape("label 'b' has extent 4 in operand 0 but 5 in operand 1 in 'abcd,dbea->ec'"),
    ),
    case(
        "extent-mismatch-third-operand",
        lambda: gpu_tc.einsum("ij,jk,kl->il", A, B, np.ones((5, 2))),
        gpu_tc.ShapeError,
        ValueError,
        re.escape("label 'k' has extent 4 in operand 1 but 5 in operand 2"),
        r"'ij,jk,kl->il'",
    ),
    case(
        "diagonal-extent-mismatch",
        lambda: gpu_tc.einsum("ii", A),
        gpu_tc.ShapeError,
        ValueError,
        r"label 'i'",
        r"extents 2 and 3",
        r"in 'ii'",
    ),
    case(
        "ellipsis-extent-mismatch",
        lambda: gpu_tc.einsum("...i,...i->...", np.ones((2, 3)), np.ones((4, 3))),
        gpu_tc.ShapeError,
        ValueError,
        r"'\.\.\.'",
        r"extent 2 in operand 0 but 4 in operand 1",
        r"'\.\.\.i,\.\.\.i->\.\.\.'",
    ),
    # bad characters and syntax
    case(
        "digit-label",
        lambda: gpu_tc.einsum("i1,j", A, B),
        gpu_tc.ExpressionError,
        ValueError,
        r"invalid label '1'",
        r"'i1,j'",
    ),
    case(
        "dot-label",
        lambda: gpu_tc.einsum("a.b", A),
        gpu_tc.ExpressionError,
        ValueError,
        r"'\.' that is not part of an ellipsis",
        r"'a\.b'",
    ),
    case(
        "dash-label",
        lambda: gpu_tc.einsum("a-b", A),
        gpu_tc.ExpressionError,
        ValueError,
        r"'->'",
        r"'a-b'",
    ),
    case(
        "two-arrows",
        lambda: gpu_tc.einsum("ij->i->j", A),
        gpu_tc.ExpressionError,
        ValueError,
        r"'->'",
        r"'ij->i->j'",
    ),
    case(
        "two-ellipses",
        lambda: gpu_tc.einsum("......->", A),
        gpu_tc.ExpressionError,
        ValueError,
        r"more than one '\.\.\.'",
        r"'\.\.\.\.\.\.->'",
    ),
    case(
        "repeated-output-label",
        lambda: gpu_tc.einsum("ij->ii", A),
        gpu_tc.ExpressionError,
        ValueError,
        r"output label 'i' appears more than once",
        r"'ij->ii'",
    ),
    case(
        "output-label-not-in-inputs",
        lambda: gpu_tc.einsum("ij->k", A),
        gpu_tc.ExpressionError,
        ValueError,
        r"output label 'k'",
        r"'ij->k'",
    ),
    case(
        "subscripts-not-a-string",
        lambda: gpu_tc.einsum(3, A),
        gpu_tc.ExpressionTypeError,
        TypeError,
        r"sublist entry",
    ),
    case(
        "sublist-entry-a-float",
        lambda: gpu_tc.einsum(A, [0, 1.0]),
        gpu_tc.ExpressionTypeError,
        TypeError,
        r"sublist entry 1\.0 in \[0, 1\.0\] must be an integer or Ellipsis",
    ),
    case(
        "sublist-out-of-range",
        lambda: gpu_tc.einsum(A, [0, 60]),
        gpu_tc.ExpressionError,
        ValueError,
        r"sublist entry 60",
        r"\[0, 60\]",
    ),
    case(
        "sublist-not-a-sequence",
        lambda: gpu_tc.einsum(A, 5),
        gpu_tc.ExpressionTypeError,
        TypeError,
        r"sublist must be a sequence, got 5",
    ),
    # ranks and ellipsis
    case(
        "rank-mismatch",
        lambda: gpu_tc.einsum("ijk->i", A),
        gpu_tc.ShapeError,
        ValueError,
        r"term 0 \('ijk'\) has 3 label\(s\) but operand 0 has rank 2",
        r"'ijk->i'",
    ),
    case(
        "rank-mismatch-second",
        lambda: gpu_tc.einsum("ij,j->i", A, B),
        gpu_tc.ShapeError,
        ValueError,
        r"term 1 \('j'\)",
        r"operand 1 has rank 2",
        r"'ij,j->i'",
    ),
    case(
        "ellipsis-rank-too-small",
        lambda: gpu_tc.einsum("...ijk->", A),
        gpu_tc.ShapeError,
        ValueError,
        r"names 3 axes but operand 0 has rank 2",
        r"'\.\.\.ijk->'",
    ),
    case(
        "ellipsis-missing-from-output",
        lambda: gpu_tc.einsum("...ij->ij", np.ones((5, 2, 3))),
        gpu_tc.ShapeError,
        ValueError,
        r"'\.\.\.' covers 1 axis",
        r"no '\.\.\.'",
        r"'\.\.\.ij->ij'",
    ),
    # dtypes
    case(
        "longdouble-operand",
        lambda: gpu_tc.einsum("i,i", np.ones(3), np.ones(3, np.longdouble)),
        gpu_tc.DTypeError,
        TypeError,
        r"operand 1 has dtype float128",
        r"'i,i'",
    ),
    case(
        "datetime-operand",
        lambda: gpu_tc.einsum("i->", np.zeros(3, "datetime64[s]")),
        gpu_tc.DTypeError,
        TypeError,
        r"operand 0 has dtype datetime64\[s\]",
        r"'i->'",
    ),
    case(
        "dtype-keyword-unsafe-cast",
        lambda: gpu_tc.einsum("i,i", np.ones(3), np.ones(3), dtype=np.float32),
        gpu_tc.DTypeError,
        TypeError,
        r"cannot cast operand 0 from dtype float64 to float32 according to the rule 'safe'",
        r"'i,i'",
    ),
    case(
        "dtype-keyword-not-a-dtype",
        lambda: gpu_tc.einsum("i,i", np.ones(3), np.ones(3), dtype="bad_data_type"),
        gpu_tc.DTypeError,
        TypeError,
        r"dtype='bad_data_type' is not a dtype",
        r"'i,i'",
    ),
    case(
        "dtype-keyword-longdouble",
        lambda: gpu_tc.einsum("i,i", np.ones(3), np.ones(3), dtype=np.longdouble),
        gpu_tc.DTypeError,
        TypeError,
        r"the result has dtype float128",
    ),
    case(
        "casting-keyword-unknown",
        lambda: gpu_tc.einsum("i,i", np.ones(3), np.ones(3), casting="blah"),
        gpu_tc.OptionsError,
        ValueError,
        r"casting must be one of",
        r"'blah'",
    ),
    case(
        "order-keyword-unknown",
        lambda: gpu_tc.einsum("i,i", np.ones(3), np.ones(3), order="W"),
        gpu_tc.OptionsError,
        ValueError,
        r"order must be one of 'C', 'F', 'A', or 'K' \(got 'W'\)",
    ),
    case(
        "optimize-keyword-not-a-path",
        lambda: gpu_tc.einsum("i,i", np.ones(3), np.ones(3), optimize=3),
        gpu_tc.OptionsTypeError,
        TypeError,
        r"Did not understand the path: optimize=3",
    ),
    case(
        "einsum-path-incomplete",
        lambda: gpu_tc.einsum("i,i,i", np.ones(3), np.ones(3), np.ones(3),
                              optimize=["einsum_path", (0, 1)]),
        gpu_tc.PathError,
        RuntimeError,
        r"Invalid einsum_path is specified: 1 more operands has to be contracted",
        r"'i,i,i'",
    ),
    case(
        "einsum-path-position-out-of-range",
        lambda: gpu_tc.einsum("i,i", np.ones(3), np.ones(3), optimize=["einsum_path", (0, 2)]),
        gpu_tc.PathError,
        IndexError,
        r"step 0 of the path, \(0, 2\), names position 2 out of range: 2 tensors are left",
    ),
    case(
        "einsum-path-position-twice",
        lambda: gpu_tc.einsum("i,i", np.ones(3), np.ones(3), optimize=["einsum_path", (1, 1)]),
        gpu_tc.PathError,
        IndexError,
        r"names position 1 twice",
    ),
    case(
        "einsum-path-empty-step",
        lambda: gpu_tc.einsum("i,i", np.ones(3), np.ones(3), optimize=["einsum_path", ()]),
        gpu_tc.PathError,
        RuntimeError,
        r"step 0 of the path names no operand",
    ),
    case(
        "optimize-unknown-name-three-operands",
        lambda: gpu_tc.einsum("i,i,i", np.ones(3), np.ones(3), np.ones(3), optimize="fastest"),
        gpu_tc.PathNameError,
        KeyError,
        r"Path name 'fastest' not found",
    ),
    case(
        "order-keyword-not-a-str",
        lambda: gpu_tc.einsum("i,i", np.ones(3), np.ones(3), order=3),
        gpu_tc.OptionsTypeError,
        TypeError,
        r"order must be str, not int",
    ),
    case(
        "sublist-entry-a-bool",
        lambda: gpu_tc.einsum(np.ones(2), [True]),
        gpu_tc.ExpressionTypeError,
        TypeError,
        r"sublist entry True",
    ),
    case(
        "einsum-path-step-not-positions",
        lambda: gpu_tc.einsum("i,i", np.ones(3), np.ones(3), optimize=["einsum_path", (0, "a")]),
        gpu_tc.OptionsTypeError,
        TypeError,
        r"step \(0, 'a'\) of the path",
    ),
    case(
        "object-operand",
        lambda: gpu_tc.einsum("i,i", np.ones(3), np.ones(3, object)),
        gpu_tc.DTypeError,
        TypeError,
        r"operand 1 has dtype object",
        r"'i,i'",
    ),
    case(
        "str-operand",
        lambda: gpu_tc.einsum("i,i", np.array(["a", "b"]), np.ones(2)),
        gpu_tc.DTypeError,
        TypeError,
        r"operand 0 has dtype <U1",
        r"'i,i'",
    ),
    case(
        "ragged-list-operand",
        lambda: gpu_tc.einsum("ij", [[1.0, 2.0], [3.0]]),
        gpu_tc.OperandError,
        TypeError,
        r"operand 0 cannot be read as an array",
    ),
    case(
        "out-wrong-shape",
        lambda: gpu_tc.einsum("ij,jk->ik", A, B, out=np.zeros((2, 5))),
        gpu_tc.OutputError,
        ValueError,
        r"out has shape \(2, 5\)",
        r"\(2, 4\)",
        r"'ij,jk->ik'",
    ),
    case(
        "out-wrong-dtype",
        lambda: gpu_tc.einsum("ij,jk->ik", A, B, out=np.zeros((2, 4), np.float32)),
        gpu_tc.OutputTypeError,
        TypeError,
        r"out has dtype float32 but the result has dtype float64, which the rule 'safe'",
        r"'ij,jk->ik'",
    ),
    case(
        "out-dtype-casting-no",
        lambda: gpu_tc.einsum("ij,jk->ik", A.astype(np.float32), B, casting="no",
                              out=np.zeros((2, 4))),
        gpu_tc.DTypeError,
        TypeError,
        r"cannot cast operand 0 from dtype float32 to float64 according to the rule 'no'",
    ),
    case(
        "out-read-only",
        lambda: gpu_tc.einsum("ij,jk->ik", A, B, out=_read_only()),
        gpu_tc.OutputError,
        ValueError,
        r"read-only",
        r"'ij,jk->ik'",
    ),
    case(
        "out-broadcast-view",
        lambda: gpu_tc.einsum("ij,jk->ik", A, B, out=np.broadcast_to(np.zeros(4), (2, 4))),
        gpu_tc.OutputError,
        ValueError,
        r"read-only",
        r"'ij,jk->ik'",
    ),
    case(
        "out-elements-overlap",
        lambda: gpu_tc.einsum(
            "ij,jk->ik", A, B,
            out=np.lib.stride_tricks.as_strided(np.zeros(8), (2, 4), (8, 8)),
        ),
        gpu_tc.OutputError,
        ValueError,
        r"out has elements that share memory",
        r"'ij,jk->ik'",
    ),
    case(
        "out-is-a-list",
        lambda: gpu_tc.einsum("ij,jk->ik", A, B, out=[[0.0] * 4] * 2),
        gpu_tc.OutputError,
        ValueError,
        r"out is a list",
        r"'ij,jk->ik'",
    ),
    case(
        "permute-out-is-a-list",
        lambda: gpu_tc.permute("ij->ji", A, out=[0.0] * 6),
        gpu_tc.OutputError,
        ValueError,
        r"out is a list",
        r"'ij->ji'",
    ),
    case(
        "trace-out-wrong-shape",
        lambda: gpu_tc.trace(np.ones((3, 3, 2)), out=np.zeros(3)),
        gpu_tc.OutputError,
        ValueError,
        r"out has shape \(3,\)",
        r"\(2,\)",
        r"trace",
    ),
    # trace axes
    case(
        "trace-axis-out-of-range",
        lambda: gpu_tc.trace(A, axis1=0, axis2=2),
        gpu_tc.AxisError,
        IndexError,
        r"axis2=2 is out of range for rank 2",
        r"trace",
    ),
    case(
        "trace-negative-axis-out-of-range",
        lambda: gpu_tc.trace(A, axis1=-3, axis2=0),
        gpu_tc.AxisError,
        np.exceptions.AxisError,
        r"axis1=-3 is out of range",
        r"trace",
    ),
    case(
        "trace-equal-axes",
        lambda: gpu_tc.trace(A, 0, 1, -1),
        gpu_tc.ShapeError,
        ValueError,
        r"axis1 and axis2 are both axis 1",
        r"trace",
    ),
    case(
        "trace-rank-1",
        lambda: gpu_tc.trace(np.ones(3)),
        gpu_tc.AxisError,
        ValueError,
        r"axis2=1 is out of range for rank 1",
    ),
    case(
        "trace-offset-not-an-integer",
        lambda: gpu_tc.trace(A, 1.5),
        gpu_tc.OptionsTypeError,
        TypeError,
        r"offset=1\.5 is not an integer",
        r"trace",
    ),
    case(
        "trace-axis-not-an-integer",
        lambda: gpu_tc.trace(A, axis1=0.0),
        gpu_tc.OptionsTypeError,
        TypeError,
        r"axis1=0\.0 is not an integer",
    ),
    # scalars
    case(
        "complex-alpha-real-contract",
        lambda: gpu_tc.contract("ij,jk->ik", A, B, alpha=1j),
        gpu_tc.DTypeError,
        TypeError,
        r"alpha=1j is complex",
        r"float64",
        r"'ij,jk->ik'",
    ),
    case(
        "complex-beta-real-contract",
        lambda: gpu_tc.contract("ij,jk->ik", A, B, beta=2j, c=np.ones((2, 4))),
        gpu_tc.DTypeError,
        TypeError,
        r"beta=2j is complex",
        r"'ij,jk->ik'",
    ),
    case(
        "complex-alpha-real-permute",
        lambda: gpu_tc.permute("ij->ji", A, alpha=1j),
        gpu_tc.DTypeError,
        TypeError,
        r"alpha=1j is complex",
        r"float64",
        r"'ij->ji'",
    ),
    case(
        "complex-alpha-real-reduce",
        lambda: gpu_tc.reduce("ij->j", A, alpha=1j),
        gpu_tc.DTypeError,
        TypeError,
        r"alpha=1j is complex",
        r"'ij->j'",
    ),
    case(
        "complex-gamma-real-elementwise",
        lambda: gpu_tc.elementwise_binary("ij,ij->ij", A, A, gamma=1j),
        gpu_tc.DTypeError,
        TypeError,
        r"gamma=1j is complex",
        r"'ij,ij->ij'",
    ),
    case(
        "fractional-alpha-integer-contract",
        lambda: gpu_tc.contract("ij,jk->ik", A.astype(int), B.astype(int), alpha=0.5),
        gpu_tc.DTypeError,
        TypeError,
        r"alpha=0\.5 is not a whole number but the result dtype int64 is an integer",
    ),
    case(
        "alpha-two-bool-contract",
        lambda: gpu_tc.contract("ij,jk->ik", A.astype(bool), B.astype(bool), alpha=2),
        gpu_tc.DTypeError,
        TypeError,
        r"alpha=2 is neither 0 nor 1 for a bool result",
    ),
    case(
        "alpha-out-of-range-uint8",
        lambda: gpu_tc.contract("ij,jk->ik", A.astype(np.uint8), B.astype(np.uint8), alpha=-1),
        gpu_tc.DTypeError,
        TypeError,
        r"alpha=-1 does not fit the result dtype uint8 \(\[0, 255\]\)",
    ),
    case(
        "beta-out-of-range-int64",
        lambda: gpu_tc.permute("ij->ji", A.astype(np.int64), alpha=2**70),
        gpu_tc.DTypeError,
        TypeError,
        r"does not fit the result dtype int64",
    ),
    case(
        "relu-bool",
        lambda: gpu_tc.permute("ij->ji", A.astype(bool), op_a=UnaryOp.RELU),
        gpu_tc.DTypeError,
        TypeError,
        r"UnaryOp\.RELU is not defined for bool data",
    ),
    case(
        "conj-bool",
        lambda: gpu_tc.elementwise_binary("ij,ij->ij", A.astype(bool), A.astype(bool),
                                          op_a=UnaryOp.CONJ),
        gpu_tc.DTypeError,
        TypeError,
        r"UnaryOp\.CONJ is not defined for bool data",
    ),
    case(
        "sqrt-integer",
        lambda: gpu_tc.permute("ij->ji", A.astype(int), op_a=UnaryOp.SQRT),
        gpu_tc.DTypeError,
        TypeError,
        r"UnaryOp\.SQRT",
        r"int64",
    ),
    case(
        "alpha-not-a-number",
        lambda: gpu_tc.contract("ij,jk->ik", A, B, alpha="2"),
        gpu_tc.DTypeError,
        TypeError,
        r"alpha='2' is not a number",
        r"'ij,jk->ik'",
    ),
    # operators
    case(
        "reduce-max-complex",
        lambda: gpu_tc.reduce("ij->j", A + 0j, op=ReduceOp.MAX),
        gpu_tc.DTypeError,
        TypeError,
        r"ReduceOp\.MAX",
        r"complex128",
        r"'ij->j'",
    ),
    case(
        "reduce-min-complex",
        lambda: gpu_tc.reduce("ij->j", A + 0j, op=ReduceOp.MIN),
        gpu_tc.DTypeError,
        TypeError,
        r"ReduceOp\.MIN",
        r"complex128",
        r"'ij->j'",
    ),
    case(
        "binary-max-complex",
        lambda: gpu_tc.elementwise_binary("ij,ij->ij", A + 0j, A, op=BinaryOp.MAX),
        gpu_tc.DTypeError,
        TypeError,
        r"BinaryOp\.MAX",
        r"complex128",
        r"'ij,ij->ij'",
    ),
    case(
        "trinary-min-complex",
        lambda: gpu_tc.elementwise_trinary("ij,ij,ij->ij", A, A, A + 0j, op_abc=BinaryOp.MIN),
        gpu_tc.DTypeError,
        TypeError,
        r"BinaryOp\.MIN",
        r"complex128",
        r"'ij,ij,ij->ij'",
    ),
    case(
        "relu-complex",
        lambda: gpu_tc.permute("ij->ji", A + 0j, op_a=UnaryOp.RELU),
        gpu_tc.DTypeError,
        TypeError,
        r"UnaryOp\.RELU",
        r"complex128",
        r"'ij->ji'",
    ),
    case(
        "floor-complex",
        lambda: gpu_tc.reduce("ij->j", A + 0j, op_a=UnaryOp.FLOOR),
        gpu_tc.DTypeError,
        TypeError,
        r"UnaryOp\.FLOOR",
        r"complex128",
        r"'ij->j'",
    ),
    case(
        "reduce-op-not-a-reduceop",
        lambda: gpu_tc.reduce("ij->j", A, op=BinaryOp.MUL),
        gpu_tc.DTypeError,
        TypeError,
        r"BinaryOp\.MUL",
        r"not a ReduceOp",
        r"'ij->j'",
    ),
    case(
        "unary-op-an-int",
        lambda: gpu_tc.permute("ij->ji", A, op_a=2),
        gpu_tc.DTypeError,
        TypeError,
        r"2 is not a UnaryOp",
        r"'ij->ji'",
    ),
    case(
        "reduce-max-over-empty-label",
        lambda: gpu_tc.reduce("ij->i", np.zeros((3, 0)), op=ReduceOp.MAX),
        gpu_tc.ShapeError,
        ValueError,
        r"MAX",
        r"'ij->i'",
    ),
    # operations whose labels do not fit
    case(
        "permute-drops-label",
        lambda: gpu_tc.permute("ij->i", A),
        gpu_tc.ExpressionError,
        ValueError,
        r"label 'j' of operand 0 is missing from the output",
        r"'ij->i'",
    ),
    case(
        "elementwise-drops-label",
        lambda: gpu_tc.elementwise_binary("ij,jk->ij", A, B),
        gpu_tc.ExpressionError,
        ValueError,
        r"label 'k' of operand 1",
        r"'ij,jk->ij'",
    ),
    case(
        "elementwise-extent-mismatch",
        lambda: gpu_tc.elementwise_trinary("ij,ij,ij->ij", A, A, B),
        gpu_tc.ShapeError,
        ValueError,
        r"label 'i' has extent 2 in operand 0 but 3 in operand 2",
    ),
    case(
        "contract-three-terms",
        lambda: gpu_tc.contract("ij,jk,kl->il", A, B),
        gpu_tc.ExpressionError,
        ValueError,
        r"two terms",
        r"'ij,jk,kl->il'",
    ),
    case(
        "contract-one-term",
        lambda: gpu_tc.contract("ij->ji", A, B),
        gpu_tc.ExpressionError,
        ValueError,
        r"two terms",
        r"'ij->ji'",
    ),
    case(
        "contract-beta-without-c",
        lambda: gpu_tc.contract("ij,jk->ik", A, B, beta=1),
        gpu_tc.OperandError,
        TypeError,
        r"beta=1 needs c",
        r"'ij,jk->ik'",
    ),
    case(
        "reduce-beta-without-c",
        lambda: gpu_tc.reduce("ij->j", A, beta=0.5),
        gpu_tc.OperandError,
        TypeError,
        r"beta=0\.5 needs c",
        r"reduce\('ij->j'\)",
    ),
    case(
        "contract-c-wrong-shape",
        lambda: gpu_tc.contract("ij,jk->ik", A, B, beta=1, c=np.ones((4, 2))),
        gpu_tc.ShapeError,
        ValueError,
        r"c has shape \(4, 2\)",
        r"\(2, 4\)",
        r"contract\('ij,jk->ik'\)",
    ),
    case(
        "reduce-c-wrong-shape",
        lambda: gpu_tc.reduce("ij->j", A, beta=1, c=np.ones(2)),
        gpu_tc.ShapeError,
        ValueError,
        r"c has shape \(2,\)",
        r"\(3,\)",
        r"reduce\('ij->j'\)",
    ),
    # options and cache
    case(
        "workspace-limit-negative",
        lambda: gpu_tc.Options(workspace_limit=-1),
        gpu_tc.OptionsError,
        ValueError,
        r"workspace_limit",
        r"-1",
    ),
    case(
        "workspace-limit-float",
        lambda: gpu_tc.Options(workspace_limit=1.5),
        gpu_tc.OptionsTypeError,
        TypeError,
        r"workspace_limit must be an int or None, got 1\.5",
    ),
    case(
        "memory-limit-numpy-bool",
        lambda: gpu_tc.Options(memory_limit=np.True_),
        gpu_tc.OptionsTypeError,
        TypeError,
        r"memory_limit must be an int or None, got np\.True_",
    ),
    case(
        "contract-subscripts-list",
        lambda: gpu_tc.contract(["i", "i"], np.ones(2), np.ones(2)),
        gpu_tc.ExpressionTypeError,
        TypeError,
        r"subscripts must be a str, got list",
    ),
    case(
        "ragged-operand",
        lambda: gpu_tc.trace([[1.0, 2.0], [3.0]]),
        gpu_tc.OperandValueError,
        ValueError,
        r"operand 0 cannot be read as an array",
        r"inhomogeneous",
    ),
    case(
        "einsum-options-dict",
        lambda: gpu_tc.einsum("ij,jk->ik", A, B, options={"memory_limit": 5}),
        gpu_tc.OptionsTypeError,
        TypeError,
        r"options must be a gpu_tc\.Options or None, got dict",
        r"einsum\('ij,jk->ik'\)",
    ),
    case(
        "prepare-options-str",
        lambda: gpu_tc.prepare("ij,jk->ik", A, B, options="x"),
        gpu_tc.OptionsTypeError,
        TypeError,
        r"options must be a gpu_tc\.Options or None, got str 'x'",
        r"prepare\('ij,jk->ik'\)",
    ),
    case(
        "contract-options-int",
        lambda: gpu_tc.contract("ij,jk->ik", A, B, options=5),
        gpu_tc.OptionsTypeError,
        TypeError,
        r"options must be a gpu_tc\.Options or None, got int 5",
        r"contract\('ij,jk->ik'\)",
    ),
    case(
        "allow-cublas-not-bool",
        lambda: gpu_tc.Options(allow_cublas=1),
        gpu_tc.OptionsError,
        ValueError,
        r"allow_cublas must be a bool, got 1",
    ),
    case(
        "cache-capacity-negative",
        lambda: gpu_tc.PlanCache(-1),
        gpu_tc.OptionsError,
        ValueError,
        r"capacity",
        r"-1",
    ),
    case(
        "cache-capacity-setter-negative",
        lambda: setattr(gpu_tc.PlanCache(), "capacity", -1),
        gpu_tc.OptionsError,
        ValueError,
        r"capacity",
        r"-1",
    ),
    case(
        "cache-capacity-float",
        lambda: gpu_tc.PlanCache(2.0),
        gpu_tc.OptionsError,
        ValueError,
        r"capacity",
        r"2\.0",
    ),
]


@pytest.mark.parametrize("call, error, builtin, patterns", CASES)
def test_error(call, error, builtin, patterns):
    assert issubclass(error, gpu_tc.GpuTcError) and issubclass(error, builtin)
    with pytest.raises(error, match=patterns[0]) as info:
        call()
    assert isinstance(info.value, builtin)
    message = str(info.value)
    for pattern in patterns[1:]:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"


def test_errors_do_not_depend_on_the_plan_cache():
    """A valid call caches a plan; an invalid operator on the same layout must still be
    rejected (IntEnum members of different Enums compare equal: BinaryOp.ADD == ReduceOp.SUM)."""
    a = np.ones((2, 3))
    gpu_tc.reduce("ij->j", a, op=ReduceOp.SUM)
    with pytest.raises(gpu_tc.DTypeError, match=r"not a ReduceOp.*'ij->j'"):
        gpu_tc.reduce("ij->j", a, op=BinaryOp.ADD)
    gpu_tc.permute("ij->ji", a, op_a=UnaryOp.IDENTITY)
    with pytest.raises(gpu_tc.DTypeError, match=r"1 is not a UnaryOp.*'ij->ji'"):
        gpu_tc.permute("ij->ji", a, op_a=1)
    gpu_tc.elementwise_binary("ij,ij->ij", a, a, op=BinaryOp.MUL)
    with pytest.raises(gpu_tc.DTypeError, match=r"not a BinaryOp.*'ij,ij->ij'"):
        gpu_tc.elementwise_binary("ij,ij->ij", a, a, op=ReduceOp.PROD)


def test_errors_after_a_cached_einsum():
    """The same subscripts and layouts planned once still check out= and scalars."""
    gpu_tc.einsum("ij,jk->ik", A, B)
    with pytest.raises(gpu_tc.OutputError, match=r"read-only.*'ij,jk->ik'"):
        gpu_tc.einsum("ij,jk->ik", A, B, out=_read_only())
    gpu_tc.contract("ij,jk->ik", A, B)
    with pytest.raises(gpu_tc.DTypeError, match=r"alpha=1j"):
        gpu_tc.contract("ij,jk->ik", A, B, alpha=1j)


def test_plan_execute_errors(rng):
    a = rng.standard_normal((3, 3))
    plan = gpu_tc.prepare("ij,jk->ik", a, a, out=np.zeros((3, 3)))
    with pytest.raises(gpu_tc.OutputError, match=r"'ij,jk->ik'"):
        plan.execute(a, a, out=np.zeros((3, 3), order="F"))
    with pytest.raises(gpu_tc.ShapeError, match=r"operand 0 has shape \(3, 2\).*'ij,jk->ik'"):
        plan.execute(a[:, :2], a, out=np.zeros((3, 3)))
    plan.free()
    with pytest.raises(gpu_tc.PlanStateError, match=r"'ij,jk->ik' was freed") as info:
        plan.execute(a, a)
    assert isinstance(info.value, RuntimeError)


@pytest.mark.gpu
def test_a_broadcast_cupy_out_is_refused():
    import cupy

    out = cupy.broadcast_to(cupy.zeros(4), (2, 4))  # writable on CuPy: writing it races
    with pytest.raises(gpu_tc.OutputError, match=r"share memory.*'ij,jk->ik'"):
        gpu_tc.einsum("ij,jk->ik", cupy.ones((2, 3)), cupy.ones((3, 4)), out=out)


@pytest.mark.gpu
def test_mixed_cupy_numpy_operands():
    import cupy

    a = cupy.ones((2, 3))
    with pytest.raises(
        gpu_tc.OperandError,
        match=r"operand 1 is a ndarray but operand 0 is a "
        r"CuPy array in einsum\('ij,jk->ik'\)",
    ) as info:
        gpu_tc.einsum("ij,jk->ik", a, np.ones((3, 4)))
    assert isinstance(info.value, TypeError)
    with pytest.raises(
        gpu_tc.OutputError,
        match=r"out is a numpy.ndarray but the operands need a cupy.ndarray.*'ij,jk->ik'",
    ):
        gpu_tc.einsum("ij,jk->ik", a, cupy.ones((3, 4)), out=np.zeros((2, 4)))
