"""Run an AgentSpec over a JSONL file: bounded concurrency, input order kept, every row answered.

The CLI's `agentgraphs run` is a thin face over `run_file` (engines from strings, outputs written to a run
directory); `run_rows` is the loop itself, for rows from anywhere.
Rows are read by `agentgraphs.rollout_inputs` (slime's default keys, configurable). A malformed row does
not stop the run: it comes back as a FAILED sample whose reason names the line and the field.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from .context import AgentContext, derive_seed
from .engines import Engine, SamplingParams
from .errors import ConfigError, InputError
from .records import sample_fields, scalar, trace_record
from .records import Rollout
from .rollout import run_rollout
from .rollout_inputs import ParsedRow, RowKeys, read_rollout_inputs
from .spec import AgentSpec, load_spec

if TYPE_CHECKING:
    from .checkpoints.replay import RunCheckpoints


@dataclass
class RunSummary:
    rows: int = 0
    results: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    reward_sum: float = 0.0
    llm_calls: int = 0
    wall_s: float = 0.0
    metrics_sum: dict[str, float] = field(default_factory=dict)

    def add(self, rollout: Rollout, reward_key: str) -> None:
        self.results += 1
        self.by_status[rollout.status] = self.by_status.get(rollout.status, 0) + 1
        self.reward_sum += scalar(rollout.reward, reward_key)
        self.llm_calls += rollout.llm_calls if rollout.llm_calls is not None else len(rollout.turns)
        for k, v in rollout.metrics.items():
            self.metrics_sum[k] = self.metrics_sum.get(k, 0.0) + float(v)

    def as_dict(self) -> dict[str, Any]:
        n = max(self.results, 1)
        return {
            "rows": self.rows,
            "results": self.results,
            "by_status": dict(sorted(self.by_status.items())),
            "mean_reward": self.reward_sum / n,
            "metrics": {k: v / n for k, v in sorted(self.metrics_sum.items())},
            "llm_calls": self.llm_calls,
            "wall_s": round(self.wall_s, 3),
        }


def lead_with_headline(spec: AgentSpec, summary: dict[str, Any]) -> dict[str, Any]:
    """A run summary (`RunSummary.as_dict`) led by the spec's headline metric, with the metric notes.

    >>> from agentgraphs.memagent import SPEC
    >>> out = lead_with_headline(SPEC, {"rows": 1, "metrics": {"answered": 0.0, "sub_em": 1.0, "sub_em_strict": 0.0}})
    >>> out["headline"], list(out["metrics"])
    ({'metric': 'sub_em_strict', 'mean': 0.0}, ['sub_em_strict', 'answered', 'sub_em'])
    """
    metrics = summary.get("metrics") or {}
    name = spec.headline_metric
    if name is None or name not in metrics:
        return summary
    ordered = {name: metrics[name], **{k: v for k, v in metrics.items() if k != name}}
    notes = {k: v for k, v in spec.metric_notes.items() if k in metrics}
    return {"headline": {"metric": name, "mean": metrics[name]}, **summary, "metrics": ordered,
            **({"metric_notes": notes} if notes else {})}


ResultSink = Callable[[dict[str, Any], dict[str, Any]], None]


async def run_rows(
    spec: AgentSpec,
    rows: Iterable[ParsedRow],
    make_context: Callable[[], AgentContext],
    *,
    options: Mapping[str, Any] | None = None,
    concurrency: int = 8,
    on_result: ResultSink | None = None,
    checkpoints: "RunCheckpoints | None" = None,
    seed: int | None = None,
) -> RunSummary:
    """Run rollouts with at most `concurrency` in flight; results delivered in input order.

    A pool of `concurrency` workers pulls rows from `rows` one at a time (the file is read lazily),
    so a slow rollout holds one slot, never the others. Results pass through a reorder buffer so
    `on_result` sees them in input order: a rollout that finishes before an earlier, slower one
    waits there. That buffer is the one unbounded part of memory: while the head row is still running it
    holds every later rollout that has finished (at most the rows the other workers get through
    in that time), and it empties as soon as the head arrives.

    With `checkpoints` every rollout is checkpointed in its own thread (`checkpoints.thread_id(position)`),
    named in its sample's metadata as `checkpoint_thread`, so a failed one can be replayed afterwards.

    With `seed`, rollout k of the run (its input index) samples with `AgentContext.seed = derive_seed(seed, k)`
    and gets the trajectory id `derive_seed(seed, k)` too: on an engine that honours sampling seeds (HFEngine,
    SGLang in deterministic mode) the same rows give the same samples, whatever the concurrency.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    opts = spec.resolve_options(options)
    spec.check_engines(opts, make_context().engines)  # a missing judge: refused before any rollout
    summary = RunSummary()
    started = time.monotonic()
    source = iter(rows)
    finished: dict[int, tuple[ParsedRow, Rollout, str | None]] = {}  # the reorder buffer, keyed by input position
    next_seq = 0  # the next input position to hand to a worker
    next_out = 0  # the next input position to deliver

    def take() -> tuple[int, ParsedRow] | None:
        nonlocal next_seq
        row = next(source, None)  # no await between reading and numbering: workers never race
        if row is None:
            return None
        seq, next_seq = next_seq, next_seq + 1
        summary.rows += 1
        return seq, row

    def deliver(seq: int, row: ParsedRow, rollout: Rollout, thread: str | None) -> None:
        nonlocal next_out
        finished[seq] = (row, rollout, thread)
        while next_out in finished:
            head_row, head, head_thread = finished.pop(next_out)
            next_out += 1
            summary.add(head, spec.reward_key)
            if on_result is not None:
                sample, trace = _sample_record(head, spec, head_row), _trace_line(head, head_row)
                if head_thread is not None:
                    sample["metadata"]["checkpoint_thread"] = trace["checkpoint_thread"] = head_thread
                on_result(sample, trace)

    async def worker() -> None:
        while (item := take()) is not None:
            seq, row = item
            thread = None
            if row.inp is None:
                rollout = _bad_row(row)
            elif checkpoints is None:
                rollout = await run_rollout(spec, row.inp, _context(row, seq), options=opts)
            else:
                config = await checkpoints.start(seq, row.inp, opts)
                thread = config["configurable"]["thread_id"]
                rollout = await run_rollout(spec, row.inp, _context(row, seq), options=opts, config=config,
                                            checkpointer=checkpoints.saver)
            if seed is not None:
                rollout.trajectory_id = f"{derive_seed(seed, 'trajectory', _position(row, seq)):016x}"
            deliver(seq, row, _with_line(rollout, row), thread)

    def _context(row: ParsedRow, seq: int) -> AgentContext:
        ctx = make_context()
        if seed is not None:
            ctx.seed = derive_seed(seed, _position(row, seq))
        return ctx

    workers = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
    try:
        await asyncio.gather(*workers)
    except BaseException:
        # a sink that raised (a full disk) or a cancelled run: stop the other rollouts, then re-raise
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    summary.wall_s = time.monotonic() - started
    return summary


