"""Parse einsum subscripts into a frozen Expression, and relabel it canonically.

Parsing is syntax only and cached on the string; :func:`expand` then fixes the width of
``...`` from the operand ranks and fills in an implicit output, as numpy.einsum does.
"""

from __future__ import annotations

import functools
import operator
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import ExpressionError, ExpressionTypeError, ShapeError

VALID_LABELS = frozenset(string.ascii_letters)
ELLIPSIS = "."  # stands for "..." inside a parsed term; never a valid label
_SUBLIST_LABELS = string.ascii_uppercase + string.ascii_lowercase
# Labels that stand for the axes "..." covers; outside the range users may write.
_ELLIPSIS_LABEL_BASE = 0x2800


@dataclass(frozen=True)
class ParsedSubscripts:
    """Syntax of a subscripts string: terms and output, "..." kept as ELLIPSIS."""

    text: str
    terms: tuple[str, ...]
    output: str  # explicit; an implicit output is filled in as numpy.einsum does

    def canonical(self) -> str:
        """The subscripts relabelled by first appearance ("..." kept as ELLIPSIS)."""
        return _canonical_text(self.terms, self.output)


@dataclass(frozen=True)
class Expression:
    """An einsum expression with "..." expanded and the output made explicit.

    Attributes:
        text: The subscripts as the caller wrote them (for messages).
        terms: The labels of each operand, one character per axis.
        output: The labels of the result, in order.
    """

    text: str
    terms: tuple[str, ...]
    output: str

    @property
    def labels(self) -> str:
        """Every distinct label in order of first appearance (terms, then output)."""
        return "".join(dict.fromkeys("".join(self.terms) + self.output))

    def canonical(self) -> str:
        """Relabel by first appearance so equivalent expressions share one text.

        Example: ``"wxyz,zxvw->vy"`` and ``"abcd,dbea->ec"`` both become
        ``"abcd,dbea->ec"``.
        """
        return _canonical_text(self.terms, self.output)

    def lettered(self) -> Expression:
        """The same expression relabelled by first appearance (letters for up to 52
        labels; "..."'s labels too), as gpu_tc's subscripts accept it."""
        inputs, output = self.canonical().split("->")
        return Expression(self.text, tuple(inputs.split(",")), output)


def symbol(index: int) -> str:
    """The index-th canonical label: a-z, A-Z, then characters past the ASCII range."""
    if index < 52:
        return string.ascii_letters[index]
    return chr(0x100 + index)


@functools.lru_cache(maxsize=4096)
def _canonical_text(terms: tuple[str, ...], output: str) -> str:
    mapping: dict[str, str] = {ELLIPSIS: ELLIPSIS}
    for label in "".join(terms) + output:
        if label not in mapping:
            mapping[label] = symbol(len(mapping) - 1)
    relabel = str.maketrans(mapping)
    return ",".join(t.translate(relabel) for t in terms) + "->" + output.translate(relabel)


def parse(subscripts: str) -> ParsedSubscripts:
    """Parse the syntax of an einsum subscripts string.

    Args:
        subscripts: e.g. ``"ij,jk->ik"``, ``"...ii->...i"`` or ``"ij,jk"``.

    Returns:
        The terms and the explicit output; spaces around labels are ignored (not inside
        "..." or "->", as numpy). An implicit output is "..." (if any term has it)
        followed by the labels that appear exactly once, in ASCII order, as in
        numpy.einsum.

    Raises:
        ExpressionTypeError: the subscripts are not a str.
        ExpressionError: a misplaced "->" or ".", an invalid character, an output
            label given twice or missing from every term.
    """
    if not isinstance(subscripts, str):  # before the cache, which hashes it
        raise ExpressionTypeError(
            f"subscripts must be a str, got {type(subscripts).__name__}"
        )
    return _parse(subscripts)


@functools.lru_cache(maxsize=4096)
def _parse(subscripts: str) -> ParsedSubscripts:
    """:func:`parse` of a str."""
    text = subscripts
    if (
        text.count("->") > 1
        or text.count("-") != text.count(">")
        or ("-" in text and "->" not in text)
    ):
        raise ExpressionError(f"'->' must appear at most once, as '->', in {subscripts!r}")
    lhs, arrow, rhs = text.partition("->")
    terms = tuple(_parse_term(term, subscripts) for term in lhs.split(","))
    if arrow:
        output = _parse_term(rhs, subscripts)
        for label in output:
            if output.count(label) > 1:
                name = "..." if label == ELLIPSIS else repr(label)
                raise ExpressionError(
                    f"output label {name} appears more than once in {subscripts!r}"
                )
            if label != ELLIPSIS and not any(label in term for term in terms):
                raise ExpressionError(
                    f"output label {label!r} appears in no operand's term in {subscripts!r}"
                )
    else:
        output = _implicit_output(terms)
    return ParsedSubscripts(subscripts, terms, output)


