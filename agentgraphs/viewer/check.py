"""`agentgraphs check`: the exactness audit of a run directory.

For every training sequence in samples.jsonl (what the trainer sees), against the Turns in traces.jsonl
(what the engines did):
- invariant breaches, each with the rollout, sequence, node and token position: lengths that disagree, a
  prompt that is not what the engine saw, a trained token no engine produced (or with another log-prob),
  a masked position with a non-zero log-prob, a failed rollout that still trains;
- drift: every trained token re-scored by teacher forcing with a plain transformers model at the turn's
  temperature (log_softmax(logits / T) in float32); per node the max / mean |delta log-prob| and the share
  of tokens over the threshold.

Which turns make up a sequence is re-derived from the turns and the recorded layout with the same
function the run used (`agentgraphs.trace.build_sequences`); the comparison itself is position by
position against the turns' own ids and log-probs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Sequence, TypedDict

from ..errors import ConfigError
from ..trace import Turn, build_sequences
from .run_data import RunRecord, check_run_dir, read_run

BreachKind = Literal["length", "prompt", "untraced_token", "token_mismatch", "logprob_mismatch",
                     "masked_logprob", "lost_mask", "failed_trains", "sequence_count"]
GREEDY_BELOW = 1e-6  # the engines' convention: below this temperature log-probs are unscaled


class Breach(TypedDict):
    """One invariant breach: where (rollout line/index, sequence, node, turn, token position) and what."""

    line: int
    index: int | None
    sequence: int
    node: str | None
    turn: int | None
    position: int | None  # absolute position in the sequence's tokens
    kind: BreachKind
    detail: str


class NodeDrift(TypedDict):
    """Re-scoring of one node's trained tokens against the recorded log-probs."""

    node: str
    tokens: int
    max_abs_delta: float
    mean_abs_delta: float
    over_threshold: int
    share_over_threshold: float


@dataclass
class CheckReport:
    """What `check_run` found. `ok` is False when any invariant is breached (the CLI then exits 1)."""

    run_dir: str
    model: str | None
    device: str
    threshold: float
    rollouts: int = 0
    sequences: int = 0
    trained_tokens: int = 0
    rescored_tokens: int = 0
    breaches: list[Breach] = field(default_factory=list)
    nodes: dict[str, NodeDrift] = field(default_factory=dict)
    worst: list[dict[str, Any]] = field(default_factory=list)  # the largest deltas, with where they are

    @property
    def ok(self) -> bool:
        return not self.breaches

    @property
    def drift_over_threshold(self) -> int:
        return sum(n["over_threshold"] for n in self.nodes.values())

    def as_dict(self) -> dict[str, Any]:
        return {"run_dir": self.run_dir, "model": self.model, "device": self.device, "threshold": self.threshold,
                "ok": self.ok, "rollouts": self.rollouts, "sequences": self.sequences,
                "trained_tokens": self.trained_tokens, "rescored_tokens": self.rescored_tokens,
                "nodes": self.nodes, "breaches": self.breaches, "worst": self.worst}

    def to_text(self, max_breaches: int = 50) -> str:
        """A human-readable report (what `agentgraphs check` prints)."""
        lines = [f"run {self.run_dir}: {self.rollouts} rollouts, {self.sequences} training sequences, "
                 f"{self.trained_tokens} trained tokens"]
        if self.model:
            lines.append(f"re-scored {self.rescored_tokens} trained tokens with {self.model} on {self.device} "
                         f"(threshold {self.threshold:g})")
            lines.append(f"  {'node':<24} {'tokens':>8} {'max|d|':>10} {'mean|d|':>10} {'over':>7} {'share':>7}")
            for n in self.nodes.values():
                lines.append(f"  {n['node']:<24} {n['tokens']:>8} {n['max_abs_delta']:>10.3g} "
                             f"{n['mean_abs_delta']:>10.3g} {n['over_threshold']:>7} {n['share_over_threshold']:>7.2%}")
            for w in self.worst[:5]:
                lines.append(f"  largest: line {w['line']} sequence {w['sequence']} node {w['node']} position "
                             f"{w['position']}: recorded {w['recorded']:.6f} re-scored {w['rescored']:.6f}")
        if self.ok:
            lines.append("OK: no invariant breach")
        else:
            lines.append(f"BREACH: {len(self.breaches)} invariant breach(es)")
            for b in self.breaches[:max_breaches]:
                where = f"line {b['line']} (index {b['index']}) sequence {b['sequence']}"
                if b["node"] is not None:
                    where += f" node {b['node']!r} (turn {b['turn']})"
                if b["position"] is not None:
                    where += f" position {b['position']}"
                lines.append(f"  [{b['kind']}] {where}: {b['detail']}")
            if len(self.breaches) > max_breaches:
                lines.append(f"  ... and {len(self.breaches) - max_breaches} more (--json for all)")
        return "\n".join(lines)