def _position(row: ParsedRow, seq: int) -> int:
    return row.inp["index"] if row.inp is not None and row.inp["index"] is not None else seq


def _with_line(rollout: Rollout, row: ParsedRow) -> Rollout:
    """A row the graph's make_input refused names its line too, as one the reader refused does."""
    head = "bad input: "
    if rollout.status == "failed" and rollout.reason.startswith(head) and not rollout.reason.startswith(
            f"{head}line "):
        rollout.reason = f"{head}line {row.line}: {rollout.reason[len(head):]}"
    return rollout


def _bad_row(row: ParsedRow) -> Rollout:
    exc = InputError("row", row.error or "unreadable", "fix the dataset row")
    return Rollout(status="failed", reason=f"bad input: {row.error}", error=str(exc))


def _sample_record(rollout: Rollout, spec: AgentSpec, row: ParsedRow) -> dict[str, Any]:
    fields = sample_fields(rollout, spec)
    inp = row.inp
    meta = dict(inp["metadata"]) if inp else {}
    return {
        "group_index": row.group,
        "index": inp["index"] if inp else None,
        "line": row.line,
        "prompt": inp["prompt"] if inp else None,
        "label": inp["label"] if inp else None,
        **fields,
        "metadata": {**meta, **fields["metadata"]},
    }