def _implicit_output(terms: tuple[str, ...]) -> str:
    labels = "".join(terms)
    singles = sorted(label for label in set(labels) if labels.count(label) == 1)
    return (ELLIPSIS if ELLIPSIS in labels else "") + "".join(
        label for label in singles if label != ELLIPSIS
    )


def _parse_term(term: str, subscripts: str) -> str:
    """One term: "..." kept whole (a "." outside one is an error), spaces dropped."""
    if "." in term.replace("...", ""):
        raise ExpressionError(
            f"term {term.strip()!r} has a '.' that is not part of an ellipsis ('...') in "
            f"{subscripts!r}"
        )
    term = term.replace(" ", "")
    if term.count("...") > 1:
        raise ExpressionError(f"term {term!r} has more than one '...' in {subscripts!r}")
    for char in term.replace("...", ""):
        if char not in VALID_LABELS:
            raise ExpressionError(
                f"invalid label {char!r} in term {term!r} of {subscripts!r}: "
                "labels are the letters a-z and A-Z, and '...'"
            )
    return term.replace("...", ELLIPSIS)


@functools.lru_cache(maxsize=4096)
def expand(parsed: ParsedSubscripts, ranks: tuple[int, ...]) -> Expression:
    """Fix the width of "..." from the operand ranks.

    Args:
        parsed: The result of :func:`parse`.
        ranks: The number of axes of each operand.

    Returns:
        The Expression, one label per axis of every operand.

    Raises:
        ExpressionError: the number of terms differs from the number of operands.
        ShapeError: a term's label count does not match its operand's rank.
    """
    text = parsed.text
    if len(parsed.terms) != len(ranks):
        raise ExpressionError(
            f"{text!r} has {len(parsed.terms)} term(s) but {len(ranks)} operand(s) were given"
        )
    widths = []
    for index, (term, rank) in enumerate(zip(parsed.terms, ranks)):
        named = len(term) - term.count(ELLIPSIS)
        if ELLIPSIS in term:
            if named > rank:
                raise ShapeError(
                    f"term {index} ({_show(term)!r}) names {named} axes but operand {index} "
                    f"has rank {rank} in {text!r}"
                )
            widths.append(rank - named)
        elif named != rank:
            raise ShapeError(
                f"term {index} ({_show(term)!r}) has {named} label(s) but operand {index} "
                f"has rank {rank} in {text!r}"
            )
        else:
            widths.append(0)
    width = max(widths, default=0)
    ellipsis_labels = "".join(chr(_ELLIPSIS_LABEL_BASE + i) for i in range(width))
    terms = tuple(
        term.replace(ELLIPSIS, ellipsis_labels[width - w :])
        for term, w in zip(parsed.terms, widths)
    )
    if ELLIPSIS in parsed.output:
        output = parsed.output.replace(ELLIPSIS, ellipsis_labels)
    elif width:
        raise ShapeError(
            f"'...' covers {width} axis/axes in {text!r} but the output has no '...' to hold them"
        )
    else:
        output = parsed.output
    return Expression(text, terms, output)


def _show(term: str) -> str:
    return term.replace(ELLIPSIS, "...")


def show_label(label: str) -> str:
    """A label as a user can read it ("..." axes are named by their position)."""
    code = ord(label)
    if code >= _ELLIPSIS_LABEL_BASE:
        return f"'...'[{code - _ELLIPSIS_LABEL_BASE}]"
    return repr(label)


def from_interleaved(args: Sequence[Any]) -> tuple[str, list[Any]]:
    """Turn numpy's interleaved form ``(op0, sub0, op1, sub1, ..., [out])`` into a string.

    Sublist entries are integers (Python or NumPy, 0-51, mapped as numpy does: A-Z then
    a-z) or Ellipsis; a sublist may be any sequence, an ndarray of labels included.

    Raises:
        ExpressionTypeError: a sublist is not a sequence, or an entry is neither an
            integer nor Ellipsis.
        ExpressionError: an integer entry is out of range.
    """
    operands = list(args[0::2])
    sublists = list(args[1::2])
    output = None
    if len(args) % 2 == 1:
        output = operands.pop()  # the trailing element is the output sublist
    terms = [_sublist_term(s) for s in sublists]
    text = ",".join(terms)
    if output is not None:
        text += "->" + _sublist_term(output)
    return text, operands


def _sublist_term(sublist: Any) -> str:
    try:
        items = list(sublist)
    except TypeError:
        raise ExpressionTypeError(f"a sublist must be a sequence, got {sublist!r}") from None
    out = []
    for item in items:
        if item is Ellipsis:
            out.append("...")
            continue
        try:
            if isinstance(item, (bool, np.bool_)):
                raise TypeError  # an integer to operator.index, a bool to numpy
            label = operator.index(item)
        except TypeError:
            raise ExpressionTypeError(
                f"sublist entry {item!r} in {items!r} must be an integer or Ellipsis"
            ) from None
        if not 0 <= label < 52:
            raise ExpressionError(
                f"sublist entry {item!r} in {items!r} is not within the valid range [0, 52)"
            )
        out.append(_SUBLIST_LABELS[label])
    return "".join(out)
