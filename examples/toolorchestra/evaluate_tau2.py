"""Evaluate a ToolOrchestra orchestrator on the real tau^2-bench and print pass^1 per domain.

    # the trained orchestrator, a user simulator and two experts, each on its own SGLang server
    python examples/toolorchestra/evaluate_tau2.py --domains airline retail telecom \
        --engine sglang:http://127.0.0.1:30000 --tokenizer /models/Orchestrator-8B \
        --user sglang:http://127.0.0.1:30001 --user-tokenizer /models/Qwen3-32B \
        --expert expert-1=sglang:http://127.0.0.1:30002 --expert-tokenizer /models/Qwen3-32B \
        --concurrency 32 --out out/tau2

    # RL training rows for slime: tau^2's train split of airline and retail
    python examples/toolorchestra/evaluate_tau2.py --domains airline retail --split train \
        --write-rows data/tau2/train.jsonl

    # a smoke run on the embedded tiny model (random weights: expect 0.0)
    python examples/toolorchestra/evaluate_tau2.py --domains mock --engine hf:tiny --user hf:tiny \
        --limit 2 --max-steps 6 --max-new-tokens 16

Every task of each domain runs through the `toolorchestra-tau2` graph in evaluation mode (nothing
trainable, up to 200 steps unless --max-steps), and tau^2's own evaluator scores the conversation.
pass^1 is tau^2's: the share of tasks whose reward is 1 (one trial per task). Per domain,
OUT/<domain>.jsonl holds one line per task (reward, breakdown, how the episode ended) and
OUT/summary.json the table's numbers. Needs the tau2 extra: pip install 'agentgraphs[tau2]'.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from agentgraphs.context import AgentContext, shared_engine, shared_tokenizer
from agentgraphs.records import Rollout
from agentgraphs.rollout import rollout_input, run_rollout

DEFAULT_DOMAINS = ("airline", "retail", "telecom")


def pass_at_1(rewards: Sequence[float]) -> float:
    """tau^2's pass^1: the share of tasks solved (reward 1 within 1e-6), one trial each.

    >>> pass_at_1([1.0, 0.0, 1.0, 0.9999999])
    0.75
    >>> pass_at_1([])
    0.0
    """
    if not rewards:
        return 0.0
    return sum(1 for r in rewards if abs(r - 1.0) <= 1e-6) / len(rewards)


def table(results: dict[str, dict[str, Any]]) -> str:
    """The per-domain table that the script prints.

    >>> print(table({"airline": {"tasks": 50, "pass^1": 0.5, "failed": 1, "terminations": {"user_stop": 49}}}))
    | domain | tasks | pass^1 | failed | terminations |
    |---|---|---|---|---|
    | airline | 50 | 0.500 | 1 | user_stop=49 |
    """
    lines = ["| domain | tasks | pass^1 | failed | terminations |", "|---|---|---|---|---|"]
    for domain, r in results.items():
        ends = " ".join(f"{k}={v}" for k, v in sorted(r["terminations"].items()))
        lines.append(f"| {domain} | {r['tasks']} | {r['pass^1']:.3f} | {r['failed']} | {ends} |")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--domains", nargs="+", default=list(DEFAULT_DOMAINS), help="tau^2 domains to run")
    p.add_argument("--engine", help="the orchestrator: hf:DIR, hf:tiny or sglang:URL")
    p.add_argument("--tokenizer", help="the orchestrator's tokenizer (HF dir); default: the engine's own")
    p.add_argument("--user", help="the user simulator's engine (never trained)")
    p.add_argument("--user-tokenizer", help="the user simulator's tokenizer; default: its engine's, else --tokenizer")
    p.add_argument("--expert", action="append", default=[], metavar="NAME=ENGINE",
                   help="an expert call_expert may name (repeatable)")
    p.add_argument("--expert-tokenizer", help="the experts' tokenizer; default: each engine's, else --tokenizer")
    p.add_argument("--split", help="tau^2's task split per domain (test, train; default: every task, as tau^2)")
    p.add_argument("--limit", type=int, help="first N tasks per domain")
    p.add_argument("--write-rows", type=Path, metavar="JSONL",
                   help="only write the selected tasks as dataset rows (e.g. --split train for slime) and exit")
    p.add_argument("--max-steps", type=int, help="override the evaluation step cap (200)")
    p.add_argument("--max-new-tokens", type=int, default=4096)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--out", type=Path, help="directory for per-task results and summary.json")
    args = p.parse_args(argv)
    if not args.write_rows and not (args.engine and args.user):
        p.error("--engine and --user are required (unless --write-rows)")
    return args


def make_context(args: argparse.Namespace) -> AgentContext:
    """One context for every rollout: policy, user simulator and experts, each with its tokenizer."""
    policy = shared_engine(args.engine)
    base_tok = shared_tokenizer(args.tokenizer) if args.tokenizer else getattr(policy, "tokenizer", None)
    engines: dict[str, Any] = {"user": shared_engine(args.user)}
    for item in args.expert:
        name, sep, spec = item.partition("=")
        if not sep or not name or not spec or name in ("user", "policy"):
            raise SystemExit(f"--expert {item!r}: expected NAME=ENGINE with NAME other than user/policy")
        engines[name] = shared_engine(spec)
    tokenizers = {}
    for name, engine in engines.items():
        given = args.user_tokenizer if name == "user" else args.expert_tokenizer
        tok = shared_tokenizer(given) if given else getattr(engine, "tokenizer", None) or base_tok
        tokenizers[name] = tok
    return AgentContext(policy=policy, tokenizer=base_tok, engines=engines, tokenizers=tokenizers,
                        sampling={"temperature": args.temperature, "max_new_tokens": args.max_new_tokens},
                        evaluation=True)


async def evaluate_domain(domain: str, ctx: AgentContext, args: argparse.Namespace) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Every task of `domain` (or the first --limit), at most --concurrency at a time; results in task order."""
    from agentgraphs.toolorchestra.tau2 import SPEC

    rows = selected_rows(domain, args)
    options = {"eval_max_steps": args.max_steps} if args.max_steps else None
    gate = asyncio.Semaphore(max(1, args.concurrency))

    async def one(i: int, row: dict[str, Any]) -> Rollout:
        async with gate:
            return await run_rollout(SPEC, rollout_input(row["input"], metadata=row["metadata"], index=i), ctx,
                                     options=options)

    rollouts = await asyncio.gather(*(one(i, r) for i, r in enumerate(rows)))
    per_task = [task_result(row["input"], r) for row, r in zip(rows, rollouts)]
    terminations: dict[str, int] = {}
    for r in per_task:
        key = str(r["termination"] or r["status"])
        terminations[key] = terminations.get(key, 0) + 1
    summary = {"tasks": len(per_task), "pass^1": pass_at_1([r["reward"] for r in per_task]),
               "failed": sum(r["status"] == "failed" for r in per_task), "terminations": terminations}
    return summary, per_task


