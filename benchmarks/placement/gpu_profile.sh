#!/usr/bin/env bash
# Engine profiles of a GPU for the simulator, with the co-location share measured on it.
#
#   OUT=folder bash benchmarks/placement/gpu_profile.sh        (from the repo root, on the GPU)
#
# Needs python3 with a CUDA torch. Wheels in .whl/ (grpcio, protobuf, gguf: the versions the
# stubs were generated for) are installed to /tmp/site first where the machine lacks them.
# Writes $OUT/dummy-1b-h200.json (the profile of TinyLlama-1.1B's shape in bfloat16 with 2
# engines co-located), $OUT/colocate4.json (4 engines at batch 8) and the log
# (benchmarks/placement/gpu_profile.py).
set -u
OUT=${OUT:-.strata/gpu-profile}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=libs:.:${PYTHONPATH:-} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
    | tee "$OUT/gpu.txt"
python3 -c "import torch, grpc, google.protobuf as p; print('torch', torch.__version__, \
'cuda', torch.cuda.is_available(), 'grpc', grpc.__version__, 'protobuf', p.__version__)"
timeout 420 python3 benchmarks/placement/gpu_profile.py "$OUT" dummy-1b 2>&1 | tee "$OUT/dummy-1b.log"
