#!/usr/bin/env bash
# Build the project environment in .venv/ on a fresh Debian machine.
#
# MPI and parallel HDF5 come from Debian (MPICH + libhdf5-mpich); mpi4py and
# h5py are built from source against them so that h5py.get_config().mpi is
# True.  The built wheels are cached under ~/.cache/trajscale/wheels so a
# second run on the same machine takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=.venv
CACHE=${TRAJSCALE_CACHE:-$HOME/.cache/trajscale}
WHEELS=$CACHE/wheels
H5PY_VERSION=3.16.0
MPI4PY_VERSION=4.1.2
STAMP=$VENV/.trajscale-env-ok

log() { printf '[setup] %s\n' "$*" >&2; }

need_apt=0
for pkg in libhdf5-mpich-dev mpich pkg-config clang ccache; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt=1
done
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
if [ "$need_apt" = 1 ]; then
  log "installing MPICH and parallel HDF5 from Debian"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libhdf5-mpich-dev mpich pkg-config clang ccache >/dev/null
fi
# GROMACS (Debian's 2022.5, ~70 MB, seconds to install) is a real IMD producer for the streaming test
# (tests/sources/test_follow_gromacs.py, skipped without gmx). Without its recommends: they include
# Open MPI's launcher, which would take over the mpiexec alternative.
if ! command -v gmx >/dev/null 2>&1; then
  log "installing GROMACS from Debian (a real IMD producer for the streaming tests)"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends gromacs >/dev/null \
    || log "GROMACS not installed: its streaming test will be skipped"
fi
# SLURM (Debian's 22.05) and munge: the tests marked `slurm` start a one-node cluster from them
# (tests/slurm/cluster.py; as root, skipped otherwise). Nothing is started or configured here.
if ! dpkg -s slurm-wlm munge >/dev/null 2>&1; then
  log "installing SLURM and munge from Debian (a local scheduler for the tests marked slurm)"
  slurm_apt() { DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null; }
  slurm_apt || { $SUDO apt-get update -qq && slurm_apt; } \
    || log "SLURM not installed: the tests marked slurm will be skipped"
fi

# nginx (Debian's) serves files over http and https for the byte-store tests (tests/remote/servers.py starts it
# on free ports from a configuration of its own; nothing is started here: policy-rc.d or no init keeps the
# package's service down).
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
  log "installing nginx from Debian (a web server for the byte-store tests)"
  nginx_apt() { DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nginx >/dev/null; }
  nginx_apt || { $SUDO apt-get update -qq && nginx_apt; } || log "nginx not installed: its store tests will be skipped"
fi
# Azurite (npm; the Azure Blob emulator) for the az:// store tests, once, under the cache (tests/remote/emulators.py
# looks there); skipped where npm is missing.
if command -v npm >/dev/null 2>&1 && [ ! -x "$CACHE/npm/node_modules/.bin/azurite-blob" ]; then
  log "installing Azurite from npm (the Azure Blob emulator for the az:// store tests)"
  mkdir -p "$CACHE/npm"
  npm install --prefix "$CACHE/npm" --no-audit --no-fund --loglevel=error azurite@3 >/dev/null \
    || log "Azurite not installed: the az:// store tests will be skipped"
fi

if [ -f "$STAMP" ] && [ "$STAMP" -nt pyproject.toml ] && [ "$STAMP" -nt "$0" ] && [ "$STAMP" -nt scripts/compile_runtime.py ]; then
  exit 0
fi

[ -x $VENV/bin/python ] || { log "creating $VENV"; $PY -m venv $VENV; }
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"

# uv (PyPI) installs from its cache in seconds where pip takes most of a minute; pip's own configuration
# (find-links, constraints, index) is passed on to it. Without uv, pip installs everything.
# Bytecode is compiled after the install for what trajscale's runs import (scripts/compile_runtime.py), not
# for all ~18,000 modules installed (68 s of CPU at every set-up, most of them imported by no run: the test
# servers' and the docs' dependencies compile at their first import).
uv_from_pip_config() {
  $VENV/bin/python - <<'PY'
import os, shlex, subprocess, sys
out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
conf = {}
for line in out.splitlines():
    key, _, value = line.partition("=")
    conf.setdefault(key.split(".", 1)[-1], []).extend(value.strip("'\"").split())
def usable(url):   # pip skips a missing local index with a warning; uv would stop
    return not url.startswith("file://") or os.path.isdir(url[len("file://"):])
pairs = [("--find-links", d) for d in conf.get("find-links", []) if usable(d)]
pairs += [("-c", c) for c in conf.get("constraint", []) if os.path.isfile(c)]
pairs += [("--default-index", u) for u in conf.get("index-url", [])[:1] if usable(u)]
pairs += [("--index", u) for u in conf.get("extra-index-url", []) if usable(u)]
print(shlex.join(a for pair in dict.fromkeys(pairs) for a in pair))
PY
}
if $PIP install --no-compile uv >/dev/null 2>&1; then
  eval "UV_ARGS=($(uv_from_pip_config))"
  # unsafe-best-match: every index's versions are candidates, as pip takes them
  INSTALL=($VENV/bin/python -m uv pip install -q --python $VENV/bin/python --index-strategy unsafe-best-match
           "${UV_ARGS[@]}")
  REINSTALL=("${INSTALL[@]}" --reinstall --no-deps)
