#!/usr/bin/env bash
# Records the GPU faults of the zoo on one GPU (the workbench's device machine) into $OUT/gpu-faults.tar.gz:
#   launch_bound/before, launch_bound/after (rerun with the config `workbench recommend` writes for launch_bound,
#   given as $1: make it here with `python bench/faults.py --gpu-config gpu_fix/launch_bound.toml`),
#   pageable_h2d/before. Unpack into sample_traces/gpu-launch-bound-{before,after} (+ fixes.toml in -before) and
#   sample_traces/gpu-pageable-h2d; tests/faults/test_gpu_samples.py checks them.
# The machine's python3 has torch but neither orjson nor polars: orjson comes as a wheel in .whl/, and a minimal
# `workbench` package (the collectors and what they import: bench/device_shim.sh) and the zoo's package
# (zoo/workbench_zoo) go first on PYTHONPATH, so the collectors and the fault runner import without the analysis stack.
# Analyse the runs where polars is.
set -u
REPO=$PWD
CFG=${1:?usage: bench/faults_gpu.sh LAUNCH_BOUND_FIXES.toml}
OUT=${OUT:-/tmp/wb-out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
. "$REPO/bench/device_shim.sh"   # the minimal workbench package, orjson and the zoo on PYTHONPATH
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache TORCH_LOGS=perf_hints  # perf_hints: why CUDA graphs were skipped
nvidia-smi -L; python3 -P -c "import torch, workbench.collectors, workbench_zoo.runner; print(torch.__version__, torch.cuda.get_device_name(0))" || exit 1
S=/tmp/gpu-faults; rm -rf $S; mkdir -p $S
run() {  # name out [config]
  local t=$(date +%s)
  timeout ${T:-200} python3 -P -m workbench_zoo run "$1" --out "$S/$2" ${3:+--compile-config "$3"} > "$OUT/$1-$(basename $2).log" 2>&1
  echo "$1 $2 rc=$? $(( $(date +%s) - t ))s"; tail -2 "$OUT/$1-$(basename $2).log"
}
run launch_bound launch_bound/before
run launch_bound launch_bound/after "$CFG"
run pageable_h2d pageable_h2d/before
tar czf "$OUT/gpu-faults.tar.gz" -C $S .
ls -la "$OUT"
