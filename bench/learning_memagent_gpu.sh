#!/bin/bash
# The GPU MemAgent learning run (bench/README.md, "learning.py", MemAgent): MemAgent's graph on the shaped
# share reward, fp32 and bf16, plus the permuted-reward control, as parallel processes on one GPU.
# Writes OUT_DIR/learning_memagent_gpu.json (all runs). Usage: bash bench/learning_memagent_gpu.sh OUT_DIR [STEPS]
set -u
out=${1:?usage: bench/learning_memagent_gpu.sh OUT_DIR [STEPS]}; steps=${2:-30}
here=$(cd "$(dirname "$0")" && pwd); mkdir -p "$out/runs"
big="--device cuda --task memagent --hidden-size 256 --layers 4 --prompts 8 --samples 8 --chunks 2 --chunk-tokens 64
     --memory-tokens 16 --final-tokens 8 --init-scale 0.1 --lr 1e-2 --steps $steps"
run() { name=$1; shift; timeout "${LIMIT:-300}" python3 "$here/learning.py" $big --name "$name" \
        --json "$out/runs/$name.json" "$@" > "$out/runs/$name.log" 2>&1 & }
run memagent-fp32 --dtype float32
run memagent-bf16 --dtype bfloat16
run memagent-fp32-permute_within_groups --dtype float32 --fault permute_within_groups
wait
python3 - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1]); runs = []
for f in sorted((out / "runs").glob("*.json")):
    r = json.loads(f.read_text())
    runs.append({**r, "log_tail": f.with_suffix(".log").read_text()[-3000:]})
(out / "learning_memagent_gpu.json").write_text(json.dumps({"bench": "learning_memagent_gpu", "runs": runs}, indent=1) + "\n")
for r in runs:
    print(r["name"], "PARTIAL" if r.get("partial") else r["summary"])
PY
