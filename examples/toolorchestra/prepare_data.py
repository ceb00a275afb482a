"""Data for ToolOrchestra (QA mode): slime rows from FlashRAG-style QA files, or a synthetic smoke set.

    # QA rows: {"question": ..., "golden_answers": [...]} (NQ, HotpotQA, ... as FlashRAG / Search-R1 ship
    # them; a file, a dataset directory or a Hub id) -> {"input", "label", "metadata"} rows for slime
    python examples/toolorchestra/prepare_data.py --qa nq_train.jsonl hotpotqa_train.jsonl --out train.jsonl

    # a self-contained smoke set: a corpus with planted facts + questions about them
    python examples/toolorchestra/prepare_data.py --synthetic 200 --out-dir /tmp/to_smoke
    agentgraphs retrieval index /tmp/to_smoke/corpus.jsonl --out /tmp/to_smoke/index

Rows are read and converted by `agentgraphs.toolorchestra.data` and written by
`agentgraphs.dataset_io.write_jsonl`. The retrieval corpus itself (wiki-18: {"id", "contents"} per line)
needs no conversion: `agentgraphs retrieval index wiki-18.jsonl --out INDEX [--dense]`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentgraphs.dataset_io import write_jsonl
from agentgraphs.retrieval.corpus import write_passages
from agentgraphs.toolorchestra.data import read_qa, synthetic_set


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--qa", nargs="*", default=[], help="FlashRAG-style QA sources: JSONL/JSON/parquet files, "
                   "dataset directories or Hugging Face ids (agentgraphs.dataset_io.load_rows)")
    p.add_argument("--split", default="train", help="split of a dataset directory or Hub id")
    p.add_argument("--out", type=Path, help="slime rows (JSONL) from --qa")
    p.add_argument("--limit", type=int, default=None, help="at most this many rows")
    p.add_argument("--synthetic", type=int, default=0, help="N planted-fact questions + corpus into --out-dir")
    p.add_argument("--out-dir", type=Path, help="where --synthetic writes corpus.jsonl and questions.jsonl")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.synthetic:
        if args.out_dir is None:
            p.error("--synthetic needs --out-dir")
        passages, rows = synthetic_set(args.synthetic, args.seed)
        args.out_dir.mkdir(parents=True, exist_ok=True)
        write_passages(passages, args.out_dir / "corpus.jsonl")  # type: ignore[arg-type]
        write_jsonl(rows, args.out_dir / "questions.jsonl")
        print(f"{len(passages)} passages -> {args.out_dir / 'corpus.jsonl'}; {len(rows)} questions -> "
              f"{args.out_dir / 'questions.jsonl'}")
    if args.qa:
        if args.out is None:
            p.error("--qa needs --out")
        rows = [row for source in args.qa for row in read_qa(source, args.split)][: args.limit]
        write_jsonl(rows, args.out)
        print(f"{len(rows)} rows -> {args.out}")
    if not args.synthetic and not args.qa:
        p.error("nothing to do: give --qa FILES --out OUT and/or --synthetic N --out-dir DIR")


if __name__ == "__main__":
    main()
