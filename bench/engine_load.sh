#!/usr/bin/env bash
# Engine load time (issue #5): build a ResNet-50 fp16 engine, then load it in fresh processes,
# first with empty kernel caches, then with them warm. Prints import, CUDA init, load and first
# run (CUDA graph capture) times separately.   Usage (on a GPU machine): bash bench/engine_load.sh
set -eu
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
WORK=$(mktemp -d)
python - "$WORK" <<'PY'
import sys, warnings, torch, torchvision
warnings.filterwarnings("ignore")
torch.manual_seed(0)
torch.onnx.export(torchvision.models.resnet50().eval(), (torch.randn(1, 3, 224, 224),), f"{sys.argv[1]}/r50.onnx",
                  input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}},
                  opset_version=17, dynamo=False)
PY
TENSORSMITH_KERNEL_CACHE=$WORK/kc_build TRITON_CACHE_DIR=$WORK/tc_build python -m tensorsmith.cli.main build \
  "$WORK/r50.onnx" --fp16 --shapes x:32x3x224x224 -o "$WORK/r50.tsmith" --no-progress 2>&1 | tail -1
for run in cold warm; do
  TENSORSMITH_KERNEL_CACHE=$WORK/kc_load TRITON_CACHE_DIR=$WORK/tc_load python - "$run" "$WORK/r50.tsmith" <<'PY'
import sys, time
t0 = time.perf_counter(); import torch, tensorsmith; t1 = time.perf_counter()
torch.empty(1, device="cuda"); t2 = time.perf_counter()
engine = tensorsmith.load(sys.argv[2]); t3 = time.perf_counter()
y = engine.run({"x": torch.randn(32, 3, 224, 224, device="cuda")})["y"]; torch.cuda.synchronize(); t4 = time.perf_counter()
print(f"{sys.argv[1]} kernel caches: import {t1 - t0:.2f} s, CUDA init {t2 - t1:.2f} s, load {t3 - t2:.2f} s, "
      f"first run (graph capture) {t4 - t3:.2f} s, finite output: {bool(torch.isfinite(y).all())}")
PY
done
rm -rf "$WORK"
