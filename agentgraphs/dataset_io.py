"""Dataset rows from where users keep them (a local file, a local dataset directory, or a Hugging Face id),
and the one writer of prepared rows (``write_jsonl``).

Every method's data preparation (its ``data.py``) reads its source through ``load_rows`` (or
``load_located_rows``, which also says where each row came from, for error messages), maps the rows to
slime's format, and writes them with ``write_jsonl``.

- a local file: ``.jsonl`` (streamed line by line), ``.json`` (one JSON list, or JSONL), ``.parquet``
  (streamed in batches; needs pyarrow, which the ``data`` extra brings);
- a local directory: the output of ``datasets``' ``save_to_disk`` (a Dataset or a DatasetDict), or a
  folder of data files read by ``datasets.load_dataset(folder)`` (``train.jsonl``, ``test.parquet``...);
- anything else is a Hugging Face dataset id (``BytedTsinghua-SIA/hotpotqa``), loaded through
  ``datasets.load_dataset`` with ``split``, ``revision``, ``config`` and ``data_files``: this needs network
  access or a local Hugging Face cache.

Directories and ids need the optional extra ``data`` (``pip install 'agentgraphs[data]'``, i.e. the
``datasets`` package); plain JSON/JSONL files need nothing. A problem raises ``InputError`` (a row or file
that cannot be read, naming ``file:line``) or ``ConfigError`` (a source, split or revision that cannot be
used), each saying what to do.

>>> import json, os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "rows.jsonl")
>>> _ = open(path, "w").write(json.dumps({"input": "Q?", "label": "A"}) + "\\n")
>>> list(load_rows(path))
[{'input': 'Q?', 'label': 'A'}]
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError, InputError

__all__ = ["Row", "SourceKind", "FILE_SUFFIXES", "source_kind", "load_rows", "load_located_rows", "write_jsonl"]

Row = dict[str, Any]
SourceKind = Literal["file", "directory", "hub"]
FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
_EXTRA_HINT = "pip install 'agentgraphs[data]' (the datasets package)"


def source_kind(source: str | PathLike[str]) -> SourceKind:
    """How ``source`` is read: an existing local file or directory, else a Hugging Face dataset id.

    A missing local path (it has a data-file suffix, starts with ``/``, ``.`` or ``~``, or has more than
    one ``/``) raises ``ConfigError`` instead of being sent to the Hub.

    >>> source_kind("BytedTsinghua-SIA/hotpotqa"), source_kind(".")
    ('hub', 'directory')
    >>> source_kind("/no/such/train.jsonl")
    Traceback (most recent call last):
    ...
    agentgraphs.errors.ConfigError: data source '/no/such/train.jsonl' does not exist: give an existing file (.jsonl, .json, .parquet) or dataset directory, or a Hugging Face dataset id such as 'owner/name'
    """
    text = str(source)
    path = Path(text).expanduser()
    if path.is_file():
        return "file"
    if path.is_dir():
        return "directory"
    looks_local = (text.startswith(("/", ".", "~")) or text.count("/") > 1
                   or path.suffix.lower() in FILE_SUFFIXES or not text.strip())
    if looks_local:
        raise ConfigError(
            f"data source {text!r} does not exist: give an existing file ({', '.join(FILE_SUFFIXES)}) or "
            "dataset directory, or a Hugging Face dataset id such as 'owner/name'"
        )
    return "hub"


def load_rows(source: str | PathLike[str], *, split: str = "train", revision: str | None = None,
              config: str | None = None, data_files: str | Sequence[str] | None = None,
              streaming: bool = False, cache_dir: str | PathLike[str] | None = None) -> Iterator[Row]:
    """The rows of ``source`` (a file, a dataset directory or a Hugging Face id) as dicts, in order.

    ``split`` picks the split of a directory or Hub dataset (a single file is the split ``train``);
    ``revision`` (a branch, tag or commit) and ``streaming`` apply to Hub datasets only; ``config`` is the
    dataset's configuration name; ``data_files`` selects files inside a directory or Hub repository
    (``"eval_50.json"``); ``cache_dir`` is where ``datasets`` keeps its Arrow cache.

    >>> import datasets, os, tempfile  # a dataset directory written by datasets' save_to_disk
    >>> folder = os.path.join(tempfile.mkdtemp(), "ds")
    >>> datasets.DatasetDict({"test": datasets.Dataset.from_list([{"q": "Q?", "a": ["A"]}])}).save_to_disk(folder)
    >>> list(load_rows(folder, split="test"))
    [{'q': 'Q?', 'a': ['A']}]
    """
    for row, _ in load_located_rows(source, split=split, revision=revision, config=config,
                                    data_files=data_files, streaming=streaming, cache_dir=cache_dir):
        yield row


def load_located_rows(source: str | PathLike[str], *, split: str = "train", revision: str | None = None,
                      config: str | None = None, data_files: str | Sequence[str] | None = None,
                      streaming: bool = False, cache_dir: str | PathLike[str] | None = None,
                      ) -> Iterator[tuple[Row, str]]:
    """``(row, where)`` pairs: ``where`` is ``file:line``, ``file[i]`` or ``source[split][i]``.

    Same arguments as ``load_rows``; the source is checked before the first row is read.

    >>> import json, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "rows.json")
    >>> _ = open(path, "w").write(json.dumps([{"x": 1}, {"x": 2}]))
    >>> [where.rsplit("/", 1)[-1] for _, where in load_located_rows(path)]
    ['rows.json[0]', 'rows.json[1]']
    """
    kind = source_kind(source)
    path = Path(str(source)).expanduser()
    if kind == "file":
        _refuse_hub_only(source, revision=revision, streaming=streaming, config=config, data_files=data_files)
        if split != "train":
            raise ConfigError(f"data source {str(source)!r} is a single file, which holds one split ('train'), "
                              f"not {split!r}: drop --split, or give a dataset directory or Hub id")
        return _file_rows(path)
    if kind == "directory":
        _refuse_hub_only(source, revision=revision, streaming=streaming)
        dataset = _directory_dataset(path, split=split, config=config, data_files=data_files, cache_dir=cache_dir)
    else:
        dataset = _hub_dataset(str(source), split=split, revision=revision, config=config,
                               data_files=data_files, streaming=streaming, cache_dir=cache_dir)
    return _dataset_rows(dataset, f"{source}[{split}]")


def write_jsonl(rows: Iterable[Mapping[str, Any]], path: str | PathLike[str]) -> int:
    """Write rows as UTF-8 JSONL (one object per line, non-ASCII kept); returns the number written.

    All or nothing: the rows go to ``PATH.partial``, which replaces ``path`` once the last row is written, so
    a row that raises (a bad input row met while streaming) leaves no half-written file behind. The parent
    directory is created.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "out", "rows.jsonl")
    >>> write_jsonl([{"input": "Q?", "label": ["é"]}], path), open(path, encoding="utf-8").read()
    (1, '{"input": "Q?", "label": ["é"]}\\n')
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    count = 0
    try:
        with partial.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                count += 1
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    return count


