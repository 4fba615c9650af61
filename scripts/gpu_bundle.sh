#!/usr/bin/env bash
# scripts/gpu_bundle.sh BUILD_DIR DEST -- packs what scripts/gpu_check.sh runs from a build
# directory, for a GPU machine that has the CUDA driver and toolkit but not kiln's build
# dependencies (LLVM 19, XGBoost, SQLite, protobuf-c, ...), and a different path for the
# repository:
#
#   DEST/build.tar.xz     kiln, libkiln.so, libkiln_rt.a, the measurement runner, the stand-in
#                         drivers, test_cuda_rt, test_measure, test_tune, bench_gpu, and
#                         CMakeCache.txt (the paths the binaries were built at)
#   DEST/libs.tar.xz      the shared libraries they load that are not glibc's, the C++
#                         runtime's or CUDA's (those come from the GPU machine), and under
#                         include/ DLPack's header, which a cuda module's host code is
#                         compiled with (codegen/cuda_so.c) and such a machine may lack
#   DEST/kiln-bundle      a marker
#
# Compressed (about 50 MB with LLVM 19's 130 MB library, whose xz takes CPU minutes), so that it
# travels with a checkout to a machine that takes 64 MiB in all.
#
# Then, on the GPU machine, in a checkout of the same commit: scripts/gpu_check.sh OUTDIR DEST
# unpacks the libraries, puts them on LD_LIBRARY_PATH and, where the build and source paths
# compiled into the binaries do not exist, makes them symbolic links to DEST/build and the
# checkout. Name DEST under build* (ignored by git) and copy it along with the checkout.
set -euo pipefail
B=${1:?usage: scripts/gpu_bundle.sh BUILD_DIR DEST}
D=${2:?usage: scripts/gpu_bundle.sh BUILD_DIR DEST}
cd "$(dirname "$0")/.."
[ -x "$B/kiln" ] || { echo "gpu_bundle: no kiln in $B (build it first)" >&2; exit 1; }
rm -rf "$D"
mkdir -p "$D/build" "$D/lib"
bins=()
for f in kiln kiln_measure_runner test_cuda_rt test_measure test_tune bench_gpu; do
    if [ -x "$B/$f" ]; then
        cp "$B/$f" "$D/build/"
        bins+=("$B/$f")
    else
        echo "gpu_bundle: $B/$f is not built: left out" >&2
    fi
done
cp -P "$B"/libkiln.so* "$B"/libkiln_rt.a "$B/CMakeCache.txt" "$D/build/"
for d in fake_cuda fake_cuda_emu; do
    [ -d "$B/$d" ] && cp -rP "$B/$d" "$D/build/"
done
# the shared libraries to carry: every one ldd resolves that a CUDA machine need not have
ldd "${bins[@]}" "$B"/libkiln.so.* 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' |
    sort -u | while read -r name path; do
    case $name in
    libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux* | libstdc++.so* | \
        libgcc_s.so* | libkiln.so* | libcuda.so* | libcudart.so* | libcublas*.so* | libcudnn*.so* | \
        libnvrtc*.so*) ;;
    *) cp -L "$path" "$D/lib/$name" ;;
    esac
done
dl=$(echo '#include <dlpack/dlpack.h>' | cc -E -M -x c - 2>/dev/null | tr ' \\' '\n\n' | grep -m1 '/dlpack/dlpack.h$') ||
    { echo "gpu_bundle: no <dlpack/dlpack.h> found" >&2; exit 1; }
mkdir -p "$D/lib/include/dlpack"
cp "$dl" "$D/lib/include/dlpack/"
tar -cJf "$D/libs.tar.xz" -C "$D/lib" .
tar -cJf "$D/build.tar.xz" -C "$D" build
rm -rf "$D/lib" "$D/build"
touch "$D/kiln-bundle"
du -sh "$D"
