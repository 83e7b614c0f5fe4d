#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh runs into gpu-bundle/ (ignored by git), for a machine that
# has a GPU and CUDA 13 but none of Debian's -dev packages: the tandem CLI, the GPU tests and
# benchmarks, the CUDA backend's module, and every shared library they need that is neither
# the C library nor CUDA's (oneDNN, yaml-cpp, OpenMP, libstdc++, ...). CUDA's own libraries
# (cudart, cuBLAS, cuDNN, NCCL) are the target's: run.sh finds them there.
#
#   scripts/gpu_bundle.sh              # builds (scripts/build.sh) if needed, then packs
#   then, on the GPU machine, from a copy of the repository with gpu-bundle/ in it:
#   gpu-bundle/gpu_check.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out=gpu-bundle
programs=(tandem tests/tandem_gpu_tests bench/bench_cuda_gemm bench/bench_cuda_copy)
for p in "${programs[@]}" libtandem_cuda.so; do
  [ -e "build/$p" ] || { scripts/build.sh; break; }
done
for p in "${programs[@]}" libtandem_cuda.so; do
  [ -e "build/$p" ] || { echo "gpu_bundle: build/$p is missing: is the CUDA backend built (docs/cuda-backend.md)?" >&2; exit 2; }
done
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for p in "${programs[@]}"; do strip --strip-unneeded -o "$out/bin/$(basename "$p")" "build/$p"; done
strip --strip-unneeded -o "$out/lib/libtandem_cuda.so" build/libtandem_cuda.so
# every library the programs and the module load, but the C library's and CUDA's own
for f in "$out"/bin/* "$out/lib/libtandem_cuda.so"; do ldd "$f"; done |
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    case "$name" in
      linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libresolv.so*|libutil.so*) continue ;;
      libcuda.so*|libcudart.so*|libcublas*|libcudnn*|libnccl*|libnvrtc*|libnvJitLink*) continue ;;
    esac
    cp -L "$path" "$out/lib/$name"
  done
cp scripts/gpu_check.sh "$out/gpu_check.sh"
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# usage: run.sh PROGRAM [ARGS...]: runs a packed program with the bundle's libraries and
# the target's CUDA libraries (the toolkit's, or Python's nvidia-* packages').
here=$(cd "$(dirname "$0")" && pwd)
cuda=$(find /usr/local/cuda*/lib* /usr/local/cuda*/targets /opt /usr/local/lib/python3*/dist-packages/nvidia \
         /usr/lib/python3*/site-packages/nvidia -maxdepth 6 \
         \( -name 'libcudnn.so.9' -o -name 'libnccl.so.2' -o -name 'libcublas.so.13*' -o -name 'libcudart.so.13*' \) \
         -printf '%h\n' 2>/dev/null | sort -u | paste -sd:)
export LD_LIBRARY_PATH="$here/lib${cuda:+:$cuda}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$here/bin:$PATH"
exec "$@"
RUN
chmod +x "$out/run.sh" "$out/gpu_check.sh"
du -sh "$out"
size=$(du -sm "$out" | cut -f1)
if [ "$size" -ge 64 ]; then echo "gpu_bundle: $out is $size MiB, over the 64 MiB a GPU machine is sent" >&2; exit 2; fi
