"""gpu_tc.expression: parsing, implicit outputs, '...' expansion, canonical labels and
numpy's interleaved form (syntax only: no operands, no backend)."""

from __future__ import annotations

import string

import numpy as np
import pytest

from gpu_tc import ExpressionError, ShapeError
from gpu_tc.expression import (
    ELLIPSIS,
    Expression,
    expand,
    from_interleaved,
    parse,
    show_label,
    symbol,
)

# --- parse ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "subscripts, terms, output",
    [
        ("ij,jk->ik", ("ij", "jk"), "ik"),
        ("ij,jk", ("ij", "jk"), "ik"),
        ("ba", ("ba",), "ab"),
        ("Ba,ab", ("Ba", "ab"), "Bb"),  # ASCII order: upper case first
        ("bA,Ab", ("bA", "Ab"), ""),
        ("ii", ("ii",), ""),
        ("ii->i", ("ii",), "i"),
        ("i,i", ("i", "i"), ""),
        ("ij,ij", ("ij", "ij"), ""),
        ("zyx", ("zyx",), "xyz"),
        ("ij,jk,kl", ("ij", "jk", "kl"), "il"),
        ("a,b,c", ("a", "b", "c"), "abc"),
        (",", ("", ""), ""),
        ("->", ("",), ""),
        ("i,->i", ("i", ""), "i"),
        ("...ij,...jk->...ik", (".ij", ".jk"), ".ik"),
        ("...ij,...jk", (".ij", ".jk"), ".ik"),  # implicit: '...' first
        ("ij...,jk...", ("ij.", "jk."), ".ik"),
        ("...ii->...i", (".ii",), ".i"),
        ("i...i", ("i.i",), "."),
        ("...", (".",), "."),
        (" i j , j k -> i k ", ("ij", "jk"), "ik"),  # white space is ignored
    ],
)
def test_parse(subscripts, terms, output):
    parsed = parse(subscripts)
    assert parsed.terms == terms
    assert parsed.output == output
    assert parsed.text == subscripts


@pytest.mark.parametrize(
    "subscripts", ["ij,jk", "ba", "Ba,ab", "ii", "ij,jk,kl", "...ij,...jk", "zyx,xw"]
)
def test_implicit_output_is_numpys(subscripts):
    """The implicit output matches numpy.einsum's result axes on distinct extents."""
    parsed = parse(subscripts)
    letters = sorted(set(subscripts) - set(".,"))
    extents = {x: 2 + i for i, x in enumerate(letters)}
    operands = [np.ones([extents[x] for x in t.replace(".", "")]) for t in parsed.terms]
    expected_shape = tuple(extents[x] for x in parsed.output.replace(ELLIPSIS, ""))
    assert np.einsum(subscripts, *operands).shape == expected_shape


def test_parse_is_cached():
    assert parse("ab,bc->ac") is parse("ab,bc->ac")


@pytest.mark.parametrize(
    "subscripts, message",
    [
        ("i1,j", r"invalid label '1' in term 'i1' of 'i1,j'"),
        ("a.b", r"term 'a\.b' has a '\.' that is not part of an ellipsis"),
        ("a..b", r"'\.' that is not part of an ellipsis"),
        ("a. ..->", r"'\.' that is not part of an ellipsis"),
        ("i\tj", r"invalid label"),
        ("ij- >", r"'->'"),
        ("a-b", r"'->'"),
        ("a>b", r"'->'"),
        ("ab->a->b", r"'->'"),
        ("ij->ii", r"output label 'i' appears more than once in 'ij->ii'"),
        ("ij->k", r"output label 'k' appears in no operand's term in 'ij->k'"),
        ("......", r"more than one '\.\.\.'"),
        ("...i->......", r"more than one '\.\.\.'"),
        ("é->", r"invalid label 'é'"),
    ],
)
def test_parse_errors(subscripts, message):
    with pytest.raises(ExpressionError, match=message):
        parse(subscripts)


def test_parse_rejects_non_strings():
    with pytest.raises(ExpressionError, match="must be a str, got bytes"):
        parse(b"ij")  # type: ignore[arg-type]


# --- canonical labels ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "first, second",
    [
        ("wxyz,zxvw->vy", "abcd,dbea->ec"),
        ("ij,jk->ik", "ab,bc->ac"),
        ("ij,jk", "ab,bc->ac"),
        ("ZY,YX->ZX", "ij,jk->ik"),
        ("...ij->...ji", "...xy->...yx"),
        ("ii->i", "qq->q"),
        ("Ba,ab", "xy,yz->xz"),
    ],
)
def test_canonical_equal(first, second):
    assert parse(first).canonical() == parse(second).canonical()


@pytest.mark.parametrize(
    "first, second",
    [
        ("ij,jk->ik", "ij,kj->ik"),
        ("ij,jk->ik", "ij,jk->ki"),
        ("ij,jk->ik", "ji,jk->ik"),
        ("ii->i", "ij->i"),
        ("...ij->...ji", "ij...->ji..."),
        ("ij,jk->ik", "ij,jk,kl->il"),
    ],
)
def test_canonical_differs(first, second):
    assert parse(first).canonical() != parse(second).canonical()


def test_canonical_text():
    assert parse("wxyz,zxvw->vy").canonical() == "abcd,dbea->ec"
    assert parse("ba").canonical() == "ab->ba"
    assert parse("...ij->...ji").canonical() == ".ab->.ba"


def test_canonical_beyond_52_labels():
    assert [symbol(i) for i in range(52)] == list(string.ascii_letters)
    extra = [symbol(i) for i in range(52, 60)]
    assert len(set(extra)) == 8 and not set(extra) & set(string.ascii_letters)


