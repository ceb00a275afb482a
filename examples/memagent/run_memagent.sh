#!/bin/bash
# MemAgent (chunked recurrent memory) trained with GRPO in slime, through agentgraphs' rl_bridge.
#
# Mirrors the seed reproduction: Qwen2.5-7B-Instruct, GRPO + low_var_kl KL loss, HotpotQA training,
# RULER-HQA evaluation (7K .. 448K), SGLang with a 131072-token context (YaRN, see SGLANG_ARGS).
# Run inside the slimerl/slime image with this repository installed (docker/README.md), on 8 GPUs:
#
#   python examples/memagent/prepare_data.py --hotpotqa /root/data/hotpotqa_train.json --out ${DATA_DIR}/train.jsonl
#   python examples/memagent/prepare_data.py --ruler /root/data/ruler_hqa/eval_{50,100,200,400,800,1600,3200}.json \
#       --out-dir ${DATA_DIR}/ruler
#   bash examples/memagent/run_memagent.sh
#
# The method's options live in memagent.yaml (`variant: seed`, what the seed's code trains; README.md, "MemAgent").
# Batch sizes, clip and weight decay are the seed's (Takenzz/AgentFlow@4b5aa84 agentic/memagent/run_memagent_7b.sh).

set -exo pipefail

# ------------------------------------------------------------------------------------------ paths
SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
REPO_DIR="$(cd -- "${SCRIPT_DIR}/../.." &>/dev/null && pwd)"   # agentgraphs checkout (rl_bridge lives here)
SLIME_DIR=${SLIME_DIR:-/root/slime}
MEGATRON_DIR=${MEGATRON_DIR:-/root/Megatron-LM}
MODEL_DIR=${MODEL_DIR:-/root/Qwen2.5-7B-Instruct}                  # HF checkpoint (also the tokenizer)
REF_LOAD=${REF_LOAD:-/root/Qwen2.5-7B-Instruct_torch_dist}         # Megatron torch_dist conversion of MODEL_DIR
SAVE_DIR=${SAVE_DIR:-/root/checkpoints/memagent_qwen2.5-7b}
DATA_DIR=${DATA_DIR:-/root/data/memagent}                          # prepare_data.py output
CONFIG=${CONFIG:-${SCRIPT_DIR}/memagent.yaml}
NUM_GPUS=${NUM_GPUS:-8}
ENABLE_YARN=${ENABLE_YARN:-1}
RULER_LENGTHS=${RULER_LENGTHS:-"7K 14K 28K 56K 112K 224K 448K"}

export PYTHONUNBUFFERED=1   # keep Ray from buffering stdout/stderr

source "${SLIME_DIR}/scripts/models/qwen2.5-7B.sh"   # MODEL_ARGS (Megatron architecture flags)

# ------------------------------------------------------------------------------------------ args
CKPT_ARGS=(
   --hf-checkpoint "${MODEL_DIR}"
   --ref-load "${REF_LOAD}"
   --load "${SAVE_DIR}"
   --save "${SAVE_DIR}"
   --save-interval 20
)

EVAL_DATA=()
for length in ${RULER_LENGTHS}; do
   EVAL_DATA+=("ruler_hqa_${length}" "${DATA_DIR}/ruler/ruler_hqa_${length}.jsonl")
done

ROLLOUT_ARGS=(
   --prompt-data "${DATA_DIR}/train.jsonl"
   --input-key input
   --label-key label
   --metadata-key metadata
   # no --apply-chat-template: the graph renders its own prompts from the question in `input`
   --rollout-shuffle
   --num-epoch 1                        # the seed's (run_memagent_7b.sh:58); a shorter run: --num-rollout N here
   --rollout-batch-size 16      # the seed's 16 prompts x 16 samples (run_memagent_7b.sh:59-60)
   --n-samples-per-prompt 16
   # per engine call: each memory update and the final answer are capped at 1024 new tokens
   --rollout-max-response-len 1024
   --rollout-temperature 1.0
   # Training rows, not trajectories: rl_bridge.convert expands every trajectory into one row per
   # turn (one per chunk read + the final answer), so a rollout of 16 x 16 trajectories over documents of
   # k chunks gives 256 x (k + 1) rows; slime v0.2.x steps over rows, v0.3.x counts trajectories
   # (see rl_bridge/convert.py).
   --global-batch-size 256
   --balance-data   # the seed's (run_memagent_7b.sh:65): rows spread over data-parallel ranks by length
)

EVAL_ARGS=(
   --eval-interval 10
   --eval-prompt-data "${EVAL_DATA[@]}"
   --n-samples-per-eval-prompt 1
   --eval-max-response-len 1024
   --eval-temperature 0.7   # MemAgent's RULER-HQA sampling
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
   # one row is at most ~5000 chunk + 1024 memory + the question + template + 1024 response tokens
   --max-tokens-per-gpu 16384
)

GRPO_ARGS=(
   --advantage-estimator grpo
   --use-kl-loss
   --kl-loss-coef 0.001
   --kl-loss-type low_var_kl
   --entropy-coef 0.00
   --eps-clip 0.2
   --eps-clip-high 0.3   # the seed's (run_memagent_7b.sh:94)
   # original MemAgent uses advantage = reward - group mean (no std division):
   # --disable-grpo-std-normalization
)

OPTIMIZER_ARGS=(
   --optimizer adam
   --lr 1e-6
   --lr-decay-style constant
   --weight-decay 0.1    # the seed's (run_memagent_7b.sh:101)
   --adam-beta1 0.9
   --adam-beta2 0.98
)

WANDB_ARGS=(
   # --use-wandb
   # --wandb-project agentgraphs
   # --wandb-group memagent-qwen2.5-7b
)

SGLANG_ARGS=(
   --rollout-num-gpus-per-engine 2
   --sglang-mem-fraction-static 0.7
)
if [ "${ENABLE_YARN}" = "1" ]; then
   # The seed serves Qwen2.5-7B-Instruct (32768 native positions) with a 131072-token context through
   # static YaRN (factor 4), as Qwen's model card describes for long inputs. Notes:
   # - MemAgent's own prompts never exceed ~8K tokens (one chunk + memory + question), so YaRN is not
   #   needed by MemAgent itself; ENABLE_YARN=0 serves the model unchanged.
   # - static YaRN rescales rotary frequencies at every length, while Megatron trains without it: the
   #   rollout log-probs then differ from the trainer's more than usual (watch the train/rollout
   #   log-prob gap, or consider ENABLE_YARN=0 for training runs).
   SGLANG_ARGS+=(
      --sglang-context-length 131072
      --sglang-json-model-override-args
      '{"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}'
   )
fi

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
ray start --head --node-ip-address "${MASTER_ADDR}" --num-gpus "${NUM_GPUS}" --disable-usage-stats

# rl_bridge and agentgraphs must be importable in every Ray worker: the repository root goes on
# PYTHONPATH (the Docker image also pip-installs it; this keeps a mounted checkout authoritative).
RUNTIME_ENV_JSON="{
  \"env_vars\": {
    \"PYTHONPATH\": \"${REPO_DIR}:${MEGATRON_DIR}\",
    \"CUDA_DEVICE_MAX_CONNECTIONS\": \"1\",
    \"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN\": \"1\"
  }
}"

ray job submit --address="http://127.0.0.1:8265" \
   --runtime-env-json="${RUNTIME_ENV_JSON}" \
   -- python3 "${SLIME_DIR}/train.py" \
   --actor-num-nodes 1 \
   --actor-num-gpus-per-node "${NUM_GPUS}" \
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
