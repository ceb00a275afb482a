"""`agentgraphs view`: one self-contained HTML file (no network, opens offline) for a run directory.

The data is embedded as JSON and rendered lazily by the page's own script: one NDJSON line per rollout
(parsed only when that rollout is opened), a small index for the rollouts table (virtualised: only the
visible rows exist in the DOM), and the token strings (each id decoded on its own with the run's
tokenizer, once per distinct id). Token roles are computed here (`agentgraphs.viewer.roles`).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import IO, Any, Callable, Mapping, Sequence, TypedDict

from ..errors import ConfigError
from ..trace import Turn, extended_turn
from .audit import audit_record
from .roles import (PROMPT, ROLE_NAMES, UNTRAINED, GlueScaffold, appended_roles, sequence_roles,
                    to_runs)
from .run_data import RunRecord, check_run_has_rollouts, load_tokenizer, read_run, read_summary, tokenizer_dir

_TEXT_CAP = 20_000  # characters of an input prompt / answer / error kept in the report
_DIFF_CAP = 20_000  # positions listed per breached prompt (the rest are counted: "N more differ")


def _json(obj: Any) -> str:
    # inside <script>: "</script>" must not appear, so every "<" is escaped (JSON strings allow \u003c)
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def _cap(value: Any) -> Any:
    if isinstance(value, str) and len(value) > _TEXT_CAP:
        return value[:_TEXT_CAP] + f"... [{len(value) - _TEXT_CAP} more characters]"
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= _TEXT_CAP else text[:_TEXT_CAP] + "..."


def reward_scalar(reward: Any) -> float | None:
    """The number shown for a reward: a float, or a dict reward's "score" (else its first number).

    >>> reward_scalar({"acc": 1, "score": 0.5}), reward_scalar(None), reward_scalar(1)
    (0.5, None, 1.0)
    """
    if isinstance(reward, bool):
        return float(reward)
    if isinstance(reward, (int, float)):
        return float(reward)
    if isinstance(reward, Mapping):
        if isinstance(reward.get("score"), (int, float)):
            return float(reward["score"])
        for v in reward.values():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
    return None


class _Decoder:
    """Each id decoded on its own (`tokenizer.decode([id])`), once; remembers every id it was asked for."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.strings: dict[int, str] = {}

    def __call__(self, token_id: int) -> str:
        s = self.strings.get(token_id)
        if s is None:
            s = self.tokenizer.decode([int(token_id)], skip_special_tokens=False)
            self.strings[token_id] = s
        return s

    def add(self, ids: Sequence[int]) -> None:
        for t in set(ids) - self.strings.keys():
            self(t)


def _owner_spans(produced: Mapping[int, tuple[int, int]]) -> list[list[int]]:
    """Which engine call produced which positions, as [position, turn, output offset, length] runs."""
    spans: list[list[int]] = []
    for k in sorted(produced):
        t, j = produced[k]
        last = spans[-1] if spans else None
        if last is not None and last[1] == t and last[0] + last[3] == k and last[2] + last[3] == j:
            last[3] += 1
        else:
            spans.append([k, t, j, 1])
    return spans


