"""Where the compiled kernels' OpenMP workers run (cpu_fallback/kernel_common.h): a
worker that starts on the CPU of the thread that launched the parallel region moves to
the main thread's other CPUs; the launching thread itself is never narrowed.

Each case runs in a fresh interpreter: it pins a thread to one CPU, so that the workers
libgomp creates for that thread start on it, launches one kernel there, checks the
kernel's result and reads back the affinity of the launching thread and of the workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux and at least two CPUs this process may use",
)

# Each kernel's parallel launch: (set-up in the main thread, call in the pinned thread
# returning whether the result is right).
LAUNCHES = {
    "small_k": (
        "from cpu_fallback import small_k\n"
        "a, b = np.random.default_rng(0).random((2, 256, 12))\n"
        "b = b.T.copy()\n"
        "d, want = np.empty((256, 256)), a @ b\n",
        "small_k.gemm(a, b, d, 1.0) and np.allclose(d, want, rtol=1e-13)",
    ),
    "tile_copy": (
        "from cpu_fallback import blocked\n"
        "from cpu_fallback.permute import copy_permuted\n"
        "blocked.MIN_ELEMENTS, blocked.PARALLEL_BYTES = 0, 0\n"
        "x = np.arange(64.0 ** 3).reshape(64, 64, 64)\n"
        "d, want = np.empty((64, 64, 64)), x.transpose(2, 1, 0).copy()\n",
        "copy_permuted(x.transpose(2, 1, 0), d) is None and (d == want).all()",
    ),
    "strided_sum": (
        "from cpu_fallback import _sums, sum_kernel\n"
        "x, d = np.arange(40.0), np.zeros(20)\n"
        "kept_src, kept_dst = np.array([0, 20]), np.array([0, 10])\n"
        "summed = np.array([0, 10])\n"
        "want = np.concatenate([x[0:10] + x[10:20], x[20:30] + x[30:40]])\n",
        "_sums.strided(x, d, 'f8', 'f8', sum_kernel.UNIT_ROWS, kept_src, kept_dst, summed,"
        " 10, 1, 1, 2) is None and (d == want).all()",
    ),
    "pairwise_sum": (
        "from cpu_fallback import pairwise_kernel\n"
        "from cpu_fallback.sum_layout import RowLayout, cuts, leaf_program\n"
        "x = np.random.default_rng(1).standard_normal(1 << 20)\n"
        "layout = RowLayout(np.zeros(1, np.int64), np.zeros(1, np.int64), x.size, 0, 0)\n"
        "d, want = np.empty(()), x.sum()\n",
        "pairwise_kernel.run(x, d, layout, leaf_program(cuts(x.size, 4)), parallel=True)"
        " is None and d == want",
    ),
}

SCRIPT = """\
import json, os, threading
import numpy as np
{setup}
allowed = sorted(os.sched_getaffinity(0))
cpu = allowed[0]
before = set(os.listdir("/proc/self/task"))
seen = {{}}

def launch():
    os.sched_setaffinity(0, {{cpu}})
    seen["right"] = bool({call})
    me = str(threading.get_native_id())
    workers = set(os.listdir("/proc/self/task")) - before - {{me}}
    seen["launcher"] = sorted(os.sched_getaffinity(0))
    seen["workers"] = [sorted(os.sched_getaffinity(int(t))) for t in workers]

thread = threading.Thread(target=launch)
thread.start()
thread.join()
print(json.dumps({{"allowed": allowed, "cpu": cpu, **seen}}))
"""


def _environment() -> dict[str, str]:
    """This environment without the variables that make OpenMP bind its threads (the
    kernels then leave them where they are), with two threads per region."""
    binding = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY")
    env = {k: v for k, v in os.environ.items() if k not in binding}
    env["OMP_NUM_THREADS"] = "2"
    return env


def _launch(kernel: str) -> dict:
    setup, call = LAUNCHES[kernel]
    env = _environment()
    code = SCRIPT.format(setup=setup, call=call)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("kernel", sorted(LAUNCHES))
def test_a_worker_started_on_the_launching_cpu_moves_off_it(kernel):
    seen = _launch(kernel)
    assert seen["right"], "the kernel's result is wrong"
    others = [c for c in seen["allowed"] if c != seen["cpu"]]
    assert seen["workers"], "no OpenMP worker was started"
    for worker in seen["workers"]:
        assert worker == others
    assert seen["launcher"] == [seen["cpu"]], "the launching thread was moved"


def test_the_launching_thread_keeps_its_cpus():
    """Runs of parallel kernels on the main thread leave its affinity as it was."""
    code = textwrap.dedent("""\
        import os
        import numpy as np
        from cpu_fallback import small_k
        before = sorted(os.sched_getaffinity(0))
        a, b, d = np.ones((256, 8)), np.ones((8, 256)), np.empty((256, 256))
        for _ in range(50):
            small_k.gemm(a, b, d, 1.0)
        print(before == sorted(os.sched_getaffinity(0)), float(d[0, 0]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_environment(), timeout=120, check=True)
    assert out.stdout.split() == ["True", "8.0"]
