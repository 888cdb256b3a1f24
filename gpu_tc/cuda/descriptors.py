"""cuTENSOR's view of a tensor, as plain data: descriptor specs, data types, mode maps,
alignment, the plan-key values of GPU operands, and the forms cuTENSOR is given.

Decided on the CPU and unit-tested there: nothing here imports CuPy or nvmath.

cuTENSOR wants positive strides and extents (a stride of zero is written by leaving
the mode out) that never address one element twice. :func:`orient` maps the core's
tensor specs onto that: labels of extent 1 are dropped everywhere, a label whose
strides are negative is reversed in every tensor holding it (a base-pointer offset, no
copy), and a tensor that still has a non-positive stride, or whose elements overlap (a
broadcast or sliding-window view), is staged through a C-ordered buffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpu_tc.problem import TensorSpec
from gpu_tc.strides import elements_overlap

# cudaDataType_t values (library_types.h): CUDA_R_32F, CUDA_R_64F, CUDA_C_32F, CUDA_C_64F.
DATA_TYPES: dict[str, int] = {"f": 0, "d": 1, "F": 4, "D": 5}
# The dtype character of each cudaDataType_t a scalar may have (SCALAR_TYPE).
SCALAR_DTYPES: dict[int, str] = {value: char for char, value in DATA_TYPES.items()}
# cutensorComputeDescriptor_t per dtype; names of nvmath's ComputeDesc class methods.
COMPUTE_DESCRIPTORS: dict[str, str] = {
    "f": "COMPUTE_32F",
    "d": "COMPUTE_64F",
    "F": "COMPUTE_32F",
    "D": "COMPUTE_64F",
}
# cuTENSOR never needs more than 256-byte alignment (cudaMalloc's guarantee).
MAX_ALIGNMENT = 256


def pointer_alignment(pointer: int) -> int:
    """The alignment in bytes of a device pointer, capped at 256 (0 counts as 256)."""
    return MAX_ALIGNMENT if pointer == 0 else min(pointer & -pointer, MAX_ALIGNMENT)


def extra_key(device: int, pointers: Sequence[int]) -> tuple[int, tuple[int, ...]]:
    """The plan-key values of GPU operands: the device and each pointer's alignment.

    Only plain ints derived from the pointers join a key, never the pointers.
    """
    return device, tuple(pointer_alignment(p) for p in pointers)


def mode_map(*label_strings: str) -> dict[str, int]:
    """cuTENSOR mode numbers for labels, in order of first appearance."""
    modes: dict[str, int] = {}
    for label in "".join(label_strings):
        modes.setdefault(label, len(modes))
    return modes


@dataclass(frozen=True)
class DescriptorSpec:
    """One tensor as a cuTENSOR tensor descriptor sees it.

    Attributes:
        modes: The mode number of each descriptor axis.
        extents: Extents (all > 1).
        strides: Strides in elements (all > 0).
        data_type: The cudaDataType_t value.
        offset: Elements from the array's data pointer to the descriptor's base.
        flip: Axes of the array (in its spec's order) read in reverse.
        staged: The tensor goes through a C-ordered buffer holding ``array[flip]``.
    """

    modes: tuple[int, ...]
    extents: tuple[int, ...]
    strides: tuple[int, ...]
    data_type: int
    offset: int
    flip: tuple[int, ...]
    staged: bool

    def same_layout(self, other: DescriptorSpec) -> bool:
        """Whether both address every mode's elements alike (mode order aside)."""
        return sorted(zip(self.modes, self.extents, self.strides)) == sorted(
            zip(other.modes, other.extents, other.strides)
        )


def staged_bytes(
    descriptors: Sequence[DescriptorSpec], tensors: Sequence[TensorSpec], itemsize: int
) -> int:
    """The bytes of the C-ordered copies that the staged ``descriptors`` go through."""
    return itemsize * sum(t.size for d, t in zip(descriptors, tensors) if d.staged)


def expected_alignment(descriptor: DescriptorSpec, itemsize: int) -> int:
    """The base alignment of a tensor whose array starts 256-byte aligned, as every
    fresh CuPy allocation does: the alignment a plan is first built for."""
    if descriptor.staged:
        return MAX_ALIGNMENT
    return pointer_alignment(descriptor.offset * itemsize)


def orient(tensors: Sequence[TensorSpec]) -> tuple[DescriptorSpec, ...]:
    """Descriptor specs of the tensors of one operation (no extent may be 0).

    A label whose strides are negative in more elements than they are positive is
    reversed everywhere; the tensors left with a negative or zero stride, and those
    whose elements overlap, are staged.
    """
    if any(0 in t.extents for t in tensors):
        raise AssertionError("internal error: a zero-size tensor reached a descriptor")
    modes = mode_map(*(t.labels for t in tensors))
    staged = [elements_overlap(t.extents, t.strides) for t in tensors]
    flipped: set[str] = set()
    for label in modes:
        holders = [
            i
            for i, t in enumerate(tensors)
            if not staged[i] and label in t.labels and t.extent(label) > 1
        ]
        negative = [i for i in holders if tensors[i].stride(label) < 0]
        if not negative:
            continue
        positive = [i for i in holders if i not in negative]
        if sum(tensors[i].size for i in negative) > sum(tensors[i].size for i in positive):
            flipped.add(label)
            losers = positive
        else:
            losers = negative
        for i in losers:
            staged[i] = True
    return tuple(_descriptor(t, modes, flipped, s) for t, s in zip(tensors, staged))


def _descriptor(
    spec: TensorSpec, modes: dict[str, int], flipped: set[str], staged: bool
) -> DescriptorSpec:
    kept = [i for i, e in enumerate(spec.extents) if e != 1]
    flip = tuple(i for i in kept if spec.labels[i] in flipped)
    extents = tuple(spec.extents[i] for i in kept)
    if staged:
        strides = _c_strides(extents)
        offset = 0
    else:
        strides = tuple(abs(spec.strides[i]) for i in kept)
        offset = sum(spec.strides[i] * (spec.extents[i] - 1) for i in flip)
    return DescriptorSpec(
        tuple(modes[spec.labels[i]] for i in kept),
        extents,
        strides,
        DATA_TYPES[spec.dtype],
        offset,
        flip,
        staged,
    )


def _c_strides(extents: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for extent in reversed(extents):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def _with_mode(spec: DescriptorSpec, mode: int) -> DescriptorSpec:
    return replace(spec, modes=(*spec.modes, mode), extents=(*spec.extents, 1),
                   strides=(*spec.strides, 1))


def documented_forms(
    descriptors: Sequence[DescriptorSpec], contraction: bool = False
) -> tuple[tuple[DescriptorSpec, ...], str]:
    """The descriptors in forms ``cutensor.h`` documents, and a reason fragment.

    The header documents no tensor without modes (but a reduction's result) and no
    contraction without a contracted mode; such operations (a scalar result, operands
    of extent-1 axes only, outer and Hadamard products) get extent-1 modes: one more
    contracted mode in A and B, one more mode in every tensor when one has none.
    """
    specs = list(descriptors)
    notes = []
    fresh = 1 + max((m for d in specs for m in d.modes), default=-1)
    if contraction:
        a, b, d = (set(x.modes) for x in specs)
        if not (a & b) - d:
            specs[0], specs[1] = _with_mode(specs[0], fresh), _with_mode(specs[1], fresh)
            fresh += 1
            notes.append("an extent-1 contracted mode added (no label is contracted)")
    if any(not d.modes for d in specs):
        specs = [_with_mode(d, fresh) for d in specs]
        notes.append("an extent-1 mode added to every tensor (one has no modes)")
    return tuple(specs), "".join(f"; {note}" for note in notes)


def staging_note(names: str, descriptors: Sequence[DescriptorSpec]) -> str:
    """A reason fragment naming the staged tensors, or "" when none is."""
    staged = [name for name, d in zip(names, descriptors) if d.staged]
    if not staged:
        return ""
    return (f"; {', '.join(staged)} staged through a C-ordered copy (negative or zero "
            "strides, or overlapping elements)")
