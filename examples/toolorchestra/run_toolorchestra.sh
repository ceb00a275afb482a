#!/bin/bash
# ToolOrchestra (QA mode) trained with GRPO in slime, through agentgraphs' rl_bridge.
#
# The orchestrator is Qwen3-8B (trained); the experts are other models, each served on its own port by
# SGLang's OpenAI-compatible server, never trained; the retrieval service answers on port 8000 as in the
# seed. One node of 8 GPUs: 4 for slime (actor + rollout, colocated), 4 for the experts. Run inside the
# slimerl/slime image with this repository installed (docker/README.md):
#
#   python examples/toolorchestra/prepare_data.py --qa /root/data/nq_train.jsonl /root/data/hotpotqa_train.jsonl \
#       --out ${DATA_DIR}/train.jsonl
#   python examples/toolorchestra/prepare_data.py --qa /root/data/hotpotqa_dev.jsonl --limit 500 --out ${DATA_DIR}/eval.jsonl
#   bash examples/toolorchestra/run_toolorchestra.sh
#
# The method's options (experts, turn limits, reward preferences) live in toolorchestra.yaml; the expert
# names there must match the servers started below.

set -exo pipefail

# ------------------------------------------------------------------------------------------ paths
SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
REPO_DIR="$(cd -- "${SCRIPT_DIR}/../.." &>/dev/null && pwd)"
SLIME_DIR=${SLIME_DIR:-/root/slime}
MEGATRON_DIR=${MEGATRON_DIR:-/root/Megatron-LM}
MODEL_DIR=${MODEL_DIR:-/root/Qwen3-8B}                           # the orchestrator (HF checkpoint + tokenizer)
REF_LOAD=${REF_LOAD:-/root/Qwen3-8B_torch_dist}                  # Megatron torch_dist conversion of MODEL_DIR
SAVE_DIR=${SAVE_DIR:-/root/checkpoints/toolorchestra_qwen3-8b}
DATA_DIR=${DATA_DIR:-/root/data/toolorchestra}                   # prepare_data.py output
CORPUS=${CORPUS:-/root/data/wiki-18.jsonl}                       # {"id", "contents"} per line
INDEX_DIR=${INDEX_DIR:-/root/data/wiki-18-index}
DENSE=${DENSE:-0}                                                # 1: faiss + all-MiniLM-L6-v2 instead of BM25
EXAMPLE_IDS=${EXAMPLE_IDS:-}  # the seed's example_id_file {eid: [doc ids]}: needed by rows with a non-empty eid
CONFIG=${CONFIG:-${SCRIPT_DIR}/toolorchestra.yaml}
TRAIN_GPUS=${TRAIN_GPUS:-4}
# expert models, one GPU and one port each (names and ports as in toolorchestra.yaml)
SEARCH_EXPERT=${SEARCH_EXPERT:-/root/Qwen3-32B}
CODE_EXPERT=${CODE_EXPERT:-/root/Qwen2.5-Coder-32B-Instruct}
ANSWER_EXPERT=${ANSWER_EXPERT:-/root/Qwen3-32B}
MATH_EXPERT=${MATH_EXPERT:-/root/Qwen2.5-Math-72B-Instruct}
LOG_DIR=${LOG_DIR:-/root/logs/toolorchestra}

