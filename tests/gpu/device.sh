#!/bin/bash
# The CUDA backend on a lent GPU machine (the device tool), in one call: the committed model
# on the GPU against the CPU (fp32, fp16, TF32), a per-node profile, compute-sanitizer,
# PyTorch on the same GPU as a reference point, then tests/gpu/run.sh over the six models.
# Logs go to $OUT (they come back); the last lines are the summary.
#
# here:   make all test-programs && tests/gpu/bundle.sh
# device: run  command "bash tests/gpu/device.sh"  carry [".gpu"]  timeout_s 560
#
# What the first run taught (H200 machine, 2026-11-28): exporting the six models with that
# machine's torch took 250 s of CPU even four at a time, so it starts first, in the
# background; cuDNN's algorithm search made a first GPU load take 1-14 s per model and
# 75 s under compute-sanitizer.  Do not put /usr/local/cuda/compat on LD_LIBRARY_PATH: its
# forward-compatibility libcuda does not fit the machine's driver (error 803, torch too).
set -u
T0=$(date +%s)
OUT=${OUT:-/tmp/nn-gpu-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/device.log") 2>&1
stage() { echo; echo "=== [$(($(date +%s) - T0)) s] $*"; }
PY=${PY:-python3} # the lent machine's python3 is the one with torch
B=/tmp/nn-gpu # unpacked outside the tree: the next call's copy of the tree replaces it
stage unpack
mkdir -p "$B" /usr/share/libonnx-testdata build/models
tar -xJf .gpu/bundle.tar.xz -C "$B" && tar -xJf .gpu/testdata.tar.xz -C /usr/share/libonnx-testdata || exit 1
(
    cd build/models || exit
    # export.py skips files that are already there (a warm machine keeps build/)
    for set in resnet50,mobilenet_v2 efficientnet_b0,googlenet densenet201 vgg19; do
        OMP_NUM_THREADS=4 "$PY" ../../tests/gpu/export_legacy.py --out . --only $set >"export.$set.log" 2>&1 &
    done
    wait
    cat export.*.log >"$OUT/export.log"
) &
EXPORT=$!
libdir() { d=$(find /usr/local /usr/lib /opt -name "$1" 2>/dev/null | head -n 1) && [ -n "$d" ] && dirname "$d"; }
CUDA_LIBS=$(libdir 'libcudnn.so.9'):$(libdir 'libcublasLt.so.13'):$(libdir 'libcudart.so.13')
export LD_LIBRARY_PATH=$B/lib:$CUDA_LIBS:${LD_LIBRARY_PATH:-}
export NN_CUDA_PLUGIN=$B/libnn_cuda.so NN_CACHE_DIR=/tmp/nn-gpu-cache NN_BUILD=$B
stage environment
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
lscpu | grep -E "Model name|^CPU\(s\)"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
ldd "$B/libnn_cuda.so" "$B/nnrun" | grep -E "not found|cudnn|cudart"
"$B/nnrun" --version

stage "models/mobilenetv2.onnx: CPU, then GPU fp32, fp16, TF32 against it"
M=models/mobilenetv2.onnx
for v in "cpu|" "fp32|--device gpu0 --tf32 off" "fp16|--device gpu0 --fp16" "tf32|--device gpu0 --tf32 on"; do
    n=${v%%|*}
    rm -rf "/tmp/nn-gpu-$n"
    # shellcheck disable=SC2086 # the options are words
    timeout 90 "$B/nnrun" $M --input models/mobilenetv2.input.npy --save-outputs "/tmp/nn-gpu-$n" --iters 3 --warmup 1 ${v#*|} |
        grep -E "^(device|load|latency|memory)"
done
for n in fp32 fp16 tf32; do echo "$n vs cpu: $("$B/tests/compare_npy" /tmp/nn-gpu-$n/output.npy /tmp/nn-gpu-cpu/output.npy 1e-2 2>&1)"; done
echo "cpu vs torch: $("$B/tests/compare_npy" /tmp/nn-gpu-cpu/output.npy models/mobilenetv2.output.npy 1e-4 2>&1)"

stage "profile: mobilenetv2 batch 64 on the GPU"
timeout 60 "$B/nnrun" $M --device gpu0 --batch 64 --iters 20 --profile >"$OUT/profile.log" 2>&1
echo "rc=$?"; grep -E "^(load|latency|throughput)" "$OUT/profile.log"

stage "PyTorch on the same GPU (cuDNN benchmark mode; fp32 with TF32 off, fp16 autocast)"
timeout 90 "$PY" - <<'PYEOF'
import time, torch, torchvision
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.benchmark = True
for name in ["resnet50", "mobilenet_v2"]:
    m = getattr(torchvision.models, name)(weights=None).eval().cuda()
    for b in (1, 64):
        x = torch.randn(b, 3, 224, 224, device="cuda")
        for half in (False, True):
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=half):
                for _ in range(5):
                    m(x)
                torch.cuda.synchronize()
                n, t = 30, time.perf_counter()
                for _ in range(n):
                    m(x)
                torch.cuda.synchronize()
                dt = (time.perf_counter() - t) / n
            print(f"torch {name} batch {b} {'fp16' if half else 'fp32'}: {b / dt:.0f} samples/s ({dt * 1e3:.2f} ms, input already on the GPU)")
PYEOF

stage "compute-sanitizer memcheck: mobilenetv2 batch 2"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
timeout 120 "$CS" --tool memcheck --print-limit 20 "$B/nnrun" $M --device gpu0 --batch 2 --iters 2 --warmup 1 >"$OUT/sanitizer.log" 2>&1
echo "rc=$?"; tail -n 3 "$OUT/sanitizer.log"

stage "waiting for the model export"
wait $EXPORT
grep -h "MiB" "$OUT/export.log"
stage "tests/gpu/run.sh"
timeout "${RUN_TIMEOUT:-300}" tests/gpu/run.sh gpu0 >"$OUT/run.log" 2>&1
echo "run.sh rc=$?"
cut -c1-300 "$OUT/run.log"
stage finished
