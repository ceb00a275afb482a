"""AgentFlow data -> slime JSONL (keys input / label / metadata), from a local file or directory or a Hub id.

    # training rows: DAPO-Math-17K (the seed's training set), by Hugging Face id (network or HF cache) ...
    python examples/agentflow/prepare_data.py --source BytedTsinghua-SIA/DAPO-Math-17k --out data/agentflow/train.jsonl
    # ... or a local copy (JSON/JSONL/parquet file or a dataset directory)
    python examples/agentflow/prepare_data.py --source /data/dapo-math-17k.parquet --out data/agentflow/train.jsonl --dedup

    # evaluation: AIME 2024 (30 problems)
    python examples/agentflow/prepare_data.py --source HuggingFaceH4/aime_2024 --out data/agentflow/aime24.jsonl

Rows are read and converted by `agentgraphs.agentflow.data` (which fields hold the question and the answer,
the DAPO wrapper it removes; `--split`, `--revision`, `--config`, `--data-files` select inside a directory or
Hub dataset; ids and directories need `pip install 'agentgraphs[data]'`) and written, all or nothing, by
`agentgraphs.dataset_io.write_jsonl`. `agentgraph: agentflow` reads them with the default keys.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentgraphs.agentflow.data import slime_rows
from agentgraphs.dataset_io import write_jsonl
from agentgraphs.errors import AgentGraphsError


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
        n = write_jsonl(slime_rows(args.source, dedup=args.dedup, limit=args.limit, **selection), args.out)
    except AgentGraphsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {n} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