# ---------------------------------------------------------------------------------------------------------
# local files (no dependency beyond the standard library, except pyarrow for parquet)
# ---------------------------------------------------------------------------------------------------------


def _refuse_hub_only(source: str | PathLike[str], *, revision: str | None, streaming: bool,
                     config: str | None = None, data_files: str | Sequence[str] | None = None) -> None:
    given = [name for name, value in (("--revision", revision), ("--streaming", streaming or None),
                                      ("--config", config), ("--data-files", data_files)) if value is not None]
    if given:
        raise ConfigError(f"{', '.join(given)} cannot apply to the local source {str(source)!r} (revisions and "
                          "streaming are for Hugging Face ids; configs and data files for directories and ids): "
                          "drop the flag")


def _file_rows(path: Path) -> Iterator[tuple[Row, str]]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return _parquet_rows(path)
    if suffix in (".jsonl", ".json"):
        return _list_rows(path) if _first_byte(path) == b"[" else _jsonl_rows(path)
    raise ConfigError(f"cannot read {str(path)!r}: a data file must end in {', '.join(FILE_SUFFIXES)} "
                      "(or give a dataset directory)")


def _first_byte(path: Path) -> bytes:
    with path.open("rb") as f:
        while chunk := f.read(4096):
            stripped = chunk.lstrip(b" \t\r\n\xef\xbb\xbf")
            if stripped:
                return stripped[:1]
    return b""