def rollout_payload(rec: RunRecord, position: int, decode: _Decoder, scaffold: GlueScaffold) -> dict[str, Any]:
    """Everything the page shows about one rollout, with per-token roles as run-length codes.

    Which turn produced which position, and every invariant breach, come from `audit_record`: the page
    outlines exactly what `agentgraphs check` reports.
    """
    turns: list[Turn] = rec.turns
    seqs = rec.sequences
    audit = audit_record(rec)
    owner: dict[int, int] = {}  # turn -> the sequence that carries its output
    for s, seq_audit in enumerate(audit.sequences):
        for t, _ in seq_audit.produced.values():
            owner.setdefault(t, s)
    seq_out: list[dict[str, Any]] = []
    seq_roles: list[list[int]] = []
    for s, (seq, seq_audit) in enumerate(zip(seqs, audit.sequences)):
        tokens = [int(x) for x in seq.get("tokens") or []]
        decode.add(tokens)
        roles = sequence_roles(seq, seq_audit.produced, decode, scaffold)
        seq_roles.append(roles)
        seq_out.append({"t": tokens, "n": seq.get("response_length"), "r": to_runs(roles),
                        "m": to_runs(list(seq.get("loss_mask") or [])),  # as written: a 0.5 is no 0 or 1
                        "lp": seq.get("rollout_log_probs") or [], "turns": sorted(seq_audit.members),
                        "own": _owner_spans(seq_audit.produced),
                        "b": [[b["position"], b["kind"], _cap(b["detail"])] for b in audit.breaches
                              if b["sequence"] == s and b["position"] is not None],
                        "pd": prompt_differences(tokens, seq_audit.members, turns)})
    turn_out: list[dict[str, Any]] = []
    display: list[tuple[list[int], list[int]]] = []  # (prompt roles, output roles) per turn, for chains
    for i, turn in enumerate(turns):
        p, o = list(turn.get("prompt_ids") or []), list(turn.get("output_ids") or [])
        decode.add(o)
        item: dict[str, Any] = {
            "node": turn.get("node"), "conv": turn.get("conversation"), "engine": turn.get("engine"),
            "T": turn.get("temperature"), "finish": turn.get("finish_reason"), "retries": turn.get("retries", 0),
            "trainable": bool(turn.get("trainable")), "wv": turn.get("weight_version"), "rid": turn.get("rid"),
            "o": o, "ol": turn.get("output_logprobs") or [], "pl": len(p),
            "text": _cap(turn.get("text")) if not o else None,
        }
        if i in owner:
            roles = seq_roles[owner[i]]
            item["seq"] = owner[i]
            if (seqs[owner[i]].get("tokens") or [])[:len(p)] != p:  # a prompt breach: what the engine saw, to show
                item["ep"] = p
            display.append((roles[:len(p)], roles[len(p):len(p) + len(o)]))
        else:
            base = extended_turn(turns, i)
            if base is None:
                rest, prompt_roles = p, [PROMPT] * len(p)
            else:
                head = len(turns[base]["prompt_ids"]) + len(turns[base]["output_ids"])
                rest = p[head:]
                prompt_roles = display[base][0] + display[base][1] + appended_roles(rest, decode, scaffold)
            decode.add(rest)
            item.update({"seq": None, "base": base, "p": rest,
                         "pr": to_runs(prompt_roles[len(p) - len(rest):]), "or": to_runs([UNTRAINED] * len(o))})
            display.append((prompt_roles, [UNTRAINED] * len(o)))
        turn_out.append(item)
    sample, trace = rec.sample, rec.trace
    meta = sample.get("metadata") or {}
    path = [str(n) for n in trace.get("path") or []]
    return {
        "pos": position, "line": rec.line, "index": rec.index, "status": sample.get("status") or trace.get("status"),
        "reason": _cap(meta.get("status_reason") or trace.get("reason")), "answer": _cap(trace.get("answer")),
        "reward": sample.get("reward", trace.get("reward")), "metrics": metric_items(trace.get("metrics") or {}),
        "label": _cap(sample.get("label")), "prompt": _cap(sample.get("prompt")), "error": _cap(trace.get("error")),
        "time_s": trace.get("time_s"), "summary": trace.get("summary") or {}, "path": path,
        "steps": path_steps(path, trace.get("path_turns"), turns),
        "layout": (sample.get("train_metadata") or {}).get("layout"),
        "weight_versions": sample.get("weight_versions") or [], "turns": turn_out, "seqs": seq_out,
        "breaches": len(audit.breaches),
        "other_breaches": [f"[{b['kind']}] {_cap(b['detail'])}" for b in audit.breaches
                           if b["sequence"] < 0 or b["position"] is None],
    }


def prompt_differences(tokens: Sequence[int], members: Sequence[int], turns: Sequence[Turn]) -> list[list[Any]]:
    """Per member turn whose prompt the sequence does not hold: [turn, [[position, id the engine saw], ...],
    how many differ] (the first _DIFF_CAP positions are listed): the page outlines each one.

    >>> prompt_differences([1, 9, 3], [0, 1], [{"prompt_ids": [1, 2, 3, 4]}, {"prompt_ids": [1]}])
    [[0, [[1, 2], [3, 4]], 2]]
    """
    out: list[list[Any]] = []
    for t in members:
        p = turns[t]["prompt_ids"]
        if list(tokens[:len(p)]) == list(p):
            continue
        diffs = [[k, x] for k, (x, y) in enumerate(zip(p, tokens)) if x != y]
        diffs += [[k, p[k]] for k in range(len(tokens), len(p))]
        out.append([t, diffs[:_DIFF_CAP], len(diffs)])
    return out