else
  log "uv is not at hand: installing with pip"
  INSTALL=($PIP install --no-compile)
  REINSTALL=("${INSTALL[@]}" --force-reinstall --no-deps)
fi
"${INSTALL[@]}" -U pip "setuptools>=77" wheel packaging "Cython>=3,<4" "numpy>=2,<3" pkgconfig

mkdir -p "$WHEELS"
# Name MPICH's compiler wrapper and launcher explicitly: installing any Debian
# package built on Open MPI (GROMACS, ...) switches the plain mpicc/mpiexec
# alternatives to Open MPI, which would build mpi4py against the wrong MPI and
# start N unrelated singleton runs.
MPICC_MPICH=$(command -v mpicc.mpich || true)
MPIEXEC_MPICH=$(command -v mpiexec.mpich || true)
if [ -z "$MPICC_MPICH" ] || [ -z "$MPIEXEC_MPICH" ]; then
  log "error: mpicc.mpich / mpiexec.mpich not found (Debian package mpich)"; exit 1
fi
export MPICC=$MPICC_MPICH
if ! ls "$WHEELS"/mpi4py-$MPI4PY_VERSION-*.whl >/dev/null 2>&1; then
  log "building mpi4py $MPI4PY_VERSION against the system MPICH (a few minutes, once)"
  $PIP wheel --no-cache-dir --no-deps --no-binary=mpi4py -w "$WHEELS" mpi4py==$MPI4PY_VERSION
fi
# h5py's MPI build imports mpi4py, so install it first.
"${REINSTALL[@]}" "$WHEELS"/mpi4py-$MPI4PY_VERSION-*.whl
if ! ls "$WHEELS"/h5py-$H5PY_VERSION-*.whl >/dev/null 2>&1; then
  log "building h5py $H5PY_VERSION against parallel HDF5 (a few minutes, once)"
  CC=$MPICC_MPICH HDF5_MPI=ON HDF5_PKGCONFIG_NAME=hdf5-mpich \
    $PIP wheel --no-cache-dir --no-deps --no-binary=h5py --no-build-isolation -w "$WHEELS" h5py==$H5PY_VERSION
fi
"${REINSTALL[@]}" "$WHEELS"/h5py-$H5PY_VERSION-*.whl

# Pin the MPI builds so pip never swaps in a serial wheel.
CONSTRAINTS=$CACHE/constraints.txt
$VENV/bin/python - > "$CONSTRAINTS" <<'PY'
import h5py, mpi4py, numpy
print(f"h5py=={h5py.__version__}\nmpi4py=={mpi4py.__version__}\nnumpy=={numpy.__version__}")
PY
# The ml extra's CPU build of torch (installs from a local file on the project's machines).
echo "torch==2.13.0" >> "$CONSTRAINTS"
log "installing trajscale and its dependencies"
# The kernels are built with the build requirements installed above (pyproject.toml's [build-system]),
# not in an isolated environment pip would make and fill for each install.
"${INSTALL[@]}" --no-build-isolation -c "$CONSTRAINTS" -e ".[all]" || {
  log "the install failed: trying again with pip"
  $PIP install --no-compile --no-build-isolation -c "$CONSTRAINTS" -e ".[all]"
}
$VENV/bin/python scripts/compile_runtime.py

# A PyPI MPI in the venv would shadow Debian's mpiexec; refuse it.
if [ -e $VENV/bin/mpiexec ]; then
  log "error: $VENV/bin/mpiexec exists (an MPI from PyPI); remove it"; exit 1
fi
$VENV/bin/python - <<'PY'
import h5py, mpi4py
assert h5py.get_config().mpi, "h5py was not built with MPI support"
print(f"[setup] h5py {h5py.__version__} (HDF5 {h5py.version.hdf5_version}, mpi=True), mpi4py {mpi4py.__version__}")
PY
# Record the launcher that goes with this environment: trajscale names it when
# a run is started by another MPI's mpiexec (see trajscale.parallel.recorded_launcher).
mkdir -p $VENV/share/trajscale
basename "$MPIEXEC_MPICH" > $VENV/share/trajscale/launcher
log "MPI launcher for this environment: $(cat $VENV/share/trajscale/launcher)"
touch "$STAMP"
