#!/bin/bash
# The whole reproduction on a GPU machine whose commands are cut after a few minutes (the device machine: 10
# minutes a command). Each call does the next unfinished stages within BUDGET seconds and stops; call it again
# (WORK_DIR must survive between calls) until it prints "all stages done". Checkpoints stay in WORK_DIR;
# logs, stage files, evaluations and the table go to WORK_DIR/results, packed into OUT_DIR/results.tgz at the
# end of every call, and when a signal cuts it (TERM: the machine's limit, `timeout`). Set RESUME=1 on every call
# after the first: a WORK_DIR that lost the run (a machine given back between calls) is then refused at once
# instead of silently starting over.
#   model -> untrained evaluation | warm start, in rounds of new documents until its probe reaches the stop
#   (at most WS_ROUNDS, each from the round before or, with WS_ROUND_FROM=untrained, from the untrained model;
#   a round whose stop reads WS_RESTART_REVERSED % of answers reversed or more, or WS_RESTART_FLIPS % of copied
#   digits flipped, begins again from its init, WS_RESTARTS times at most)
#   -> RL and its permuted-reward control in parallel (+ the warm start's evaluation; in the warm start's own
#   call when RL_MIN_S seconds are left; a last round its probe did not stop goes on to RL as it stands, or with
#   WS_ROUND_FROM=untrained the round whose last probe read highest, and the call log says so, with its last probe),
#   resumed with their AdamW state in the next calls until each has stepped RL_TOTAL_S seconds (or, in a call
#   with LAST_CALL=1, for what that call leaves after the evaluations)
#   -> evaluations of RL and control -> the seed's table, the paired comparison and the two arms' curves.
# Usage: bash run_in_calls.sh OUT_DIR [WORK_DIR]   (sizes: the variables below)
set -u
out=${1:?usage: run_in_calls.sh OUT_DIR [WORK_DIR]}; w=${2:-/tmp/repro}
here=$(cd "$(dirname "$0")" && pwd); r="$w/results"
export TQDM_DISABLE=1  # no progress bars in the logs
R="python3 $here/reproduce.py"
: "${BUDGET:=540}" "${VALUE_DIGITS:=2}" "${EVAL_PER_LENGTH:=48}" "${DEMOS:=8192}" "${DEMO_WORKERS:=}"
: "${WS_LR:=1e-3}" "${WS_SCHEDULE:=constant}" "${WS_EVAL_EVERY:=50}" "${WS_EVAL_FROM:=150}" "${PROBE:=16}"
: "${WS_STOP_AT:=30}" "${WS_SETTLE:=1}" "${CONFIRM:=32}" "${WS_ROUNDS:=2}" "${RL_PROMPTS:=16}" "${RL_SAMPLES:=16}" "${RL_LR:=1e-4}" "${RL_MIN_S:=240}"
: "${WS_STOP_ABOVE:=}" "${WS_REFINES:=2}"  # the stop band's top (empty: none): an overshoot goes back, probes finer
: "${WS_RESTART_REVERSED:=}" "${WS_RESTARTS:=2}"  # a stop reading this % of answers reversed or more (empty: never)
# begins the round's warm start again from its init weights, WS_RESTARTS times at most (if every attempt reads as
# much, the one least over its limits is kept)
: "${WS_RESTART_FLIPS:=}"  # the same for a stop whose memory updates flipped this % of the digits they copied or more
restarting="$WS_RESTART_REVERSED$WS_RESTART_FLIPS"  # non-empty: a restart rule is on, and WS_RESTARTS bounds it
: "${WS_ROUND_FROM:=last}"  # where a warm start round after the first begins: last (the round before's weights, as
# in runs 3-30) or untrained (the untrained model, on the round's own new documents: a fresh draw of the start;
# if no round's probe stops, RL starts from the round whose last probe read highest, the later on a tie)
case "$WS_ROUND_FROM" in last|untrained) ;; *) echo "WS_ROUND_FROM=$WS_ROUND_FROM: set last (each warm start round" \
  "from the one before, the default) or untrained (each from the untrained model: a fresh draw)" >&2; exit 2;; esac