def selected_rows(domain: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    from agentgraphs.toolorchestra.tau2 import task_rows

    rows = task_rows(domain, split=args.split)
    return rows[: args.limit] if args.limit else rows


def task_result(task_id: str, rollout: Rollout) -> dict[str, Any]:
    """One task's line: tau^2's reward and breakdown, how the episode ended; a failed rollout scores 0."""
    reward = rollout.reward if isinstance(rollout.reward, dict) else {"reward": 0.0}
    return {"task_id": task_id, "status": rollout.status, **reward,
            "termination": rollout.summary.get("termination"), "steps": rollout.summary.get("steps"),
            "expert_calls": rollout.summary.get("expert_calls"), "reason": rollout.reason}


async def run_all(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    ctx = make_context(args)  # inside the loop: HTTP engines bind to the loop that uses them
    results: dict[str, dict[str, Any]] = {}
    for domain in args.domains:
        summary, per_task = await evaluate_domain(domain, ctx, args)
        results[domain] = summary
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            with open(args.out / f"{domain}.jsonl", "w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r) + "\n" for r in per_task)
        print(f"{domain}: pass^1 = {summary['pass^1']:.3f} over {summary['tasks']} tasks", flush=True)
    return results


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    args = parse_args(argv)
    if args.write_rows:
        rows = [r for domain in args.domains for r in selected_rows(domain, args)]
        args.write_rows.parent.mkdir(parents=True, exist_ok=True)
        args.write_rows.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        print(f"wrote {len(rows)} rows to {args.write_rows}")
        return {}
    results = asyncio.run(run_all(args))
    print(table(results))
    if args.out:
        (args.out / "summary.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    from agentgraphs.errors import ConfigError

    try:
        main(sys.argv[1:])
    except ConfigError as exc:
        sys.exit(f"error: {exc}")