class PathStep(TypedDict):
    """One chip of the graph path: a node that ran, the engine calls it made (turn indices), and how many
    of its calls the graph dropped from its final state; `missing`: what path_turns names that is no turn of the
    trace (out of range: the trace was edited). `steps` > 1 only for a trace that did not record
    which calls each step made: consecutive runs of one node are then one chip, never split by a guess."""

    node: str
    steps: int
    calls: list[int]
    dropped: int
    missing: list[Any]  # what path_turns names that is no turn of the trace (a breach: `audit_record` says so)


def _turn_index(i: Any, turns: Sequence[Turn]) -> bool:
    """Whether `i` is the index of one of `turns` (path_turns of an edited trace may name others)."""
    return isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(turns)


def path_steps(path: Sequence[str], path_turns: Any, turns: Sequence[Turn]) -> list[PathStep]:
    """The graph path with each step's engine calls: exact from traces.jsonl's `path_turns`.

    >>> t = [{"node": "m"}, {"node": "m"}]
    >>> [(s["node"], s["calls"]) for s in path_steps(["p", "m", "m"], [[], [0], [1]], t)]
    [('p', []), ('m', [0]), ('m', [1])]
    >>> [(s["node"], s["steps"], s["calls"]) for s in path_steps(["p", "m", "m"], None, t)]
    [('p', 1, []), ('m', 2, [0, 1])]
    """
    if isinstance(path_turns, list) and len(path_turns) == len(path) and all(isinstance(p, list) for p in path_turns):
        return [PathStep(node=name, steps=1, calls=[i for i in calls if _turn_index(i, turns)],
                         dropped=sum(1 for i in calls if i is None),
                         missing=[i for i in calls if i is not None and not _turn_index(i, turns)])
                for name, calls in zip(path, path_turns)]
    out: list[PathStep] = []
    nxt = 0
    i = 0
    while i < len(path):  # an older trace: a run of one node's steps takes that node's next calls, as one chip
        name, k = path[i], 1
        while i + k < len(path) and path[i + k] == name:
            k += 1
        calls: list[int] = []
        while nxt < len(turns) and turns[nxt]["node"] == name:
            calls.append(nxt)
            nxt += 1
        out.append(PathStep(node=name, steps=k, calls=calls, dropped=0, missing=[]))
        i += k
    return out


def metric_items(metrics: Mapping[str, Any]) -> list[list[Any]]:
    """Metrics as [label, value] in display order: a strict metric leads, its lenient sibling is labelled.

    Where a metric `k` has a `k_strict` sibling (MemAgent's RULER `sub_em`, whose seed definition counts an
    empty answer as a hit, so a random model scores on it), `k_strict` comes first and `k` is kept but
    labelled lenient; every other metric follows in its own order.

    >>> metric_items({"em": 0.0, "sub_em": 1.0, "sub_em_strict": 0.0})
    [['sub_em_strict', 0.0], ['em', 0.0], ['sub_em (lenient: can score without an answer)', 1.0]]
    """
    strict = [k for k in metrics if k.endswith("_strict") and k[:-len("_strict")] in metrics]
    lenient = {k[:-len("_strict")] for k in strict}
    rest = [k for k in metrics if k not in strict and k not in lenient]
    out = [[k, metrics[k]] for k in strict + rest]
    out += [[f"{k} (lenient: can score without an answer)", metrics[k]] for k in metrics if k in lenient]
    return out


def _path_text(steps: Sequence[PathStep], turns: Sequence[Mapping[str, Any]]) -> str:
    """The table's graph path: runs of one node as `name ×N`."""
    names: list[list[Any]] = []
    for step in steps or [PathStep(node=str(t["node"]), steps=1, calls=[], dropped=0, missing=[]) for t in turns]:
        if names and names[-1][0] == step["node"]:
            names[-1][1] += step["steps"]
        else:
            names.append([step["node"], step["steps"]])
    parts = [f"{n} \u00d7{k}" if k > 1 else n for n, k in names]
    return " \u2192 ".join(parts[:12]) + (" \u2026" if len(parts) > 12 else "")