def test_expression_canonical_and_labels():
    a = expand(parse("wxyz,zxvw->vy"), (4, 4))
    b = expand(parse("abcd,dbea->ec"), (4, 4))
    assert isinstance(a, Expression)
    assert a.canonical() == b.canonical() == "abcd,dbea->ec"
    assert a.labels == "wxyzv"


# --- expand: the width of '...' ------------------------------------------------------------


def _ellipsis_labels(term: str) -> str:
    return "".join(x for x in term if x not in string.ascii_letters)


@pytest.mark.parametrize(
    "subscripts, ranks, widths, out_width",
    [
        ("...ij,...jk->...ik", (4, 3), (2, 1), 2),
        ("...ij,...jk->...ik", (2, 5), (0, 3), 3),
        ("...ij,jk->...ik", (2, 2), (0, 0), 0),
        ("...->...", (0,), (0,), 0),
        ("...,...->...", (3, 1), (3, 1), 3),
        ("i...i->...", (4,), (2,), 2),
        ("...ii->...i", (2,), (0,), 0),
        ("a...,a", (3, 1), (2, 0), 2),
    ],
)
def test_expand_ellipsis_widths(subscripts, ranks, widths, out_width):
    expression = expand(parse(subscripts), ranks)
    assert tuple(len(t) for t in expression.terms) == ranks
    found = tuple(len(_ellipsis_labels(t)) for t in expression.terms)
    assert found == widths
    out_labels = _ellipsis_labels(expression.output)
    assert len(out_labels) == out_width
    # '...' axes align on the right, as numpy broadcasting does.
    for term in expression.terms:
        mine = _ellipsis_labels(term)
        assert out_labels.endswith(mine)
    assert all(ELLIPSIS not in t for t in expression.terms + (expression.output,))


def test_expand_keeps_labels_and_text():
    expression = expand(parse("...ij,...jk"), (3, 2))
    ell = _ellipsis_labels(expression.terms[0])
    assert expression.terms == (ell + "ij", "jk")
    assert expression.output == ell + "ik"
    assert expression.text == "...ij,...jk"
    assert show_label(ell[0]) == "'...'[0]"
    assert show_label("i") == "'i'"


def test_expand_is_cached():
    parsed = parse("ij,jk->ik")
    assert expand(parsed, (2, 2)) is expand(parsed, (2, 2))


@pytest.mark.parametrize(
    "subscripts, ranks, error, message",
    [
        ("ij,jk->ik", (2,), ExpressionError, r"2 term\(s\) but 1 operand\(s\)"),
        ("ij->ji", (2, 2), ExpressionError, r"1 term\(s\) but 2 operand\(s\)"),
        ("ijk->i", (2,), ShapeError, r"term 0 \('ijk'\) has 3 label\(s\) but operand 0 has rank 2"),
        ("i,jk->i", (1, 1), ShapeError, r"term 1 \('jk'\) has 2 label\(s\) but operand 1"),
        ("...ijk", (2,), ShapeError, r"term 0 \('\.\.\.ijk'\) names 3 axes"),
        ("...ij->ij", (3,), ShapeError, r"'\.\.\.' covers 1 axis"),
    ],
)
def test_expand_errors(subscripts, ranks, error, message):
    with pytest.raises(error, match=message):
        expand(parse(subscripts), ranks)


def test_expand_ellipsis_of_width_zero_needs_no_output_ellipsis():
    expression = expand(parse("...ij->ij"), (2,))
    assert expression.terms == ("ij",) and expression.output == "ij"


# --- the interleaved form ------------------------------------------------------------------


def test_from_interleaved():
    a, b = np.ones((2, 3)), np.ones((3, 4))
    text, operands = from_interleaved([a, [0, 1], b, [1, 2], [0, 2]])
    assert text == "AB,BC->AC"
    assert operands[0] is a and operands[1] is b and len(operands) == 2


@pytest.mark.parametrize(
    "inputs, output, text",
    [
        (([0, 1], [1, 2]), None, "AB,BC"),
        (([0, 0],), None, "AA"),
        (([0, 0],), [0], "AA->A"),
        (([25, 26], [26, 51]), [51, 25], "Za,az->zZ"),
        (([Ellipsis, 0, 1], [Ellipsis, 1, 2]), [Ellipsis, 0, 2], "...AB,...BC->...AC"),
        (([], []), None, ","),
        (((0, 1), (1,)), (), "AB,B->"),
    ],
)
def test_from_interleaved_text(inputs, output, text):
    operands = [np.ones(1) for _ in inputs]
    args: list = []
    for op, sub in zip(operands, inputs):
        args += [op, sub]
    if output is not None:
        args.append(output)
    got, ops = from_interleaved(args)
    assert got == text
    assert len(ops) == len(operands) and all(x is y for x, y in zip(ops, operands))


def test_from_interleaved_agrees_with_numpy():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    text, _ = from_interleaved([a, [30, 4], b, [4, 51], [51, 30]])
    np.testing.assert_allclose(np.einsum(text, a, b), np.einsum(a, [30, 4], b, [4, 51], [51, 30]))


@pytest.mark.parametrize(
    "args, message",
    [
        ([np.ones(2), [52]], r"sublist entry 52 in \[52\] is not within the valid range \[0, 52\)"),
        ([np.ones(2), [-1]], r"sublist entry -1"),
        ([np.ones(2), ["a"]], r"sublist entry 'a'"),
        ([np.ones(2), [1.0]], r"sublist entry 1\.0"),
        ([np.ones(2), 3], r"a sublist must be a sequence, got 3"),
    ],
)
def test_from_interleaved_errors(args, message):
    with pytest.raises(ExpressionError, match=message):
        from_interleaved(args)