: "${RL_STEPS_PER_ROLLOUT:=2}" "${RL_TOTAL_S:=720}"  # RL_TOTAL_S: seconds of RL per arm, over several calls (0: one call)
: "${RL_WARMUP:=10}" "${RL_KL:=0.001}"  # optimizer steps of lr warm-up; the seed's KL loss coefficient (low_var_kl)
: "${RL_SAMPLER:=inverse_cdf}"  # the rollouts' engine sampler (inverse_cdf | multinomial: the same distribution;
# inverse_cdf batched 1.69x multinomial's tokens/s at 256 requests on the H200: bench/README "engine_batching.py")
# DEMO_WORKERS: each worker holds its own engine on the GPU (on an H200: 8 fit beside an evaluation in most runs and
# ran out once, bench/README "Run 20, lost"; 6 fit, 99.8 s for 8,192 demonstrations; 14 ran out of memory). Empty
# (the default): what the device's memory holds, `demo_workers` below (run 33's 8 and run 34's 4 ran out on an H100
# beside the untrained model's evaluation, 31.4-32.2 GiB, the workers up to 18.4 GiB each)
: "${EVAL_S:=200}" "${MODEL_ARGS:=}" "${WS_ARGS:=}" "${RL_ARGS:=}"  # *_ARGS: more flags for that stage
# (MODEL_ARGS="--sentence-lengths uniform": the filler of runs 3-29, every sentence 11 tokens; the default is varied)
: "${RL_DRAWS:=1}"  # 2: a second RL arm from the same start, its own documents and sampling seeds (`rl --draw 1`,
# evaluated as "RL, second draw"): whether the spread between runs of one plan is the start's or RL's own; the
# targets read the first arm, as with 1 (the three arms share the GPU: each steps less in the same time; a last
# call's EVAL_S must then cover three evaluations at once: run 29's two took 80 s, its last call 569 s of 600)
case "$RL_DRAWS" in 1|2) ;; *) echo "RL_DRAWS=$RL_DRAWS: set 1 (RL and its control, the default) or 2 (and a" \
  "second RL arm from the same start)" >&2; exit 2;; esac
arms=(rl rl_permuted); [ "$RL_DRAWS" = 2 ] && arms+=(rl_draw1)
: "${LAST_CALL:=0}"  # 1: this call ends the run: RL steps what it leaves after EVAL_S (RL_TOTAL_S aside), then
# the evaluations and the table, so that the last call's RL need not be worked out by hand
case "$LAST_CALL" in 0|1) ;; *) echo "LAST_CALL=$LAST_CALL: set 1 (this call ends the run) or 0 (the default)" >&2
  exit 2;; esac
: "${RESUME:=0}"  # 1: this call goes on with a run an earlier call began; refused if WORK_DIR holds none
case "$RESUME" in 0|1) ;; *) echo "RESUME=$RESUME: set 1 (this call goes on with a run) or 0 (the default)" >&2
  exit 2;; esac
if [ "$RESUME" = 1 ] && [ ! -f "$w/model/repro.json" ]; then
  echo "RESUME=1: WORK_DIR $w holds no model, so there is no run to go on with (on the device machine: it was" \
    "given back between calls, and this call's fresh machine has an empty /tmp). Nothing was run. Start the run" \
    "again from its first call (RESUME=0)." >&2
  exit 3
fi
if [ -f "$w/rl_draws" ] && [ "$(cat "$w/rl_draws")" != "$RL_DRAWS" ]; then
  echo "RL_DRAWS=$RL_DRAWS: this run's RL began with RL_DRAWS=$(cat "$w/rl_draws") ($w/rl_draws), and its arms go on" \
    "together; set RL_DRAWS=$(cat "$w/rl_draws") on every call of it (a new WORK_DIR for a run with the other)." \
    "Nothing was run." >&2
  exit 2
fi
if [ -f "$w/ws_round_from" ] && [ "$(cat "$w/ws_round_from")" != "$WS_ROUND_FROM" ]; then
  echo "WS_ROUND_FROM=$WS_ROUND_FROM: this run's warm start began with WS_ROUND_FROM=$(cat "$w/ws_round_from")" \
    "($w/ws_round_from), which decides its rounds' init and the round RL starts from; set" \
    "WS_ROUND_FROM=$(cat "$w/ws_round_from") on every call of it (a new WORK_DIR for a run with the other)." \
    "Nothing was run." >&2
  exit 2
