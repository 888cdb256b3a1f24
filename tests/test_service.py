"""The service: `gpu-tc scheduler` and two `gpu-tc worker` processes on loopback, started
the way README says, and a client contracting through them against the reference."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_close, reference_einsum

import gpu_tc
from gpu_tc import distributed

dd = pytest.importorskip("distributed", reason="the distributed extra is not installed")
da = pytest.importorskip("dask.array", reason="the distributed extra is not installed")


def _start(log, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    with open(log, "a", encoding="utf-8") as handle:  # dask logs to stderr: to a file
        return subprocess.Popen([sys.executable, "-m", "gpu_tc", *args], env=env,
                                stdout=handle, stderr=subprocess.STDOUT)


@contextlib.contextmanager
def _scheduler(folder: Path, env: dict[str, str] | None = None):
    """`gpu-tc scheduler` on a free loopback port; yields its scheduler file and address."""
    scheduler_file = str(folder / "scheduler.json")
    process = _start(folder / "scheduler.log", "scheduler", "--port", "0",
                     "--scheduler-file", scheduler_file, env=env)
    try:
        yield scheduler_file, _address(scheduler_file)
    finally:
        _stop(process)


def _address(scheduler_file: str) -> str:
    """The address a starting scheduler writes to its scheduler file."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with open(scheduler_file, encoding="utf-8") as handle:
                return str(json.load(handle)["address"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.1)
    pytest.fail("the scheduler wrote no scheduler file within 60 s")


@contextlib.contextmanager
def _workers(folder: Path, scheduler_file: str, env: dict[str, str] | None = None):
    """`gpu-tc worker --nworkers 2`, stopped (SIGTERM: dask closes them) on leaving."""
    process = _start(folder / "workers.log", "worker", "--scheduler-file", scheduler_file,
                     "--nworkers", "2", "--", "--memory-limit", "1GB", env=env)
    try:
        yield process
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    folder = tmp_path_factory.mktemp("service")
    with _scheduler(folder) as (scheduler_file, address), _workers(folder, scheduler_file):
        with dd.Client(scheduler_file=scheduler_file, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
            yield client, address


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


def _measured_route(calls: int) -> dict:
    """On a worker: ``calls`` calls of a contraction whose route the CPU backend measures,
    and more until it has chosen (lead-ins last longer while BLAS's threads spin)."""
    from cpu_fallback import measure
    from gpu_tc import disk_cache

    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((48, 40, 56)), rng.standard_normal((56, 40, 64))
    timed = []
    plan = gpu_tc.prepare("abc,cbd->ad", a, b)
    record = measure.Choice.record
    try:  # counts the calls this worker times
        measure.Choice.record = lambda self, v, s, t: (timed.append(t), record(self, v, s, t))
        results = []
        while len(results) < calls or "measuring" in plan.reason and len(results) < 300:
            results.append(plan.execute(a, b))
    finally:
        measure.Choice.record = record
    exact = np.einsum("abc,cbd->ad", a, b)
    return {"reason": plan.reason, "timed": sum(timed), "cache": disk_cache.stats(),
            "error": max(float(np.abs(r - exact).max()) for r in results)}


def test_restarted_workers_are_served_from_the_persistent_cache(tmp_path):
    """A worker measures a route and saves it; both workers that replace the first two
    start from it (nothing timed) and say so in their heartbeat."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tests/ is not on workers
    env = {**os.environ, "GPU_TC_CACHE_DIR": str(tmp_path / "cache")}
    with _scheduler(tmp_path, env) as (scheduler_file, _):
        with dd.Client(scheduler_file=scheduler_file, timeout=60) as client:
            with _workers(tmp_path, scheduler_file, env):
                client.wait_for_workers(2, timeout=60)
                one = sorted(client.scheduler_info()["workers"])[:1]
                first = client.run(_measured_route, 12, workers=one)
            deadline = time.monotonic() + 60
            while client.scheduler_info()["workers"] and time.monotonic() < deadline:
                time.sleep(0.2)
            with _workers(tmp_path, scheduler_file, env):
                client.wait_for_workers(2, timeout=60)
                second = client.run(_measured_route, 12)
                heartbeat = _heartbeats(client)
    assert len(first) == 1 and len(second) == 2 and not set(first) & set(second)
    (measured,) = first.values()
    assert measured["timed"] > 0 and measured["cache"]["saved"] >= 1, measured
    for found in second.values():
        assert found["timed"] == 0, found  # served from the cache: nothing re-measured
        assert "measured in an earlier process" in found["reason"]
        assert found["cache"]["restored"] >= 1 and found["cache"]["saved"] == 0
    assert all(r["error"] < 1e-10 for r in [*first.values(), *second.values()])
    assert all(h["cache"]["directory"] == env["GPU_TC_CACHE_DIR"] and h["cache"]["restored"]
               for h in heartbeat)


def _heartbeats(client) -> list[dict]:
    """Each worker's gpu_tc metrics, once a heartbeat has carried the latest state."""
    deadline = time.monotonic() + 30
    while True:
        reports = [w["metrics"].get("gpu_tc") for w in client.scheduler_info()["workers"].values()]
        if all(r and r["cache"]["restored"] for r in reports) or time.monotonic() > deadline:
            return reports
        time.sleep(0.5)


def test_a_tls_service_contracts_and_refuses_a_plain_client(tmp_path):
    """README's TLS example: scheduler and workers with dask's TLS flags after "--"
    (certificates from distributed's Security.temporary, a throwaway CA)."""
    pytest.importorskip("cryptography", reason="Security.temporary needs cryptography")
    from distributed.security import Security

    made = Security.temporary()
    files = {"ca": made.tls_ca_file, "cert": made.tls_client_cert, "key": made.tls_client_key}
    paths = {}
    for name, pem in files.items():
        paths[name] = tmp_path / f"{name}.pem"
        paths[name].write_text(pem, encoding="utf-8")
    tls = ["--tls-ca-file", str(paths["ca"]), "--tls-cert", str(paths["cert"]),
           "--tls-key", str(paths["key"])]
    scheduler_file = str(tmp_path / "scheduler.json")
    scheduler = _start(tmp_path / "scheduler.log", "scheduler", "--port", "0",
                       "--scheduler-file", scheduler_file, "--", "--protocol", "tls", *tls)
    workers = None
    try:
        address = _address(scheduler_file)
        assert address.startswith("tls://127.0.0.1:")
        workers = _start(tmp_path / "workers.log", "worker", address, "--nworkers", "2",
                         "--", *tls)
        security = Security(tls_ca_file=str(paths["ca"]), tls_client_cert=str(paths["cert"]),
                            tls_client_key=str(paths["key"]), require_encryption=True)
        with dd.Client(address, security=security, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
            a = np.arange(12.0).reshape(3, 4)
            got = client.submit(gpu_tc.einsum, "ij,kj->ik", a, a, pure=False).result()
            np.testing.assert_allclose(got, a @ a.T)
        with pytest.raises(OSError):  # plain TCP to the TLS listener: refused
            dd.Client(address.replace("tls://", "tcp://"), timeout=5)
        with pytest.raises(OSError):  # a certificate of another CA: refused
            dd.Client(address, security=Security.temporary(), timeout=5)
    finally:
        for process in (workers, scheduler):
            if process is not None:
                _stop(process)
