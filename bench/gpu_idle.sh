#!/usr/bin/env bash
# Records the GPU idle faults of the zoo (zoo/workbench_zoo/faults/gpu_*.py, see _gpu_idle.py) on one GPU, one tarball
# each into $OUT (gpu_<name>.tar.gz) and their logs into $OUT/gpu_idle.log. Unpack into sample_traces/gpu-<name>/.
# Usage (the device machine): bash bench/gpu_idle.sh [NAME ...]   (default: every gpu_* fault but the old two)
# As bench/faults_gpu.sh: orjson from .whl/, a minimal workbench package and the zoo's first on PYTHONPATH.
set -u
REPO=$PWD
OUT=${OUT:-/tmp/wb-out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -c "import orjson" 2>/dev/null || \
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/orjson*.whl || exit 1
mkdir -p /tmp/shim/workbench
printf '"""minimal workbench for the device machine"""\n__version__ = "0.1.0"\n' > /tmp/shim/workbench/__init__.py
for f in rundir.py errors.py compile_config.py config_policy.py source_scan.py; do ln -sf "$REPO/workbench/$f" /tmp/shim/workbench/$f; done
ln -sfn "$REPO/collectors" /tmp/shim/workbench/collectors
ln -sfn "$REPO/zoo/workbench_zoo" /tmp/shim/workbench_zoo
export PYTHONPATH=/tmp/site:/tmp/shim PYTHONSAFEPATH=1
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