def _trace_line(rollout: Rollout, row: ParsedRow) -> dict[str, Any]:
    rec = trace_record(rollout, row.inp["index"] if row.inp else None)
    rec["line"] = row.line
    return rec


def check_out_dir(out: str | Path) -> None:
    """ConfigError when `out` cannot be a run directory (an existing path that is not a directory): checked before
    the work that would be written there, by `run` and by `replay` / `fork --out`, and by JsonlWriter itself.

    >>> import tempfile
    >>> check_out_dir(tempfile.mkstemp()[1])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    agentgraphs.errors.ConfigError: --out ...: is a file; ...
    """
    if Path(out).exists() and not Path(out).is_dir():
        raise ConfigError(f"--out {out}: is a file; a run's output is a directory (samples.jsonl, traces.jsonl, "
                          "summary.json): give a new or existing directory")


# what `run` / `demo` write into a run directory, and the report `agentgraphs view` writes beside them by default:
# an earlier run's set, which a new run into the same directory would leave half-replaced
RUN_FILES = ("samples.jsonl", "traces.jsonl", "summary.json", "report.html")


def check_new_run_dir(out: str | Path, *, overwrite: bool = False) -> None:
    """`check_out_dir`, and ConfigError when `out` holds an earlier run's files (RUN_FILES) unless `overwrite`
    (then `clear_run_files` removes them once the run is ready to write): never a run half-replaced by another.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "samples.jsonl").write_text("")
    >>> check_new_run_dir(d)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    agentgraphs.errors.ConfigError: --out ...: holds an earlier run (samples.jsonl); ...
    >>> check_new_run_dir(d, overwrite=True)
    """
    check_out_dir(out)
    held = [name for name in RUN_FILES if (Path(out) / name).exists()]
    if held and not overwrite:
        raise ConfigError(f"--out {out}: holds an earlier run ({', '.join(held)}); a new run would overwrite it: "
                          "give a new directory, or pass --overwrite to remove those files before this run writes")


def clear_run_files(out: str | Path) -> None:
    """Remove an earlier run's files (RUN_FILES) from `out`; other files (the data, a checkpoints database) stay."""
    for name in RUN_FILES:
        (Path(out) / name).unlink(missing_ok=True)


class JsonlWriter:
    """samples.jsonl + traces.jsonl side by side, flushed per line so a crash loses nothing written."""

    def __init__(self, out_dir: str | Path) -> None:
        check_out_dir(out_dir)
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._samples = open(self.out_dir / "samples.jsonl", "w", encoding="utf-8")
        self._traces = open(self.out_dir / "traces.jsonl", "w", encoding="utf-8")

    def __call__(self, sample: dict[str, Any], trace: dict[str, Any]) -> None:
        self._samples.write(json.dumps(sample, ensure_ascii=False) + "\n")
        self._traces.write(json.dumps(trace, ensure_ascii=False) + "\n")
        self._samples.flush()
        self._traces.flush()

    def close(self) -> None:
        self._samples.close()
        self._traces.close()

    def __enter__(self) -> "JsonlWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_rows_engines(spec: AgentSpec, options: Any, rows: Iterable[ParsedRow], engines: Iterable[str]) -> None:
    """ConfigError naming every helper engine the rows name (`AgentSpec.row_engines`: a ToolOrchestra seed row's
    mapped models) that `engines` lacks, with the first line naming each and how to serve it. Unreadable rows are
    left to the run (each fails with its own reason)."""
    known = list(engines)
    missing: dict[str, str] = {}
    for row in rows:
        if row.inp is not None and spec.row_engines is not None:
            for name_field, name in spec.row_engines(row.inp, options).items():
                if name not in known:
                    missing.setdefault(name, f"line {row.line}, {name_field}")
    if missing:
        named = "; ".join(f"{name!r} ({where})" for name, where in missing.items())
        first = next(iter(missing))
        raise ConfigError(f"{spec.name}: the rows name engines this run does not serve: {named} (its helper engines: "
                          f"{sorted(known) or 'none'}). Fix: serve each under its name (--helper '{first}=ENGINE', "
                          "e.g. sglang:http://HOST:PORT), or mend those rows")


