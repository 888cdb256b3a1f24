"""The service: `gpu-tc scheduler` and two `gpu-tc worker` processes on loopback, started
the way README says, and a client contracting through them against the reference."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import assert_close, reference_einsum

import gpu_tc
from gpu_tc import distributed

dd = pytest.importorskip("distributed", reason="the distributed extra is not installed")
da = pytest.importorskip("dask.array", reason="the distributed extra is not installed")


def _start(log, *args: str) -> subprocess.Popen:
    with open(log, "w", encoding="utf-8") as handle:  # dask logs to stderr: to a file
        return subprocess.Popen([sys.executable, "-m", "gpu_tc", *args],
                                stdout=handle, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    folder = tmp_path_factory.mktemp("service")
    scheduler_file = str(folder / "scheduler.json")
    processes = [_start(folder / "scheduler.log", "scheduler", "--port", "0",
                        "--scheduler-file", scheduler_file)]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with open(scheduler_file, encoding="utf-8") as handle:
                    address = json.load(handle)["address"]
                break
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        else:
            pytest.fail("the scheduler wrote no scheduler file within 60 s")
        processes.append(_start(folder / "workers.log", "worker", "--scheduler-file",
                                scheduler_file, "--nworkers", "2", "--", "--memory-limit", "1GB"))
        with dd.Client(scheduler_file=scheduler_file, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
            yield client, address
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()


def test_scheduler_and_workers_listen_on_loopback(service):
    client, address = service
    assert address.startswith("tcp://127.0.0.1:")
    workers = client.scheduler_info()["workers"]
    assert len(workers) == 2 and all(w.startswith("tcp://127.0.0.1:") for w in workers)


def test_a_client_contracts_through_the_workers(service):
    client, _ = service
    rng = np.random.default_rng(11)
    ring = [rng.standard_normal((24, 24)) for _ in range(4)]
    exact, scale = reference_einsum("ab,bc,cd,da->", *ring)
    got = distributed.contract("ab,bc,cd,da->", *ring, client=client, memory_limit=24 * 8)
    assert_close(got, exact, "float64", scale)
    a = rng.standard_normal((40, 30))
    lazy = gpu_tc.einsum("ij,kj->ik", da.from_array(a, chunks=10), da.from_array(a, chunks=10))
    np.testing.assert_allclose(lazy.compute(), a @ a.T, rtol=1e-12)


def test_workers_report_gpu_tc_in_their_heartbeat(service):
    client, _ = service
    client.submit(gpu_tc.einsum, "ij,jk->ik", np.eye(3), np.eye(3), pure=False).result()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reports = [w["metrics"].get("gpu_tc") for w in client.scheduler_info()["workers"].values()]
        if all(reports) and sum(r["plans"] for r in reports) > 0:
            break
        time.sleep(0.5)
    assert all(r["version"] == gpu_tc.__version__ for r in reports)
    assert sum(r["plans"] for r in reports) > 0  # the einsum's plan, held by its worker
    assert all(r["gpu"] is None for r in reports) or all(r["gpu"] for r in reports)


def test_the_compose_file_runs_commands_gpu_tc_accepts():
    yaml = pytest.importorskip("yaml", reason="PyYAML (a dask dependency) is not installed")
    from pathlib import Path

    from gpu_tc.cli import build_parser

    compose = Path(__file__).resolve().parents[1] / "docker" / "compose.yaml"
    services = yaml.safe_load(compose.read_text(encoding="utf-8"))["services"]
    assert set(services) == {"scheduler", "worker"}
    for name, service in services.items():
        args = build_parser().parse_args(service["command"])
        assert args.command == name and args.host == "0.0.0.0"
    assert services["scheduler"]["ports"] == ["127.0.0.1:8786:8786"]  # host loopback only