fi
mkdir -p "$out" "$r"
t0=$(date +%s)
left() { echo $((t0 + BUDGET - $(date +%s))); }
cap() { local l; l=$(left); echo $(( l > 1 ? l : 1 )); }  # a `timeout` limit: 0 would mean none
as_minutes() { awk -v s="$1" 'BEGIN{m = s / 60; printf "%.2f", m < 0.01 ? 0.01 : m}'; }  # a stage's 0 means no cap
stamp() { echo "[$(date +%T)] $*" | tee -a "$r/calls.log"; }
pack() { tar czf "$out/results.tgz.tmp" -C "$r" . && mv "$out/results.tgz.tmp" "$out/results.tgz"; }
gpu_gib() {  # the first GPU's memory in GiB as nvidia-smi reports it; nothing where it does not answer
  local mib; mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  case "$mib" in ''|*[!0-9\ ]*) return 0;; esac
  awk -v m="$mib" 'BEGIN{printf "%.1f\n", m / 1024}'
}
demo_workers() {  # demo_workers BESIDE: the demonstration workers the first GPU's memory holds, BESIDE (1: the
  # untrained model's evaluation runs beside them, 32 GiB; 0: alone) at 18.5 GiB a worker (run 34's peak, 18.4), 1 to 8
  # (139 GiB H200: 5 beside, 7 alone; 79 GiB H100: 2 beside, 4 alone); 8, runs 3-32's, where nvidia-smi does not answer
  local gib; gib=$(gpu_gib)
  [ -n "$gib" ] || { echo 8; return; }
  awk -v g="$gib" -v e="$1" 'BEGIN{n = int((g - 32 * e) / 18.5); print n < 1 ? 1 : (n > 8 ? 8 : n)}'
}
eval_fits_beside() {  # eval_fits_beside ARMS: the first GPU holds an evaluation (22 GiB) beside ARMS RL arms (30 GiB
  # each; run 34 on an H100: 21.7 GiB and 28.0-29.4 GiB, and its control ran out there); yes where nvidia-smi does
  # not answer (runs 3-33: the arms and the warm start's evaluation together on an H200)
  local gib; gib=$(gpu_gib)
  [ -n "$gib" ] || return 0
  awk -v g="$gib" -v a="$1" 'BEGIN{exit !(g >= 22 + 30 * a)}'
}
probe_stopped() {  # the warm start in $1 stopped on its probe; if not (its step cap or time budget), exit 1 and
  # print why, with its last probe and confirmation
  python3 - "$1/stage.json" <<'PY'
import json, sys
stage = json.load(open(sys.argv[1]))
if stage["stop"]["reason"].startswith("probe"):
    sys.exit(0)
probes = [c for c in stage["curve"] if "probe_strict" in c]
last = probes[-1] if probes else None
read = "no probe ran" if last is None else f"its last probe read {last['probe_strict']:.1f} % at step {last['step']}"
if last is not None and "confirm_strict" in last:
    read += f", its confirmation {last['confirm_strict']:.1f} %"
print(f"{stage['stop']['reason']}; {read}")
sys.exit(1)
PY
}
best_round() {  # best_round WORK_DIR ROUNDS: of rounds 1..ROUNDS (none stopped by its probe), the one whose
  # last probe read highest (the later on a tie), tab-separated: its number, that probe, the others' last probes
  python3 - "$1" "$2" <<'PY'
import json, sys
last = {}
for k in range(1, int(sys.argv[2]) + 1):
    curve = json.load(open(f"{sys.argv[1]}/warm{k}/stage.json"))["curve"]
    probes = [c["probe_strict"] for c in curve if "probe_strict" in c]
    last[k] = probes[-1] if probes else None
best = max(last, key=lambda k: (-1.0 if last[k] is None else last[k], k))
read = lambda p: "no probe" if p is None else f"{p:.1f} %"
others = ", ".join(f"round {k}'s {read(p)}" for k, p in last.items() if k != best)
print(best, read(last[best]), others, sep="\t")
PY
}
declare -A started=()  # the evaluations this call started (a second one would truncate the first's log)
evaluate() {  # evaluate CKPT NAME FILE, in the background, once a call
  { [ -f "$r/eval_$3.json" ] || [ -n "${started[$3]:-}" ]; } && return 0
  started[$3]=1
  timeout "$(cap)" $R eval --ckpt "$1" --name "$2" --out "$r/eval_$3.json" > "$r/eval_$3.log" 2>&1 &
  started[$3]=$!
}
# a long stage runs as a job the shell waits for: a trapped signal interrupts `wait` (never a foreground command),
# and `timeout` puts its command in a process group of its own, which a signal to ours does not reach: cut stops it
interruptible() { local log=$1; shift; "$@" > "$log" 2>&1 & wait $!; }  # interruptible LOG COMMAND...
cut() {  # cut "SIGNAL" CODE: the call's limit (or a Ctrl-C) came first: stop the stages, pack what is done
  trap - TERM INT HUP
  local pids; pids=$(jobs -p); [ -n "$pids" ] && kill $pids 2>/dev/null; wait
  stamp "call cut by SIG$1 after $(( $(date +%s) - t0 )) s: packed what was done (a stage cut short runs again" \
    "in the next call)"
  pack; exit $((128 + $2))
}
trap 'cut TERM 15' TERM; trap 'cut INT 2' INT; trap 'cut HUP 1' HUP
stamp "call starts, budget ${BUDGET}s"

