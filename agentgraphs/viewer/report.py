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
from typing import IO, Any, Callable, Mapping, Sequence

from ..trace import Turn
from .roles import (PROMPT, ROLE_NAMES, UNTRAINED, GlueScaffold, appended_roles, chain_base, match_turns,
                    sequence_roles, to_runs)
from .run_data import RunRecord, check_run_dir, load_tokenizer, read_run, read_summary, tokenizer_dir

_TEXT_CAP = 20_000  # characters of an input prompt / answer / error kept in the report


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


def rollout_payload(rec: RunRecord, position: int, decode: _Decoder, scaffold: GlueScaffold) -> dict[str, Any]:
    """Everything the page shows about one rollout, with per-token roles as run-length codes."""
    turns: list[Turn] = rec.turns
    seqs = rec.sequences
    owner = match_turns(turns, seqs)
    members: dict[int, list[int]] = {}
    for t, s in owner.items():
        members.setdefault(s, []).append(t)
    seq_out: list[dict[str, Any]] = []
    seq_roles: list[list[int]] = []
    for s, seq in enumerate(seqs):
        tokens = [int(x) for x in seq.get("tokens") or []]
        decode.add(tokens)
        roles = sequence_roles(seq, turns, members.get(s, []), decode, scaffold)
        seq_roles.append(roles)
        seq_out.append({"t": tokens, "n": seq.get("response_length"), "r": to_runs(roles),
                        "m": to_runs([int(x) for x in seq.get("loss_mask") or []]),
                        "lp": seq.get("rollout_log_probs") or [], "turns": sorted(members.get(s, []))})
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
            display.append((roles[:len(p)], roles[len(p):len(p) + len(o)]))
        else:
            base = chain_base(turns, i)
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
    return {
        "pos": position, "line": rec.line, "index": rec.index, "status": sample.get("status") or trace.get("status"),
        "reason": _cap(meta.get("status_reason") or trace.get("reason")), "answer": _cap(trace.get("answer")),
        "reward": sample.get("reward", trace.get("reward")), "metrics": trace.get("metrics") or {},
        "label": _cap(sample.get("label")), "prompt": _cap(sample.get("prompt")), "error": _cap(trace.get("error")),
        "time_s": trace.get("time_s"), "summary": trace.get("summary") or {}, "path": trace.get("path") or [],
        "layout": (sample.get("train_metadata") or {}).get("layout"),
        "weight_versions": sample.get("weight_versions") or [], "turns": turn_out, "seqs": seq_out,
    }


def index_row(payload: Mapping[str, Any]) -> dict[str, Any]:
    """One line of the rollouts table."""
    turns = payload["turns"]
    nodes: list[str] = []
    for name in payload.get("path") or [t["node"] for t in turns]:  # every node that ran; else the LLM nodes
        if not nodes or nodes[-1] != name:
            nodes.append(str(name))
    trained = sum(n for s in payload["seqs"] for role, n in s["m"] if role)
    return {
        "pos": payload["pos"], "index": payload["index"], "line": payload["line"], "status": payload["status"],
        "reward": reward_scalar(payload["reward"]), "metrics": payload["metrics"], "turns": len(turns),
        "trained": trained, "retries": sum(int(t.get("retries") or 0) for t in turns),
        "path": " \u2192 ".join(nodes[:12]) + (" \u2026" if len(nodes) > 12 else ""),
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
    check_run_dir(run_dir)
    summary = read_summary(run_dir)
    tok = load_tokenizer(tokenizer_dir(summary, tokenizer))
    target = Path(out) if out is not None else Path(run_dir) / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_report_records(read_run(run_dir), tok, target, summary=summary,
                                title=title or f"agentgraphs run: {Path(run_dir).resolve().name}",
                                on_rollout=on_rollout)


def write_report_records(records: Any, tokenizer: Any, target: Path, *, summary: Mapping[str, Any],
                         title: str, on_rollout: Callable[[int], None] | None = None) -> Path:
    """The report of any iterable of RunRecords (streamed: one rollout in memory at a time)."""
    decode = _Decoder(tokenizer)
    scaffold = GlueScaffold.for_tokenizer(tokenizer)
    page = _asset("report.html")
    head, sep, tail = page.partition("<!--AG_DATA-->")
    if not sep:
        raise RuntimeError("viewer asset report.html lost its <!--AG_DATA--> marker")
    rows: list[dict[str, Any]] = []
    tmp = target.with_name(target.name + ".part")
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
        _script(fh, "ag-summary", {**summary, "title": title})
        _script(fh, "ag-roles", list(ROLE_NAMES))
        _script(fh, "ag-vocab", {str(k): v for k, v in decode.strings.items()})
        fh.write("<script>\n" + _asset("report.js") + "\n</script>\n")
        fh.write(tail)
    tmp.replace(target)
    return target


def _script(fh: IO[str], element_id: str, obj: Any) -> None:
    fh.write(f'<script type="application/json" id="{element_id}">{_json(obj)}</script>\n')


def _html_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