Scorer = Callable[[list[int], list[int], list[float]], list[float]]


def check_run(run_dir: str | Path, model_dir: str | Path | None = None, *, device: str = "cpu",
              threshold: float = 1e-3, dtype: str = "float32", scorer: Scorer | None = None,
              max_worst: int = 10) -> CheckReport:
    """Audit a run directory; with `model_dir`, also re-score every trained token with that model.

    `scorer(tokens, positions, temperatures) -> log-probs` replaces the transformers model (for a model
    you already hold in memory); by default one is built from `model_dir` with AutoModelForCausalLM.

    >>> import tempfile
    >>> from agentgraphs.testing.runs import synthetic_records, write_run_dir
    >>> run = write_run_dir(synthetic_records(3, 600, [100, 200]), tempfile.mkdtemp())
    >>> report = check_run(run)  # invariants only; pass a model directory to re-score too
    >>> report.ok, report.rollouts, report.sequences
    (True, 3, 60)
    """
    if threshold <= 0:
        raise ConfigError(f"--threshold {threshold}: must be > 0")
    check_run_dir(run_dir)  # before loading a model
    if scorer is None and model_dir is not None:
        scorer = transformers_scorer(model_dir, device=device, dtype=dtype)
    report = CheckReport(run_dir=str(run_dir), model=str(model_dir) if model_dir else None, device=device,
                         threshold=threshold)
    deltas: dict[str, list[float]] = {}
    worst: list[dict[str, Any]] = []
    for rec in read_run(run_dir):
        report.rollouts += 1
        _check_record(rec, report, scorer, deltas, worst)
    for node, ds in deltas.items():
        over = sum(1 for d in ds if d > threshold)
        report.nodes[node] = NodeDrift(node=node, tokens=len(ds), max_abs_delta=max(ds, default=0.0),
                                       mean_abs_delta=sum(ds) / len(ds) if ds else 0.0, over_threshold=over,
                                       share_over_threshold=over / len(ds) if ds else 0.0)
    worst.sort(key=lambda w: -w["abs_delta"])
    report.worst = worst[:max_worst]
    return report


def _check_record(rec: RunRecord, report: CheckReport, scorer: Scorer | None, deltas: dict[str, list[float]],
                  worst: list[dict[str, Any]]) -> None:
    turns = rec.turns
    seqs = rec.sequences
    meta = rec.sample.get("train_metadata") or {}
    layout = meta.get("layout") or "per_turn"
    status = str(rec.sample.get("status") or "")

    def breach(s: int, kind: BreachKind, detail: str, *, turn: int | None = None, position: int | None = None) -> None:
        report.breaches.append(Breach(line=rec.line, index=rec.index, sequence=s,
                                      node=turns[turn]["node"] if turn is not None else None, turn=turn,
                                      position=position, kind=kind, detail=detail))

    try:
        expected = build_sequences(turns, layout) if turns else []
    except Exception as exc:  # a damaged trace: say so, check what can be checked
        breach(-1, "sequence_count", f"cannot rebuild training sequences from the trace: {exc}")
        expected = []
    # a rollout with nothing to train carries one placeholder sequence (records.sample_fields): a failed or
    # aborted one whatever its turns made, any other only when its turns make no sequence
    placeholder = len(seqs) == 1 and _is_placeholder(seqs[0]) and (not expected or status in ("failed", "aborted"))
    if len(expected) != len(seqs) and not placeholder:
        breach(-1, "sequence_count", f"{len(seqs)} training sequences recorded but the trace's turns make "
                                     f"{len(expected)} ({layout} layout)")
    for s, seq in enumerate(seqs):
        report.sequences += 1
        members = list(expected[s]["turn_indices"]) if s < len(expected) and not placeholder else []
        _check_sequence(s, seq, turns, members, status, breach, report, scorer, deltas, worst, rec)