if [ ! -f "$w/model/repro.json" ]; then
  stamp model
  interruptible "$r/model.log" $R model --out "$w/model" --eval-per-length "$EVAL_PER_LENGTH" \
    --value-digits "$VALUE_DIGITS" $MODEL_ARGS \
    || { cat "$r/model.log"; exit 1; }
fi
evaluate "$w/model" "untrained" untrained

# warm start: rounds of new documents, each from the last (WS_ROUND_FROM=untrained: from the untrained model),
# until the probe reaches the stop or WS_ROUNDS ran
k=1; while [ -f "$w/warm$k/stage.json" ]; do k=$((k + 1)); done; last=$((k - 1))
if [ "$last" -lt 1 ] || { ! probe_stopped "$w/warm$last" > /dev/null && [ "$last" -lt "$WS_ROUNDS" ]; }; then
  init="$w/model"; [ "$last" -ge 1 ] && [ "$WS_ROUND_FROM" = last ] && init="$w/warm$last"
  echo "$WS_ROUND_FROM" > "$w/ws_round_from"  # where this run's rounds begin, which its later calls keep
  minutes=$(as_minutes $(( $(left) - 45 )))
  [ -n "$DEMO_WORKERS" ] || DEMO_WORKERS=$(demo_workers "$([ -n "${started[untrained]:-}" ] && echo 1 || echo 0)")
  stamp "warm start round $k from $init, $minutes min, $DEMO_WORKERS demonstration workers"
  interruptible "$r/warmstart$k.log" timeout "$(cap)" $R warmstart --init "$init" --out "$w/warm$k" \
    --demos "$DEMOS" --demo-workers "$DEMO_WORKERS" \
    --demo-split "demo$k" --lr "$WS_LR" --schedule "$WS_SCHEDULE" --max-minutes "$minutes" --max-steps 100000 \
    --eval-every "$WS_EVAL_EVERY" --eval-from "$WS_EVAL_FROM" --probe-per-length "$PROBE" --stop-at "$WS_STOP_AT" --settle "$WS_SETTLE" --confirm-per-length "$CONFIRM" \
    ${WS_STOP_ABOVE:+--stop-above "$WS_STOP_ABOVE" --refines "$WS_REFINES"} \
    ${WS_RESTART_REVERSED:+--restart-reversed "$WS_RESTART_REVERSED"} ${WS_RESTART_FLIPS:+--restart-flips "$WS_RESTART_FLIPS"} \
    ${restarting:+--restarts "$WS_RESTARTS"} $WS_ARGS
  cp "$w/warm$k/stage.json" "$r/warmstart${k}_stage.json" 2>/dev/null; tail -2 "$r/warmstart$k.log" | tee -a "$r/calls.log"
  # the warm start is done (its probe reached the stop, or it was the last round): RL goes on in this call if
  # RL_MIN_S is left, so that the time an early stop leaves is not lost
  if [ -f "$w/warm$k/stage.json" ] && { probe_stopped "$w/warm$k" > /dev/null || [ "$k" -ge "$WS_ROUNDS" ]; } \
     && [ "$(left)" -ge "$RL_MIN_S" ]; then
    stamp "warm start done after round $k, $(left) s left: RL in this call"; last=$k
  else
    wait; stamp "call ends after warm start round $k"; pack; exit 0
  fi
