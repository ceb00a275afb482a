"""MemAgent data -> slime JSONL (keys input / label / metadata), from a local file or directory or a Hub id.

    # training rows: HotpotQA in MemAgent's format, by Hugging Face id (needs network or the HF cache) ...
    python examples/memagent/prepare_data.py --hotpotqa BytedTsinghua-SIA/hotpotqa --split train \
        --out data/memagent/train.jsonl
    # ... or from a local copy: a JSON/JSONL/parquet file, or a dataset directory (save_to_disk or files)
    python examples/memagent/prepare_data.py --hotpotqa /data/hotpotqa/train.parquet --out data/memagent/train.jsonl

    # evaluation: RULER-HQA files (MemAgent's eval_{n_docs}.json, n_docs 50 = 7K tokens ... 3200 = 448K)
    python examples/memagent/prepare_data.py --ruler /data/ruler_hqa/eval_*.json --out-dir data/memagent/ruler
    # the same files inside a Hub dataset repository: one output file per data file
    python examples/memagent/prepare_data.py --ruler BytedTsinghua-SIA/hotpotqa \
        --data-files eval_50.json eval_100.json --out-dir data/memagent/ruler

    # a synthetic needle-in-filler set (no data at all; needs the policy's tokenizer to size documents)
    python examples/memagent/prepare_data.py --synthetic 7K,14K,28K --tokenizer /root/Qwen2.5-7B-Instruct \
        --per-length 16 --out-dir data/memagent/synthetic

Rows are read and converted by `agentgraphs.memagent.data` (through `agentgraphs.dataset_io.load_rows`:
`--split`, `--revision`, `--config`, `--data-files` select inside a directory or Hub dataset; ids and
directories need `pip install 'agentgraphs[data]'`) and written by `agentgraphs.dataset_io.write_jsonl`.
Every output row is `{"input": question, "label": [answers], "metadata": {"context": document, "length",
"id"}}`, which `agentgraph: memagent` reads with `--input-key input --label-key label --metadata-key metadata`.
The RULER and synthetic modes write one file per length and print the matching `--eval-prompt-data` flag.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TypedDict

from agentgraphs.dataset_io import write_jsonl
from agentgraphs.errors import AgentGraphsError, ConfigError
from agentgraphs.memagent.data import MemAgentRow, read_hotpotqa, read_ruler_hqa, to_slime_row

# MemAgent names RULER-HQA files by their number of documents; the paper reports them in tokens.
RULER_DOCS_TO_LENGTH: dict[int, str] = {
    50: "7K", 100: "14K", 200: "28K", 400: "56K", 800: "112K", 1600: "224K", 3200: "448K", 6400: "896K",
}


def length_label(n_tokens: int) -> str:
    """7000 -> '7K', 7168 -> '7K', 1500 -> '1500'.

    >>> [length_label(n) for n in (7000, 7168, 448000, 1500)]
    ['7K', '7K', '448K', '1500']
    """
    for unit in (1000, 1024):
        if n_tokens >= unit and n_tokens % unit == 0:
            return f"{n_tokens // unit}K"
    return str(n_tokens)


def parse_lengths(text: str) -> list[int]:
    """'7K,14K,2000' -> [7000, 14000, 2000] (K = 1000 tokens).

    >>> parse_lengths("7K, 14k,2000")
    [7000, 14000, 2000]
    """
    out = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)([kK]?)", part)
        if not m:
            raise argparse.ArgumentTypeError(f"bad length {part!r}: use integers or nK, e.g. 7K,14K,28K")
        out.append(int(m.group(1)) * (1000 if m.group(2) else 1))
    return out


def ruler_label(path: Path, lengths: Iterable[int | None] = ()) -> str:
    """The length bucket of a RULER-HQA file: from MemAgent's eval_{n_docs} name, else its rows' length.

    >>> ruler_label(Path("eval_50.json")), ruler_label(Path("x.jsonl"), [14000, 14000]), ruler_label(Path("y.json"))
    ('7K', '14K', 'y')
    """
    m = re.fullmatch(r"eval_(\d+)", path.stem)
    if m and int(m.group(1)) in RULER_DOCS_TO_LENGTH:
        return RULER_DOCS_TO_LENGTH[int(m.group(1))]
    distinct = set(lengths)
    if len(distinct) == 1 and isinstance(n := next(iter(distinct)), int):
        return length_label(n)
    return path.stem


class Selection(TypedDict, total=False):
    """Where to read inside a source: `agentgraphs.dataset_io.load_rows`' keyword arguments."""

    split: str
    revision: str | None
    config: str | None
    data_files: str | list[str] | None


