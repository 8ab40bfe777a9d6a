#!/usr/bin/env bash
# Here, before a GPU session: prepare what the GPU machine needs but lacks. That machine has
# CUDA, cuDNN and NCCL (in PyTorch's wheels) but none of our Debian libraries, and no network.
# This builds the CUDA binaries here for a portable x86-64-v3 host CPU (make CUDA=1, sm_90),
# strips them into .gpu/bin/, and downloads the Debian runtime packages they and Open MPI load
# (found with ldd and dpkg -S, minus what every Linux has) into .gpu/debs/. .gpu/ is added to
# .git/info/exclude; name it in the device call's carry list and run bench/gpu_device.sh there:
#   run(command="bash bench/gpu_device.sh", carry=[".gpu"], timeout_s=540)
# Usage: bench/gpu_bundle.sh   (env: CUDA_ARCH, HOST_ARCH=-march=x86-64-v3)
set -eu
cd "$(dirname "$0")/.."
out=.gpu
build=build-gpu-bundle
mkdir -p "$out/bin" "$out/debs"
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude

echo "== CUDA build for the device (host code ${HOST_ARCH:--march=x86-64-v3}, CUDA_ARCH ${CUDA_ARCH:-sm_90}) in $build/"
make --no-print-directory cuda-build cuda-tests CUDA_BUILD=$build ARCH="${HOST_ARCH:--march=x86-64-v3}"
for b in pipetrain pt_tests; do strip -o "$out/bin/$b" "$build/$b"; done

echo "== Debian runtime packages"
libs() {  # every shared library the binaries, mpirun/orted and Open MPI's plugins load
  for f in "$build/pipetrain" "$build/pt_tests" /usr/bin/orterun /usr/bin/orted \
           /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so; do
    ldd "$f" 2>/dev/null | awk '/=> \// { print $3 }'
  done | sort -u | xargs -r -n1 readlink -f | sort -u
}
# what every glibc system has, what is the CUDA toolkit's, and what is tied to the host system
base='^(libc6|libstdc\+\+6|libgcc-s1|zlib1g|libudev1|libhwloc-plugins|libcudnn.*|libnccl.*|cuda-.*|libcublas.*)$'
owner() {  # the package of a library path; with merged /usr, dpkg may know it as /lib/...
  dpkg -S "$1" 2>/dev/null || dpkg -S "${1#/usr}" 2>/dev/null || echo "unowned: $1" >&2
}
pkgs=$(for l in $(libs | grep -v '^/usr/local/cuda'); do owner "$l"; done | cut -d: -f1 | tr ',' '\n' | sed 's/ //g' |
       sort -u | grep -Ev "$base" || true)
pkgs="$pkgs openmpi-bin openmpi-common"
rm -f "$out"/debs/*.deb
(cd "$out/debs" && apt-get -o APT::Sandbox::User=root download $pkgs >/dev/null)
echo "$(ls "$out"/debs/*.deb | wc -l) packages: $(echo $pkgs | tr '\n' ' ')"
du -sh "$out" | awk '{ print "== .gpu/ holds " $1 " (the device call carries at most 64 MiB with the working tree)" }'
echo "next, in a session with a GPU: run(command=\"bash bench/gpu_device.sh\", carry=[\".gpu\"], timeout_s=540)"
