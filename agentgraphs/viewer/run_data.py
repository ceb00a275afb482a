"""Read a run directory written by `agentgraphs run` / `agentgraphs demo`, one rollout at a time.

A run directory holds `samples.jsonl` (slime Sample fields, one line per rollout), `traces.jsonl` (every
Turn of the same rollout, on the same line number) and `summary.json`. `read_run` pairs the two files
line by line, so memory stays bounded by one rollout however large the run is.

>>> import json, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "samples.jsonl").write_text(json.dumps({"index": 0, "status": "failed"}) + "\\n")
>>> _ = (d / "traces.jsonl").write_text(json.dumps({"index": 0, "turns": []}) + "\\n")
>>> [r.sample["status"] for r in read_run(d)]
['failed']
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ..errors import ConfigError, InputError
from ..trace import Turn, record_field_problem

SAMPLES = "samples.jsonl"
TRACES = "traces.jsonl"
SUMMARY = "summary.json"


_OTHER_VERSION = " (a trace written by another agentgraphs version, or damaged)"
_REWRITE = "re-run with this version (`agentgraphs run` / `replay --out`), or view it with the version that wrote it"


@dataclass(frozen=True)
class RunRecord:
    """One rollout of a run: its line number (1-based), its Sample fields and its trace line."""

    line: int
    sample: dict[str, Any]
    trace: dict[str, Any]

    @property
    def turns(self) -> list[Turn]:
        """The trace line's turns; InputError naming the line and the field when a turn lacks what the viewer
        and the audit read (a trace written by another agentgraphs version, or edited by hand)."""
        if "turns" not in self.trace:
            raise InputError(TRACES, f"line {self.line} has no 'turns'{_OTHER_VERSION}", _REWRITE)
        turns = self.trace["turns"]
        if not isinstance(turns, list):
            raise InputError(TRACES, f"line {self.line}: 'turns' is a {type(turns).__name__}, not a list"
                             f"{_OTHER_VERSION}", _REWRITE)
        for i, turn in enumerate(turns):
            if not isinstance(turn, dict):
                raise InputError(TRACES, f"line {self.line}: turn {i} is a {type(turn).__name__}, not an object"
                                 f"{_OTHER_VERSION}", _REWRITE)
            wrong = record_field_problem(turn)
            if wrong is not None:
                key, kind = wrong
                what = (f"turn {i} has no {key!r}" if kind is None
                        else f"turn {i}'s {key!r} is a {type(turn[key]).__name__}, not a {kind.__name__}")
                raise InputError(TRACES, f"line {self.line}: {what}{_OTHER_VERSION}", _REWRITE)
        return list(turns)

    @property
    def sequences(self) -> list[dict[str, Any]]:
        """The training sequences exactly as the trainer sees them (train_metadata.turns)."""
        return list((self.sample.get("train_metadata") or {}).get("turns") or [])

    @property
    def index(self) -> int | None:
        idx = self.sample.get("index", self.trace.get("index"))
        return int(idx) if isinstance(idx, int) else None


def check_run_dir(run_dir: str | Path) -> Path:
    """The run directory as a Path; ConfigError naming what is missing otherwise."""
    path = Path(run_dir)
    if not path.is_dir():
        raise ConfigError(f"RUN_DIR {path}: not a directory; pass the --out directory of `agentgraphs run`")
    for name in (SAMPLES, TRACES):
        if not (path / name).is_file():
            raise ConfigError(f"RUN_DIR {path}: no {name}; pass the --out directory of `agentgraphs run` or `demo`")
    return path


def check_run_has_rollouts(run_dir: str | Path, doing: str) -> Path:
    """`check_run_dir`, and ConfigError when neither file holds a rollout: a report or an audit of nothing
    would look like one of a good run (`doing`: what the caller would do, e.g. "check", "show")."""
    path = check_run_dir(run_dir)
    if not any(_has_content(path / name) for name in (SAMPLES, TRACES)):
        raise ConfigError(f"RUN_DIR {path}: {SAMPLES} and {TRACES} hold no rollout: nothing to {doing} "
                          "(the run wrote nothing; check its log, or pass the run's --out directory)")
    return path


def _has_content(path: Path) -> bool:
    with open(path, "rb") as fh:
        return any(line.strip() for line in fh)


def read_summary(run_dir: str | Path) -> dict[str, Any]:
    """summary.json, or {} when the run was interrupted before writing it."""
    path = Path(run_dir) / SUMMARY
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InputError(SUMMARY, f"is not valid JSON ({exc})", f"fix or delete {path}") from None
    return data if isinstance(data, dict) else {}


def read_run(run_dir: str | Path) -> Iterator[RunRecord]:
    """Yield the run's rollouts in file order, samples.jsonl and traces.jsonl paired line by line."""
    path = check_run_dir(run_dir)
    with open(path / SAMPLES, encoding="utf-8") as samples, open(path / TRACES, encoding="utf-8") as traces:
        line = 0
        while True:
            s_raw, t_raw = samples.readline(), traces.readline()
            if not s_raw and not t_raw:
                return
            line += 1
            if not s_raw or not t_raw:  # named by the file with the extra line, where the reader should look
                longer, short = (TRACES, SAMPLES) if not s_raw else (SAMPLES, TRACES)
                raise InputError(longer, f"has a line {line} but {short} ends at line {line - 1}",
                                 f"use a run directory whose {SAMPLES} and {TRACES} were written together, or "
                                 f"remove the extra line from {longer}")
            sample = _parse(s_raw, SAMPLES, line)
            trace = _parse(t_raw, TRACES, line)
            si, ti = sample.get("index"), trace.get("index")
            if si is not None and ti is not None and si != ti:
                raise InputError(TRACES, f"line {line} has index {ti} but {SAMPLES} line {line} has index {si}",
                                 "the two files must come from the same run")
            yield RunRecord(line, sample, trace)


def _parse(raw: str, name: str, line: int) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        raise InputError(name, f"line {line} is not valid JSON ({exc})", "the file is damaged; re-run") from None
    if not isinstance(obj, dict):
        raise InputError(name, f"line {line} is not a JSON object", "the file is damaged; re-run")
    return obj


def tokenizer_dir(summary: dict[str, Any], explicit: str | Path | None) -> str:
    """The tokenizer directory: `explicit` if given, else the `tokenizer` directory summary.json names (an
    `sglang:` run's, written by `agentgraphs run --tokenizer` and by replay/fork --out), else its `hf:DIR` engine.

    >>> tokenizer_dir({"engine": "scripted:hf:/models/tiny"}, None) if os.path.isdir("/models/tiny") else "skip"
    'skip'
    >>> tokenizer_dir({}, "/models/x")
    '/models/x'
    """
    if explicit:
        return str(explicit)
    named = summary.get("tokenizer")
    if isinstance(named, str) and os.path.isdir(named):
        return named
    engine = str(summary.get("engine") or "")
    at = engine.find("hf:")  # "hf:DIR", or a wrapper's "scripted:hf:DIR"
    if at >= 0 and os.path.isdir(engine[at + 3:]):
        return engine[at + 3:]
    raise ConfigError(f"cannot tell the run's tokenizer: summary.json names engine {engine!r}, not an hf: directory "
                      "that exists here; pass --tokenizer DIR (the model's Hugging Face directory)")


def load_tokenizer(path: str) -> Any:
    from ..context import shared_tokenizer

    try:
        return shared_tokenizer(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--tokenizer {path}: cannot load a tokenizer from it: {exc}") from exc
