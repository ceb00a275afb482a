"""One run of `run_in_calls.sh` as the results file `bench/results/` keeps: every file its last call packed
(stage files, evaluations, table, comparison, curves, calls.log) and the figures the targets are read from,
computed here from those files, so that no published figure is worked out by hand.

    python examples/memagent/small_scale/publish.py RESULTS_DIR --out bench/results/memagent_small_scale_run13.json \\
        --when "2026-12-03 10:00-10:27 UTC (device clock)" --command "call 1: env ... BUDGET=535 ..." \\
        --device-seconds 1644 --changes-from 12 --changes "run 12's settings with RL_KL=0.01"

RESULTS_DIR is `results.tgz` of the run's last call, unpacked. What the figures mean: bench/README.md ("Run 12"
and the target rows); `tests/memagent/test_small_scale.py` re-derives them from a published file by plain
arithmetic.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pipeline as P

MACHINE = "one NVIDIA H200 (device machine), 16 cores"
REWARD_NOTE = "the rewarded share of each step's 256 rollouts at temperature 1.0 (the evaluation samples at 0.7)"
ARMS = {"untrained": "untrained", "warmstart": "warm start", "rl": "RL",
        "rl_permuted": "RL, permuted rewards (control)"}  # eval_<key>.json: the model's name in it
DRAW = {"rl_draw1": "RL, second draw"}  # a run with RL_DRAWS=2 has this arm too; the targets read "rl"


class Unpublishable(ValueError):
    """The results directory lacks what a published run needs; the message names the file and the fix."""


def _read(results: Path, name: str) -> Any:
    path = results / name
    if not path.is_file():
        raise Unpublishable(f"{path}: missing; unpack the results.tgz of the run's last call (the one that printed "
                            "'all stages done') into RESULTS_DIR")
    return path.read_text() if path.suffix in (".md", ".log") else json.loads(path.read_text())


def _kilo(lengths: list[int]) -> str:
    """A label for a span of lengths in tokens.

    >>> _kilo([8000, 16000, 32000]), _kilo([32000])
    ('8K-32K', '32K')
    """
    ks = [f"{n // 1000}K" for n in (min(lengths), max(lengths))]
    return ks[0] if ks[0] == ks[1] else f"{ks[0]}-{ks[1]}"


def audit_total(*stages: dict[str, Any]) -> dict[str, Any]:
    """The per-step `check_run` audits of the RL arms, summed (the largest |delta| of all)."""
    points = [point for stage in stages for point in stage["curve"]]
    unaudited = [f"{_arm(stage)} step {point['step']}" for stage in stages
                 for point in stage["curve"] if point.get("audit") is None]  # `rl --no-audit` writes None
    if not points or unaudited:
        raise Unpublishable(f"RL steps not audited ({', '.join(unaudited[:3]) or 'no step at all'}): every rollout "
                            "of a published run is checked before it is trained on; run RL without --no-audit")
    audits = [point["audit"] for point in points]
    total = {k: sum(a[k] for a in audits) for k in ("rollouts", "sequences", "rescored_tokens", "breaches")}
    return {**total, "max_abs_delta": max(a["max_abs_delta"] for a in audits),
            "over_threshold": sum(a["over_threshold"] for a in audits)}


def _arm(stage: dict[str, Any]) -> str:
    """An RL stage file's arm, as a refusal names it."""
    if stage["permuted"]:
        return "control"
    draw = stage["args"].get("draw", 0)  # stage files written before `rl --draw`: draw 0
    return f"RL draw {draw}" if draw else "RL"