def _is_placeholder(seq: dict[str, Any]) -> bool:
    return (len(seq.get("tokens") or []) == 2 and seq.get("response_length") == 1
            and not any(seq.get("loss_mask") or []) and not any(seq.get("rollout_log_probs") or []))


def _check_sequence(s: int, seq: dict[str, Any], turns: Sequence[Turn], members: list[int], status: str,
                    breach: Callable[..., None], report: CheckReport, scorer: Scorer | None,
                    deltas: dict[str, list[float]], worst: list[dict[str, Any]], rec: RunRecord) -> None:
    tokens = [int(t) for t in seq.get("tokens") or []]
    n = int(seq.get("response_length") or 0)
    mask = list(seq.get("loss_mask") or [])
    lps = [float(x) for x in seq.get("rollout_log_probs") or []]
    if not 0 < n < len(tokens):
        breach(s, "length", f"response_length {n} must be in 1..{len(tokens) - 1} (len(tokens) {len(tokens)})")
        return
    if len(mask) != n or len(lps) != n:
        breach(s, "length", f"response_length {n} but {len(mask)} loss-mask entries and {len(lps)} log-probs")
        n = min(n, len(mask), len(lps))
    start = len(tokens) - int(seq.get("response_length") or 0)
    report.trained_tokens += sum(1 for m in mask[:n] if m)
    # which engine call produced each response position (and what it returned there)
    produced: dict[int, tuple[int, int]] = {}  # absolute position -> (turn index, offset in its output)
    for t in members:
        turn = turns[t]
        p, o = turn["prompt_ids"], turn["output_ids"]
        a = len(p)
        if tokens[:a] != list(p):
            k = next((i for i, (x, y) in enumerate(zip(tokens, p)) if x != y), min(len(tokens), a))
            got = tokens[k] if k < len(tokens) else "end of sequence"
            want = p[k] if k < len(p) else "end of prompt"
            breach(s, "prompt", f"the sequence is not the prompt this turn's engine saw: token {got} where the "
                                f"engine saw {want} (prompt of {a} tokens, sequence of {len(tokens)})",
                   turn=t, position=k)
            continue
        for j in range(len(o)):
            produced[a + j] = (t, j)
        if a < start and turn["trainable"] and o and status != "failed":
            breach(s, "lost_mask", f"the turn's output starts at position {a}, inside the prompt part "
                                   f"(the response starts at {start}): it is never trained", turn=t, position=a)
    untraced: list[int] = []
    for k in range(start, start + n):
        r = k - start
        owner = produced.get(k)
        if mask[r]:
            if status == "failed":
                breach(s, "failed_trains", "a FAILED rollout trains this position (invariant 4)",
                       turn=owner[0] if owner else None, position=k)
            if owner is None:
                untraced.append(k)
                continue
            t, j = owner
            turn = turns[t]
            if not turn["trainable"]:
                breach(s, "untraced_token", "trained token comes from a turn recorded as not trainable",
                       turn=t, position=k)
            if tokens[k] != turn["output_ids"][j]:
                breach(s, "token_mismatch", f"trained token {tokens[k]} but the engine returned "
                                            f"{turn['output_ids'][j]} here (output offset {j}): a re-tokenised or "
                                            "edited span", turn=t, position=k)
            elif lps[r] != turn["output_logprobs"][j]:
                breach(s, "logprob_mismatch", f"trained log-prob {lps[r]!r} but the engine returned "
                                              f"{turn['output_logprobs'][j]!r} (delta {lps[r] - turn['output_logprobs'][j]:.3g})",
                       turn=t, position=k)
        else:
            if lps[r] != 0.0:
                breach(s, "masked_logprob", f"masked position carries log-prob {lps[r]!r} (must be 0.0)",
                       turn=owner[0] if owner else None, position=k)
            if (owner is not None and status != "failed" and turns[owner[0]]["trainable"]
                    and tokens[k] == turns[owner[0]]["output_ids"][owner[1]]):
                breach(s, "lost_mask", "the engine produced this token for a trainable turn but it is masked",
                       turn=owner[0], position=k)
    for first, last in _runs(untraced):
        what = f"trained token {tokens[first]}" if first == last else f"{last - first + 1} trained tokens (to {last})"
        before = next((produced[k][0] for k in range(first - 1, start - 1, -1) if k in produced), None)
        where = f" (after the output of turn {before})" if before is not None else ""
        breach(s, "untraced_token", f"{what}{where} produced by no engine call: glue, an observation, or a "
                                    "re-tokenised span", turn=before, position=first)
    if scorer is not None:
        _rescore(s, tokens, start, mask[:n], lps, produced, turns, scorer, report, deltas, worst, rec)


