#!/usr/bin/env bash
# Records sample_traces/h200-1gpu and sample_traces/h200-2rank-shared-gpu and runs bench/overhead.py on one
# H200 (the workbench's device machine). Run from the repo root; results go to $OUT (default /tmp/wb-out):
#   h200-1gpu.tar.gz, h200-2rank-shared-gpu.tar.gz, bench.json, bench.txt, *.log
# The machine's python3 has torch but neither orjson nor polars: orjson comes as a wheel in .whl/, and a
# minimal `workbench` package (rundir, errors, compile_config + collectors) is put on PYTHONPATH so the
# collectors import without the analysis stack.
set -u
REPO=$PWD
OUT=${OUT:-/tmp/wb-out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
if ! python3 -c "import orjson" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
fi
if ! python3 -c "import polars" 2>/dev/null; then
  mkdir -p /tmp/shim/workbench
  printf '"""minimal workbench for the device machine"""\n__version__ = "0.1.0"\n' > /tmp/shim/workbench/__init__.py
  for f in rundir.py errors.py compile_config.py source_scan.py; do ln -sf "$REPO/workbench/$f" /tmp/shim/workbench/$f; done
  ln -sfn "$REPO/collectors" /tmp/shim/workbench/collectors
fi
export PYTHONPATH=/tmp/site:/tmp/shim:$REPO
export TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
STEPS=${STEPS:-12}
nvidia-smi -L; python3 -P -c "import torch, workbench.collectors as c; print(torch.__version__, torch.cuda.get_device_name(0), c.__file__)" || exit 1
S=/tmp/wb-samples; rm -rf $S; mkdir -p $S
if [ -z "${SKIP_SAMPLES:-}" ]; then
t=$(date +%s)
timeout ${T1:-170} python3 -m torch.distributed.run --standalone --nproc-per-node 1 examples/h200_transformer.py \
  --steps $STEPS --out $S/h200-1gpu > "$OUT/h200-1gpu.log" 2>&1; echo "h200-1gpu rc=$? $(( $(date +%s) - t ))s"
t=$(date +%s)
timeout ${T2:-150} python3 -m torch.distributed.run --standalone --nproc-per-node 2 examples/h200_transformer.py \
  --shared-gpu --steps $STEPS --out $S/h200-2rank-shared-gpu > "$OUT/h200-2rank.log" 2>&1; echo "h200-2rank rc=$? $(( $(date +%s) - t ))s"
tar czf "$OUT/h200-1gpu.tar.gz" -C $S h200-1gpu; tar czf "$OUT/h200-2rank-shared-gpu.tar.gz" -C $S h200-2rank-shared-gpu
ls -la "$OUT"
fi
t=$(date +%s)
timeout ${T3:-240} python3 bench/overhead.py ${BENCH_ARGS:-} --json "$OUT/bench.json" > "$OUT/bench.txt" 2>&1; echo "bench rc=$? $(( $(date +%s) - t ))s"
grep -v USDT "$OUT/bench.txt" | tail -8
