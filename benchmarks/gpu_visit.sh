#!/usr/bin/env bash
# One visit to a GPU host (issue #11): everything there is to learn in one command per
# mode, each well inside 10 minutes, results packed into a few files under OUT.
#
#   benchmarks/gpu_visit.sh tests OUT    versions; the whole test suite with the gpu
#                                        tests (all cores, no stop at a failure, long
#                                        tracebacks, junit XML); the selftest as the
#                                        Docker image runs it; first calls with and
#                                        without the persistent cache (autotuning on)
#   benchmarks/gpu_visit.sh tccg OUT     gpu-tc bench tccg, float64 and float32, against
#                                        every GPU peer (cupy.einsum with CuPy's cuTENSOR
#                                        accelerator on, nvmath held and function,
#                                        torch), then cupy.einsum with it off
#   benchmarks/gpu_visit.sh small OUT    the overhead, permute, trace and reduce suites,
#                                        float64, the same peers (torch-cuda twice: the
#                                        noise floor) and the same two passes
#   benchmarks/gpu_visit.sh bench OUT    tccg and small in one command, most telling
#                                        first: tccg float64, the small suites, tccg
#                                        float32, then the two passes with it off
#   benchmarks/gpu_visit.sh visit OUT    tests (no first calls) then bench (no passes
#                                        with the accelerator off) in one command: on an
#                                        H200 about 540 s with the staging's install,
#                                        so one staging serves the whole visit
#   benchmarks/gpu_visit.sh rest OUT     what visit leaves out: the first calls, the
#                                        passes with the accelerator off, the host
#                                        profile of warm small calls and each reduction
#                                        route timed alone (about 150 s)
#
# A session's device time is short (15 minutes, the start and the staging included), so
# the limits below are sized for `tests` then `bench` on one warm machine; the archive
# is rewritten after every step, so a call cut off at its limit still returns what the
# finished steps found.
# Run from the repository root with gpu_tc importable (on the lent machine: after the
# staging calls, `source /tmp/stage/env.sh`, which puts the checkout on PYTHONPATH); each
# mode first compiles the C kernels in place (setup.py build_ext --inplace).
# That machine lacks some of gpu_tc's dependencies; stage them with cuTENSOR:
#   WHEELS="$(benchmarks/gpu_visit.sh wheels)" ../shared/tools/device-cutensor prepare
# Each step runs under its own time limit and a failing step does not stop the next.
set -uo pipefail

mode=${1:-}
out=${2:-}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

# Wheels the GPU image lacks (its list: /work/.library/device/KINDS.md), besides
# cuTENSOR and nvmath-python; pure Python except tornado; the versions CI runs here.
WHEELS="cutensor-cu13==2.8.1 nvmath-python==1.0.0 platformdirs==4.14.7 dask==2026.8.0
distributed==2026.8.0 cotengra==0.8.3 autoray==0.11.0 tornado==6.6.1 zict==3.0.0
tblib==3.2.2 partd==1.4.2 locket==1.0.0"

usage() { sed -n '2,37p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

step() {  # step NAME SECONDS COMMAND...: run with a limit, log to $work/NAME.log
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s): $*" | tee -a "$work/steps.txt"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$work/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc after $((SECONDS - start))s" | tee -a "$work/steps.txt"
  tail -n 5 "$work/$name.log"
  pack > /dev/null
}

versions() {
  {
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    $PY - <<'PY'
import json, platform, sys
from gpu_tc.bench import environment
status = environment.gpu_status()
found = {"python": platform.python_version(), "available": status.available,
         "reason": status.reason, "devices": list(status.devices), **status.versions}
for name in ("torch", "numpy", "opt_einsum", "dask", "distributed", "cotengra"):
    found[name] = environment.package_version(name)
found["host"] = environment.host()
print(json.dumps(found, indent=1, default=str))
PY
  } > "$work/versions.txt" 2>&1
  cat "$work/versions.txt"
}

