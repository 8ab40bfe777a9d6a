#!/usr/bin/env bash
# Dependency check and install: one ✓/✗ line per dependency with the Debian package that
# provides it. `deps.sh check` exits 1 when something is missing; `deps.sh install` installs
# what is missing (as root, apt-get --no-install-recommends); `deps.sh install-dev` adds the
# fixture/peer-benchmark packages. python3-matplotlib is installed with the runtime packages:
# run.plots is on by default, so `make run` draws timeline.png and accuracy.png on a fresh
# machine; the build itself does not need it.
set -u
mode=${1:-check}
ok='\033[32m✓\033[0m'; bad='\033[31m✗\033[0m'
[ -t 1 ] || { ok='✓'; bad='✗'; }

# name | package | test (a command that succeeds when present)
runtime=(
  "MPI compiler wrapper (mpicxx)|libopenmpi-dev|command -v mpicxx"
  "mpirun|openmpi-bin|command -v mpirun"
  "parallel HDF5|libhdf5-openmpi-dev|pkg-config --exists hdf5-openmpi"
  "h5dump|hdf5-tools|command -v h5dump"
  "Kokkos core 3.4|libtrilinos-kokkos-dev|test -f /usr/include/trilinos/Kokkos_Core.hpp"
  "KokkosKernels (BLAS)|libtrilinos-kokkos-kernels-dev|test -f /usr/include/trilinos/KokkosBlas3_gemm.hpp"
  "oneDNN 2.x (matmul, convolution)|libdnnl-dev|test -f /usr/include/dnnl.hpp -a -f /usr/include/oneapi/dnnl/dnnl.hpp"
  "OpenBLAS|libopenblas-dev|test -f /usr/lib/x86_64-linux-gnu/libopenblas.so -o -f /usr/lib/$(uname -m)-linux-gnu/libopenblas.so"
  "toml++|libtomlplusplus-dev|test -f /usr/include/toml++/toml.h"
  "nlohmann JSON|nlohmann-json3-dev|test -f /usr/include/nlohmann/json.hpp"
  "zlib|zlib1g-dev|test -f /usr/include/zlib.h"
  "GoogleTest|libgtest-dev|test -f /usr/include/gtest/gtest.h"
  "Fashion-MNIST|dataset-fashion-mnist|test -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
  "fortunes (default text corpus)|fortunes|test -f /usr/share/games/fortunes/cookie"
)
# installed by `make deps` / `make run` / `make test` with the above, but not needed to build:
# `deps.sh check` (the build's gate) only notes when they are missing
plots=(
  "matplotlib (run.plots, on by default)|python3-matplotlib|/usr/bin/python3 -c 'import matplotlib'"
)
dev=(
  "PyTorch (fixtures, peer benchmark)|python3-torch|/usr/bin/python3 -c 'import torch'"
  "h5py (fixtures, tools/to_pytorch.py)|python3-h5py|/usr/bin/python3 -c 'import h5py'"
)

check() {  # prints the lines; echoes missing packages on fd 3
  local missing=()
  for entry in "$@"; do
    IFS='|' read -r name pkg test <<<"$entry"
    if eval "$test" >/dev/null 2>&1; then
      printf "  $ok %-32s (%s)\n" "$name" "$pkg"
    else
      printf "  $bad %-32s missing: apt-get install %s\n" "$name" "$pkg"
      missing+=("$pkg")
    fi
  done
  echo "${missing[*]:-}" >&3
}

install() {
  local missing
  missing=$(check "$@" 3>&1 >/dev/null)
  if [ -z "$missing" ]; then return 0; fi
  echo "installing: $missing"
  if [ "$(id -u)" != 0 ]; then
    echo "error: not root; run as root: apt-get install -y --no-install-recommends $missing" >&2
    return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null || { echo "error: apt-get update failed" >&2; return 1; }
  # shellcheck disable=SC2086
  apt-get install -y -q --no-install-recommends $missing >/tmp/pipetrain-apt.log 2>&1 ||
    { tail -20 /tmp/pipetrain-apt.log >&2; echo "error: apt-get install failed (log: /tmp/pipetrain-apt.log)" >&2; return 1; }
}

case "$mode" in
  check)
    echo "pipetrain dependencies:"
    tmp=$(mktemp); check "${runtime[@]}" 3>"$tmp"; missing=$(cat "$tmp")
    check "${plots[@]}" 3>"$tmp"; missing_plots=$(cat "$tmp"); rm -f "$tmp"
    if [ -n "$missing_plots" ]; then
      echo "  note: without $missing_plots runs print 'plots skipped'; make deps installs it"
    fi
    if [ -n "$missing" ]; then
      echo "error: missing dependencies; run 'make deps' (as root) or: apt-get install -y --no-install-recommends $missing" >&2
      exit 1
    fi ;;
  quiet) missing=$(check "${runtime[@]}" "${plots[@]}" 3>&1 >/dev/null); [ -z "$missing" ] ;;
  install) install "${runtime[@]}" "${plots[@]}" && check "${runtime[@]}" "${plots[@]}" 3>/dev/null ;;
  install-dev) install "${runtime[@]}" "${plots[@]}" "${dev[@]}" && check "${runtime[@]}" "${plots[@]}" "${dev[@]}" 3>/dev/null ;;
  *) echo "usage: deps.sh check|quiet|install|install-dev" >&2; exit 2 ;;
esac
