#!/usr/bin/env bash
# There, on the GPU machine (after bench/gpu_bundle.sh here, with .gpu carried): unpack the
# Debian runtime packages of .gpu/debs into /tmp/ptroot, point PATH, LD_LIBRARY_PATH and Open MPI
# (OPAL_PREFIX) at it, add the CUDA libraries (the toolkit's, and cuDNN and NCCL from PyTorch's
# wheels), check that every library resolves, then run bench/gpu_check.sh on the carried
# binaries (PREBUILT=1). The log and CSV land in $OUT when the device tool sets it, else in
# runs/gpu_check/. Usage: bash bench/gpu_device.sh [STEPS]
set -u
cd "$(dirname "$0")/.."
root=/tmp/ptroot
[ -d .gpu/debs ] && [ -x .gpu/bin/pipetrain ] || { echo "no .gpu/ bundle: run bench/gpu_bundle.sh here and carry .gpu"; exit 2; }
mkdir -p "$root"
unpack() {  # a .deb into $root: dpkg -x where dpkg exists, else Python (ar + tar)
  if command -v dpkg >/dev/null; then dpkg -x "$1" "$root"; return; fi
  python3 - "$1" "$root" <<'PY'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
pos = 8  # "!<arch>\n", then 60-byte member headers
while pos < len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2], **kw)
    pos += 60 + size + (size & 1)
PY
}
for f in .gpu/debs/*.deb; do unpack "$f" || { echo "could not unpack $f"; exit 3; }; done
ln -sf orterun "$root/usr/bin/mpirun"
L=$root/usr/lib/x86_64-linux-gnu
cuda_dirs=$( { ls -d /usr/local/cuda/lib64 2>/dev/null
               find /opt /usr/local /usr/lib -maxdepth 9 \( -name 'libcudnn.so.9*' -o -name 'libnccl.so.2*' -o -name 'libcublas.so.13*' \) 2>/dev/null |
                 xargs -r -n1 dirname; } | sort -u | tr '\n' ':')
export PATH=$root/usr/bin:$PATH OPAL_PREFIX=$root/usr
export LD_LIBRARY_PATH=$L/openmpi/lib:$L:$L/openblas-pthread:$root/lib/x86_64-linux-gnu:${cuda_dirs}${LD_LIBRARY_PATH:-}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p build-cuda && cp .gpu/bin/pipetrain .gpu/bin/pt_tests build-cuda/
echo "== libraries (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
if ldd build-cuda/pipetrain build-cuda/pt_tests | grep "not found"; then echo "FAIL: unresolved libraries above"; exit 4; fi
mpirun --version | head -1
mpirun -np 2 build-cuda/pipetrain check input/fashion_cnn.toml --ranks 2 --set 'parallel.split=[4]' | tail -2 ||
  { echo "FAIL: pipetrain does not start under the carried mpirun"; exit 5; }
[ -n "${OUT:-}" ] && export OUT LOG="$OUT/gpu_check.log"
PREBUILT=1 bash bench/gpu_check.sh "$@"
