"""README's worked example runs and its printed claims hold."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_readme_api_example_runs_and_prints_what_it_says():
    text = README.read_text()
    block = re.search(r"## API\n\n```python\n(.*?)```", text, re.S).group(1)
    printed = io.StringIO()
    namespace: dict = {}
    with contextlib.redirect_stdout(printed):
        exec(compile(block, "README.md", "exec"), namespace)
    lines = printed.getvalue().splitlines()
    assert lines[0] == "blas:packed"
    assert lines[1].startswith("blas:packed: A packed: labels 'abd' do not merge")
    import gpu_tc

    x = namespace["x"]
    assert gpu_tc.prepare("ij,jk->ik", x.T, x).route == "blas:direct"


def test_readme_memory_example_holds():
    text = README.read_text()
    api = re.search(r"## API\n\n```python\n(.*?)```", text, re.S).group(1)
    memory = re.search(r"naming the limit and the smallest need.*?```python\n(.*?)```", text, re.S)
    namespace: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(api, "README.md", "exec"), namespace)
    claim = memory.group(1).strip().splitlines()[-1].split("#")[0].strip()
    exec(compile(memory.group(1), "README.md", "exec"), namespace)
    assert eval(claim, namespace) is True
    import numpy as np

    plan = namespace["plan"]
    expected = np.einsum("abcd,dbea->ec", namespace["A"], namespace["B"])
    assert np.allclose(plan.execute(namespace["A"], namespace["B"]), expected)


def test_readme_scale_out_examples_hold():
    import numpy as np
    import pytest

    pytest.importorskip("dask.array", reason="the distributed extra is not installed")
    text = README.read_text()
    section = text.split("### Scale-out on dask")[1]
    arrays, sliced = re.findall(r"```python\n(.*?)```", section, re.S)[:2]
    namespace: dict = {"client": None}  # client=None: the same code path, in this process
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(re.search(r"## API\n\n```python\n(.*?)```", text, re.S).group(1),
                     "README.md", "exec"), namespace)
    exec(compile(arrays, "README.md", "exec"), namespace)
    x, y = namespace["X"].compute(), namespace["Y"].compute()
    np.testing.assert_allclose(namespace["Z"].compute(scheduler="sync"), x @ y, rtol=1e-10)
    exec(compile(sliced, "README.md", "exec"), namespace)
    ring, p = namespace["ring"], namespace["p"]
    expected = np.trace(ring[0] @ ring[1] @ ring[2] @ ring[3])
    assert p.sliced and p.largest_bytes <= 512
    np.testing.assert_allclose(namespace["total"], expected, rtol=1e-10)