def sampling_from_flags(**flags: Any) -> SamplingParams:
    """SamplingParams from command-line flags; a bad value is reported under its flag's name.

    >>> sampling_from_flags(temperature=0.5).temperature
    0.5
    >>> sampling_from_flags(top_p=2.0)
    Traceback (most recent call last):
    ...
    agentgraphs.errors.ConfigError: --top-p 2.0: ...
    """
    for name, value in flags.items():
        try:
            SamplingParams(**{name: value})
        except ValueError as exc:
            raise ConfigError(f"--{name.replace('_', '-')} {value}: {exc}") from None
    return SamplingParams(**flags)


def tokenizer_for(engine: Any, path: str | None) -> Any:
    """The tokenizer at `path` (`--tokenizer`), else the engine's own (an in-process engine has one; an
    `sglang:` engine needs the path)."""
    if path:
        from .context import shared_tokenizer

        try:
            return shared_tokenizer(path)
        except ConfigError as exc:  # already says what is wrong with the path and what to do
            raise ConfigError(f"--tokenizer: {exc}") from exc
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--tokenizer {path}: cannot load a tokenizer from it: {exc}") from exc
    tok = getattr(engine, "tokenizer", None)
    if tok is None:
        raise ConfigError("an sglang: engine needs --tokenizer DIR (the model's HF directory)")
    return tok