def _limited(rows: Iterable[MemAgentRow], limit: int | None) -> Iterator[MemAgentRow]:
    if limit is not None and limit < 1:  # it wrote an empty file and exited 0
        raise ConfigError(f"--limit {limit}: must be at least 1 (rows per input); drop it to convert them all")
    for i, row in enumerate(rows):
        if limit is not None and i >= limit:
            return
        yield row


def _write(rows: Iterable[MemAgentRow], path: Path) -> int:
    """slime rows to `path`, all or nothing: a bad input row leaves no half-written file behind."""
    return write_jsonl((to_slime_row(r) for r in rows), path)


def convert_hotpotqa(src: str | Path, out: Path, *, limit: int | None = None,
                     selection: Selection | None = None) -> int:
    """HotpotQA training rows -> slime JSONL; returns the number of rows written."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return _write(_limited(read_hotpotqa(str(src), **(selection or {})), limit), out)


def ruler_inputs(sources: Sequence[str | Path], selection: Selection | None = None) -> list[tuple[str, Selection]]:
    """One (source, selection) per RULER length: each source, or each of `data_files` inside one source.

    >>> ruler_inputs(["a.json", "b.json"])
    [('a.json', {}), ('b.json', {})]
    >>> ruler_inputs(["org/ds"], {"split": "train", "data_files": ["eval_50.json", "eval_100.json"]})
    [('org/ds', {'split': 'train', 'data_files': 'eval_50.json'}), ('org/ds', {'split': 'train', 'data_files': 'eval_100.json'})]
    """
    selection = dict(selection or {})
    files = selection.pop("data_files", None)
    if files is None:
        return [(str(src), Selection(**selection)) for src in sources]  # type: ignore[typeddict-item]
    if len(sources) != 1:
        raise ConfigError("--data-files selects the length files inside ONE source: give one --ruler SOURCE "
                          "with --data-files, or several sources without it")
    names = [files] if isinstance(files, str) else list(files)
    return [(str(sources[0]), Selection(**selection, data_files=name)) for name in names]  # type: ignore[typeddict-item]


def convert_ruler(sources: Sequence[str | Path], out_dir: Path, *, limit: int | None = None,
                  selection: Selection | None = None) -> dict[str, Path]:
    """RULER-HQA sources -> out_dir/ruler_hqa_{length}.jsonl; returns {dataset name: path}, in input order.

    Rows are streamed (a 448K-token file is hundreds of MB); the name is settled once all are read: from
    MemAgent's eval_{n_docs} file name (the data file's, when `data_files` picks one), else the rows' length.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for src, picked in ruler_inputs(sources, selection):
        lengths: set[int | None] = set()

        def rows(src: str = src, picked: Selection = picked) -> Iterator[MemAgentRow]:
            for row in _limited(read_ruler_hqa(src, **picked), limit):
                lengths.add(row["length"])
                yield row

        named_by = Path(str(picked.get("data_files") or src))
        staged = out_dir / f".{named_by.name}.converted"
        _write(rows(), staged)
        name = f"ruler_hqa_{ruler_label(named_by, lengths)}"
        if name in written:
            staged.unlink()
            raise SystemExit(f"{named_by}: a second file for {name}; give each length one file")
        written[name] = out_dir / f"{name}.jsonl"
        staged.replace(written[name])
    return written


