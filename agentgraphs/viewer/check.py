"""`agentgraphs check`: the exactness audit of a run directory.

For every training sequence in samples.jsonl (what the trainer sees), against the Turns in traces.jsonl
(what the engines did):
- invariant breaches (`agentgraphs.viewer.audit`), each with the rollout, sequence, node and token position:
  lengths that disagree, a prompt that is not what the engine saw, a trained token no engine produced (or
  with another log-prob), a masked position with a non-zero log-prob, a failed rollout that still trains,
  top-level Sample fields (what slime trains without rl_bridge.convert) that are not the first sequence;
- drift: every trained token an engine call produced, re-scored by teacher forcing with a plain
  transformers model at its own turn's recorded temperature (log_softmax(logits / T) in float32); per node
  the max / mean |delta log-prob| and the share of tokens over the threshold.

A run that trains nothing (`agentgraphs run --eval`, or every rollout failed) has no trained token to re-score:
then every recorded call of the policy engine (summary.json's `engine`) is re-scored instead, its output ids
after its own prompt ids against its recorded output log-probs, so a wrong model is caught there too. When a
model was given and still no token could be compared, the check fails: a model check that compared nothing
must not read as passed.

Drift over the threshold fails the check like a breach (a wrong model, log-probs recorded at another
temperature than the turn says, or samples and traces edited alike all show only there), unless
`allow_drift` (`--allow-drift`) reports it without failing. A trained token that no engine call produced
is not re-scored: it is already a breach, and with no engine call there is no sampling (temperature) and
no engine log-prob it should agree with, so a delta would be noise.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence, TypedDict

from ..engines.sampling import GREEDY_BELOW  # below it log-probs are greedy, unscaled
from ..errors import ConfigError
from ..trace import SequenceAudit, Turn
from .audit import Breach, audit_record
from .run_data import RunRecord, check_run_has_rollouts, read_run, read_summary



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
    """What `check_run` found. `ok` is False on any invariant breach, on any re-scored token over the
    threshold unless `allow_drift`, and when a model was given but no token (or not every policy output of a
    run that trains nothing) could be re-scored (the CLI then exits 1)."""

    run_dir: str
    model: str | None
    device: str
    threshold: float
    allow_drift: bool = False
    rollouts: int = 0
    sequences: int = 0
    trained_tokens: int = 0
    rescored_tokens: int = 0
    unscored_tokens: int = 0  # trained tokens no engine call produced (each inside an untraced_token breach)
    rescoring: bool = False  # a model (scorer) was given
    # runs that train nothing: the policy engine's recorded output tokens, re-scored in their own call's context
    rescored_untrained_tokens: int = 0
    unscored_untrained_tokens: int = 0  # policy outputs with no prompt ids or no log-prob per id: a damaged trace
    breaches: list[Breach] = field(default_factory=list)
    nodes: dict[str, NodeDrift] = field(default_factory=dict)
    worst: list[dict[str, Any]] = field(default_factory=list)  # the largest deltas, with where they are

    @property
    def drift_over_threshold(self) -> int:
        return sum(n["over_threshold"] for n in self.nodes.values())

    @property
    def compared_nothing(self) -> bool:
        """A model was given but no token was re-scored: the model was not checked at all."""
        return self.rescoring and not (self.rescored_tokens or self.rescored_untrained_tokens)

    @property
    def ok(self) -> bool:
        return (not self.breaches and (self.allow_drift or not self.drift_over_threshold)
                and not self.compared_nothing and not self.unscored_untrained_tokens)

    def as_dict(self) -> dict[str, Any]:
        return {"run_dir": self.run_dir, "model": self.model, "device": self.device, "threshold": self.threshold,
                "allow_drift": self.allow_drift, "ok": self.ok, "rollouts": self.rollouts,
                "sequences": self.sequences, "trained_tokens": self.trained_tokens,
                "rescored_tokens": self.rescored_tokens, "unscored_tokens": self.unscored_tokens,
                "rescored_untrained_tokens": self.rescored_untrained_tokens,
                "unscored_untrained_tokens": self.unscored_untrained_tokens,
                "drift_over_threshold": self.drift_over_threshold, "nodes": self.nodes,
                "breaches": self.breaches, "worst": self.worst, "verdict": self.verdict()}

    def verdict(self) -> str:
        """One line: OK or FAIL, and why (the last line `agentgraphs check` prints)."""
        drift = self.drift_over_threshold
        reasons = []
        if self.breaches:
            reasons.append(f"{len(self.breaches)} invariant breach(es)")
        if drift and not self.allow_drift:
            reasons.append(f"{drift} of {self._rescored_what()} over the threshold "
                           f"{self.threshold:g} (a model, dtype or temperature other than the run's, or edited "
                           "tokens or log-probs; --allow-drift reports drift without failing)")
        if self.unscored_untrained_tokens:
            reasons.append(f"{self.unscored_untrained_tokens} policy output tokens could not be re-scored: their "
                           "call records no prompt ids or not one log-prob per output id (traces.jsonl was edited "
                           "or damaged; re-run)")
        if self.compared_nothing:
            reasons.append("no token could be re-scored, so the model was not checked: the run trains nothing "
                           "and records no policy engine call with prompt ids and a log-prob per output id (a "
                           "text engine, or every rollout failed before its first call); check a run that "
                           "sampled token ids from the policy")
        if reasons:
            return "FAIL: " + "; ".join(reasons)
        if not self.rescoring:
            return "OK: no invariant breach (not re-scored: pass a model to re-score)"
        allowed = f"; {drift} tokens over the threshold, allowed by --allow-drift" if drift else ""
        untrained = " (the run trains nothing: each policy call re-scored after its own prompt)" \
            if self.rescored_untrained_tokens else ""
        return f"OK: no invariant breach, {self._rescored_what()}{untrained}{allowed}"

    def _rescored_what(self, verb: str = "re-scored ") -> str:
        if self.rescored_untrained_tokens:  # only in a run that trains nothing
            return f"{self.rescored_untrained_tokens} {verb}policy output tokens"
        return f"{self.rescored_tokens} {verb}trained tokens"

    def to_text(self, max_breaches: int = 50) -> str:
        """A human-readable report (what `agentgraphs check` prints); its last line is the verdict."""
        lines = [(f"run {self.run_dir}: {self.rollouts} rollouts, {self.sequences} training sequences, "
                  f"{self.trained_tokens} trained tokens")]
        if self.rescoring:
            lines.append(f"re-scored {self._rescored_what(verb='')} with {self.model or 'the given scorer'} on "
                         f"{self.device} (threshold {self.threshold:g}, each at its turn's temperature)")
            if self.unscored_tokens:
                lines.append(f"  not re-scored: {self.unscored_tokens} trained tokens no engine call produced "
                             "(see the untraced_token breaches)")
            lines.append(f"  {'node':<24} {'tokens':>8} {'max|d|':>10} {'mean|d|':>10} {'over':>7} {'share':>7}")
            for n in self.nodes.values():
                lines.append(f"  {n['node']:<24} {n['tokens']:>8} {n['max_abs_delta']:>10.3g} "
                             f"{n['mean_abs_delta']:>10.3g} {n['over_threshold']:>7} {n['share_over_threshold']:>7.2%}")
            for w in self.worst[:5]:
                seq = f"sequence {w['sequence']}" if w["sequence"] is not None else f"turn {w['turn']}"
                lines.append(f"  largest: line {w['line']} {seq} node {w['node']} position "
                             f"{w['position']} (T {w['temperature']:g}): recorded {w['recorded']:.6f} "
                             f"re-scored {w['rescored']:.6f}")
        if self.breaches:
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
        lines.append(self.verdict())
        return "\n".join(lines)


Scorer = Callable[[list[int], list[int], list[float]], list[float]]


def check_run(run_dir: str | Path, model_dir: str | Path | None = None, *, device: str = "cpu",
              threshold: float = 1e-3, dtype: str = "float32", scorer: Scorer | None = None,
              allow_drift: bool = False, max_worst: int = 10) -> CheckReport:
    """Audit a run directory; with `model_dir`, also re-score every trained token with that model (in a run
    that trains nothing: every output token of the policy engine's recorded calls).

    `scorer(tokens, positions, temperatures) -> log-probs` replaces the transformers model (for a model
    you already hold in memory); by default one is built from `model_dir` with AutoModelForCausalLM.
    An empty run (no rollout at all) is a ConfigError: there is nothing to vouch for.

    >>> import tempfile
    >>> from agentgraphs.testing.runs import synthetic_records, write_run_dir
    >>> run = write_run_dir(synthetic_records(3, 600, [100, 200]), tempfile.mkdtemp())
    >>> report = check_run(run)  # invariants only; pass a model directory to re-score too
    >>> report.ok, report.rollouts, report.sequences, report.verdict()[:3]
    (True, 3, 60, 'OK:')
    """
    if not 0 < threshold < math.inf:
        # an infinite threshold counts no token over it: any model, even another one, would pass
        raise ConfigError(f"--threshold {threshold}: must be > 0 and finite (to report drift without failing, "
                          "pass --allow-drift)")
    path = check_run_has_rollouts(run_dir, "check")  # before loading a model
    if scorer is None and model_dir is not None:
        scorer = transformers_scorer(model_dir, device=device, dtype=dtype)
    report = CheckReport(run_dir=str(run_dir), model=str(model_dir) if model_dir else None, device=device,
                         threshold=threshold, allow_drift=allow_drift, rescoring=scorer is not None)
    deltas: dict[str, list[float]] = {}
    worst: list[dict[str, Any]] = []
    for rec in read_run(path):
        report.rollouts += 1
        audit = audit_record(rec)
        report.breaches.extend(audit.breaches)
        for s, (seq, seq_audit) in enumerate(zip(rec.sequences, audit.sequences)):
            report.sequences += 1
            report.trained_tokens += len(seq_audit.trained)
            if scorer is not None:
                _rescore(s, seq, seq_audit, rec, scorer, report, deltas, worst)
    if scorer is not None and not report.trained_tokens:
        # nothing trained (an --eval run): without this pass a wrong model would pass having compared nothing
        policy = read_summary(path).get("engine")
        for rec in read_run(path):
            _rescore_calls(rec, policy if isinstance(policy, str) else None, scorer, report, deltas, worst)
    for node, ds in deltas.items():
        over = sum(1 for d in ds if d > threshold)
        report.nodes[node] = NodeDrift(node=node, tokens=len(ds), max_abs_delta=max(ds, default=0.0),
                                       mean_abs_delta=sum(ds) / len(ds) if ds else 0.0, over_threshold=over,
                                       share_over_threshold=over / len(ds) if ds else 0.0)
    worst.sort(key=lambda w: -w["abs_delta"])
    report.worst = worst[:max_worst]
    return report


def turn_temperature(turn: Turn) -> float:
    """The temperature a turn's log-probs were taken at (below GREEDY_BELOW: greedy, unscaled, so 1.0).

    >>> turn_temperature({"temperature": 0.7}), turn_temperature({"temperature": 0.0})
    (0.7, 1.0)
    """
    value = turn.get("temperature")
    if value is None:
        raise ConfigError(f"turn of node {turn.get('node')!r} records no temperature: traces.jsonl is from an "
                          "older agentgraphs or was edited; re-run to re-score it")
    t = float(value)
    return t if t >= GREEDY_BELOW else 1.0


def _rescore(s: int, seq: dict[str, Any], audit: SequenceAudit, rec: RunRecord, scorer: Scorer,
             report: CheckReport, deltas: dict[str, list[float]], worst: list[dict[str, Any]]) -> None:
    turns = rec.turns
    positions = [k for k in audit.trained if k in audit.produced]
    report.unscored_tokens += len(audit.trained) - len(positions)
    if not positions:
        return
    tokens = [int(t) for t in seq["tokens"]]
    lps = [float(x) for x in seq["rollout_log_probs"]]
    owners = [turns[audit.produced[k][0]] for k in positions]
    temps = [turn_temperature(turn) for turn in owners]
    got = scorer(tokens, positions, temps)
    report.rescored_tokens += len(positions)
    for k, turn, temp, new in zip(positions, owners, temps, got):
        where = {"line": rec.line, "index": rec.index, "sequence": s, "turn": audit.produced[k][0],
                 "node": turn["node"], "position": k, "temperature": temp}
        _record_delta(where, lps[k - audit.start], new, report, deltas, worst)


def _rescore_calls(rec: RunRecord, policy: str | None, scorer: Scorer, report: CheckReport,
                   deltas: dict[str, list[float]], worst: list[dict[str, Any]]) -> None:
    """Re-score the output of every call of the `policy` engine (None: summary.json is missing, so every
    call with token ids) after its own prompt ids: the context it was generated in, trained or not.
    Calls of other engines (judges, simulators) are another model's and are left alone."""
    for i, turn in enumerate(rec.turns):
        outputs = [int(t) for t in turn.get("output_ids") or []]
        if not outputs or (policy is not None and turn.get("engine") != policy):
            continue
        prompt = [int(t) for t in turn.get("prompt_ids") or []]
        lps = [float(x) for x in turn.get("output_logprobs") or []]
        if not prompt or len(lps) != len(outputs):
            report.unscored_untrained_tokens += len(outputs)
            continue
        temp = turn_temperature(turn)
        positions = list(range(len(prompt), len(prompt) + len(outputs)))
        got = scorer(prompt + outputs, positions, [temp] * len(positions))
        report.rescored_untrained_tokens += len(positions)
        for k, recorded, new in zip(positions, lps, got):
            where = {"line": rec.line, "index": rec.index, "sequence": None, "turn": i, "node": turn["node"],
                     "position": k, "temperature": temp}
            _record_delta(where, recorded, new, report, deltas, worst)


def _record_delta(where: dict[str, Any], recorded: float, rescored: float, report: CheckReport,
                  deltas: dict[str, list[float]], worst: list[dict[str, Any]]) -> None:
    d = abs(rescored - recorded)
    if not math.isfinite(d):
        d = float("inf")
    deltas.setdefault(where["node"], []).append(d)
    if d > report.threshold:
        worst.append({**where, "recorded": recorded, "rescored": rescored, "abs_delta": d})
        if len(worst) > 1000:  # bounded memory on a long run: keep the largest
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
    path = Path(model_dir)
    if not path.is_dir():
        raise ConfigError(f"--model {model_dir}: not a directory; pass the run's Hugging Face model directory")
    if not (path / "config.json").is_file():
        raise ConfigError(f"--model {model_dir}: not a model directory (no config.json); pass the Hugging Face "
                          "directory (config.json + weights) of the model the run sampled with")
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if torch_dtype is None:
        raise ConfigError(f"--dtype {dtype}: use float32, bfloat16 or float16")
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype).to(device).eval()
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        why = " ".join(str(exc).split())[:300]
        raise ConfigError(f"--model {model_dir}: transformers cannot load a causal language model from it "
                          f"({type(exc).__name__}: {why}); pass the Hugging Face directory of the model the "
                          "run sampled with") from None
    return model_scorer(model, chunk=chunk, name=f"--model {model_dir}")


def model_scorer(model: Any, *, chunk: int = 2048, name: str = "the model") -> Scorer:
    """A Scorer over a transformers causal LM already in memory (on its own device): one plain forward of
    the whole sequence per call, logits only at the scored positions, log_softmax(logits / T) in float32.
    A token id outside the model's vocabulary is a ConfigError (not the model the run sampled with)."""
    import torch

    device = next(model.parameters()).device
    vocab = int(model.get_input_embeddings().num_embeddings)

    def score(tokens: list[int], positions: list[int], temperatures: list[float]) -> list[float]:
        out: list[float] = []
        top = max(tokens, default=0)
        if top >= vocab or min(tokens, default=0) < 0:
            raise ConfigError(f"{name}: its vocabulary has {vocab} ids but the run holds token id "
                              f"{top if top >= vocab else min(tokens)}: not the model (or tokenizer) the run "
                              "sampled with")
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
