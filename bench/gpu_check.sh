#!/usr/bin/env bash
# raylite's GPU check: the tests/gpu suite on a machine with a CUDA GPU and no network.
#
#   bench/gpu_check.sh prepare [DIR]   on a machine that reaches the package index: put in DIR
#                                      (default bench/gpu_wheels, git-ignored) a wheel of raylite
#                                      and wheels of the dependencies a CUDA image lacks, for the
#                                      GPU machine's Python (GPU_PYTHON_VERSION, default 3.12)
#   bench/gpu_check.sh [run] [DIR]     on the GPU machine, from the repository root: install
#                                      raylite from DIR only (--no-index) into that machine's
#                                      python3 (whose CUDA build of torch it keeps), print the
#                                      card, and run the GPU suite (under 8 minutes on one GPU)
#
# The GPU machine's python3 brings torch with CUDA, numpy, pandas, pyarrow, lightning and
# transformers; raylite adds its server and protocol libraries from DIR. Nothing is fetched
# there. DeepSpeed (an sdist) is carried too and built against the machine's torch; where it
# does not build, the one test that needs it skips.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=run
if [ "${1:-}" = prepare ] || [ "${1:-}" = run ]; then mode=$1; shift; fi
dir=${1:-bench/gpu_wheels}
py=${PYTHON:-python3}

if [ "$mode" = prepare ]; then
    version=${GPU_PYTHON_VERSION:-3.12}
    mkdir -p "$dir"
    echo "== raylite's wheel"
    $py -m pip wheel -q --no-deps -w "$dir" .
    echo "== dependencies for CPython $version on x86-64 Linux (binary wheels only)"
    $py -m pip download -q --only-binary=:all: --python-version "$version" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform any -d "$dir" \
        msgpack cloudpickle psutil packaging click pyyaml starlette uvicorn websockets httpx httptools \
        pydantic uvloop fsspec pytest pytest-timeout hjson py-cpuinfo
    echo "== deepspeed (an sdist, built on the GPU machine against its torch)"
    $py -m pip download -q --no-deps --no-binary=:all: -d "$dir" deepspeed==0.19.8 || true
    du -sh "$dir"
    exit 0
fi

if [ ! -d "$dir" ]; then
    echo "no wheel folder $dir: run 'bench/gpu_check.sh prepare $dir' where the package index is reachable" >&2
    exit 2
fi
echo "== the machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "(no nvidia-smi)"
$py -c 'import sys, torch; print("python", sys.version.split()[0], "| torch", torch.__version__,
"| cuda", torch.version.cuda, "| devices", torch.cuda.device_count())' || echo "(torch is not importable: the suite will skip)"
echo "== installing raylite from $dir (no network)"
$py -m pip install -q --no-index --find-links "$dir" --disable-pip-version-check 'raylite[serve,data]' pytest-timeout
# DeepSpeed's setup imports torch: build it with the machine's torch, not an isolated copy
ds=$(ls "$dir"/deepspeed-*.tar.gz 2>/dev/null | head -1 || true)
if [ -n "$ds" ]; then
    DS_BUILD_OPS=0 $py -m pip install -q --no-index --find-links "$dir" --no-build-isolation "$ds" \
        || echo "deepspeed did not build here: its test will skip"
fi
echo "== tests/gpu"
start=$(date +%s)
timeout "${GPU_CHECK_TIMEOUT_S:-480}" $py -m pytest -q -p no:randomly -p no:cacheprovider \
    --timeout=300 -rs tests/gpu 2>&1 | tail -40
status=${PIPESTATUS[0]}
echo "== GPU suite finished in $(( $(date +%s) - start )) s with exit status $status"
exit "$status"