def run_file(agent: str, data: Path, engine: "str | Engine", out: Path, *, tokenizer: str | None = None,
             options: Mapping[str, Any] | None = None, concurrency: int = 8, n_samples: int = 1,
             temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int | None = None,
             evaluation: bool = False, limit: int | None = None,
             keys: tuple[str, str, str] = ("input", "label", "metadata"),
             engines: Mapping[str, "str | Engine"] | None = None, checkpoints: Path | None = None,
             seed: int | None = None, on_start: Callable[[str, int], None] | None = None,
             on_result: ResultSink | None = None, overwrite: bool = False) -> dict[str, Any]:
    """What `agentgraphs run` does: run `agent` over the JSONL file `data`, write OUT/samples.jsonl,
    OUT/traces.jsonl and OUT/summary.json, and return the summary.

    `engine` is an engine string (`hf:DIR`, `sglang:URL`) or an Engine object to reuse across calls;
    `engines` are helper engines by name (AgentContext.engines: a judge, AgentFlow's "helper"...).
    `checkpoints`: a compact SQLite file keeping every rollout's checkpoints (see agentgraphs.checkpoints.replay).
    `max_new_tokens`: the cap of every call (`AgentContext.max_new_tokens_cap`); None (the default): none, each
    call gets its method's own cap (1024 for a call that asks for none).
    `seed`: reproducible sampling (`run_rows`); samples.jsonl holds no wall-clock value, so a seeded run on an
    in-process engine writes it byte for byte the same (timings are in traces.jsonl and summary.json; with
    `checkpoints`, samples name their checkpoint thread, new per run). Once everything is checked and loaded,
    `on_start(agent name, number of samples to come)` is called; `on_result(sample, trace)` sees each result
    in input order, after it is written. A bad agent, file, engine or flag value raises ConfigError naming it.
    `out` holding an earlier run's files (RUN_FILES) is refused unless `overwrite`: then they are removed (the
    earlier report.html too) once everything is checked, before the first line is written.
    """
    from .engines import make_engine

    spec = load_spec(agent)
    opts = spec.resolve_options(options)
    if data.is_dir():
        raise ConfigError(f"--data {data}: is a directory; --data is a JSONL file with one slime-style row per line: "
                          "give the file's path")
    if not data.is_file():
        raise ConfigError(f"--data {data}: no such file")
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit {limit}: must be at least 1 (the number of rows to run); drop it to run them all")
    check_new_run_dir(out, overwrite=overwrite)  # before an engine is loaded and a row is run
    if checkpoints is not None:  # before a file is created in `out`
        from .checkpoints.replay import check_checkpoints_path

        check_checkpoints_path(checkpoints)
    with open(data, "rb") as fh:
        total = sum(1 for line in fh if line.strip())
    if total == 0:  # a run of nothing would exit 0 with a summary (mean_reward 0.0) that looks like a result
        raise ConfigError(f"--data {data}: the file holds no row (it is empty or blank): give a JSONL file with "
                          "one slime-style row per line")
    total = min(total, limit) if limit is not None else total
    flags: dict[str, Any] = {"temperature": temperature, "top_p": top_p}
    if max_new_tokens is not None:
        flags["max_new_tokens"] = max_new_tokens
    sampling = sampling_from_flags(**flags)
    if isinstance(engine, str):
        try:
            eng = make_engine(engine)
        except (ValueError, OSError) as exc:  # ConfigError is a ValueError; transformers raises OSError
            raise ConfigError(f"--engine: {exc}") from exc
    else:
        eng = engine
    tok = tokenizer_for(eng, tokenizer)
    helpers: dict[str, Any] = {}
    for name, helper in (engines or {}).items():
        try:
            helpers[name] = make_engine(helper) if isinstance(helper, str) else helper
        except (ValueError, OSError) as exc:
            raise ConfigError(f"--helper {name}={helper}: {exc}") from exc
    spec.check_engines(opts, helpers)  # before anything is written
    if spec.row_engines is not None:  # the file is at hand: every helper a row names, before any rollout
        check_rows_engines(spec, opts, read_rollout_inputs(data, RowKeys(*keys), limit=limit), helpers)

    def make_context() -> AgentContext:
        return AgentContext(policy=eng, tokenizer=tok, sampling=sampling, evaluation=evaluation, engines=dict(helpers),
                            max_new_tokens_cap=max_new_tokens is not None)

    if overwrite:
        clear_run_files(out)
    with JsonlWriter(out) as writer:
        if on_start is not None:
            on_start(spec.name, total * n_samples)

        def sink(sample: dict[str, Any], trace: dict[str, Any]) -> None:
            writer(sample, trace)
            if on_result is not None:
                on_result(sample, trace)

        rows = read_rollout_inputs(data, RowKeys(*keys), n_samples=n_samples, limit=limit)

        async def go() -> RunSummary:
            if checkpoints is None:
                return await run_rows(spec, rows, make_context, options=opts, concurrency=concurrency,
                                      on_result=sink, seed=seed)
            from .checkpoints.replay import RunCheckpoints, new_thread_id, open_checkpoints

            async with open_checkpoints(checkpoints) as saver:
                store = RunCheckpoints(saver, agent, sampling, engine, run_id=new_thread_id(spec.name),
                                       engines=dict(engines or {}), evaluation=evaluation)
                return await run_rows(spec, rows, make_context, options=opts, concurrency=concurrency,
                                      on_result=sink, checkpoints=store, seed=seed)

        summary = asyncio.run(go())
    result = {"agent": spec.name, "engine": eng.name, **({"seed": seed} if seed is not None else {}),
              "options": opts.model_dump(), **lead_with_headline(spec, summary.as_dict())}
    if tokenizer:  # an sglang: run's tokenizer, so `view` / `check` need no --tokenizer for it
        result["tokenizer"] = str(Path(tokenizer).resolve()) if Path(tokenizer).is_dir() else tokenizer
    if checkpoints is not None:
        result["checkpoints"] = str(checkpoints)
    (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result