def index_row(payload: Mapping[str, Any]) -> dict[str, Any]:
    """One line of the rollouts table."""
    turns = payload["turns"]
    trained = sum(n for s in payload["seqs"] for role, n in s["m"] if role)
    return {
        "pos": payload["pos"], "index": payload["index"], "line": payload["line"], "status": payload["status"],
        "reward": reward_scalar(payload["reward"]), "metrics": payload["metrics"], "turns": len(turns),
        "trained": trained, "retries": sum(int(t.get("retries") or 0) for t in turns),
        "path": _path_text(payload["steps"], turns), "breaches": payload["breaches"],
        "time_s": payload["time_s"], "reason": str(payload["reason"] or "")[:200],
    }


def _asset(name: str) -> str:
    return resources.files("agentgraphs.viewer").joinpath("assets", name).read_text(encoding="utf-8")


def write_report(run_dir: str | Path, out: str | Path | None = None, *, tokenizer: str | Path | None = None,
                 title: str | None = None, on_rollout: Callable[[int], None] | None = None) -> Path:
    """Write the HTML report of a run directory; returns its path (default RUN_DIR/report.html).

    `tokenizer` is the tokenizer directory (default: the `hf:DIR` engine summary.json names).

    >>> import tempfile
    >>> from agentgraphs.testing.runs import synthetic_records, write_run_dir
    >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
    >>> run = write_run_dir(synthetic_records(3, 600, [100, 200]), tempfile.mkdtemp())
    >>> write_report(run, tokenizer=ensure_tiny_model()).name
    'report.html'
    """
    check_run_has_rollouts(run_dir, "show")
    summary = read_summary(run_dir)
    tok = load_tokenizer(tokenizer_dir(summary, tokenizer))
    target = Path(out) if out is not None else Path(run_dir) / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_report_records(read_run(run_dir), tok, target, summary=summary,
                                title=title or f"agentgraphs run: {Path(run_dir).resolve().name}",
                                on_rollout=on_rollout)


def write_report_records(records: Any, tokenizer: Any, target: Path, *, summary: Mapping[str, Any],
                         title: str, on_rollout: Callable[[int], None] | None = None) -> Path:
    """The report of any iterable of RunRecords (streamed: one rollout in memory at a time), written to
    TARGET.part and renamed into place: a report that fails half-way leaves neither a partial file nor a
    changed target. A target that is a directory is a ConfigError naming the fix."""
    if target.is_dir():
        raise ConfigError(f"--out {target}: is a directory; the report is one HTML file: give its path, e.g. "
                          f"--out {target / 'report.html'}")
    decode = _Decoder(tokenizer)
    scaffold = GlueScaffold.for_tokenizer(tokenizer)
    page = _asset("report.html")
    head, sep, tail = page.partition("<!--AG_DATA-->")
    if not sep:
        raise RuntimeError("viewer asset report.html lost its <!--AG_DATA--> marker")
    tmp = target.with_name(target.name + ".part")
    try:
        _write_page(tmp, records, head, tail, title, summary, decode, scaffold, on_rollout)
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a damaged run, an interrupt, a full disk: no half report left behind
        raise
    return target


def _write_page(tmp: Path, records: Any, head: str, tail: str, title: str, summary: Mapping[str, Any],
                decode: "_Decoder", scaffold: GlueScaffold, on_rollout: Callable[[int], None] | None) -> None:
    rows: list[dict[str, Any]] = []
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(head.replace("AG_TITLE", _html_escape(title)).replace("/*AG_CSS*/", _asset("report.css")))
        fh.write('<script type="application/x-ndjson" id="ag-rollouts">')
        for position, rec in enumerate(records):
            payload = rollout_payload(rec, position, decode, scaffold)
            rows.append(index_row(payload))
            fh.write(("\n" if position else "") + _json(payload))
            if on_rollout is not None:
                on_rollout(position)
        fh.write("</script>\n")
        _script(fh, "ag-index", rows)
        _script(fh, "ag-summary", {**summary, "title": title, "metrics": metric_items(summary.get("metrics") or {})})
        _script(fh, "ag-roles", list(ROLE_NAMES))
        _script(fh, "ag-vocab", {str(k): v for k, v in decode.strings.items()})
        fh.write("<script>\n" + _asset("report.js") + "\n</script>\n")
        fh.write(tail)


def _script(fh: IO[str], element_id: str, obj: Any) -> None:
    fh.write(f'<script type="application/json" id="{element_id}">{_json(obj)}</script>\n')


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
