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
  $py -c "import torch, torchvision, transformers, platform; print('python', platform.python_version()); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version()); print('torchvision', torchvision.__version__); print('transformers', transformers.__version__); print('tf32 matmul', torch.backends.cuda.matmul.allow_tf32, 'tf32 cudnn', torch.backends.cudnn.allow_tf32)"
  git rev-parse HEAD 2>/dev/null || true
} > "$out/environment.txt" 2>&1

if [ "$codec" = codec ]; then
  # 4 Mi elements (the default) and 32 Mi: per-element costs should agree if they are linear
  $py -m scalemodel.calibrate.codec_bench --out "$out/codec.json" --repeats 50 \
    > "$out/codec.txt" 2>&1 || status=1
  $py -m scalemodel.calibrate.codec_bench --out "$out/codec-32Mi.json" --numel 33554432 \
    --repeats 20 > "$out/codec-32Mi.txt" 2>&1 || status=1
fi

run() {  # run NAME SPEC BATCH PRECISION
  local name=$1 spec=$2 batch=$3 prec=$4 amp=()
  [ "$prec" = bf16 ] && amp=(--amp bf16)
  echo "== $name $prec batch $batch" >&2
  $py -m scalemodel.calibrate --steps compute --model "$spec" --batch-size "$batch" \
    --warmup 5 --iterations 30 "${amp[@]}" --out "$out/unused.json" \
    --profile-out "$out/$name-$prec.json" >> "$out/compute.log" 2>&1 || status=1
}

precs=(fp32 bf16)
[ "$which" != all ] && precs=("$which")
for prec in "${precs[@]}"; do
  run resnet50 resnet50 32 "$prec"
  run resnet101 resnet101 32 "$prec"
  run vgg16 vgg16_bn 32 "$prec"
  run bert-base calibration.transformer_models:bert_base 64 "$prec"
  run bert-large calibration.transformer_models:bert_large 8 "$prec"
  run gpt2 calibration.transformer_models:gpt2 4 "$prec"
done
exit $status