def _jsonl_rows(path: Path) -> Iterator[tuple[Row, str]]:
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            where = f"{path}:{line_no}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError("file", f"{where}: byte {exc.start} is not valid UTF-8 ({exc.reason})",
                                 "re-encode the file as UTF-8") from None
            text = text.removeprefix("\ufeff") if line_no == 1 else text
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError("line", f"{where}: not valid JSON ({exc.msg})",
                                 "write one JSON object per line") from None
            yield _object(obj, where), where


def _list_rows(path: Path) -> Iterator[tuple[Row, str]]:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line_no = raw[: exc.start].count(b"\n") + 1
        raise InputError("file", f"{path}:{line_no}: not valid UTF-8 ({exc.reason})",
                         "re-encode the file as UTF-8") from None
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError("file", f"{path}:{exc.lineno}: not valid JSON ({exc.msg})", "fix the JSON list") from None
    for i, obj in enumerate(rows):
        where = f"{path}[{i}]"
        yield _object(obj, where), where


def _parquet_rows(path: Path) -> Iterator[tuple[Row, str]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError(f"reading {str(path)!r} needs pyarrow: {_EXTRA_HINT}, or convert it to JSONL") from None
    index = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=256):
        for obj in batch.to_pylist():
            yield obj, f"{path}[{index}]"
            index += 1


def _object(obj: Any, where: str) -> Row:
    if not isinstance(obj, dict):
        raise InputError("row", f"{where}: the row is a {type(obj).__name__}, not a JSON object",
                         "write one JSON object per row")
    return obj


# ---------------------------------------------------------------------------------------------------------
# datasets (the optional extra `data`)
# ---------------------------------------------------------------------------------------------------------


def _datasets(source: str) -> Any:
    try:
        import datasets
    except ImportError:
        raise ConfigError(f"reading {source!r} needs the optional extra 'data': {_EXTRA_HINT}") from None
    return datasets


def _directory_dataset(path: Path, *, split: str, config: str | None,
                       data_files: str | Sequence[str] | None, cache_dir: str | PathLike[str] | None) -> Any:
    datasets = _datasets(str(path))
    saved = (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()
    if saved:  # save_to_disk output: Arrow files plus their state, read in place
        if config is not None or data_files is not None:
            raise ConfigError(f"{str(path)!r} was written by save_to_disk: --config and --data-files do not "
                              "apply to it; drop them")
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            return _pick_split(loaded, split, str(path))
        if split != "train":
            raise ConfigError(f"{str(path)!r} holds a single Dataset (no splits), not split {split!r}: "
                              "drop --split")
        return loaded
    try:
        return datasets.load_dataset(str(path), name=config, split=split, data_files=_files(data_files),
                                     cache_dir=None if cache_dir is None else str(cache_dir))
    except (ValueError, FileNotFoundError) as exc:  # unknown split, no data files, mixed formats
        raise ConfigError(f"cannot load the dataset directory {str(path)!r} (split {split!r}): {exc}. "
                          "Check --split and --data-files against the files in the directory") from None


def _hub_dataset(source: str, *, split: str, revision: str | None, config: str | None,
                 data_files: str | Sequence[str] | None, streaming: bool,
                 cache_dir: str | PathLike[str] | None) -> Any:
    datasets = _datasets(source)
    try:
        return datasets.load_dataset(source, name=config, split=split, revision=revision,
                                     data_files=_files(data_files), streaming=streaming,
                                     cache_dir=None if cache_dir is None else str(cache_dir))
    except Exception as exc:  # the Hub raises many types; each becomes one actionable error
        at = f" at revision {revision!r}" if revision else ""
        raise ConfigError(
            f"cannot load the Hugging Face dataset {source!r} (split {split!r}{at}): "
            f"{type(exc).__name__}: {exc}. A dataset id needs network access to the Hub or a copy in the "
            "local Hugging Face cache; otherwise download it and give the local file or directory"
        ) from exc


def _files(data_files: str | Sequence[str] | None) -> str | list[str] | None:
    if data_files is None or isinstance(data_files, str):
        return data_files
    return list(data_files)


def _pick_split(loaded: Any, split: str, source: str) -> Any:
    if split not in loaded:
        raise ConfigError(f"{source!r} has no split {split!r}; its splits are {sorted(loaded)}: "
                          "pass --split with one of them")
    return loaded[split]


def _dataset_rows(dataset: Any, prefix: str) -> Iterator[tuple[Row, str]]:
    for i, row in enumerate(dataset):
        yield dict(row), f"{prefix}[{i}]"
