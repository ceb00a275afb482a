#!/bin/bash
# AgentFlow (planner -> executor -> verifier, Flow-GRPO) trained with GRPO in slime, through rl_bridge.
#
# Mirrors the seed reproduction (Takenzz/AgentFlow@4b5aa84, agentic/agentflow/agentflow_qwen25_7b_rl_v2.sh):
# Qwen2.5-7B-Instruct as the planner (its query analysis and its steps are the trained calls: the YAML's
# `variant: seed`), GRPO + low_var_kl KL loss, DAPO-Math-17K training, AIME 2024 evaluation, the seed's
# batch sizes, clip and weight decay. The planner is served by slime's own SGLang engines (the router, port
# from slime); the helper model (commands, verifier, final output, base_generator, the judge) is a FIXED
# Qwen2.5-7B-Instruct on a separate SGLang server (HELPER_PORT, on its own GPUs), and python_coder's code is
# written by a FIXED Qwen2.5-Coder-7B-Instruct on a third (CODER_PORT), as the seed's launch.sh:75-99 serves
# them (8 GPUs: 4 train, 2 coder, 2 helper). Run inside the slimerl/slime image with this repository installed:
#
#   python examples/agentflow/prepare_data.py --source BytedTsinghua-SIA/DAPO-Math-17k --dedup --out ${DATA_DIR}/train.jsonl
#   python examples/agentflow/prepare_data.py --source HuggingFaceH4/aime_2024 --out ${DATA_DIR}/aime24.jsonl
#   bash examples/agentflow/run_agentflow.sh
#
# The method's options (variant, tools, role engines, sandbox limits) live in agentflow.yaml.
# python_coder runs model-written code in agentgraphs.sandbox: install bubblewrap and the `sandbox`
# extra in the image (`apt-get install -y bubblewrap`, `pip install 'agentgraphs[sandbox,math]'`) and
# check `python -m agentgraphs.sandbox` before training.

set -exo pipefail

# ------------------------------------------------------------------------------------------ paths
SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
REPO_DIR="$(cd -- "${SCRIPT_DIR}/../.." &>/dev/null && pwd)"
SLIME_DIR=${SLIME_DIR:-/root/slime}
MEGATRON_DIR=${MEGATRON_DIR:-/root/Megatron-LM}
MODEL_DIR=${MODEL_DIR:-/root/Qwen2.5-7B-Instruct}                  # the planner (trained) and its tokenizer
HELPER_MODEL_DIR=${HELPER_MODEL_DIR:-/root/Qwen2.5-7B-Instruct}    # the fixed helper model
CODER_MODEL_DIR=${CODER_MODEL_DIR:-/root/Qwen2.5-Coder-7B-Instruct}  # the fixed coder model (python_coder)
REF_LOAD=${REF_LOAD:-/root/Qwen2.5-7B-Instruct_torch_dist}
SAVE_DIR=${SAVE_DIR:-/root/checkpoints/agentflow_qwen2.5-7b}
DATA_DIR=${DATA_DIR:-/root/data/agentflow}
CONFIG=${CONFIG:-${SCRIPT_DIR}/agentflow.yaml}
NUM_GPUS=${NUM_GPUS:-8}                # GPUs on this node
HELPER_GPUS=${HELPER_GPUS:-2}          # the last HELPER_GPUS of them serve the helper model
HELPER_PORT=${HELPER_PORT:-30001}      # must match agentgraph_engines.helper in agentflow.yaml
CODER_GPUS=${CODER_GPUS:-2}            # the CODER_GPUS before those serve the coder model
CODER_PORT=${CODER_PORT:-30002}        # must match agentgraph_engines.coder in agentflow.yaml
TRAIN_GPUS=$((NUM_GPUS - HELPER_GPUS - CODER_GPUS))

export PYTHONUNBUFFERED=1

source "${SLIME_DIR}/scripts/models/qwen2.5-7B.sh"   # MODEL_ARGS

# ------------------------------------------------------------------------------------------ helper models
SERVER_PIDS=()
trap 'kill "${SERVER_PIDS[@]}" 2>/dev/null || true' EXIT
# start_server NAME MODEL_DIR PORT FIRST_GPU NUM_GPUS: a fixed model on its own SGLang server, waited for
start_server() {
   local name=$1 model=$2 port=$3 first=$4 gpus=$5
   CUDA_VISIBLE_DEVICES=$(seq -s, "${first}" $((first + gpus - 1))) python3 -m sglang.launch_server \
      --model-path "${model}" --host 127.0.0.1 --port "${port}" \
      --tp "${gpus}" --mem-fraction-static 0.85 > "${SAVE_DIR%/}_${name}_sglang.log" 2>&1 &
   SERVER_PIDS+=($!)
   until curl -sf "http://127.0.0.1:${port}/health" > /dev/null; do
      kill -0 "${SERVER_PIDS[-1]}" || { echo "${name} SGLang server died, see its log"; exit 1; }
      sleep 5
   done
}
start_server coder "${CODER_MODEL_DIR}" "${CODER_PORT}" "${TRAIN_GPUS}" "${CODER_GPUS}"
start_server helper "${HELPER_MODEL_DIR}" "${HELPER_PORT}" $((TRAIN_GPUS + CODER_GPUS)) "${HELPER_GPUS}"

