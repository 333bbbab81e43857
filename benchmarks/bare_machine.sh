#!/usr/bin/env bash
# Run a benchmark on a machine that has Python 3 but not the project's environment
# (e.g. a lent 16-core node with no network): the wheels it lacks are in .whl/
# (MDAnalysis, dask, distributed, mpi4py and the MPICH wheel that provides mpiexec)
# and AdK's TPR and XTC are in .devdata/ (MDAnalysisTests is too large to carry).
#
#   bash benchmarks/bare_machine.sh benchmarks/scaling.py --frames 20000 --max-n 16 ...
#
# The MPI runs use the MPICH wheel's mpiexec and, h5py being serial there, the
# default HDF5 driver (each rank opens the file read-only).
set -euo pipefail
cd "$(dirname "$0")/.."
PFX=/tmp/trajscale-pfx
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --prefix "$PFX" .whl/*.whl
SITE=$(python3 -c "import sys; print(f'$PFX/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages')")
export PATH="$PFX/bin:$PATH" LD_LIBRARY_PATH="$PFX/lib:${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$SITE:$PWD/src" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
python3 - <<'EOF'
import os, sys, h5py, numpy, MDAnalysis, mpi4py, dask
print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; numpy {numpy.__version__}, h5py {h5py.__version__} "
      f"(mpi={h5py.get_config().mpi}), MDAnalysis {MDAnalysis.__version__}, mpi4py {mpi4py.__version__}, "
      f"dask {dask.__version__}")
EOF
script=$1
shift
exec python3 "$script" --source .devdata/adk_oplsaa.tpr .devdata/adk_oplsaa.xtc --mpiexec "$PFX/bin/mpiexec" "$@"