def _second_draw(results: Path, evals: dict[str, Any], compare: dict[str, Any]) -> dict[str, Any]:
    """The second RL arm of a run with RL_DRAWS=2: its stage file, its evaluation, and its figures (against the
    warm start and its 32K share as `compare.json` reads them, and paired against the first arm at the training
    lengths)."""
    stage, evaluation = _read(results, "rl_draw1_stage.json"), _read(results, "eval_rl_draw1.json")
    if evaluation["name"] != DRAW["rl_draw1"]:
        raise Unpublishable(f"eval_rl_draw1.json: its model is {evaluation['name']!r}, not {DRAW['rl_draw1']!r}")
    if stage["args"].get("draw") != 1 or stage["permuted"]:
        raise Unpublishable("rl_draw1_stage.json is not RL's second draw (`rl --draw 1`, rewards not permuted)")
    row = compare["vs_base"][2]
    return {"rl_draw1_stage": stage, "eval_rl_draw1": evaluation,
            "second_draw": {"vs_warm_start": row["training_lengths"], "kept_at_8x": row["kept_at_8x"],
                            "vs_first_draw": P.paired(evals["rl"], evaluation, compare["train_lengths"])}}


def _kept_by_all(evals: dict[str, Any], field: str) -> bool:
    """Whether every evaluation's results keep `field` (False when none does: evaluations made before it was
    kept); a run whose evaluations keep it only in part is refused, naming the others."""
    kept = {k: all(field in r for r in e["results"]) for k, e in evals.items()}
    if any(kept.values()) and not all(kept.values()):
        lacking = ", ".join(f"eval_{k}.json" for k, has in kept.items() if not has)
        raise Unpublishable(f"{lacking}: no {field}, where the other evaluations keep them; evaluate that model again "
                            "with this reproduce.py (`reproduce.py eval`)")
    return all(kept.values())


def _memory_readings(evals: dict[str, Any], groups: dict[str, list[int]]) -> dict[str, Any]:
    """Per evaluation, the codes written before the needle was read and the held codes changed after it, by the
    kind of chunk read (`pipeline.needle_free_writes`, `pipeline.held_code_changes`; bench/README, "Chunk
    alignment") when the evaluations keep `flush_chunks`; and what their memories held (`pipeline.blank_memory`,
    `pipeline.held_code_returns`, `pipeline.answers_off_memory` for each group of `groups`' lengths, and
    `pipeline.digit_flips`; bench/README, "Confused digits") when they keep `memory_texts`. Runs 3-29's
    evaluations keep neither."""
    readings: dict[str, Any] = {}
    if _kept_by_all(evals, "flush_chunks"):
        readings["needle_free_writes"] = {k: P.needle_free_writes(e["results"]) for k, e in evals.items()}
        readings["held_code_changes"] = {k: P.held_code_changes(e["results"]) for k, e in evals.items()}
    if _kept_by_all(evals, "memory_texts"):
        readings["blank_memory"] = {k: P.blank_memory(e["results"]) for k, e in evals.items()}
        readings["held_code_returns"] = {k: P.held_code_returns(e["results"]) for k, e in evals.items()}
        readings["answers_off_memory"] = {k: {label: P.answers_off_memory(e["results"], lengths)
                                              for label, lengths in groups.items()} for k, e in evals.items()}
        readings["digit_flips"] = {k: P.digit_flips(e["results"]) for k, e in evals.items()}
    return readings


def _kept_at_8x(kept: float, trained: float, floor: float, figures: dict[str, Any]) -> dict[str, Any]:
    """The 8x target: RL's score at 8x the longest training length, kept at 0.8x or more of its score at the
    training lengths, which must itself reach `floor` (the warm start's `--stop-at`, the bottom of the band RL
    starts from): a ratio of two scores near 0 keeps nothing (run 30's RL read 8.3 % at 32K and 7.6 % at 1K-4K,
    1.09x), and is a miss, saying why (`under_floor`).

    >>> _kept_at_8x(1.09, 7.64, 30.0, {})
    {'under_floor': {'training_lengths_strict': 7.64, 'floor': 30.0}, 'passed': False}
    >>> _kept_at_8x(0.97, 68.75, 30.0, {})["passed"]
    True
    """
    if trained < floor:
        return {**figures, "under_floor": {"training_lengths_strict": trained, "floor": floor}, "passed": False}
    return {**figures, "passed": kept >= 0.8}