def make_synthetic(lengths: Sequence[int], tokenizer_dir: str, out_dir: Path, *, per_length: int,
                   seed: int) -> dict[str, Path]:
    """Needle-in-filler questions sized with the policy's tokenizer -> out_dir/synthetic_{length}.jsonl."""
    from agentgraphs.memagent.synthetic import make_dataset
    from agentgraphs.tokenizer_loading import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for n in lengths:
        name = f"synthetic_{length_label(n)}"
        written[name] = out_dir / f"{name}.jsonl"
        _write(make_dataset(tokenizer, [n], per_length=per_length, seed=seed), written[name])
    return written


def eval_prompt_data_flag(written: dict[str, Path]) -> str:
    """The slime flag for these files: `--eval-prompt-data name path name path ...`."""
    return "--eval-prompt-data " + " ".join(f"{name} {path}" for name, path in written.items())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--hotpotqa", metavar="SOURCE",
                      help="HotpotQA training data: a JSON/JSONL/parquet file, a dataset directory or a Hub id")
    mode.add_argument("--ruler", nargs="+", metavar="SOURCE",
                      help="RULER-HQA eval data, one source per length (files, dataset directories or Hub ids)")
    mode.add_argument("--synthetic", type=parse_lengths, metavar="LENGTHS",
                      help="comma-separated document lengths in tokens, e.g. 7K,14K,28K")
    p.add_argument("--out", type=Path, help="output JSONL (--hotpotqa)")
    p.add_argument("--out-dir", type=Path, help="output directory (--ruler, --synthetic)")
    p.add_argument("--limit", type=int, default=None, help="only the first N rows of each input file")
    p.add_argument("--tokenizer", help="HF tokenizer dir used to size synthetic documents (--synthetic)")
    p.add_argument("--per-length", type=int, default=128, help="questions per length (--synthetic)")
    p.add_argument("--seed", type=int, default=0, help="seed (--synthetic)")
    p.add_argument("--split", default="train", help="split of a dataset directory or Hub dataset (default train)")
    p.add_argument("--revision", help="branch, tag or commit of a Hub dataset")
    p.add_argument("--config", help="configuration name of a directory or Hub dataset")
    p.add_argument("--data-files", nargs="+", metavar="FILE",
                   help="files inside a directory or Hub dataset (--ruler: one output length per file)")
    return p


def selection_of(args: argparse.Namespace) -> Selection:
    """The `load_rows` keywords the flags ask for (flags left unset are not passed)."""
    selection = Selection(split=args.split)
    for key in ("revision", "config", "data_files"):
        if getattr(args, key) is not None:
            selection[key] = getattr(args, key)  # type: ignore[literal-required]
    return selection


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return _run(parser, args)
    except (AgentGraphsError, OSError) as exc:  # a bad row names its file:line and field
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.hotpotqa is not None:
        if args.out is None:
            parser.error("--hotpotqa needs --out FILE.jsonl")
        n = convert_hotpotqa(args.hotpotqa, args.out, limit=args.limit, selection=selection_of(args))
        print(f"wrote {n} training rows to {args.out}")
        return 0
    if args.out_dir is None:
        parser.error("--ruler / --synthetic need --out-dir DIR")
    if args.ruler is not None:
        written = convert_ruler(args.ruler, args.out_dir, limit=args.limit, selection=selection_of(args))
    else:
        if not args.tokenizer:
            parser.error("--synthetic needs --tokenizer DIR (the policy's tokenizer sizes the documents)")
        written = make_synthetic(args.synthetic, args.tokenizer, args.out_dir, per_length=args.per_length,
                                 seed=args.seed)
    for name, path in written.items():
        print(f"{name}: {path}")
    print(eval_prompt_data_flag(written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
