#!/usr/bin/env bash
# Run a benchmark on a machine that has Python 3 but not the project's environment
# (e.g. a lent 16-core node with no network): the wheels it lacks are in .whl/
# (MDAnalysis, dask, distributed, mpi4py and the MPICH wheel that provides mpiexec;
# obstore for remote.py) and AdK's TPR and XTC are in .devdata/ (MDAnalysisTests is
# too large to carry). The compiled kernels are built for the machine's Python first.
#
#   bash benchmarks/bare_machine.sh benchmarks/scaling.py --frames 20000 --max-n 16 ...
#
# The MPI runs use the MPICH wheel's mpiexec and, h5py being serial there, the
# default HDF5 driver (each rank opens the file read-only). The script is given
# --source (the .devdata files) and --mpiexec only where its --help lists them.
# WHEELS, DEVDATA, PFX and MPIEXEC override the folders and the launcher (the
# test suite runs this with no wheels, on the project's environment).
set -euo pipefail
cd "$(dirname "$0")/.."
PFX=${PFX:-/tmp/trajscale-pfx}
WHEELS=${WHEELS:-.whl}
DEVDATA=${DEVDATA:-.devdata}
MPIEXEC=${MPIEXEC:-$PFX/bin/mpiexec}
shopt -s nullglob
wheels=("$WHEELS"/*.whl)
if ((${#wheels[@]})); then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --prefix "$PFX" "${wheels[@]}"
fi
SITE=$(python3 -c "import sys; print(f'$PFX/lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages')")
export PATH="$PFX/bin:$PATH" LD_LIBRARY_PATH="$PFX/lib:${LD_LIBRARY_PATH:-}"
export PYTHONPATH="$SITE:$PWD/src" PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
# the compiled kernels, built for this Python where they are not yet (a C compiler is needed)
if ! python3 -c "import trajscale.kernels._sums" 2>/dev/null; then
    python3 setup.py -q build_ext --inplace >/dev/null
fi
python3 - <<'PY'
import importlib, os, sys, h5py
have = []
for name in ("numpy", "MDAnalysis", "mpi4py", "dask", "obstore"):
    try:
        have.append(f"{name} {importlib.import_module(name).__version__}")
    except ImportError:
        pass
print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs ({len(os.sched_getaffinity(0))} usable); "
      f"h5py {h5py.__version__} (mpi={h5py.get_config().mpi}); " + ", ".join(have))
PY
script=$1
shift
usage=$(python3 "$script" --help)
opts=()
if [[ $usage == *--source* ]]; then opts+=(--source "$DEVDATA/adk_oplsaa.tpr" "$DEVDATA/adk_oplsaa.xtc"); fi
if [[ $usage == *--mpiexec* ]]; then opts+=(--mpiexec "$MPIEXEC"); fi
exec python3 "$script" "${opts[@]}" "$@"
