"""numpy's optimize= read as a path, and any path followed as pairwise contractions
(gpu_tc.pairwise): explicit paths step by step, opt_einsum's searches as they return."""

from __future__ import annotations

import numpy as np
import pytest
from opt_einsum import paths as oe_paths

import gpu_tc
from gpu_tc.pairwise import contraction_pairs, path_choice

INPUTS = ["ab", "bc", "cd", "de"]
EXTENTS = {"a": 4, "b": 5, "c": 6, "d": 3, "e": 7}


def _pairs(optimize, inputs=INPUTS, output="ae"):
    return contraction_pairs(path_choice(optimize), inputs, output, EXTENTS, "test")


@pytest.mark.parametrize(
    "optimize, expected",
    [
        # ids 0-3 are the operands; the k-th pair's result is id 4 + k
        (["einsum_path", (2, 3), (0, 2), (0, 1)], [(2, 3), (0, 4), (1, 5)]),
        (["einsum_path", (0, 1), (0, 1), (0, 1)], [(0, 1), (2, 3), (4, 5)]),
        (["einsum_path", (1, 3), (1, 2), (0, 1)], [(1, 3), (2, 4), (0, 5)]),
        # a one-index step moves the tensor to the end, as numpy's path does
        (["einsum_path", (0,), (0, 1), (0, 2), (0, 1)], [(1, 2), (3, 4), (0, 5)]),
    ],
    ids=["right-first", "left-to-right", "skips", "move"],
)
def test_an_explicit_path_is_followed_step_by_step(optimize, expected):
    assert _pairs(optimize) == expected


def test_a_step_of_more_than_two_tensors_runs_pairwise():
    pairs = _pairs(["einsum_path", (1, 2, 3), (0, 1)])
    assert len(pairs) == 3 and {x for pair in pairs[:2] for x in pair} == {1, 2, 3, 4}
    assert pairs[-1] == (0, 5)


@pytest.mark.parametrize("name", ["greedy", "optimal", "dp"])
def test_a_named_search_is_opt_einsums(name):
    path = oe_paths.get_path_fn(name)([set(x) for x in INPUTS], set("ae"), EXTENTS)
    ids, expected = list(range(4)), []
    for step in path:
        group = [ids[i] for i in step]
        for i in sorted(step, reverse=True):
            del ids[i]
        expected.append(tuple(group))
        ids.append(4 + len(expected) - 1)
    assert _pairs(name) == expected


def test_a_memory_limit_still_contracts_everything_pairwise():
    """opt_einsum gives up under a tiny limit (one step of every tensor); gpu_tc then
    contracts that step pairwise."""
    assert len(_pairs(("greedy", 1))) == 3


def test_true_is_greedy_and_false_is_auto():
    assert path_choice(True) == "greedy" and path_choice(False) == path_choice(None) == "auto"


def test_the_plan_runs_the_path_it_was_given(rng):
    """User-visible: the stages of the held plan follow the explicit path (here the first
    path's second step multiplies two tensors that share no label)."""
    operands = [rng.standard_normal((EXTENTS[t[0]], EXTENTS[t[1]])) for t in INPUTS]
    right_first = gpu_tc.prepare("ab,bc,cd,de->ae", *operands,
                                 optimize=["einsum_path", (2, 3), (0, 2), (0, 1)])
    left_to_right = gpu_tc.prepare("ab,bc,cd,de->ae", *operands,
                                   optimize=["einsum_path", (0, 1), (0, 1), (0, 1)])
    assert right_first.route == "blas:small+blas:multiply+blas:small"
    assert left_to_right.route == "blas:small+blas:small+blas:small"
    expected = np.einsum("ab,bc,cd,de->ae", *operands)
    np.testing.assert_allclose(right_first.execute(*operands), expected)
    np.testing.assert_allclose(left_to_right.execute(*operands), expected)


@pytest.mark.parametrize("path", [[(0, 1), (0, 1)], [(1, 2), (0, 1)], [(0, 2), (0, 1)]],
                         ids=["left", "right", "outer"])
@pytest.mark.parametrize("operands", [3, 4])
def test_warm_chains_follow_every_path_into_a_new_result(rng, path, operands):
    """A chain of small steps runs as one call of the steps' fast paths (three operands:
    two steps without a list of intermediates), the right operands fed to each step,
    cold and warm, as numpy."""
    inputs = INPUTS[:operands]
    output = "a" + inputs[-1][1]
    path = path + [(0, 1)] * (operands - 3)
    arrays = [rng.standard_normal((EXTENTS[t[0]], EXTENTS[t[1]])) for t in inputs]
    subscripts = ",".join(inputs) + "->" + output
    plan = gpu_tc.prepare(subscripts, *arrays, optimize=["einsum_path", *path])
    assert plan._plan.fast is not None
    expected = np.einsum(subscripts, *arrays)
    for _ in range(3):
        np.testing.assert_allclose(plan.execute(*arrays), expected)
        np.testing.assert_allclose(gpu_tc.einsum(subscripts, *arrays,
                                                 optimize=["einsum_path", *path]), expected)