# ------------------------------------------------------------------------------------------ args
CKPT_ARGS=(
   --hf-checkpoint "${MODEL_DIR}"
   --ref-load "${REF_LOAD}"
   --load "${SAVE_DIR}"
   --save "${SAVE_DIR}"
   --save-interval 20
)

ROLLOUT_ARGS=(
   --prompt-data "${DATA_DIR}/train.jsonl"
   --input-key input
   --label-key label
   --metadata-key metadata
   # no --apply-chat-template: the graph renders its own prompts
   --rollout-shuffle
   --num-epoch 1                        # the seed's (agentflow_qwen25_7b_rl_v2.sh:62); a shorter run: --num-rollout N here
   --rollout-batch-size 8               # the seed's
   --n-samples-per-prompt 8
   --rollout-max-response-len 4096      # caps each engine call: the seed's engines ask 4096 tokens per call
   --rollout-temperature 0.7            # AgentFlow's training temperature (the seed's helpers sample with it too)
   # Flow-GRPO rows, not trajectories: rl_bridge.convert expands each trajectory into one row per
   # trained turn (the analysis + 1..5 steps), so 8 x 8 trajectories give 128-384 rows, trimmed to a
   # multiple of the global batch size as the seed's converter trims them.
   --global-batch-size 64
)

EVAL_ARGS=(
   --eval-interval 10
   --eval-prompt-data aime24 "${DATA_DIR}/aime24.jsonl"
   --n-samples-per-eval-prompt 1        # the seed evaluates one sample per problem
   --eval-max-response-len 4096
   --eval-temperature 0.7
   --eval-top-p 0.95
)

PERF_ARGS=(
   --tensor-model-parallel-size 2
   --sequence-parallel
   --pipeline-model-parallel-size 1
   --context-parallel-size 1
   --recompute-granularity full
   --recompute-method uniform
   --recompute-num-layers 1
   --use-dynamic-batch-size
   # a planner row: its prompt (query, analysis, tool metadata, memory of <= 5 steps) + <= 4096 response tokens
   --max-tokens-per-gpu 16384
)

GRPO_ARGS=(
   --advantage-estimator grpo
   --use-kl-loss
   --kl-loss-coef 0.001
   --kl-loss-type low_var_kl
   --entropy-coef 0.00
   --eps-clip 0.2
   --eps-clip-high 0.3
)

OPTIMIZER_ARGS=(
   --optimizer adam
   --lr 1e-6
   --lr-decay-style constant
   --weight-decay 0.1
   --adam-beta1 0.9
   --adam-beta2 0.98
)

WANDB_ARGS=(
   # --use-wandb
   # --wandb-project agentgraphs
   # --wandb-group agentflow-qwen2.5-7b
)

SGLANG_ARGS=(
   --rollout-num-gpus-per-engine 2
   --sglang-mem-fraction-static 0.7
)

MISC_ARGS=(
   --attention-dropout 0.0
   --hidden-dropout 0.0
   --accumulate-allreduce-grads-in-fp32
   --attention-softmax-in-fp32
   --attention-backend flash
)

CUSTOM_ARGS=(
   --custom-generate-function-path rl_bridge.generate
   --custom-rm-path rl_bridge.reward_func
   --custom-eval-rollout-log-function-path rl_bridge.eval_log
   --custom-convert-samples-to-train-data-path rl_bridge.convert
   --custom-config-path "${CONFIG}"
)

# ------------------------------------------------------------------------------------------ launch
export MASTER_ADDR=${MASTER_ADDR:-"127.0.0.1"}
ray stop --force || true
# Ray sees only the training GPUs; the helper and coder servers keep the others
CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((TRAIN_GPUS - 1))) \
   ray start --head --node-ip-address "${MASTER_ADDR}" --num-gpus "${TRAIN_GPUS}" --disable-usage-stats

RUNTIME_ENV_JSON="{
  \"env_vars\": {
    \"PYTHONPATH\": \"${REPO_DIR}:${MEGATRON_DIR}\",
    \"CUDA_DEVICE_MAX_CONNECTIONS\": \"1\"
  }
}"

ray job submit --address="http://127.0.0.1:8265" \
   --runtime-env-json="${RUNTIME_ENV_JSON}" \
   -- python3 "${SLIME_DIR}/train.py" \
   --actor-num-nodes 1 \
   --actor-num-gpus-per-node "${TRAIN_GPUS}" \
   --colocate \
   "${MODEL_ARGS[@]}" \
   "${CKPT_ARGS[@]}" \
   "${ROLLOUT_ARGS[@]}" \
   "${EVAL_ARGS[@]}" \
   "${OPTIMIZER_ARGS[@]}" \
   "${GRPO_ARGS[@]}" \
   "${WANDB_ARGS[@]}" \
   "${PERF_ARGS[@]}" \
   "${SGLANG_ARGS[@]}" \
   "${MISC_ARGS[@]}" \
   "${CUSTOM_ARGS[@]}"