def _runs(positions: list[int]) -> list[tuple[int, int]]:
    """Consecutive positions as (first, last) pairs."""
    out: list[tuple[int, int]] = []
    for k in positions:
        if out and out[-1][1] == k - 1:
            out[-1] = (out[-1][0], k)
        else:
            out.append((k, k))
    return out


def _temperature(turn: Turn | None) -> float:
    t = float(turn["temperature"]) if turn is not None and turn.get("temperature") is not None else 1.0
    return t if t >= GREEDY_BELOW else 1.0


def _rescore(s: int, tokens: list[int], start: int, mask: list[int], lps: list[float],
             produced: dict[int, tuple[int, int]], turns: Sequence[Turn], scorer: Scorer, report: CheckReport,
             deltas: dict[str, list[float]], worst: list[dict[str, Any]], rec: RunRecord) -> None:
    positions = [start + r for r, m in enumerate(mask) if m]
    if not positions:
        return
    owners = [produced.get(k) for k in positions]
    temps = [_temperature(turns[o[0]] if o else None) for o in owners]
    got = scorer(tokens, positions, temps)
    report.rescored_tokens += len(positions)
    for k, o, new in zip(positions, owners, got):
        node = turns[o[0]]["node"] if o else "(no engine call)"
        d = abs(new - lps[k - start])
        if not math.isfinite(d):
            d = float("inf")
        deltas.setdefault(node, []).append(d)
        if d > report.threshold:
            worst.append({"line": rec.line, "index": rec.index, "sequence": s, "node": node, "position": k,
                          "recorded": lps[k - start], "rescored": new, "abs_delta": d})
            if len(worst) > 1000:
                worst.sort(key=lambda w: -w["abs_delta"])
                del worst[100:]


def transformers_scorer(model_dir: str | Path, *, device: str = "cpu", dtype: str = "float32",
                        chunk: int = 2048) -> Scorer:
    """A Scorer backed by plain `transformers.AutoModelForCausalLM` (teacher forcing, one forward per chunk).

    Only the logits of the scored positions are computed (`logits_to_keep` with their indices), so a long
    prompt costs one forward pass, not a vocabulary-sized row per token.
    """
    import torch
    from transformers import AutoModelForCausalLM

    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ConfigError(f"--device {device}: use cpu or cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is visible here; use --device cpu")
    if not Path(model_dir).is_dir():
        raise ConfigError(f"--model {model_dir}: not a directory; pass the run's Hugging Face model directory")
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if torch_dtype is None:
        raise ConfigError(f"--dtype {dtype}: use float32, bfloat16 or float16")
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch_dtype).to(device).eval()
    return model_scorer(model, chunk=chunk)


