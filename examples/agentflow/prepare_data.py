"""AgentFlow data -> slime JSONL (keys input / label / metadata), from a local file or directory or a Hub id.

    # training rows: DAPO-Math-17K (the seed's training set), by Hugging Face id (network or HF cache) ...
    python examples/agentflow/prepare_data.py --source BytedTsinghua-SIA/DAPO-Math-17k --out data/agentflow/train.jsonl
    # ... or a local copy (JSON/JSONL/parquet file or a dataset directory)
    python examples/agentflow/prepare_data.py --source /data/dapo-math-17k.parquet --out data/agentflow/train.jsonl --dedup

    # evaluation: AIME 2024 (30 problems)
    python examples/agentflow/prepare_data.py --source HuggingFaceH4/aime_2024 --out data/agentflow/aime24.jsonl

Sources are read by `agentgraphs.dataset_io.load_rows` (`--split`, `--revision`, `--config`, `--data-files`;
ids and directories need `pip install 'agentgraphs[data]'`). A row's question is the first of `problem`,
`Problem`, `question`, `prompt` (a string or chat messages: the last user message), with DAPO's answer-format
wrapper ("Solve the following math problem step by step ... Answer: $Answer ...") removed, because
AgentFlow asks for <answer> tags itself. Its answer is the first of `answer`, `Answer`,
`reward_model.ground_truth`, `ground_truth`, `label`, `solution`. Output rows are
`{"input": question, "label": answer, "metadata": {"question": question, "id": ..., "source": ...}}`
(the judge reads the question from the row's prompt, `RewardInput["prompt"]`); `agentgraph: agentflow` reads them with the default keys.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from agentgraphs.dataset_io import load_located_rows
from agentgraphs.errors import AgentGraphsError, InputError

QUESTION_KEYS = ("problem", "Problem", "question", "prompt")
ANSWER_KEYS = ("answer", "Answer", "ground_truth", "label", "solution")
_DAPO_HEAD = "Solve the following math problem step by step."
_DAPO_TAIL = 'Remember to put your answer on its own line after "Answer:".'


def strip_dapo_wrapper(text: str) -> str:
    """The bare problem of a DAPO-Math-17K prompt (its answer-format head and tail removed).

    >>> strip_dapo_wrapper('Solve the following math problem step by step. The last line of your response '
    ...     'should be of the form Answer: $Answer (without quotes) where $Answer is the answer to the '
    ...     'problem.\\n\\nWhat is 1+1?\\n\\nRemember to put your answer on its own line after "Answer:".')
    'What is 1+1?'
    >>> strip_dapo_wrapper("What is 2+2?")
    'What is 2+2?'
    """
    body = text.strip()
    if body.startswith(_DAPO_HEAD):
        parts = body.split("\n\n", 1)
        body = parts[1] if len(parts) == 2 else body
    if body.endswith(_DAPO_TAIL):
        body = body[: -len(_DAPO_TAIL)]
    return body.strip()


def _question(obj: Mapping[str, Any]) -> str | None:
    for key in QUESTION_KEYS:
        value = obj.get(key)
        if isinstance(value, list):  # chat messages
            users = [m.get("content") for m in value if isinstance(m, Mapping) and m.get("role") == "user"]
            value = users[-1] if users else None
        if isinstance(value, str) and value.strip():
            return strip_dapo_wrapper(value)
    return None


def _answer(obj: Mapping[str, Any]) -> str | None:
    reward_model = obj.get("reward_model")
    if isinstance(reward_model, Mapping) and reward_model.get("ground_truth") not in (None, ""):
        return str(reward_model["ground_truth"]).strip()
    for key in ANSWER_KEYS:
        value = obj.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def to_row(obj: Any, where: str, source: str) -> dict[str, Any]:
    """One slime row; InputError naming the row and the missing field otherwise.

    >>> to_row({"problem": "What is 6*7?", "answer": 42, "id": 3}, "f.jsonl:1", "f")["label"]
    '42'
    """
    if not isinstance(obj, Mapping):
        raise InputError(where, f"expected a JSON object, got {type(obj).__name__}", "fix or drop this row")
    question = _question(obj)
    if question is None:
        raise InputError(f"{where}: question", f"none of {list(QUESTION_KEYS)} holds a non-empty question",
                         "rename the question's field or drop the row")
    answer = _answer(obj)
    if answer is None:
        raise InputError(f"{where}: answer", f"none of {['reward_model.ground_truth', *ANSWER_KEYS]} holds an answer",
                         "rename the answer's field or drop the row")
    ident = obj.get("id", obj.get("ID", obj.get("extra_info", {}).get("index") if isinstance(obj.get("extra_info"),
                                                                                               Mapping) else None))
    return {"input": question, "label": answer,
            "metadata": {"question": question, "id": ident if ident is not None else where, "source": source}}


def rows(source: str, *, dedup: bool = False, limit: int | None = None, **selection: Any) -> Iterator[dict[str, Any]]:
    seen: set[str] = set()
    count = 0
    for obj, where in load_located_rows(source, **selection):
        row = to_row(obj, where, source)
        if dedup:
            if row["input"] in seen:
                continue
            seen.add(row["input"])
        yield row
        count += 1
        if limit is not None and count >= limit:
            return


def write_jsonl(items: Iterable[dict[str, Any]], path: Path) -> int:
    """All rows or nothing: a bad row leaves no half-written file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for item in items:
                fh.write(json.dumps(item, ensure_ascii=False) + "\n")
                n += 1
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", required=True, help="a .jsonl/.json/.parquet file, a dataset directory or a Hub id")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--revision", default=None)
    p.add_argument("--config", default=None)
    p.add_argument("--data-files", nargs="*", default=None)
    p.add_argument("--dedup", action="store_true", help="drop repeated questions (DAPO-Math-17K repeats each one)")
    p.add_argument("--limit", type=int, default=None)
    args = p.parse_args(argv)
    selection = {"split": args.split, "revision": args.revision, "config": args.config}
    if args.data_files:
        selection["data_files"] = args.data_files
    try:
        n = write_jsonl(rows(args.source, dedup=args.dedup, limit=args.limit, **selection), args.out)
    except AgentGraphsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {n} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
