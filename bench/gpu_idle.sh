#!/usr/bin/env bash
# Records the GPU idle faults of the zoo (zoo/workbench_zoo/faults/gpu_*.py, see _gpu_idle.py) on one GPU, one tarball
# each into $OUT (gpu_<name>.tar.gz) and their logs into $OUT/gpu_idle.log. Unpack into sample_traces/gpu-<name>/.
# Usage (the device machine): bash bench/gpu_idle.sh [NAME ...]   (default: every gpu_* fault but the old two)
# As bench/faults_gpu.sh: orjson from .whl/, a minimal workbench package and the zoo's first on PYTHONPATH.
set -u
REPO=$PWD
OUT=${OUT:-/tmp/wb-out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
. "$REPO/bench/device_shim.sh"   # the minimal workbench package, orjson and the zoo on PYTHONPATH
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
nvidia-smi -L; python3 -P -c "import torch, workbench.collectors, workbench_zoo.runner; print(torch.__version__, torch.cuda.get_device_name(0))" || exit 1
NAMES=${*:-gpu_clean gpu_item_sync gpu_dtoh_sync gpu_unfused_optimizer gpu_cpu_dataload gpu_eager_frame}
S=/tmp/gpu-idle; rm -rf $S; mkdir -p $S
for name in $NAMES; do
  t=$(date +%s)
  timeout ${T:-240} python3 -P -c 'import sys; from workbench_zoo.runner import run_fault
t = run_fault(sys.argv[1], sys.argv[2]); print(sys.argv[1], "truth", t.get("cost_ns"), t.get("cost_per_step_ns"), t.get("unprofiled_cost_per_step_ns"), t.get("returncodes"))' "$name" "$S/$name" >> "$OUT/gpu_idle.log" 2>&1
  echo "$name rc=$? $(( $(date +%s) - t ))s" | tee -a "$OUT/gpu_idle.log"
  tar czf "$OUT/$name.tar.gz" -C $S "$name"
done
ls -la "$OUT"