def model_scorer(model: Any, *, chunk: int = 2048) -> Scorer:
    """A Scorer over a transformers causal LM already in memory (on its own device): one plain forward of
    the whole sequence per call, logits only at the scored positions, log_softmax(logits / T) in float32."""
    import torch

    device = next(model.parameters()).device

    def score(tokens: list[int], positions: list[int], temperatures: list[float]) -> list[float]:
        out: list[float] = []
        ids = torch.tensor([tokens], device=device)
        with torch.inference_mode():
            for c in range(0, len(positions), chunk):
                pos = positions[c:c + chunk]
                keep = torch.tensor([p - 1 for p in pos], device=device)  # logits at p-1 predict token p
                logits = model(input_ids=ids, logits_to_keep=keep).logits[0].float()
                temps = torch.tensor(temperatures[c:c + chunk], device=device, dtype=torch.float32).unsqueeze(1)
                logprobs = torch.log_softmax(logits / temps, dim=-1)
                target = torch.tensor([tokens[p] for p in pos], device=device).unsqueeze(1)
                out.extend(logprobs.gather(1, target).squeeze(1).tolist())
        return out

    return score


Job = tuple[list[int], list[int], list[float]]  # a Scorer call's arguments: tokens, positions, temperatures


def prefetched_scorer(model: Any, jobs: Sequence[Job], *, max_tokens: int = 32768) -> Scorer:
    """A Scorer whose answers to `jobs` are computed up front in padded batches (one forward per ~`max_tokens`
    tokens instead of one per sequence); a call it was not given ahead is scored by `model_scorer`.

    Same computation as `model_scorer` (teacher forcing, logits at position p - 1 for token p, float32
    log_softmax(logits / T)), so a report does not depend on whether a job was prefetched.
    """
    import torch

    device = next(model.parameters()).device
    single = model_scorer(model)
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
    head = model.get_output_embeddings()
    answers: dict[tuple[tuple[int, ...], tuple[int, ...], tuple[float, ...]], list[float]] = {}
    todo = [j for j in jobs if j[1]]
    start = 0
    while start < len(todo):
        end, width = start, 0
        while end < len(todo) and (end == start or max(width, len(todo[end][0])) * (end - start + 1) <= max_tokens):
            width, end = max(width, len(todo[end][0])), end + 1
        batch = todo[start:end]
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        rows, at, targets, temps = [], [], [], []
        for i, (tokens, positions, temperatures) in enumerate(batch):
            ids[i, : len(tokens)] = torch.tensor(tokens)
            mask[i, : len(tokens)] = 1
            rows += [i] * len(positions)
            at += [p - 1 for p in positions]
            targets += [tokens[p] for p in positions]
            temps += list(temperatures)
        with torch.inference_mode():
            hidden = base(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
            logits = head(hidden[torch.tensor(rows, device=device), torch.tensor(at, device=device)]).float()
            logprobs = torch.log_softmax(logits / torch.tensor(temps, device=device).unsqueeze(1), dim=-1)
            values = logprobs.gather(1, torch.tensor(targets, device=device).unsqueeze(1)).squeeze(1).tolist()
        k = 0
        for tokens, positions, temperatures in batch:
            answers[(tuple(tokens), tuple(positions), tuple(temperatures))] = values[k: k + len(positions)]
            k += len(positions)
        start = end

    def score(tokens: list[int], positions: list[int], temperatures: list[float]) -> list[float]:
        found = answers.get((tuple(tokens), tuple(positions), tuple(temperatures)))
        return list(found) if found is not None else single(tokens, positions, temperatures)

    return score


def report_json(report: CheckReport) -> str:
    return json.dumps(report.as_dict(), indent=2)
