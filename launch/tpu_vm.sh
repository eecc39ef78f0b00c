#!/usr/bin/env bash
# Runs the same training command on every worker of a TPU VM slice.
#
#   launch/tpu_vm.sh TPU_NAME ZONE -- --config experiments/configs/qwen3.py:size=8b \
#       --config.model.path=/mnt/ckpt/Qwen3-8B --workdir gs://bucket/runs/qwen3_8b
#
# Every argument after `--` is forwarded unchanged to experiments/run.py. Multi-host runs set
# SPADE_DISTRIBUTED=1 so run.py calls jax.distributed.initialize() before building the mesh.
set -euo pipefail
if [[ $# -lt 3 || "$2" == "--" ]]; then
  echo "usage: $0 TPU_NAME ZONE -- RUN_ARGS..." >&2
  exit 2
fi
TPU_NAME="$1"; ZONE="$2"; shift 2
[[ "${1:-}" == "--" ]] && shift
ARGS=$(printf '%q ' "$@")
gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone "$ZONE" --worker=all --command \
  "cd ~/spade_jax && SPADE_DISTRIBUTED=1 python3 experiments/run.py $ARGS"
