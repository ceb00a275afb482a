"""Evaluate AgentFlow on AIME 2024 and print the seed's table: accuracy over n samples per problem.

    # planner (query analysis and steps) = the trained checkpoint on one SGLang server, helpers (commands,
    # verifier, final output, base_generator, and the judge) = the fixed Qwen2.5-7B-Instruct on another,
    # python_coder's code = the fixed Qwen2.5-Coder-7B-Instruct on a third, as in training (and the seed's eval)
    python examples/agentflow/evaluate.py data/agentflow/aime24.jsonl \
        --engine sglang:http://127.0.0.1:30000 --tokenizer /root/AgentFlow-7B \
        --helper helper=sglang:http://127.0.0.1:30001 --helper judge=sglang:http://127.0.0.1:30001 \
        --helper coder=sglang:http://127.0.0.1:30002 -o 'tool_engines={"python_coder": "coder"}' \
        --n-samples 10 --out out/aime24

    # the judge decides answers the boxed rule does not match exactly; without a judge engine the run is
    # refused: give one (--helper judge=SPEC) or score by the boxed rule alone (-o judge=null)
    # the AgentFlow paper's setup instead of the seed's: add -o variant=original

Every row runs `--n-samples` times through `agentgraphs.batch.run_file("agentflow", ..., evaluation=True)`
(nothing trainable; `eval_max_steps` applies) with the seed's evaluation sampling: temperature 0.7, top-p
0.95, 10 samples per problem (Takenzz/AgentFlow@4b5aa84 agentic/agentflow/eval_all_checkpoints.sh:26,
122-123; pass --temperature 0 for greedy). A sample is correct when its reward
is 1.0: with `variant: seed` (the default) the seed's rule (the <answer>'s last \\boxed{} or line rule,
normalised, equal to the label), else the judge; with `-o variant=original` the judge (with `-o judge=null`:
math-verify).
The table reports the mean accuracy over all samples (avg@n: the seed's avg_score) and the best run's
(sample k of every problem is run k; best run = the highest run accuracy: the seed's best_score, max over
its NUM_RUNS runs, eval_all_checkpoints.sh:198, which its README's 30.0% is), plus pass@n (a problem
solved by any sample) and maj@n (the most frequent answer is right), and how many samples failed or were
aborted (no verdict: counted as wrong, and a warning names the file with their reasons). Under the table a
line says how the judge sampled (`judge_note`): the seed's judge samples (SGLang's defaults, temperature 1.0),
so a rerun can score the same answer differently.
OUT holds samples.jsonl, traces.jsonl, summary.json and aime_table.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

_SCORED = ("completed", "truncated")


def scores(samples: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """avg@n, best run, pass@n and maj@n (in %) from slime samples (reward 1.0 = correct), grouped by problem
    (`group_index`: the n samples of one row; the k-th by `index` is run k). A tie in the majority vote goes to
    the answer seen first.
    A sample that failed or was aborted has no verdict: it counts as wrong, and `unscored` says how many.

    >>> s = [{"group_index": 0, "reward": 1.0, "metadata": {"answer": "42"}},
    ...      {"group_index": 0, "reward": 0.0, "metadata": {"answer": "41"}},
    ...      {"group_index": 1, "reward": 0.0, "metadata": {"answer": "7"}},
    ...      {"group_index": 1, "reward": 0.0, "metadata": {"answer": "7"}}]
    >>> scores(s)
    {'problems': 2, 'samples': 4, 'avg@n': 25.0, 'best_run': 50.0, 'pass@n': 50.0, 'maj@n': 50.0, 'unscored': 0}
    """
    by_row: dict[Any, list[tuple[float, str]]] = defaultdict(list)
    runs: dict[Any, list[tuple[int, float]]] = defaultdict(list)  # problem -> (index, correct)
    unscored = 0
    for sample in samples:
        reward = sample.get("reward")
        scored = sample.get("status", "completed") in _SCORED and isinstance(reward, (int, float))
        unscored += not scored
        correct = float(reward) if scored else 0.0  # type: ignore[arg-type]
        answer = str((sample.get("metadata") or {}).get("answer", ""))
        problem = sample.get("group_index", sample.get("index"))
        by_row[problem].append((correct, answer))
        index = sample.get("index")
        runs[problem].append((index if isinstance(index, int) else len(runs[problem]), correct))
    if not by_row:
        return {"problems": 0, "samples": 0, "avg@n": 0.0, "best_run": 0.0, "pass@n": 0.0, "maj@n": 0.0,
                "unscored": 0}
    per_run: dict[int, list[float]] = defaultdict(list)  # run k -> the k-th sample of every problem
    for samples_of_problem in runs.values():
        for k, (_, correct) in enumerate(sorted(samples_of_problem, key=lambda x: x[0])):
            per_run[k].append(correct)
    best = max(sum(v) / len(v) for v in per_run.values())
    n_samples = sum(len(v) for v in by_row.values())
    avg = sum(c for v in by_row.values() for c, _ in v) / n_samples
    passed = sum(1 for v in by_row.values() if any(c == 1.0 for c, _ in v)) / len(by_row)
    maj = 0
    for v in by_row.values():
        votes = Counter(a for _, a in v if a)
        if votes:
            top = votes.most_common(1)[0][0]
            maj += any(c == 1.0 for c, a in v if a == top)
    return {"problems": len(by_row), "samples": n_samples, "avg@n": round(100 * avg, 2),
            "best_run": round(100 * best, 2), "pass@n": round(100 * passed, 2),
            "maj@n": round(100 * maj / len(by_row), 2), "unscored": unscored}


def aime_table(rows: Sequence[tuple[str, Mapping[str, float]]], n: int) -> str:
    """The markdown table: one line per model; `unscored` samples (failed, aborted) are counted as wrong.

    >>> print(aime_table([("AgentFlow", {"problems": 30, "avg@n": 30.0, "best_run": 36.67, "pass@n": 40.0,
    ...                                  "maj@n": 33.33, "unscored": 0})], 8))
    | model | AIME 2024 acc (avg@8) | best of 8 runs | pass@8 | maj@8 | problems | unscored (counted wrong) |
    |---|---|---|---|---|---|---|
    | AgentFlow | 30.0 | 36.67 | 40.0 | 33.33 | 30 | 0 |
    """
    lines = [f"| model | AIME 2024 acc (avg@{n}) | best of {n} runs | pass@{n} | maj@{n} | problems | "
             "unscored (counted wrong) |", "|---|---|---|---|---|---|---|"]
    for model, s in rows:
        lines.append(f"| {model} | {s['avg@n']} | {s['best_run']} | {s['pass@n']} | {s['maj@n']} | "
                     f"{int(s['problems'])} | {int(s['unscored'])} |")
    return "\n".join(lines)


def judge_note(options: Any) -> str:
    """How the run's judge decided (resolved AgentFlow options): which engine, and whether it sampled.

    >>> from agentgraphs.agentflow import SPEC
    >>> judge_note(SPEC.resolve_options({"variant": "original"}))
    "judge: engine 'judge', greedy (temperature 0)"
    """
    if options.judge is None:
        return "judge: none (judge: null), the rule alone decides"
    if options.judge_sampling == "greedy":
        return f"judge: engine {options.judge!r}, greedy (temperature 0)"
    return (f"judge: engine {options.judge!r}, SAMPLED with SGLang's defaults (temperature 1.0, top-p 1.0), as the "
            "seed's judge: a verdict can change between runs (judge_sampling: greedy to fix it)")


def main(argv: Sequence[str] | None = None) -> int:
    from agentgraphs.agentflow import SPEC
    from agentgraphs.batch import run_file
    from agentgraphs.cli import parse_helpers
    from agentgraphs.errors import AgentGraphsError

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data", type=Path, help="AIME rows from prepare_data.py")
    p.add_argument("--engine", required=True, help="the planner: sglang:URL or hf:DIR")
    p.add_argument("--tokenizer", default=None, help="the planner's HF directory (needed for sglang:)")
    p.add_argument("--helper", action="append", default=[], help="NAME=SPEC (helper, coder, judge), repeatable")
    p.add_argument("--n-samples", type=int, default=10, help="samples (runs) per problem (the seed's: 10)")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--top-p", type=float, default=0.95, help="the seed's evaluation top-p")
    p.add_argument("--max-new-tokens", type=int, default=4096, help="cap of every call (the seed's: 4096)")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--model-name", default="AgentFlow")
    p.add_argument("-o", "--option", action="append", default=[], help="agent option KEY=VALUE")
    p.add_argument("--out", type=Path, default=Path("out/aime24"))
    args = p.parse_args(argv)
    from agentgraphs.cli import parse_options

    try:
        note = judge_note(SPEC.resolve_options(parse_options(args.option)))
        summary = run_file("agentflow", args.data, args.engine, args.out, tokenizer=args.tokenizer,
                           options=parse_options(args.option), engines=parse_helpers(args.helper),
                           concurrency=args.concurrency, n_samples=args.n_samples, temperature=args.temperature,
                           top_p=args.top_p, max_new_tokens=args.max_new_tokens, evaluation=True)
    except AgentGraphsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with open(args.out / "samples.jsonl", encoding="utf-8") as fh:
        result = scores(json.loads(line) for line in fh if line.strip())
    table = aime_table([(args.model_name, result)], args.n_samples)
    (args.out / "aime_table.md").write_text(f"{table}\n\n{note}\n", encoding="utf-8")
    print(table)
    print(note)
    print(f"by status: {summary.get('by_status')}")
    if result["unscored"]:
        print(f"warning: {result['unscored']} of {result['samples']} samples failed or were aborted and count as "
              f"wrong above; {args.out / 'samples.jsonl'} has each one's metadata.status_reason", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