fi
warm="$w/warm$last"; chosen=""

# RL and its control: RL_TOTAL_S seconds of stepping each (0: what one call leaves), over as many calls as that takes
rl_s() { python3 -c "import json; print(int(json.load(open('$1/stage.json'))['seconds']))" 2>/dev/null || echo 0; }
all_begun() { local d; for d in "${arms[@]}"; do [ -f "$w/$d/stage.json" ] || return 1; done; }  # every arm has begun
flags() { case "$1" in rl) ;; rl_permuted) echo --permute;; rl_draw1) echo --draw 1;; esac; }  # an arm's own flags
before_evals() { echo $(( $(left) - EVAL_S - 50 )); }  # RL's seconds before the evaluations (50: load, save the arms)
step_rl() {  # step_rl SECONDS: every arm steps SECONDS more (fresh from the warm start, or resumed), in parallel
  local minutes d pids=() resume=0 seconds=$1 t
  if [ ! -f "$r/eval_warmstart.json" ] && ! eval_fits_beside "${#arms[@]}"; then  # first, alone: then the arms
    t=$(date +%s); stamp "the warm start's evaluation first: the GPU ($(gpu_gib) GiB) holds it or ${#arms[@]} RL" \
      "arms, not both"
    evaluate "$warm" "warm start" warmstart; wait "${started[warmstart]}"
    seconds=$(( seconds - ($(date +%s) - t) ))
    [ "$seconds" -ge 10 ] || { stamp "no time left for RL after the warm start's evaluation: call again"; pack; exit 0; }
  fi
  minutes=$(as_minutes "$seconds")
  local rl=(--prompts "$RL_PROMPTS" --samples "$RL_SAMPLES" --lr "$RL_LR" --steps-per-rollout "$RL_STEPS_PER_ROLLOUT"
      --lr-warmup "$RL_WARMUP" --kl-coef "$RL_KL" --sampler "$RL_SAMPLER" --steps 1000 --max-minutes "$minutes" --skip-flat --tf32 $RL_ARGS)
  local which="RL and control"; [ "$RL_DRAWS" = 2 ] && which="RL, control and RL's second draw"
  if all_begun; then
    stamp "$which resumed after $(rl_s "$w/rl") s, $minutes min each"; resume=1
  else
    [ -n "$chosen" ] && stamp "$chosen"  # the round RL starts from, when the rounds were separate draws
    stamp "$which from $warm, $minutes min each"; echo "$RL_DRAWS" > "$w/rl_draws"  # the arms this run steps
    why=$(probe_stopped "$warm") || stamp "RL starts from a warm start its probe never stopped ($why): as it" \
      "stands; the warm start's evaluation says where RL began"
  fi
  evaluate "$warm" "warm start" warmstart
  for d in "${arms[@]}"; do
    local from=(--init "$warm"); [ "$resume" = 1 ] && from=(--init "$w/$d" --resume)
    timeout "$(cap)" $R rl --out "$w/$d" $(flags "$d") "${from[@]}" "${rl[@]}" >> "$r/$d.log" 2>&1 & pids+=($!)
  done
  watch_arms "${pids[@]}"
  for d in "${arms[@]}"; do
    cp "$w/$d/stage.json" "$r/${d}_stage.json" 2>/dev/null; tail -1 "$r/$d.log" | tee -a "$r/calls.log"
  done
}
watch_arms() {  # watch_arms PID...: wait for the arms (in `arms` order); the first to fail stops the others and the
  # call, loudly: RL without its control is no result (run 34's control ran out of memory at its first step and RL
  # stepped alone for 7 minutes). The next call begins every arm again from where the last whole call left them.
  local pids=("$@") k rc
  while :; do
    local running=0
    for k in "${!pids[@]}"; do
      [ -n "${pids[$k]}" ] || continue
      if kill -0 "${pids[$k]}" 2>/dev/null; then running=1; continue; fi
      wait "${pids[$k]}"; rc=$?; pids[$k]=""
      [ "$rc" = 0 ] && continue
      local alive=("${pids[@]}"); alive=(${alive[@]}); [ "${#alive[@]}" -gt 0 ] && kill "${alive[@]}" 2>/dev/null
      wait
      stamp "RL arm ${arms[$k]} failed (exit $rc; its log: $r/${arms[$k]}.log): $(tail -1 "$r/${arms[$k]}.log")"
      stamp "the other arms were stopped with it (RL without its control is no result): fix the cause and call" \
        "again; the arms begin again from where the last whole call left them"
      pack; exit 1
    done
    [ "$running" = 1 ] || return 0
    sleep 2 & wait $!  # a signal (the call's limit) interrupts `wait`, not a foreground sleep
  done
}
if [ "$WS_ROUND_FROM" = untrained ] && [ "$last" -gt 1 ] && ! probe_stopped "$warm" > /dev/null; then
  # the rounds are separate draws from the untrained model, none stopped by its probe: RL takes the best of them
  IFS=$'\t' read -r best probe others <<< "$(best_round "$w" "$last")"
  warm="$w/warm$best"
  chosen="RL starts from warm start round $best of $last (WS_ROUND_FROM=untrained: each round a fresh draw from the"
  chosen+=" untrained model, none stopped by its probe; round $best's last probe read highest, $probe; $others)"
