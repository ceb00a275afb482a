"""Conversion speed: 10,000 recorded turns -> slime training data, through the library's one path.

    python bench/conversion.py [--quick]

1,000 trajectories x 10 turns (512-token prompts, 128-token outputs with log-probs), grouped 8 per
prompt, converted the way a training step does it:
  1. sequences: `build_sequences` + `check_sequence` on every sequence (what run_rollout's finish does);
  2. sample fields: `sample_fields` and filling a slime Sample (the stand-in with slime's exact fields);
  3. convert: `rl_bridge.convert.convert` (GRPO group normalisation, masks, the train-data dict).
Two layouts: `per_turn` (independent prompts, MemAgent's shape: 10 sequences of 640 tokens per
trajectory) and `concat` (ONE conversation of 10 turns: prompt k+1 = prompt k + output k + 32 glue ids,
merged into one sequence per trajectory). Target: the whole path <= 1 s for 10,000 turns, per layout.
Turn generation is not timed. Figures are the median of the repeats.
"""

from __future__ import annotations

import gc
import random
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

from agentgraphs.engines import Completion  # noqa: E402
from agentgraphs.records import Rollout, sample_fields  # noqa: E402
from agentgraphs.spec import AgentSpec  # noqa: E402
from agentgraphs.testing.slime_sample import Sample  # noqa: E402
from agentgraphs.trace import Turn, build_sequences, check_sequence, make_turn  # noqa: E402
from rl_bridge.convert import convert  # noqa: E402

NAME = "conversion"
TARGET_S = 1.0
TURNS_PER_TRAJECTORY = 10
PROMPT, OUTPUT, GLUE = 512, 128, 32
GROUP = 8


def _ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(151643) for _ in range(n)]


def make_trajectory(rng: random.Random, layout: str) -> list[Turn]:
    turns: list[Turn] = []
    prompt = _ids(rng, PROMPT)
    for k in range(TURNS_PER_TRAJECTORY):
        out = _ids(rng, OUTPUT - 1) + [151645]
        lps = [-rng.random() * 3 for _ in out]
        turns.append(make_turn(Completion(out, lps, "stop", text="x" * 64), node="step", prompt_ids=prompt,
                               trainable=True, temperature=1.0, engine="bench",
                               conversation="main" if layout == "concat" else ""))
        # per_turn: a new independent prompt; concat: the conversation grows append-only
        prompt = _ids(rng, PROMPT) if layout == "per_turn" else prompt + out + _ids(rng, GLUE)
    return turns


def _spec(layout: str) -> AgentSpec:
    return AgentSpec(name="bench", build_graph=lambda o: None, make_input=lambda r, o: {},
                     answer=lambda s: "", reward=lambda r, c: 0.0, layout=layout)  # type: ignore[arg-type]


def convert_all(trajectories: list[list[Turn]], spec: AgentSpec, rewards: list[float]) -> dict[str, float]:
    t0 = time.perf_counter()
    rollouts = []
    for turns in trajectories:
        seqs = build_sequences(turns, spec.layout)
        rollouts.append(Rollout(status="completed", reason="ok", answer="42", turns=turns, sequences=seqs,
                                options={"reward_split": "broadcast"}))
    t1 = time.perf_counter()
    for r in rollouts:
        for seq in r.sequences:
            check_sequence(seq, r.turns)
    t2 = time.perf_counter()
    samples = []
    for i, (r, reward) in enumerate(zip(rollouts, rewards)):
        f = sample_fields(r, spec)
        s = Sample(group_index=i // GROUP, index=i, tokens=f["tokens"], response_length=f["response_length"],
                   loss_mask=f["loss_mask"], rollout_log_probs=f["rollout_log_probs"], response=f["response"],
                   reward=reward, status=Sample.Status(f["status"]), remove_sample=f["remove_sample"],
                   weight_versions=f["weight_versions"], metadata=dict(f["metadata"]),
                   train_metadata=f["train_metadata"])
        samples.append(s)
    t3 = time.perf_counter()
    args = SimpleNamespace(advantage_estimator="grpo", rewards_normalization=True, grpo_std_normalization=True,
                           n_samples_per_prompt=GROUP, global_batch_size=None, reward_key=None)
    data = convert(args, samples)
    t4 = time.perf_counter()
    n_rows = len(data["tokens"])
    return {"sequences_s": t1 - t0, "check_s": t2 - t1, "sample_fields_s": t3 - t2, "convert_s": t4 - t3,
            "total_s": t4 - t0, "rows": n_rows, "tokens": sum(len(t) for t in data["tokens"])}


def main() -> None:
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=None, help="timed repeats (default 3; quick 1)")
    args = p.parse_args()
    n_traj = 100 if args.quick else 1000
    repeats = args.repeats or (1 if args.quick else 3)
    n_turns = n_traj * TURNS_PER_TRAJECTORY
    print(f"{NAME}: {n_traj} trajectories x {TURNS_PER_TRAJECTORY} turns = {n_turns:,} turns "
          f"({PROMPT}-token prompts, {OUTPUT}-token outputs, groups of {GROUP}); "
          f"machine: {_common.machine()['cores']} cores; median of {repeats}")
    results: dict[str, Any] = {"quick": args.quick, "turns": n_turns, "target_s": TARGET_S}
    passed = True
    for layout in ("per_turn", "concat"):
        rng = random.Random(0)
        trajectories = [make_trajectory(rng, layout) for _ in range(n_traj)]
        rewards = [float(rng.random() < 0.5) for _ in range(n_traj)]
        spec = _spec(layout)
        runs = [convert_all(trajectories, spec, rewards) for _ in range(repeats)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        scale = 10_000 / n_turns  # the target is per 10,000 turns
        total = med["total_s"] * scale
        ok = total <= TARGET_S
        passed &= ok
        print(f"  {layout:8s}: {int(med['rows']):,} training rows, {int(med['tokens']):,} tokens")
        print(f"    build_sequences {1000 * med['sequences_s']:7.1f} ms | check_sequence {1000 * med['check_s']:7.1f} ms"
              f" | sample_fields + Sample {1000 * med['sample_fields_s']:7.1f} ms | convert "
              f"{1000 * med['convert_s']:7.1f} ms")
        print(f"    total {med['total_s']:.3f} s" + (f" (= {total:.3f} s per 10,000 turns)" if scale != 1 else "")
              + f"   target <= {TARGET_S:.1f} s  {_common.verdict(ok)}")
        gc.disable()  # for reference: the share of Python's cyclic GC, which the caller may freeze
        try:
            no_gc = convert_all(trajectories, spec, rewards)["total_s"] * scale
        finally:
            gc.enable()
        print(f"    (with the cyclic GC disabled: {no_gc:.3f} s; the rest is GC passes over the new lists)")
        results[layout] = {k: round(v, 4) for k, v in med.items()} | {"per_10k_turns_s": round(total, 4),
                                                                      "no_gc_per_10k_turns_s": round(no_gc, 4),
                                                                      "passed": ok}
    results["passed"] = passed
    _common.finish(args.results_dir, NAME, results, passed, f"per_turn {results['per_turn']['per_10k_turns_s']:.3f} s, concat "
                                      f"{results['concat']['per_10k_turns_s']:.3f} s per 10,000 turns <= {TARGET_S} s")


if __name__ == "__main__":
    main()