export PYTHONUNBUFFERED=1
mkdir -p "${LOG_DIR}"
PIDS=()
cleanup() { for pid in "${PIDS[@]}"; do kill "${pid}" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_for() {  # URL NAME: poll until it answers 200 (servers load for minutes)
   for _ in $(seq 1 600); do
      if curl -sf "$1" >/dev/null; then return 0; fi
      sleep 2
   done
   echo "$2 did not come up at $1" >&2
   exit 1
}

# ------------------------------------------------------------------------------------------ retrieval
if [ ! -f "${INDEX_DIR}/meta.json" ]; then
   if [ "${DENSE}" = "1" ]; then
      agentgraphs retrieval index "${CORPUS}" --out "${INDEX_DIR}" --dense
   else
      agentgraphs retrieval index "${CORPUS}" --out "${INDEX_DIR}"
   fi
fi
agentgraphs retrieval serve "${INDEX_DIR}" --port 8000 ${EXAMPLE_IDS:+--example-ids "${EXAMPLE_IDS}"} \
   > "${LOG_DIR}/retrieval.log" 2>&1 &
PIDS+=($!)

# ------------------------------------------------------------------------------------------ experts
launch_expert() {  # GPU PORT MODEL_PATH NAME (the OpenAI model name toolorchestra.yaml uses after '#')
   CUDA_VISIBLE_DEVICES=$1 python3 -m sglang.launch_server --model-path "$3" --served-model-name "$4" \
      --host 127.0.0.1 --port "$2" --tp 1 --mem-fraction-static 0.85 > "${LOG_DIR}/expert_$2.log" 2>&1 &
   PIDS+=($!)
}
launch_expert 4 30001 "${SEARCH_EXPERT}" Qwen3-32B
launch_expert 5 30002 "${CODE_EXPERT}" Qwen2.5-Coder-32B-Instruct
launch_expert 6 30003 "${ANSWER_EXPERT}" Qwen3-32B
launch_expert 7 30004 "${MATH_EXPERT}" Qwen2.5-Math-72B-Instruct   # 72B on one GPU needs FP8: adjust
wait_for http://127.0.0.1:8000/health retrieval
for port in 30001 30002 30003 30004; do wait_for "http://127.0.0.1:${port}/health" "expert ${port}"; done

source "${SLIME_DIR}/scripts/models/qwen3-8B.sh"   # MODEL_ARGS (Megatron architecture flags)

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
   # no --apply-chat-template: the graph renders each orchestrator prompt (Qwen3 template, hermes tools)
   --rollout-shuffle
   # the seed's (Takenzz/AgentFlow@4b5aa84 agentic/ToolOrchestra/train_orchestra.sh:69-74)
   --num-epoch 2
   --rollout-batch-size 32
   --n-samples-per-prompt 8
   --rollout-max-response-len 16384  # per orchestrator turn (Qwen3 thinks first); the seed variant uses all of it
   --rollout-temperature 0.7
   # rows, not trajectories: every orchestrator turn is its own training row (per_turn)
   --global-batch-size 128
)

EVAL_ARGS=(
   --eval-interval 10
   --eval-prompt-data hotpotqa "${DATA_DIR}/eval.jsonl"
   --n-samples-per-eval-prompt 1
   --eval-max-response-len 16384
   --eval-temperature 0.6
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
   # one row: ~6000 context + tools + problem + template, + up to 16384 response tokens (a longer row
   # gets a micro-batch of its own)
   --max-tokens-per-gpu 12288
)

GRPO_ARGS=(
   # the cost-aware group reward replaces GRPO's normalisation for these samples (rl_bridge.convert)
   --advantage-estimator grpo
   --use-kl-loss
   --kl-loss-coef 0.001
   --kl-loss-type low_var_kl
   --entropy-coef 0.00
   --eps-clip 0.2
   --eps-clip-high 0.3   # the seed's (train_orchestra.sh:115-116)
)

OPTIMIZER_ARGS=(
   --optimizer adam
   --lr 1e-6
   --lr-decay-style constant
   --weight-decay 0.1    # the seed's (train_orchestra.sh:124)
   --adam-beta1 0.9
   --adam-beta2 0.98
)

SGLANG_ARGS=(
   --rollout-num-gpus-per-engine 2
   --sglang-mem-fraction-static 0.6
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
   "${PERF_ARGS[@]}" \
   "${SGLANG_ARGS[@]}" \
   "${MISC_ARGS[@]}" \
   "${CUSTOM_ARGS[@]}"
