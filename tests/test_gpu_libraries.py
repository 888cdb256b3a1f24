"""Which GPU library failed to load and how to fix it (gpu_tc.cuda.libraries), on the CPU."""

from __future__ import annotations

from gpu_tc.cuda.libraries import Library, fix_for

NVMATH_ERROR = ('Failure finding "libcublasLt.so.13 or libcublasLt.so.12": No such file: '
                "libcublasLt.so.13 or libcublasLt.so.12")


def test_a_library_installed_off_the_loader_s_path_names_ld_library_path(tmp_path, monkeypatch):
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    lib = tmp_path / "target" / "cutensor" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcutensor.so.2").touch()
    fix = fix_for('Failure finding "libcutensor.so.2"', [str(tmp_path / "target")])
    assert fix == (f"libcutensor.so.2 is installed in {lib}, where the loader does not look (a "
                   f"pip --target or PYTHONPATH install): export LD_LIBRARY_PATH={lib}"
                   "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")


def test_cublaslt_is_looked_for_where_the_cuda_13_wheels_put_it(tmp_path, monkeypatch):
    lib = tmp_path / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcublasLt.so.13").touch()
    monkeypatch.setenv("LD_LIBRARY_PATH", str(lib))
    fix = fix_for(NVMATH_ERROR, [str(tmp_path)])
    assert fix.startswith(f"{lib / 'libcublasLt.so.13'} is on LD_LIBRARY_PATH but does not load")


def test_a_library_found_nowhere_names_the_wheel_to_install(tmp_path):
    assert fix_for(NVMATH_ERROR, [str(tmp_path)]) == (
        "libcublasLt.so.13 is not installed: pip install 'cuda-toolkit[cublas]==13.*' "
        "(or pip install 'gpu-tc[gpu]')"
    )
    assert "gpu-tc[gpu]" in fix_for("something else went wrong", [str(tmp_path)])


def test_library_lines():
    assert Library("cuTENSOR", "2.8.1").describe() == "2.8.1"
    missing = Library("cuBLAS", None, "ImportError: no libcublas.so.13", "pip install x")
    assert not missing.loaded
    assert missing.describe() == "not loadable: ImportError: no libcublas.so.13; fix: pip install x"
