# Sourced by the device-machine scripts (bench/faults_gpu.sh, bench/gpu_idle.sh): a minimal `workbench` package on
# PYTHONPATH holding the collectors and the modules they import (the machine has torch but no polars), orjson from
# .whl/, and the zoo. tests/collectors/test_device_shim.py checks that SHIM_FILES covers what the collectors import.
SHIM_FILES="rundir.py errors.py regular_file.py compile_config.py compile_cache.py config_policy.py fix_versions.py source_scan.py"
python3 -c "import orjson" 2>/dev/null || \
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/orjson*.whl || exit 1
mkdir -p /tmp/shim/workbench
printf '"""minimal workbench for the device machine"""\n__version__ = "0.1.0"\n' > /tmp/shim/workbench/__init__.py
for f in $SHIM_FILES; do ln -sf "$REPO/workbench/$f" /tmp/shim/workbench/$f; done
ln -sfn "$REPO/collectors" /tmp/shim/workbench/collectors
ln -sfn "$REPO/zoo/workbench_zoo" /tmp/shim/workbench_zoo
export PYTHONPATH=/tmp/site:/tmp/shim PYTHONSAFEPATH=1
