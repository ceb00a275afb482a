#!/bin/bash
# The whole small-scale reproduction on one GPU, stage by stage (each stage a process that resumes from the
# previous stage's checkpoint directory): model -> warm start -> RL and its permuted-reward control (in
# parallel) -> the seed's RULER-HQA evaluation of all four checkpoints -> the seed's table.
# (run_in_calls.sh does the same over several commands of a few minutes each.)
# Usage: bash run_gpu.sh OUT_DIR [WORK_DIR]   (checkpoints go to WORK_DIR, default /tmp/repro; figures and logs
# to OUT_DIR, packed into $PACK (default OUT_DIR.tgz) after every stage). Sizes: the variables below; the
# defaults are run 5's settings (bench/README.md, "Run 5") with run 6's rollout sampler (inverse_cdf), RL for
# RL_MINUTES per arm.
set -u
out=${1:?usage: run_gpu.sh OUT_DIR [WORK_DIR]}; w=${2:-/tmp/repro}
here=$(cd "$(dirname "$0")" && pwd); mkdir -p "$out" "$w"
R="python3 $here/reproduce.py"
: "${EVAL_PER_LENGTH:=48}" "${DEMOS:=8192}" "${WS_MAX_STEPS:=100000}" "${WS_EVAL_EVERY:=50}" "${WS_EVAL_FROM:=150}"
: "${WS_STOP_AT:=30}" "${WS_SETTLE:=1}" "${PROBE:=16}" "${CONFIRM:=32}" "${RL_STEPS:=1000}" "${RL_PROMPTS:=16}" "${RL_SAMPLES:=16}" "${RL_LR:=1e-4}"
: "${RL_STEPS_PER_ROLLOUT:=2}" "${RL_WARMUP:=10}" "${RL_KL:=0.001}" "${DEMO_WORKERS:=8}" "${RL_SAMPLER:=inverse_cdf}" "${WS_MAX_MINUTES:=0}"
: "${RL_MINUTES:=17}" "${PACK:=$out.tgz}" "${WS_STOP_ABOVE:=}" "${WS_REFINES:=2}"  # WS_STOP_ABOVE: the band's top (none)
pack() { tar czf "$PACK.tmp" -C "$out" . && mv "$PACK.tmp" "$PACK"; }
stamp() { echo "[$(date +%T)] $*"; }

stamp model
$R model --out "$w/model" --eval-per-length "$EVAL_PER_LENGTH" --value-digits "${VALUE_DIGITS:-2}" > "$out/model.log" 2>&1 || { cat "$out/model.log"; exit 1; }
$R eval --ckpt "$w/model" --name "untrained" --out "$out/eval_untrained.json" > "$out/eval_untrained.log" 2>&1 &
stamp warmstart
$R warmstart --init "$w/model" --out "$w/warm" --demos "$DEMOS" --demo-workers "$DEMO_WORKERS" \
   --max-steps "$WS_MAX_STEPS" --max-minutes "$WS_MAX_MINUTES" \
   --eval-every "$WS_EVAL_EVERY" --eval-from "$WS_EVAL_FROM" --probe-per-length "$PROBE" --stop-at "$WS_STOP_AT" --settle "$WS_SETTLE" --confirm-per-length "$CONFIRM" \
   ${WS_STOP_ABOVE:+--stop-above "$WS_STOP_ABOVE" --refines "$WS_REFINES"} > "$out/warmstart.log" 2>&1
cp "$w/warm/stage.json" "$out/warmstart_stage.json" 2>/dev/null; tail -3 "$out/warmstart.log"; pack
$R eval --ckpt "$w/warm" --name "warm start" --out "$out/eval_warmstart.json" > "$out/eval_warmstart.log" 2>&1 &
stamp rl
if [ -n "${DEADLINE:-}" ]; then  # an epoch second by which everything must be done: RL gets what is left
  RL_MINUTES=$(awk -v d="$DEADLINE" -v n="$(date +%s)" -v r="${RESERVE:-180}" 'BEGIN{m=(d-n-r)/60; if(m<1)m=1; printf "%.2f", m}')
  stamp "RL time budget $RL_MINUTES min"
fi
rl=(--steps "$RL_STEPS" --prompts "$RL_PROMPTS" --samples "$RL_SAMPLES" --lr "$RL_LR" --max-minutes "$RL_MINUTES"
    --steps-per-rollout "$RL_STEPS_PER_ROLLOUT" --lr-warmup "$RL_WARMUP" --kl-coef "$RL_KL" --sampler "$RL_SAMPLER" --skip-flat --tf32)
$R rl --init "$w/warm" --out "$w/rl" "${rl[@]}" > "$out/rl.log" 2>&1 & a=$!
$R rl --init "$w/warm" --out "$w/rl_permuted" --permute "${rl[@]}" > "$out/rl_permuted.log" 2>&1 & b=$!
wait $a $b
for d in rl rl_permuted; do cp "$w/$d/stage.json" "$out/${d}_stage.json" 2>/dev/null; tail -2 "$out/$d.log"; done; pack
stamp eval
$R eval --ckpt "$w/rl" --name "RL" --out "$out/eval_rl.json" > "$out/eval_rl.log" 2>&1 &
$R eval --ckpt "$w/rl_permuted" --name "RL, permuted rewards (control)" --out "$out/eval_rl_permuted.json" \
   > "$out/eval_rl_permuted.log" 2>&1 &
wait
for f in untrained warmstart rl rl_permuted; do tail -1 "$out/eval_$f.log"; done
$R table "$out/eval_untrained.json" "$out/eval_warmstart.json" "$out/eval_rl.json" "$out/eval_rl_permuted.json" \
   --out "$out/table.md"
$R compare "$out/eval_warmstart.json" "$out/eval_rl.json" "$out/eval_rl_permuted.json" --out "$out/compare.json"
pack; stamp done
