#!/usr/bin/env bash
# Record the data-parallel wrapper's own costs on one GPU: for each model, the compute step
# (its workload profile) and the wrapper step (python -m scalemodel.calibrate --steps
# compute,wrapper): one worker trained plain and under DDP at bucket_cap_mb 0, 1, 5, 25 and
# 100, in rounds, whose wrapped-minus-plain times against DDP's bucket counts give the
# framework's work per iteration and per bucket (scalemodel.calibrate.wrapper). Usage, from
# the repository root:
#
#     bash calibration/record_framework.sh OUTDIR
#
# Needs torch with CUDA (or runs on the CPU with gloo), torchvision and transformers (the
# models are built from their configurations; nothing is downloaded).
#
# Environment: PYTHON (default python3); MODELS, space-separated NAME=SPEC:BATCH:PRECISION
# entries (default below: the six models of the built-in profiles in fp32, two in bf16);
# ITERATIONS (timed rounds, default 20); CAPS (default 0,1,5,25,100).
set -uo pipefail
out=${1:?usage: record_framework.sh OUTDIR}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
status=0
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit \
    --format=csv 2>/dev/null || echo "no nvidia-smi"
  $py -c "import platform, torch; print('python', platform.python_version()); \
print('torch', torch.__version__, 'cuda', torch.version.cuda); \
print('cpus', __import__('os').cpu_count())"
  git rev-parse HEAD 2>/dev/null || true
} > "$out/environment.txt" 2>&1

models=${MODELS:-"resnet50=resnet50:32:fp32 resnet101=resnet101:32:fp32
  vgg16=vgg16_bn:32:fp32 bert-base=calibration.transformer_models:bert_base:64:fp32
  bert-large=calibration.transformer_models:bert_large:8:fp32
  gpt2=calibration.transformer_models:gpt2:4:fp32
  resnet50=resnet50:32:bf16 bert-base=calibration.transformer_models:bert_base:64:bf16"}
for entry in $models; do
  name=${entry%%=*} rest=${entry#*=}
  prec=${rest##*:} rest=${rest%:*}
  batch=${rest##*:} spec=${rest%:*}
  amp=()
  [ "$prec" = bf16 ] && amp=(--amp bf16)
  echo "== $name $prec batch $batch ($(date -u +%T))"
  $py -m scalemodel.calibrate --steps compute,wrapper --model "$spec" \
    --batch-size "$batch" --warmup 3 --iterations "${ITERATIONS:-20}" \
    --bucket-caps "${CAPS:-0,1,5,25,100}" "${amp[@]}" \
    --out "$out/$name-$prec.json" --profile-out "$out/$name-$prec.profile.json" \
    || status=1
done
exit $status