fi
if [ "$LAST_CALL" = 1 ]; then  # what is left before the evaluations is RL's
  extra=$(before_evals)
  if [ "$extra" -ge 10 ]; then stamp "last call: RL ${extra} s more, then the evaluations"; step_rl "$extra"
  elif ! all_begun; then
    wait; stamp "too little time left for RL before the evaluations ($(left) s, EVAL_S=$EVAL_S): call again" \
      "(with a larger BUDGET)"; pack; exit 0
  fi
elif ! all_begun || { [ "$RL_TOTAL_S" -gt 0 ] && [ "$(rl_s "$w/rl")" -lt $((RL_TOTAL_S - 60)) ]; }; then
  if [ "$(left)" -lt "$RL_MIN_S" ]; then
    wait; stamp "too little time left for RL ($(left) s, RL_MIN_S=$RL_MIN_S): call again (with BUDGET over RL_MIN_S)"
    pack; exit 0
  fi
  want=$(( RL_TOTAL_S > 0 ? RL_TOTAL_S - $(all_begun && rl_s "$w/rl" || echo 0) : 100000 ))
  reserve=0  # keep time for the evaluations when RL can finish in this call anyway
  if [ "$RL_TOTAL_S" -gt 0 ]; then [ "$want" -le "$(before_evals)" ] && reserve=$EVAL_S
  else [ "$(left)" -gt $((RL_MIN_S + EVAL_S)) ] && reserve=$EVAL_S; fi
  step_s=$(( $(left) - reserve - 50 )); [ "$want" -lt "$step_s" ] && step_s=$want
  step_rl "$step_s"
  if [ "$RL_TOTAL_S" -gt 0 ] && [ "$(rl_s "$w/rl")" -lt $((RL_TOTAL_S - 60)) ]; then
    wait; stamp "call ends after $(rl_s "$w/rl") s of RL: call again"; pack; exit 0
  fi
fi

if [ "$(left)" -lt "$EVAL_S" ]; then wait; stamp "evaluations next call (they need EVAL_S=$EVAL_S s, BUDGET over it)"; pack; exit 0; fi
stamp evaluations
evaluate "$warm" "warm start" warmstart
evaluate "$w/rl" "RL" rl
evaluate "$w/rl_permuted" "RL, permuted rewards (control)" rl_permuted
[ "$RL_DRAWS" = 2 ] && evaluate "$w/rl_draw1" "RL, second draw" rl_draw1
wait
evals=(untrained warmstart "${arms[@]}"); files=("${evals[@]/#/$r/eval_}"); files=("${files[@]/%/.json}")
for f in "${evals[@]}"; do tail -1 "$r/eval_$f.log" | tee -a "$r/calls.log"; done
missing=0; for f in "${files[@]}"; do [ -f "$f" ] || missing=1; done
if [ "$missing" = 0 ]; then
  $R table "${files[@]}" --out "$r/table.md"
  $R compare "${files[@]:1}" --out "$r/compare.json" | tee -a "$r/calls.log"
  $R curves "$w/rl/stage.json" "$w/rl_permuted/stage.json" --out "$r/curves.json" | tee -a "$r/calls.log"
  stamp "all stages done"
else
  stamp "an evaluation is missing (eval_*.log): call again"
fi
pack