def _round_taken(stages: list[dict[str, Any]], base: dict[str, Any], names: list[str]) -> int:
    """The index of the warm start round RL started from: the one whose checkpoint `eval_warmstart.json` evaluated
    (a round after the first may begin from the untrained model, and RL start from an earlier one: run_in_calls.sh
    WS_ROUND_FROM=untrained)."""
    taken = [i for i, stage in enumerate(stages) if stage["args"]["out"] == base["ckpt"]]
    if len(taken) != 1:
        outs = ", ".join(f"{n}: {stage['args']['out']}" for n, stage in zip(names, stages))
        raise Unpublishable(f"eval_warmstart.json evaluated {base['ckpt']}, which is {len(taken)} of the warm start "
                            f"rounds' checkpoints ({outs}), not one; unpack one run's last call's results.tgz, whose "
                            "warm start evaluation is of the round RL started from")
    return taken[0]


def published(results: Path, *, when: str, command: str, device_seconds: int, changes_from: int, changes: str,
              failures: list[str], machine: str = MACHINE) -> dict[str, Any]:
    """The results file's contents (the keys of `bench/results/memagent_small_scale_run12.json`, and, when the warm
    start ran in more than one round, `warmstart_earlier_rounds` and `warmstart_later_rounds`: the rounds before
    and after the one RL started from, the one `eval_warmstart.json` evaluated)."""
    rounds = sorted(results.glob("warmstart*_stage.json"), key=lambda p: int(re.sub(r"\D", "", p.name) or 0))
    if not rounds:
        raise Unpublishable(f"{results}: no warmstart<k>_stage.json; unpack the last call's results.tgz there")
    rl, control = _read(results, "rl_stage.json"), _read(results, "rl_permuted_stage.json")
    evals = {k: _read(results, f"eval_{k}.json") for k in ARMS}
    for key, name in ARMS.items():
        if evals[key]["name"] != name:
            raise Unpublishable(f"eval_{key}.json: its model is {evals[key]['name']!r}, not {name!r}")
    compare = _read(results, "compare.json")
    compared = [compare["base"], *(row["name"] for row in compare["vs_base"])]
    drawn = (results / "rl_draw1_stage.json").exists()
    if compared != [ARMS["warmstart"], ARMS["rl"], ARMS["rl_permuted"], *([DRAW["rl_draw1"]] if drawn else [])]:
        raise Unpublishable(f"compare.json compares {compared}; the targets read RL and its control against the warm "
                            "start: run `reproduce.py compare eval_warmstart.json eval_rl.json eval_rl_permuted.json"
                            + (" eval_rl_draw1.json`" if drawn else "`"))
    train, far = compare["train_lengths"], compare["lengths_8x"]
    if not far:
        raise Unpublishable(f"compare.json: no evaluation length is 8x the longest training length {max(train)}, so "
                            "the 8x target cannot be read; evaluate at that length too (`model --eval-lengths`)")
    base = evals["warmstart"]
    every = sorted(int(k) for k in base["by_length"])
    longer = [n for n in every if n > max(train)]
    paired_more: dict[str, Any] = {
        label: {"RL": P.paired(base, evals["rl"], lengths), "control": P.paired(base, evals["rl_permuted"], lengths)}
        for label, lengths in ((_kilo(longer), longer), (_kilo(far), far), ("all", every))}
    paired_more[f"RL_vs_control_{_kilo(train)}"] = P.paired(evals["rl_permuted"], evals["rl"], train)
    second = _second_draw(results, evals, compare) if drawn else {}
    audit = audit_total(rl, control, *([second["rl_draw1_stage"]] if second else []))
    vs_rl, vs_control = compare["vs_base"][:2]
    after = f"after_{rl['seconds'] / 60:.1f}_min"
    untrained = P.pooled(evals["untrained"]["results"], train)
    stages = [json.loads(p.read_text()) for p in rounds]
    taken = _round_taken(stages, base, [p.name for p in rounds])
    warm_stage = stages[taken]
    warm_train = P.pooled(base["results"], train)
    warm_kept = round(P.pooled(base["results"], far) / warm_train, 2) if warm_train else None  # None: 0 at 1K-4K
    return {
        "when": when, "machine": machine, "command": command, "device_seconds": device_seconds,
        "calls_log": _read(results, "calls.log"), f"changes_from_run_{changes_from}": changes, "failures": failures,
        "warmstart_stage": warm_stage,  # the round RL started from; the others below
        **({"warmstart_earlier_rounds": stages[:taken]} if taken else {}),
        **({"warmstart_later_rounds": stages[taken + 1:]} if taken + 1 < len(stages) else {}),
        "rl_stage": rl, "rl_permuted_stage": control,
        **{f"eval_{k}": e for k, e in evals.items()},
        "table": _read(results, "table.md"), "compare_strict": compare, "audit": audit,
        "training_reward_at_t1": {
            **{arm: {"steps_0_4": P.mean3([p["reward_mean"] for p in s["curve"][:5]]),
                     "last_10": P.mean3([p["reward_mean"] for p in s["curve"][-10:]])}
               for arm, s in (("rl", rl), ("control", control))},
            "note": REWARD_NOTE},
        "paired_more": paired_more,
        **second,
        **_memory_readings({**evals, **({"rl_draw1": second["eval_rl_draw1"]} if second else {})},
                           {_kilo(train): train, _kilo(longer): longer}),
        "curves": _read(results, "curves.json"),
        "targets": {
            "rl_gain_points_ge_15": {after: vs_rl["training_lengths"]["gain_points"],
                                     "mcnemar_z": vs_rl["training_lengths"]["mcnemar_z"],
                                     "passed": vs_rl["training_lengths"]["gain_points"] >= 15},
            "keeps_80pct_at_8x": _kept_at_8x(vs_rl["kept_at_8x"], vs_rl["training_lengths"]["after"],
                                             warm_stage["args"]["stop_at"],
                                             {after: vs_rl["kept_at_8x"], "warm_start": warm_kept}),
            "control_within_noise": {after: vs_control["training_lengths"],
                                     "passed": abs(vs_control["training_lengths"]["mcnemar_z"]) < 1.96},
            "untrained_strict_near_0": {"strict": untrained, "passed": untrained == 0.0},
            "every_rollout_checked": {**audit, "passed": audit["breaches"] == 0}},
    }


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("results", type=Path, help="the unpacked results.tgz of the run's last call")
    cli.add_argument("--out", type=Path, required=True, help="bench/results/memagent_small_scale_run<N>.json")
    cli.add_argument("--when", required=True, help='e.g. "2026-12-02 14:56-15:23 UTC (device clock)"')
    cli.add_argument("--command", required=True, help="the calls' commands, as a user would repeat them")
    cli.add_argument("--device-seconds", type=int, required=True, help="device time the run used")
    cli.add_argument("--changes-from", type=int, required=True, help="the run this one changes")
    cli.add_argument("--changes", required=True, help="what changed from that run, and why")
    cli.add_argument("--failure", action="append", default=[], help="a call that failed, and what was done")
    cli.add_argument("--machine", default=MACHINE)
    args = cli.parse_args()
    try:
        data = published(args.results, when=args.when, command=args.command, device_seconds=args.device_seconds,
                         changes_from=args.changes_from, changes=args.changes, failures=args.failure,
                         machine=args.machine)
    except Unpublishable as refused:
        raise SystemExit(str(refused)) from None
    P.write_json(args.out, data)  # indented as bench/results keeps them (a diff per figure), whole or not at all
    for name, target in data["targets"].items():
        print(f"{name}: {'PASS' if target['passed'] else 'MISS'}")


if __name__ == "__main__":
    main()