pack() {  # the logs as few files: steps.txt, versions.txt and one archive
  cp "$work/steps.txt" "$work/versions.txt" "$out/" 2>/dev/null
  tar -C "$work" -czf "$out/$mode.tar.gz" .
  ls -la "$out"
}

[ -n "$mode" ] || usage
if [ "$mode" = wheels ]; then echo $WHEELS; exit 0; fi
[ -n "$out" ] || usage
mkdir -p "$out"
work=$(mktemp -d /tmp/gpu-visit-XXXX)
: > "$work/steps.txt"
# The checkout is used in place (no pip install there): compile the copy kernel beside
# its sources. Without it large CPU copies fall back to numpy.copyto, and its tests fail.
step build-kernel 120 $PY setup.py build_ext --inplace
versions

tests() {
  # A hung test must not cost the whole log: pytest-timeout (in the GPU image) ends it.
  local per_test
  per_test=$($PY -c "import pytest_timeout" 2>/dev/null && echo --timeout=90)
  step tests 240 $PY -m pytest -n "$(nproc)" -p no:cacheprovider --tb=long -rfEs \
    $per_test --junitxml="$work/junit.xml"
  head -c 15M "$work/tests.log" > "$out/tests.log"
  step selftest 60 $PY -m gpu_tc selftest             # the image's default command
}

host_profile() {  # where a warm small call spends its host time (about 30 s)
  CUPY_ACCELERATORS=cub,cutensor step host-profile 90 $PY benchmarks/host_profile.py \
    --backend gpu --output "$work/host-profile.txt"
}

reduce_probe() {  # each route of the reduce suite alone, beside torch (visit 8's question)
  CUPY_ACCELERATORS=cub,cutensor step reduce-probe 60 $PY benchmarks/reduce_probe.py \
    --output "$work/reduce-probe.txt"
}

first_calls() {
  # First calls as users get them (cuTENSOR's cache files off: with them opted in,
  # case 13 crashed its process in visits 1 and 3 on the H200, cuTENSOR 2.8.0).
  step first-call 90 $PY benchmarks/first_call.py --backend gpu --autotune 8 \
    --cases 3,13 --repeat 2 --output "$work/first-call-gpu.json"
}

tccg() {  # tccg DTYPE: every GPU peer, CuPy's cuTENSOR accelerator on
  CUPY_ACCELERATORS=cub,cutensor step "tccg-$1" 200 $PY -m gpu_tc bench tccg --backend gpu \
    --dtype "$1" --no-memory --output "$work/bench"
}

small() {
  # torch-cuda timed twice (--twin): the host's noise floor, beside 44 s of the small
  # suites on an H200 in visit 8
  CUPY_ACCELERATORS=cub,cutensor step small 150 $PY -m gpu_tc bench overhead permute trace \
    reduce --backend gpu --dtype float64 --twin torch-cuda --output "$work/bench"
}

plain() {  # plain tccg|small: cupy.einsum with CuPy's accelerators off
  case "$1" in
    tccg) CUPY_ACCELERATORS="" step tccg-cupy-plain 120 $PY -m gpu_tc bench tccg --backend gpu \
      --dtype float64 --peers cupy --no-memory --output "$work/bench-cupy-plain" ;;
    small) CUPY_ACCELERATORS="" step small-cupy-plain 90 $PY -m gpu_tc bench overhead permute \
      trace reduce --backend gpu --dtype float64 --peers cupy --output "$work/bench-cupy-plain" ;;
  esac
}

case "$mode" in
  tests) tests; first_calls ;;
  tccg) tccg float64; tccg float32; plain tccg ;;
  small) small; plain small ;;
  bench) tccg float64; small; tccg float32; plain tccg; plain small ;;
  visit) tests; tccg float64; small; tccg float32 ;;
  rest) first_calls; plain tccg; plain small; host_profile; reduce_probe ;;
  *) usage ;;
esac
pack
