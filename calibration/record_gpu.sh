#!/usr/bin/env bash
# Record GPU calibration data on one GPU: codec costs (codec_bench) and measured backward
# timelines (the compute step) of the models behind scalemodel's built-in profiles, in the
# built-in profiles' shapes, fp32 and bf16 autocast. Usage, from the repository root:
#
#     bash calibration/record_gpu.sh OUTDIR [fp32|bf16|all] [codec|no-codec]
#
# Needs torch with CUDA, torchvision and transformers (the models are built from their
# configurations; nothing is downloaded). A single GPU gives no transport measurements:
# those need two GPUs (python -m scalemodel.calibrate under torchrun, or nccl-tests).
#
# Environment: PYTHON (default python3); MODELS, space-separated NAME=SPEC:BATCH entries
# (default: the six models of the built-in profiles, below); CODEC_SIZES, the sweep's
# comma-separated sizes in elements (default 16 Ki to 64 Mi).
set -uo pipefail
out=${1:?usage: record_gpu.sh OUTDIR [fp32|bf16|all] [codec|no-codec]}
which=${2:-all}
codec=${3:-codec}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
status=0

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  $py - <<'PY'
import importlib, platform
import torch
print("python", platform.python_version())
print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn",
      torch.backends.cudnn.version())
for name in ("torchvision", "transformers"):
    try:
        print(name, importlib.import_module(name).__version__)
    except ImportError:
        print(name, "not installed")
print("tf32 matmul", torch.backends.cuda.matmul.allow_tf32, "tf32 cudnn",
      torch.backends.cudnn.allow_tf32)
PY
  git rev-parse HEAD 2>/dev/null || true
} > "$out/environment.txt" 2>&1

if [ "$codec" = codec ]; then
  # 4 Mi elements (the default) and 32 Mi: per-element costs should agree if they are linear
  # the sweep twice: the second run says how repeatable the fitted costs are
  sizes=${CODEC_SIZES:-16384,65536,262144,1048576,4194304,16777216,67108864}
  for f in codec codec-repeat; do
    $py -m scalemodel.calibrate.codec_bench --out "$out/$f.json" --sizes "$sizes" \
      --repeats 30 > "$out/$f.txt" 2>&1 || status=1
  done
fi

run() {  # run NAME SPEC BATCH PRECISION
  local name=$1 spec=$2 batch=$3 prec=$4 amp=()
  [ "$prec" = bf16 ] && amp=(--amp bf16)
  echo "== $name $prec batch $batch" >&2
  $py -m scalemodel.calibrate --steps compute --model "$spec" --batch-size "$batch" \
    --warmup 5 --iterations 30 "${amp[@]}" --out "$out/unused.json" \
    --profile-out "$out/$name-$prec.json" >> "$out/compute.log" 2>&1 || status=1
}

models=${MODELS:-"resnet50=resnet50:32 resnet101=resnet101:32 vgg16=vgg16_bn:32
  bert-base=calibration.transformer_models:bert_base:64
  bert-large=calibration.transformer_models:bert_large:8
  gpt2=calibration.transformer_models:gpt2:4"}
precs=(fp32 bf16)
[ "$which" != all ] && precs=("$which")
for prec in "${precs[@]}"; do
  for entry in $models; do
    name=${entry%%=*} rest=${entry#*=}
    run "$name" "${rest%:*}" "${rest##*:}" "$prec"
  done
done
exit $status
