"""slime-style JSONL rows as rollout inputs: read lazily, each bad row kept with the line and field it fails on.

Rows use slime's default keys (`input`, `label`, `metadata`; `RowKeys` changes them). `agentgraphs run`
(`agentgraphs.batch`), the demo and `agentgraphs debug --input` read rows through this module, so a row
means the same everywhere and a malformed one gets the same message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .errors import ConfigError, InputError
from .rollout import check_row_metadata, rollout_input
from .spec import RolloutInput

__all__ = ["ParsedRow", "RowKeys", "parse_row", "read_input_row", "read_rollout_inputs"]


@dataclass(frozen=True)
class RowKeys:
    input: str = "input"
    label: str = "label"
    metadata: str = "metadata"


@dataclass(frozen=True)
class ParsedRow:
    line: int
    inp: RolloutInput | None
    error: str | None = None
    group: int | None = None  # the row's position: all n samples of a row form one GRPO group


def read_rollout_inputs(path: str | Path, keys: RowKeys = RowKeys(), *, n_samples: int = 1,
                        limit: int | None = None) -> Iterator[ParsedRow]:
    """The rollout inputs of a slime-style JSONL file, parsed lazily; each row repeated `n_samples` times
    (a GRPO group). A row that cannot be read is a ParsedRow with its `error` (naming the line and field)."""
    with open(path, "rb") as fh:
        count = 0
        for line_no, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            if limit is not None and count >= limit:
                return
            parsed = parse_row(raw, line_no, keys)
            for k in range(n_samples):
                if parsed.inp is None:
                    yield parsed
                else:
                    inp = RolloutInput(**{**parsed.inp, "index": count * n_samples + k})  # type: ignore[typeddict-item]
                    yield ParsedRow(line_no, inp, group=count)
            count += 1


def parse_row(raw: bytes, line_no: int, keys: RowKeys) -> ParsedRow:
    """One JSONL line as a rollout input, or a ParsedRow whose `error` names the line and the field."""
    try:
        text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")  # an editor's BOM is not data
    except UnicodeDecodeError as exc:
        return ParsedRow(line_no, None,
                         f"line {line_no}: not valid UTF-8 at byte {exc.start}; re-encode the file as UTF-8")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        return ParsedRow(line_no, None, f"line {line_no}: invalid JSON ({exc.msg} at column {exc.colno})")
    except (ValueError, RecursionError) as exc:  # an over-long integer; nesting deeper than Python recurses
        problem = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        return ParsedRow(line_no, None, f"line {line_no}: invalid JSON ({problem})")
    if not isinstance(obj, dict):
        return ParsedRow(line_no, None, f"line {line_no}: expected a JSON object, got {type(obj).__name__}")
    if keys.input not in obj:
        return ParsedRow(line_no, None, f"line {line_no}: missing field {keys.input!r} (the prompt); "
                                        f"add it or pass --input-key")
    metadata = obj.get(keys.metadata)
    metadata = {} if metadata is None else metadata  # absent or null: no metadata
    try:  # "", [], 0 and false too: they are not an empty object
        check_row_metadata(metadata, keys.metadata)
    except InputError as exc:
        return ParsedRow(line_no, None, f"line {line_no}: field {keys.metadata!r} {exc.problem}")
    return ParsedRow(line_no, rollout_input(obj[keys.input], obj.get(keys.label), metadata, None))


def _is_file(path: Path) -> bool:
    """`path.is_file()`, False for a value no file can have (a name over the system's limit: inline JSON)."""
    try:
        return path.is_file()
    except (OSError, ValueError):  # ENAMETOOLONG; ValueError: an embedded NUL
        return False


def read_input_row(value: str, line: int | None = None, keys: tuple[str, str, str] = ("input", "label", "metadata"),
                   ) -> RolloutInput:
    """One rollout input from a command-line value (`agentgraphs debug --input`): a file (.json: one row;
    .jsonl: row `line`, default 1), inline JSON, or a bare string, which is the prompt. A row follows the rules of
    `read_rollout_inputs` (the same messages); ConfigError when it cannot be read, and when `line` (`--line`) is
    given for anything but a .jsonl file, which has no rows to choose from.

    >>> read_input_row("What is 2+2?")
    {'prompt': 'What is 2+2?', 'label': None, 'metadata': {}, 'index': 0}
    >>> read_input_row('{"input": "2+2?", "label": "4"}')["label"]
    '4'
    >>> read_input_row("/nonexistent/rows.jsonl")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    agentgraphs.errors.ConfigError: --input /nonexistent/rows.jsonl: no such file ...
    """
    path = Path(value)
    if line is not None and not (_is_file(path) and path.suffix == ".jsonl"):
        what = f"the file {path}" if _is_file(path) else "inline JSON or a prompt text"
        raise ConfigError(f"--line {line}: --input is {what} (one row); --line picks a row of a .jsonl file. Fix: "
                          "drop --line, or give --input ROWS.jsonl")
    line = 1 if line is None else line
    if _is_file(path):
        lines = [raw for raw in path.read_bytes().splitlines() if raw.strip()]
        if path.suffix == ".jsonl":
            if line > len(lines):
                raise ConfigError(f"--line {line}: {path} has {len(lines)} rows")
            raw = lines[line - 1]
        else:
            raw = path.read_bytes()
    else:
        if path.suffix.lower() in (".json", ".jsonl") and not any(c.isspace() for c in value):
            # a file name that is no file (misspelt, another directory): never the prompt "rows.jsonl"
            raise ConfigError(f"--input {value}: no such file (a .json / .jsonl name is read as a file). Fix: the "
                              "file's path, or the row as inline JSON or a prompt text")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value  # plain text: the prompt
        if not isinstance(parsed, dict):
            return rollout_input(parsed, None, {}, 0)
        raw = json.dumps(parsed).encode("utf-8")
    row = parse_row(raw, line, RowKeys(*keys))  # the rules of `run`'s rows, the same messages
    if row.inp is None:
        raise ConfigError(f"--input: {row.error}")
    return RolloutInput(**{**row.inp, "index": 0})  # type: ignore[typeddict-item]
