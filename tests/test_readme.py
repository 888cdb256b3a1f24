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
