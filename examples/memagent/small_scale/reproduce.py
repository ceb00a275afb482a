"""A scaled-down reproduction of the seed's MemAgent RULER-HQA table, one command per stage.

    python reproduce.py model     --out W/model                   # 1. a Qwen2 from scratch (real Qwen2.5 vocab)
    python reproduce.py warmstart --init W/model --out W/warm     # 2. supervised on oracle rollouts, stopped early
    python reproduce.py rl        --init W/warm  --out W/rl       # 3. GRPO, the seed's reward and variant
    python reproduce.py rl        --init W/warm  --out W/rl_perm --permute   # the control: rewards permuted
    python reproduce.py eval      --ckpt W/rl --name RL --out W/eval_rl.json  # 4. the seed's RULER-HQA protocol
    python reproduce.py table     W/eval_*.json                   # the seed's table, strict and as the seed scores
    python reproduce.py compare   W/eval_warmstart.json W/eval_rl.json W/eval_rl_perm.json  # paired, by document
    python reproduce.py curves    W/rl/stage.json W/rl_perm/stage.json  # RL's curve beside its control's, by step

Each stage reads the previous stage's checkpoint directory (a Hugging Face model directory plus
`repro.json`, the shared settings) and writes its own, with `stage.json` (settings, curve, timings).
`examples/memagent/small_scale/README.md` explains the stages, `run_gpu.sh` chains them on one GPU.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pipeline as P  # noqa: E402

from agentgraphs.engines.sampling import DEFAULT_SAMPLER, SAMPLERS  # noqa: E402
from agentgraphs.memagent.synthetic import SENTENCE_LENGTHS


def _engine(ckpt: Path, device: str, seed: int, sampler: str = DEFAULT_SAMPLER) -> Any:
    import torch

    from agentgraphs.engines.hf import HFEngine

    # full fp32 (no TF32) for generation: the recorded log-probs are what the audit's re-score computes
    torch.backends.cuda.matmul.allow_tf32 = False
    return HFEngine.from_dir(ckpt, device=device, dtype=torch.float32, seed=seed, sampler=sampler, batching=True,
                             max_batch=512, max_prefill_tokens=65536 if device == "cuda" else 8192)


def _open(ckpt: Path, device: str, part: int = 0, sampler: str = DEFAULT_SAMPLER, draw: int = 0
          ) -> tuple[P.ReproConfig, Any, Any]:
    """A stage's start: the checkpoint's settings, torch and the engine seeded from them (and `part`: a resumed
    stage's later part draws other sampling seeds than its first; `draw`: another RL arm's seeds), its engine and
    the filler pool."""
    import torch

    cfg = P.ReproConfig.load(ckpt)
    seed = _seed(cfg, part, draw)
    torch.manual_seed(seed)
    engine = _engine(ckpt, device, seed, sampler)
    return cfg, engine, cfg.filler_pool(engine.tokenizer)


def _seed(cfg: P.ReproConfig, part: int, draw: int = 0) -> int:
    """The seed of a stage's `part` (0: its first call) in RL's `draw` (0: the run's own, the control's too)."""
    return cfg.seed + 1_000_003 * part + 7_000_003 * draw


SAVING = ".saving"  # a checkpoint's files are written here first, then moved in; stage.json, moved last, commits


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


def _save(engine: Any, out: Path, cfg: P.ReproConfig, stage: dict[str, Any],
          extra: Callable[[Path], None] | None = None) -> None:
    """Write a checkpoint so that a process killed at any moment leaves one that says what it is: every file is
    written under out/.saving, its sha256 recorded in stage.json's `files`, moved into `out`, and stage.json, the
    commit, moved in last. A save cut before that leaves the last stage.json, whose digests the new files then
    fail (`--resume` refuses); `extra(dir)` writes more files (AdamW's state) with the checkpoint's."""
    tmp = out / SAVING
    shutil.rmtree(tmp, ignore_errors=True)  # what a cut save left
    tmp.mkdir(parents=True)
    engine.model.save_pretrained(tmp)
    engine.tokenizer.save_pretrained(tmp)
    cfg.save(tmp)
    if extra is not None:
        extra(tmp)
    names = sorted(f.name for f in tmp.iterdir())
    stage = {**stage, "files": {name: _digest(tmp / name) for name in names}}
    P.write_json(tmp / "stage.json", stage)
    for name in names:
        os.replace(tmp / name, out / name)
    os.replace(tmp / "stage.json", out / "stage.json")
    tmp.rmdir()


def _check_files(ckpt: Path, stage: dict[str, Any]) -> None:
    """The files a checkpoint's stage.json was saved with, unchanged (stage files before the digests: none)."""
    for name, digest in stage.get("files", {}).items():
        if not (ckpt / name).exists() or _digest(ckpt / name) != digest:
            raise SystemExit(f"--resume: {ckpt / name} is not the file {ckpt / 'stage.json'} was saved with (a save "
                             "cut short, or a file changed since): the checkpoint's parts disagree. Resume from a "
                             "checkpoint whose files match, or start this arm again from its warm start")


def _args(args: argparse.Namespace) -> dict[str, Any]:
    return {k: v for k, v in vars(args).items() if k != "run"}


def _log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------- 1. model

def stage_model(args: argparse.Namespace) -> None:
    from agentgraphs.testing.tiny_model import build_tiny_model

    cfg = P.ReproConfig(hidden_size=args.hidden_size, layers=args.layers, heads=args.heads, kv_heads=args.kv_heads,
                        intermediate_size=args.intermediate_size, chunk_tokens=args.chunk_tokens,
                        memory_tokens=args.memory_tokens, final_tokens=args.final_tokens,
                        train_min_tokens=args.train_min_tokens, train_max_tokens=args.train_max_tokens,
                        eval_per_length=args.eval_per_length, seed=args.seed, value_digits=args.value_digits,
                        eval_lengths=[int(x) for x in args.eval_lengths.split(",")],
                        sentence_lengths=args.sentence_lengths)
    out = Path(args.out)
    build_tiny_model(out, seed=cfg.seed, hidden_size=cfg.hidden_size, num_layers=cfg.layers, num_heads=cfg.heads,
                     num_kv_heads=cfg.kv_heads, intermediate_size=cfg.intermediate_size, init_std=cfg.init_std)
    cfg.save(out)
    P.write_json(out / "stage.json", {"stage": "model", "config": cfg.model_dump()})
    _log(f"model written to {out}")


# ---------------------------------------------------------------------------------------------- 2. warm start

def _whole_number(minimum: int, what: str, example: str) -> Any:
    """An argparse `type` for a whole number >= `minimum`, its refusal naming `what` it counts and an example."""

    def parse(text: str) -> int:
        if not text.strip().isdigit() or int(text) < minimum:
            raise argparse.ArgumentTypeError(f"{text!r}: {what}, {minimum} or more ({example})")
        return int(text)
    return parse


def _batch_rows(trained: list[int], writes: list[int], batch: int, share: float, rng: Any) -> list[int]:
    """One warm-start step's training rows, drawn with replacement: uniformly from the trained rows, or with
    `share` of them from `writes` (the rows that first write the code into memory) and the rest uniformly."""
    import torch

    k = round(share * batch)
    picked = [writes[int(i)] for i in torch.randint(len(writes), (k,), generator=rng)] if k else []
    return picked + [trained[int(i)] for i in torch.randint(len(trained), (batch - k,), generator=rng)]


def _warmstart_lr(args: argparse.Namespace, step: int, elapsed_s: float) -> float:
    """Linear warm-up, then constant or a cosine down to 10 % over the stage (its step cap or its time budget,
    whichever comes first)."""
    lr = args.lr * min(1.0, step / args.warmup)
    if args.schedule == "cosine":
        done = step / args.max_steps
        if args.max_minutes:
            done = max(done, elapsed_s / (60 * args.max_minutes))
        lr *= 0.1 + 0.45 * (1 + math.cos(math.pi * min(done, 1.0)))
    return lr


def _probe(engine: Any, probe: list[dict[str, Any]], cfg: P.ReproConfig) -> dict[str, float]:
    """The held-out probe's scores at the training lengths: strict sub_em, the seed's sub_em, digits right, and
    the share of answers that are the code reversed (`answer_kind`): RL gained least from the starts that reversed
    most (bench/README, "Reversed codes across the runs"), so the warm start's log shows it before RL begins."""
    results = P.evaluate(engine, probe, cfg)
    scores = {f"probe_{name}": round(P.pooled(results, cfg.train_lengths, metric), 2)
              for name, metric in (("strict", "sub_em_strict"), ("sub_em", "sub_em"), ("digits", "digits"))}
    scores["probe_reversed"] = _reversed_share(results, cfg)
    scores["probe_off_memory"] = _off_memory_share(results, cfg)
    scores["probe_flips"] = _flips(results, cfg)
    return scores


def _flips(results: list[dict[str, Any]], cfg: P.ReproConfig) -> list[int]:
    """[reads, flips] of the digits memory updates copied at the training lengths (`pipeline.digit_flips`, all
    digits together): a start that confuses digits flips 15 % or more of them there, a start that does not 5 % or
    less (bench/README, "Confused digits")."""
    per_digit = P.digit_flips([r for r in results if r["length"] in cfg.train_lengths])
    return [sum(reads for reads, _ in per_digit.values()), sum(flips for _, flips in per_digit.values())]


def _flip_share(counts: list[int]) -> str:
    reads, flips = counts
    return f"{100 * flips / reads:.1f}% of {reads}" if reads else "- (no code copied)"


def _reversed_share(results: list[dict[str, Any]], cfg: P.ReproConfig) -> float:
    """The share (%) of the answers at the training lengths that are the gold code with its digits swapped."""
    kinds = P.answer_kinds(results, cfg.train_lengths)
    return round(100 * kinds["reversed"] / sum(kinds[k] for k in P.ANSWER_KINDS), 2)


def _off_memory_share(results: list[dict[str, Any]], cfg: P.ReproConfig) -> float | None:
    """The share (%) of the boxed answers at the training lengths, given from a final memory that holds a code,
    that are not its last number (`pipeline.answers_off_memory`; None: no such answer): the answer's copy of the
    code, which a start that confuses digits gets wrong. The starts whose answers left it in about half their
    documents gained least from RL (bench/README, "Confused digits"), so the warm start's log shows it before RL
    begins."""
    counts = P.answers_off_memory(results, cfg.train_lengths)
    return round(100 * counts["off_last"] / counts["answers"], 2) if counts["answers"] else None


def _shown(share: float | None) -> str:
    return "-" if share is None else f"{share:.1f}%"


def _confirm(engine: Any, cfg: P.ReproConfig, args: argparse.Namespace, step: int, point: dict[str, Any],
             pool: Any) -> float | None:
    """Strict sub_em on `--confirm-per-length` documents no probe has seen, before a stop (None: no
    confirmation asked). The first probe over the mark is the maximum of noisy draws: run 3's read 31 % on 48
    documents and the checkpoint scored 14.6 % on the evaluation's 144. A fresh sample is unbiased. Its answers'
    reversed share (`confirm_reversed`) is a second reading of the probe's, on twice its documents by default: the
    probe's 48 ranked two starts that reversed 13 and 11 of 144 codes the wrong way round (bench/README,
    "Write-share warm starts and reversed codes")."""
    if args.confirm_per_length <= 0:
        return None
    rows = P.eval_rows(engine.tokenizer, cfg, cfg.train_lengths, args.confirm_per_length, f"confirm-{step}", pool)
    results = P.evaluate(engine, rows, cfg)
    point["confirm_strict"] = round(P.pooled(results, cfg.train_lengths), 2)
    point["confirm_reversed"] = _reversed_share(results, cfg)
    point["confirm_off_memory"] = _off_memory_share(results, cfg)
    point["confirm_flips"] = _flips(results, cfg)
    _log(f"step {step}: confirmation on {len(rows)} new documents: strict sub_em {point['confirm_strict']:.1f}%, "
         f"reversed {point['confirm_reversed']:.1f}%, answers off the memory's last number "
         f"{_shown(point['confirm_off_memory'])}, digits flipped {_flip_share(point['confirm_flips'])}")
    return point["confirm_strict"]


class _Snapshot(NamedTuple):
    """The warm start as it stood at a probe under the band's top: where an overshoot goes back to."""
    step: int  # the curve's length then too: it holds one point a step, from step 1
    over: int  # probes over the mark in a row, then
    model: dict[str, Any]
    optimizer: dict[str, Any]
    rng: Any


def _snapshot(step: int, over: int, model: Any, optimizer: Any, rng: Any) -> _Snapshot:
    return _Snapshot(step, over, _weights(model), copy.deepcopy(optimizer.state_dict()), rng.get_state())


def _restore(snap: _Snapshot, model: Any, optimizer: Any, rng: Any) -> None:
    """Weights, AdamW's moments and the batch sampler's state, exactly as at `snap` (a copy: an optimizer
    loads its state by reference, and a second overshoot may go back to the same snapshot)."""
    model.load_state_dict(snap.model)
    optimizer.load_state_dict(copy.deepcopy(snap.optimizer))
    rng.set_state(snap.rng)


def _demo_part(init: str, device: str, split: str, n: int) -> dict[str, Any]:
    """One worker's share of the demonstrations: `n` oracle rollouts of documents of family `split`."""
    cfg, engine, pool = _open(Path(init), device)
    rows = P.needle_rows(engine.tokenizer, P.random_lengths(cfg, n, split), split, cfg, pool)
    return dict(P.oracle_data(engine, rows, cfg))


def _demos(engine: Any, init: Path, cfg: P.ReproConfig, args: argparse.Namespace, pool: Any) -> dict[str, Any]:
    """The oracle's training rows for `args.demos` documents. The oracle's text does not depend on the model
    and supervised training reads only ids and masks, so `--demo-workers` processes (each with its own copy
    of the initial model, on the same device) roll disjoint families of documents at once; 1 = in process."""
    if args.demo_workers <= 1:
        rows = P.needle_rows(engine.tokenizer, P.random_lengths(cfg, args.demos, args.demo_split), args.demo_split, cfg,
                             pool)
        return dict(P.oracle_data(engine, rows, cfg))
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    shares = [args.demos // args.demo_workers + (k < args.demos % args.demo_workers) for k in range(args.demo_workers)]
    with ProcessPoolExecutor(args.demo_workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        parts = list(pool.map(_demo_part, [str(init)] * len(shares), [args.device] * len(shares),
                              [f"{args.demo_split}-{k}" for k in range(len(shares))], shares))
    return _merged(parts, shares)


def _merged(parts: list[dict[str, Any]], shares: list[int]) -> dict[str, Any]:
    """The workers' per-row lists, concatenated. Each part numbers its rollouts from 0: `sample_indices` are
    offset by the rollouts of the parts before (so that the rows of one rollout, and only they, share one),
    and the other counters and ids of one part's own rollouts, meaning nothing merged, are dropped.

    >>> _merged([{"sample_indices": [0, 0], "tokens": [[1], [2]], "rollout_ids": [0, 0]},
    ...          {"sample_indices": [0], "tokens": [[3]], "rollout_ids": [0]}], [1, 1])
    {'sample_indices': [0, 0, 1], 'tokens': [[1], [2], [3]]}
    """
    merged = {key: [x for part in parts for x in part[key]] for key in parts[0]
              if isinstance(parts[0][key], list) and key not in ("rollout_ids", "group_ids", "sample_indices")}
    offsets = [sum(shares[:k]) for k in range(len(parts))]
    return {"sample_indices": [i + offset for part, offset in zip(parts, offsets, strict=True)
                               for i in part["sample_indices"]], **merged}


def _stop_reason(args: argparse.Namespace, point: dict[str, Any], over: int, verdict: str, overshoots: int) -> str:
    """Why the warm start stopped where it did, in words (`run_in_calls.sh` reads its first word: "probe").
    Each figure says where it sits against the band, and the confirmation, where there is one, decides
    (`verdict`): a probe over the top with no refinement left can stop on a confirmation inside the band."""
    def place(score: float) -> str:
        if args.stop_above is None:
            return f">= {args.stop_at}%"
        inside = P.band_verdict(score, args.stop_at, args.stop_above) == "in"
        return f"in the band {args.stop_at}-{args.stop_above}%" if inside else f"over the band's top {args.stop_above}%"

    spent = f" with no refinement left (--refines {args.refines})" if verdict == "over" else ""
    confirmed = point.get("confirm_strict")
    text = f"probe strict sub_em {point['probe_strict']:.1f}% {place(point['probe_strict'])}"
    text += (spent if confirmed is None else "") + f" at step {point['step']}"
    text += f" ({over} probes in a row)" if args.settle > 1 else ""
    if confirmed is not None:
        text += f", confirmed on new documents: {confirmed:.1f}%"
        if args.stop_above is not None:
            differs = place(confirmed) != place(point["probe_strict"])
            text += f" {place(confirmed)}{spent}" + (" (the confirmation decides)" if differs else "")
    return text + (f", after {overshoots} overshoot{'s' * (overshoots > 1)} (stop['overshoots'])" if overshoots else "")


class _Training(NamedTuple):
    """What every attempt of a warm start trains and probes on, made once per stage."""
    data: dict[str, Any]  # the oracle's training rows
    trained: list[int]  # the rows with a trained position
    writes: list[int]  # the rows that first write the code into memory (--write-share; else empty)
    probe: list[dict[str, Any]]  # the held-out probe's documents
    pool: Any  # the filler pool the confirmation's documents are drawn from
    started: float  # the stage's start (perf_counter): the time budget counts from it


class _Attempt(NamedTuple):
    """One warm start from the stage's init weights to its stop."""
    stop: dict[str, Any]  # its reason, step, and overshoots (with --stop-above)
    curve: list[dict[str, Any]]
    by_probe: bool  # it stopped on its probe (not on its step cap or the time budget)


def _attempt(engine: Any, cfg: P.ReproConfig, args: argparse.Namespace, t: _Training, attempt: int) -> _Attempt:
    """Supervised steps from the model as it stands, with a fresh AdamW and batches drawn from the attempt's own
    seed (attempt 0: the checkpoint's), until the probe stops it, or the step cap or the stage's time budget."""
    import torch

    from agentgraphs.testing.grpo import trained_logprobs

    data, started = t.data, t.started
    model = engine.model
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.0)
    rng = torch.Generator().manual_seed(_seed(cfg, attempt))
    autocast = engine.device.type == "cuda"
    curve: list[dict[str, Any]] = []
    stop: dict[str, Any] = {"reason": f"max_steps {args.max_steps} reached"}
    by_probe = False
    over = 0  # probes over the mark in a row
    top, every, refines = args.stop_above, args.eval_every, args.refines  # the band's top; probe spacing
    overshoots: list[dict[str, Any]] = []
    snap = _snapshot(0, 0, model, optimizer, rng) if top is not None else None
    step = 0
    while step < args.max_steps:
        step += 1
        if _over_budget(args, started):
            stop = {"reason": f"time budget of {args.max_minutes} min spent"}
            break
        for group in optimizer.param_groups:
            group["lr"] = _warmstart_lr(args, step, time.perf_counter() - started)
        pick = _batch_rows(t.trained, t.writes, args.batch, args.write_share, rng)
        total = sum(sum(data["loss_masks"][r]) for r in pick)
        with engine.model_lock:
            model.train()
            optimizer.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for k in range(0, len(pick), args.micro_batch):
                with torch.autocast(engine.device.type, dtype=torch.bfloat16, enabled=autocast):
                    logp = trained_logprobs(model, data, pick[k:k + args.micro_batch], 1.0)[0]["logp"]
                loss = -logp.sum() / total
                loss.backward()
                loss_sum += float(loss.detach())
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            model.eval()
        point: dict[str, Any] = {"step": step, "loss": round(loss_sum, 4), "s": round(time.perf_counter() - started, 1)}
        curve.append(point)
        if not (step >= args.eval_from and step % every == 0):
            if step % 10 == 0:
                _log(f"step {step}: loss {loss_sum:.3f}")
            continue
        point.update(_probe(engine, t.probe, cfg))
        _log(f"step {step}: loss {loss_sum:.3f}, probe strict sub_em {point['probe_strict']:.1f}%, "
             f"digits right {point['probe_digits']:.1f}%, reversed {point['probe_reversed']:.1f}%, "
             f"off the memory's last number {_shown(point['probe_off_memory'])}, "
             f"digits flipped {_flip_share(point['probe_flips'])}")
        verdict = P.band_verdict(point["probe_strict"], args.stop_at, top)
        if verdict != "over" or not refines:  # with no refinement left, an overshoot counts as over the mark
            over = over + 1 if verdict != "under" else 0
            if over >= args.settle:
                confirmed = _confirm(engine, cfg, args, step, point, t.pool)
                if confirmed is not None:  # the unbiased figure decides; under the mark: not confirmed, train on
                    verdict = P.band_verdict(confirmed, args.stop_at, top)
                if verdict == "in" or (verdict == "over" and not refines):
                    stop, by_probe = {"reason": _stop_reason(args, point, over, verdict, len(overshoots))}, True
                    break
        if verdict == "over" and refines:  # back to the last probe under the top; probe `--refine-by`x as often
            assert snap is not None
            every = max(1, every // args.refine_by)
            refines -= 1
            overshoots.append({"step": step, **{k: point[k] for k in ("probe_strict", "confirm_strict") if k in point},
                               "back_to": snap.step, "probe_every": every})
            _log(f"step {step}: over the band's top ({top}%): back to step {snap.step}, a probe every {every} steps")
            _restore(snap, model, optimizer, rng)
            step, over, curve = snap.step, snap.over, curve[:snap.step]
        elif top is not None and verdict != "over":
            snap = _snapshot(step, over, model, optimizer, rng)
    if top is not None:
        stop["overshoots"] = overshoots
    stop["step"] = curve[-1]["step"] if curve else 0
    return _Attempt(stop, curve, by_probe)


def _reversed_at_stop(point: dict[str, Any], probe_answers: int, confirm_answers: int) -> float:
    """The share (%) of answers that are the code reversed at a stop: the probe's and the confirmation's answers
    pooled (run 19's stop read 39.6 % of the probe's 48 and 17.7 % of the confirmation's 96; its evaluation 22.2 %
    of 144), each reading weighed by its count of answers.

    >>> _reversed_at_stop({"probe_reversed": 39.58, "confirm_reversed": 17.71}, 48, 96)
    25.0
    >>> _reversed_at_stop({"probe_reversed": 12.5}, 48, 96)  # no confirmation: the probe alone
    12.5
    """
    readings = [(point["probe_reversed"], probe_answers)]
    if "confirm_reversed" in point:
        readings.append((point["confirm_reversed"], confirm_answers))
    return round(sum(share * n for share, n in readings) / sum(n for _, n in readings), 2)


def _flips_at_stop(point: dict[str, Any]) -> float | None:
    """The share (%) of copied digits flipped at a stop: the probe's and the confirmation's copies pooled (None:
    no code was copied, so there is nothing to read).

    >>> _flips_at_stop({"probe_flips": [100, 20], "confirm_flips": [300, 20]}), _flips_at_stop({"probe_flips": [0, 0]})
    (10.0, None)
    """
    reads = point["probe_flips"][0] + point.get("confirm_flips", [0, 0])[0]
    flips = point["probe_flips"][1] + point.get("confirm_flips", [0, 0])[1]
    return round(100 * flips / reads, 2) if reads else None


def _weights(model: Any) -> dict[str, Any]:
    """A copy of the model's weights (a state dict is by reference: the next step would change it)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def stage_warmstart(args: argparse.Namespace) -> None:
    init, out = Path(args.init), Path(args.out)
    cfg, engine, pool = _open(init, args.device)
    started = time.perf_counter()
    data = _demos(engine, init, cfg, args, pool)
    demo_s = time.perf_counter() - started
    trained = [r for r, m in enumerate(data["loss_masks"]) if any(m)]
    _log(f"{args.demos} oracle rollouts -> {len(data['tokens'])} training sequences "
         f"({sum(map(sum, data['loss_masks']))} trained tokens) in {demo_s:.1f}s")
    writes: list[int] = []
    if args.write_share:
        writes = P.first_writes(data, P.digit_ids(engine.tokenizer))
        if len(writes) != args.demos:  # every oracle rollout writes its code once (it scored reward 1)
            raise SystemExit(f"--write-share: {len(writes)} rows first write a digit into memory for {args.demos} "
                             "oracle rollouts, where each writes its code once (is the code made of digits? "
                             "--value-digits at the model stage); pass --write-share 0")
        _log(f"{len(writes)} rows first write the code into memory: {args.write_share:.0%} of each batch from them")
    probe = P.eval_rows(engine.tokenizer, cfg, cfg.train_lengths, args.probe_per_length, "probe", pool)
    attempts = args.restarts + 1 if _restart_limits(args) else 1
    run, stop = _warm_starts(engine, cfg, args, _Training(data, trained, writes, probe, pool, started), attempts)
    stop["seconds"] = round(time.perf_counter() - started, 1)
    _log(f"stopped: {stop['reason']}")
    _save(engine, out, cfg, {"stage": "warmstart", "args": _args(args), "demos": args.demos,
                             "sequences": len(data["tokens"]), "demo_s": round(demo_s, 1), "stop": stop,
                             "curve": run.curve})


def _stop_readings(point: dict[str, Any], t: _Training, cfg: P.ReproConfig, args: argparse.Namespace,
                   limits: dict[str, float]) -> dict[str, float | None]:
    """The readings of a stop that a restart flag acts on (`limits`: stop key -> the flag's share)."""
    confirm_answers = args.confirm_per_length * len(cfg.train_lengths)
    read = {"reversed": lambda: _reversed_at_stop(point, len(t.probe), confirm_answers),
            "flips": lambda: _flips_at_stop(point)}
    return {key: read[key]() for key in limits}


def _warm_starts(engine: Any, cfg: P.ReproConfig, args: argparse.Namespace, t: _Training,
                 attempts: int) -> tuple[_Attempt, dict[str, Any]]:
    """The warm start, begun again from the init weights while its stop reads a share at or over a restart flag's
    (`--restart-reversed`: answers that are the code reversed; `--restart-flips`: copied digits flipped), `attempts`
    times at most; returns the attempt kept (its weights in the engine's model) and its stop, which lists the
    attempts begun again from (`rejected`). A rejected stop is kept, the one least over its limits (the largest of
    its readings over their flags' shares, least), when every attempt reads as much, when the time budget left is
    shorter than the last rejected attempt took to its stop (run 30 began again with 102 s left after a 317 s
    attempt, and RL started from an attempt its probe never stopped, at 4.2 %), or when an attempt begun again
    ends at the step cap or the time budget before its probe stops it (kept as `stop['unfinished']`)."""
    limits = _restart_limits(args)
    flags = {rule.key: (flag, rule.words) for flag, rule in RESTART_FLAGS.items()}
    init = _weights(engine.model) if limits else {}
    rejected: list[dict[str, Any]] = []
    least: tuple[float, int, dict[str, float | None], dict[str, Any], _Attempt] | None = None
    unfinished: dict[str, Any] = {}
    read = " or ".join(f"{flags[k][0]} {limits[k]}%" for k in limits)
    why = f"every one of the {attempts} attempts read {read} or more (--restarts {attempts - 1})"
    for attempt in range(attempts):
        if attempt:
            engine.model.load_state_dict(init)
        begun = time.perf_counter()
        run = _attempt(engine, cfg, args, t, attempt)
        stop = dict(run.stop)
        if not limits:
            return run, stop
        tried = f" in attempt {attempt + 1}, after {attempt} restart{'s' * (attempt != 1)} (stop['rejected'])"
        tried = tried if attempt else ""
        if not run.by_probe and least is None:  # the step cap or the time budget, and no stop to fall back on
            stop["reason"] += tried
            return run, {**stop, "attempt": attempt, "rejected": rejected}
        if not run.by_probe:  # begun again, and never stopped by its probe: the stop rejected before is worth more
            last = next((p for p in reversed(run.curve) if "probe_strict" in p), {})
            unfinished = {"attempt": attempt, **stop, "seconds": round(time.perf_counter() - begun, 1),
                          **{k: last[k] for k in ("probe_strict", "probe_reversed", "probe_flips") if k in last},
                          "curve": run.curve}
            probed = f" (its last probe: strict sub_em {last['probe_strict']:.1f}% at step {last['step']})" if last \
                else ""
            why = f"attempt {attempt + 1} ended ({stop['reason']}) before its probe stopped it{probed}"
            break
        point = run.curve[-1]
        readings = _stop_readings(point, t, cfg, args, limits)
        over = [key for key, share in readings.items() if share is not None and share >= limits[key]]
        said = ", ".join(_reading(flags[key][1], share) for key, share in readings.items())
        if not over:
            under = ", ".join(f"{_reading(flags[k][1], share)} under {flags[k][0]} {limits[k]}%"
                              for k, share in readings.items())
            stop["reason"] += f", {under}{tried}"
            return run, {**stop, "attempt": attempt, **readings, "rejected": rejected}
        seconds = round(time.perf_counter() - begun, 1)
        rejected.append({"attempt": attempt, **readings, **stop, "seconds": seconds,
                         **{k: point[k] for k in ("probe_strict", "probe_reversed", "probe_flips", "confirm_strict",
                                                  "confirm_reversed", "confirm_flips") if k in point},
                         "curve": run.curve})
        worst = max((share or 0.0) / limits[key] for key, share in readings.items())
        if least is None or worst < least[0]:
            least = (worst, attempt, readings, _weights(engine.model), run)
        left = _budget_left(args, t.started)
        short = attempt + 1 < attempts and left is not None and left < seconds  # a restart would not reach a stop
        if short:
            why = (f"not begun again: {left:.0f} s of the time budget left, under the {seconds:.0f} s it took to its "
                   "stop")
        _log(f"attempt {attempt + 1} stopped with {said} (>= " + " / ".join(f"{flags[k][0]} {limits[k]}%" for k in over)
             + ")" + (f": {why}" if short else ": beginning again from the init weights" if attempt + 1 < attempts
                      else ""))
        if short:
            break
    assert least is not None
    _, attempt, readings, weights, run = least
    engine.model.load_state_dict(weights)
    rejected = [r for r in rejected if r["attempt"] != attempt]
    stop = dict(run.stop)
    least_words = "the least reversed" if list(limits) == ["reversed"] else (
        "the least flipped" if list(limits) == ["flips"] else "the least over its limits")
    stop["reason"] += (f", {', '.join(_reading(flags[k][1], share) for k, share in readings.items())}: {why}: kept "
                       f"attempt {attempt + 1}, {least_words}{_where(unfinished, rejected)}")
    return run, {**stop, "attempt": attempt, **readings, "rejected": rejected,
                 **({"unfinished": unfinished} if unfinished else {})}


def _where(unfinished: dict[str, Any], rejected: list[dict[str, Any]]) -> str:
    """Where a kept stop's reason points for the attempts it was kept over (nothing, when there are none)."""
    return " (stop['unfinished'])" if unfinished else " (stop['rejected'])" if rejected else ""


def _budget_left(args: argparse.Namespace, started: float) -> float | None:
    """Seconds of a stage's time budget (`--max-minutes`, counted from `started`, a perf_counter) left now (None:
    no budget)."""
    return 60 * args.max_minutes - (time.perf_counter() - started) if args.max_minutes else None


def _over_budget(args: argparse.Namespace, started: float) -> bool:
    """A stage's time budget is spent (never, with no budget)."""
    left = _budget_left(args, started)
    return left is not None and left < 0


def _reading(words: str, share: float | None) -> str:
    """A stop's reading as its reason says it ("reversed 12.5%"; "digits flipped -" with nothing copied)."""
    return f"{words} {'-' if share is None else f'{share:.1f}%'}"


# ---------------------------------------------------------------------------------------------- 3. RL

def stage_rl(args: argparse.Namespace) -> None:
    import torch

    from agentgraphs.memagent import SPEC
    from agentgraphs.testing.grpo import FAULTS, GRPOConfig, GRPOTrainer

    init, out = Path(args.init), Path(args.out)
    earlier = _earlier_rl(init, args)
    part = len(earlier.get("curve", []))
    cfg, engine, pool = _open(init, args.device, part=part, sampler=args.sampler, draw=args.draw)
    audits: list[dict[str, Any]] = []
    # the seed's GRPO flags (run_memagent_7b.sh): --use-kl-loss --kl-loss-coef 0.001 --kl-loss-type low_var_kl
    # --eps-clip 0.2 --eps-clip-high 0.3 --weight-decay 0.1 --adam-beta2 0.98; the lr is ours (see --lr)
    config = GRPOConfig(steps=args.steps, n_samples_per_prompt=args.samples, lr=args.lr, temperature=1.0,
                        max_new_tokens=max(cfg.memory_tokens, cfg.final_tokens), eps_clip=args.eps_clip,
                        eps_clip_high=args.eps_clip_high,
                        micro_batch_size=args.micro_batch, concurrency=args.prompts * args.samples, tf32=args.tf32,
                        skip_flat_updates=args.skip_flat, num_steps_per_rollout=args.steps_per_rollout,
                        use_kl_loss=args.kl_coef > 0, kl_loss_coef=args.kl_coef, kl_loss_type=args.kl_type,
                        lr_warmup_steps=args.lr_warmup, weight_decay=args.weight_decay)
    reference_dir = Path(earlier.get("reference", "") or init)  # the weights RL started from, in every part
    reference = _reference(reference_dir, args.device) if config.use_kl_loss else None

    def rows_for(step: int) -> list[dict[str, Any]]:
        split = f"rl-{step}" if args.draw == 0 else f"rl-draw{args.draw}-{step}"  # draw 0: the run's and its control's
        return P.needle_rows(engine.tokenizer, P.random_lengths(cfg, args.prompts, split), split, cfg, pool)

    def audit(rollouts: Any, samples: Any) -> None:
        P.audit_step(engine.model, rollouts, samples, config.temperature, audits)

    trainer = GRPOTrainer(SPEC, engine, rows_for(0), config, options=P.options(cfg),
                          corrupt=FAULTS["permute_within_groups"] if args.permute else None,
                          audit=None if args.no_audit else audit, reference=reference)
    curve: list[dict[str, Any]] = list(earlier.get("curve", []))
    seconds = float(earlier.get("seconds", 0.0))
    if earlier:  # a resumed run: AdamW's moments as the last call left them, the next documents in order
        trainer.optimizer.load_state_dict(torch.load(init / OPTIMIZER, map_location=args.device))
        _log(f"resuming after step {len(curve) - 1} ({seconds:.0f} s of RL so far)")
    started = time.perf_counter()
    for step in range(len(curve), args.steps):
        if _over_budget(args, started):
            _log(f"time budget of {args.max_minutes} min spent after {step} steps")
            break
        trainer.rows = rows_for(step)
        s = trainer.step()
        point = {k: s[k] for k in ("reward_mean", "reward_std", "group_means", "flat_groups", "sequences",
                                   "trained_tokens", "loss", "clipfrac", "entropy", "kl", "logp_diff_max", "ratio_min",
                                   "ratio_max", "grad_norm", "optimizer_steps", "skipped", "rollout_s", "train_s")}
        point = {"step": step, **point, "lr": trainer.optimizer.param_groups[0]["lr"],  # its last optimizer step's
                 "audit": audits[-1] if audits else None}
        curve.append(point)
        flat = f"{s['flat_groups']}/{len(s['group_means'])} ({sum(1 for m in s['group_means'] if m == 0)} at 0)"
        _log(f"step {step}: reward {s['reward_mean']:.3f} (sd {s['reward_std']:.3f}) flat groups {flat} "
             f"entropy {s['entropy']:.3f} kl {s['kl']:.2e} |dlogp| {s['logp_diff_max']:.1e} seqs {s['sequences']} "
             f"rollout {s['rollout_s']:.1f}s "
             f"train {s['train_s']:.1f}s" + (f" audit max|d| {audits[-1]['max_abs_delta']:.1e}" if audits else ""))
    _save(engine, out, cfg, {"stage": "rl", "args": _args(args), "trainer": config.model_dump(mode="json"),
                             "permuted": args.permute, "steps": len(curve),
                             "reference": str(reference_dir) if reference is not None else "",
                             "seconds": round(seconds + time.perf_counter() - started, 1), "curve": curve,
                             "calls": [*earlier.get("calls", []), {**_args(args), "seed": _seed(cfg, part, args.draw)}],
                             "batch_stats": vars(engine.batcher.stats) if engine.batcher else None},
          extra=lambda d: torch.save(trainer.optimizer.state_dict(), d / OPTIMIZER))


OPTIMIZER = "optimizer.pt"  # AdamW's state beside an RL checkpoint: `rl --resume` continues from it


def _reference(ckpt: Path, device: str) -> Any:
    """The KL loss's frozen reference (slime's --ref-load): the checkpoint RL started from, in fp32."""
    import torch
    from transformers import AutoModelForCausalLM

    if not (ckpt / "config.json").exists():
        raise SystemExit(f"the KL reference {ckpt} is not a checkpoint (it must stay where RL started from, "
                         "or pass --kl-coef 0)")
    return AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).to(device)


def _share(text: str) -> float:
    """`--write-share`: a fraction of each batch, 0 or more and under 1."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a share of each batch, 0 (the default: uniform) up to but not 1 "
                                         "(0.5: half of each batch)")
    return value


class RestartFlag(NamedTuple):
    """A warm start's restart rule: a stop reading its share or more begins again from the init weights."""
    key: str  # the stop's key for its reading (stage.json's stop.<key>)
    words: str  # how a stop's reason says the reading
    what: str  # what the flag's value is a share of, as a refusal says it
    example: str  # a value and what it means, as a refusal gives it
    help: str


RESTART_FLAGS = {
    "--restart-reversed": RestartFlag(
        "reversed", "reversed", "answers",
        "20: begin again when a fifth of the answers at the stop are the code reversed",
        "begin again from the init weights (a fresh AdamW, other batches) when the stop reads this share (%%) of "
        "answers or more that are the code reversed, probe's and confirmation's pooled: RL from a start reversing 28 "
        "codes of 144 or more gained +13.9 at most (runs 8, 12, 17, 19); default: never"),
    "--restart-flips": RestartFlag(
        "flips", "digits flipped", "copied digits",
        "10: begin again when a tenth of the digits memory updates copied at the stop came out as another digit",
        "begin again from the init weights (as --restart-reversed) when the stop reads this share (%%) of the digits "
        "memory updates copied or more flipped into another digit, probe's and confirmation's copies pooled: RL from "
        "starts that flipped 15 %% or more of them at 1K-4K gained +11.8 at most, or lost 32K on the digits they "
        "confused (runs 10, 21, 23, 26-29); default: never"),
}


def _restart_limits(args: argparse.Namespace) -> dict[str, float]:
    """The restart rules a warm start was given: each rule's stop key -> its flag's share (empty: none)."""
    given = ((rule.key, getattr(args, flag[2:].replace("-", "_"))) for flag, rule in RESTART_FLAGS.items())
    return {key: share for key, share in given if share is not None}


def _percent(what: str, example: str) -> Callable[[str], float]:
    """A restart flag's type: a share of `what` (%), over 0 and at most 100, refused with `example`."""
    def share(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = 0.0
        if not 0 < value <= 100:
            raise argparse.ArgumentTypeError(f"{text!r}: a share of {what} in %, over 0 and at most 100 ({example})")
        return value
    return share


def _positive(text: str) -> float:
    """A PPO clip range: a number over 0."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a clip range is a number over 0 (the seed: 0.2 below, 0.3 above)")
    return value


# the seed's PPO clip (run_memagent_7b.sh), the flags' defaults; stage files written before the flags ran with it
SEED_CLIP = {"eps_clip": 0.2, "eps_clip_high": 0.3}


def _earlier_rl(init: Path, args: argparse.Namespace) -> dict[str, Any]:
    """With --resume: the stage file of the RL run in `init` (same arm, same settings), else {}."""
    if not args.resume:
        return {}
    stage_file = init / "stage.json"
    stage = json.loads(stage_file.read_text()) if stage_file.exists() else {}
    if stage.get("stage") != "rl" or not (init / OPTIMIZER).exists():
        raise SystemExit(f"--resume: {init} is not an RL checkpoint with {OPTIMIZER} (give --init the run to "
                         "continue, or drop --resume to start RL from a warm start)")
    _check_files(init, stage)
    was = stage["args"]
    same = ("prompts", "samples", "lr", "permute", "skip_flat", "steps_per_rollout", "kl_coef", "kl_type",
            "lr_warmup", "weight_decay", "sampler", "eps_clip", "eps_clip_high", "draw")
    was = {**SEED_CLIP, "draw": 0, **was}  # stage files written before the flags: the seed's clip, draw 0
    changed = [k for k in same if was.get(k) != getattr(args, k)]
    if changed:
        raise SystemExit(f"--resume: {', '.join(f'{k} was {was.get(k)!r}, now {getattr(args, k)!r}' for k in changed)}"
                         ": a resumed run keeps its settings (start a new run to change them)")
    return stage


# ---------------------------------------------------------------------------------------------- 4. eval

def stage_eval(args: argparse.Namespace) -> None:
    ckpt = Path(args.ckpt)
    cfg = P.ReproConfig.load(ckpt)
    engine = _engine(ckpt, args.device, cfg.seed)
    rows = P.eval_rows(engine.tokenizer, cfg, cfg.eval_lengths, cfg.eval_per_length, "eval")
    started = time.perf_counter()
    results = P.evaluate(engine, rows, cfg)
    table = P.by_length(results)
    summary = {"name": args.name, "ckpt": str(ckpt), "seconds": round(time.perf_counter() - started, 1),
               "train_lengths": cfg.train_lengths, "by_length": table,
               "train_strict": round(P.pooled(results, cfg.train_lengths), 2),
               "train_sub_em": round(P.pooled(results, cfg.train_lengths, "sub_em"), 2),
               "protocol": {"temperature": cfg.eval_temperature, "top_p": cfg.eval_top_p, "chunk_tokens": cfg.chunk_tokens,
                            "per_length": cfg.eval_per_length},
               "results": results}
    P.write_json(Path(args.out), summary)
    _log(f"{args.name}: " + "  ".join(f"{n}: {v['sub_em']:.1f}/{v['sub_em_strict']:.1f}" for n, v in table.items())
         + f"  ({summary['seconds']}s; sub_em / strict)")


def stage_table(args: argparse.Namespace) -> None:
    evals = [json.loads(Path(p).read_text()) for p in args.evals]
    text = ("RULER-HQA (synthetic needles), sub_em as the seed computes it (an empty answer counts as a hit):\n\n"
            + P.seed_table(evals, "sub_em") + "\n\nstrict sub_em (an empty answer never counts):\n\n"
            + P.seed_table(evals, "sub_em_strict") + "\n")
    print(text)
    if args.out:
        Path(args.out).write_text(text)


def stage_compare(args: argparse.Namespace) -> None:
    """Each evaluation against the first, document by document (McNemar), at the training lengths, 8x and more."""
    evals = [json.loads(Path(p).read_text()) for p in args.evals]
    base, train = evals[0], evals[0]["train_lengths"]
    far = [n for n in (int(k) for k in base["by_length"]) if n >= 8 * max(train)]
    report: dict[str, Any] = {"base": base["name"], "metric": args.metric, "train_lengths": train,
                              "lengths_8x": far, "vs_base": [], "answers": {}}
    for e in evals:  # what the misses are, model by model (pipeline.answer_kind)
        kinds = {"training_lengths": P.answer_kinds(e["results"], train)}
        if far:
            kinds["8x_and_more"] = P.answer_kinds(e["results"], far)
        report["answers"][e["name"]] = kinds
        print(f"{e['name']}: answers at {train}: " + ", ".join(f"{k} {v}" for k, v in kinds["training_lengths"].items()))
    for path, e in zip(args.evals[1:], evals[1:]):
        try:
            row: dict[str, Any] = {"training_lengths": P.paired(base, e, train, args.metric)}
        except ValueError as refused:  # evaluations of other documents: the message says what to do
            raise SystemExit(f"{path}: {refused}") from None
        if far:
            row["8x_and_more"] = P.paired(base, e, far, args.metric)
            at_train, at_far = P.pooled(e["results"], train, args.metric), P.pooled(e["results"], far, args.metric)
            row["kept_at_8x"] = round(at_far / at_train, 3) if at_train else float("nan")
        report["vs_base"].append({"name": e["name"], "file": str(path), **row})
        t = row["training_lengths"]
        print(f"{e['name']} vs {base['name']} at {train}: {t['before']:.2f} -> {t['after']:.2f} "
              f"({t['gain_points']:+.2f} points, won {t['won']} / lost {t['lost']}, McNemar z {t['mcnemar_z']:+.2f})"
              + (f"; at {far} it keeps {row['kept_at_8x']:.2f}x its training-length score" if far else ""))
    if args.out:
        P.write_json(Path(args.out), report)


def stage_curves(args: argparse.Namespace) -> None:
    """RL's curve beside its control's, window by window (pipeline.curve_windows)."""
    run, control = (json.loads(Path(p).read_text()) for p in (args.rl, args.control))
    try:
        windows = P.curve_windows(run, control, args.window)
    except ValueError as refused:  # a user's mistake: the message says which, no traceback
        raise SystemExit(str(refused)) from None
    print("steps | reward RL / control (difference, same documents) | entropy RL / control | KL RL / control "
          "| flat groups RL / control")
    for w in windows:
        pair = lambda key: f"{w[key]['rl']} / {w[key]['control']}"  # noqa: E731
        print(f"{w['steps'][0]}-{w['steps'][1]} | {pair('reward')} ({w['difference']:+.3f}) | {pair('entropy')} | "
              f"{pair('kl')} | {pair('flat_groups')}")
    if args.out:
        P.write_json(Path(args.out), {"rl": args.rl, "control": args.control, "window": args.window,
                                      "windows": windows})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="stage", required=True)
    dev = "cuda" if _cuda() else "cpu"

    m = sub.add_parser("model", help="1. a Qwen2 initialised from scratch")
    m.add_argument("--out", required=True)
    m.add_argument("--hidden-size", type=int, default=512)
    m.add_argument("--layers", type=int, default=8)
    m.add_argument("--heads", type=int, default=8)
    m.add_argument("--kv-heads", type=int, default=4)
    m.add_argument("--intermediate-size", type=int, default=1536)
    m.add_argument("--chunk-tokens", type=int, default=512)
    m.add_argument("--memory-tokens", type=int, default=32)
    m.add_argument("--final-tokens", type=int, default=24)
    m.add_argument("--train-min-tokens", type=int, default=1000)
    m.add_argument("--train-max-tokens", type=int, default=4000)
    m.add_argument("--eval-lengths", default="1000,2000,4000,8000,16000,32000")
    m.add_argument("--eval-per-length", type=int, default=64)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--value-digits", type=int, default=7, help="digits of the needle's secret code (the answer)")
    m.add_argument("--sentence-lengths", choices=SENTENCE_LENGTHS, default="varied",
                   help="the filler's sentences: of varied lengths, or all 11 tokens as in runs 3-29 (bench/README, "
                   "'Chunk alignment': there the place of a chunk boundary in a sentence cycles with the chunk index)")
    m.set_defaults(run=stage_model)

    w = sub.add_parser("warmstart", help="2. supervised steps on oracle rollouts, stopped early")
    w.add_argument("--init", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--demos", type=int, default=1024, help="oracle rollouts (documents) to train on")
    w.add_argument("--batch", type=int, default=128, help="training sequences per step")
    w.add_argument("--micro-batch", type=int, default=64)
    w.add_argument("--lr", type=float, default=1e-3)
    w.add_argument("--warmup", type=int, default=20)
    w.add_argument("--max-steps", type=int, default=600)
    w.add_argument("--eval-every", type=int, default=5)
    w.add_argument("--eval-from", type=int, default=25, help="first step at which the probe is evaluated")
    w.add_argument("--probe-per-length", type=_whole_number(1, "a whole number of documents", "16: 48 at 1K-4K"),
                   default=16, help="held-out probe documents per training length")
    w.add_argument("--stop-at", type=float, default=30.0, help="stop once probe strict sub_em (%%) reaches this")
    w.add_argument("--settle", type=_whole_number(1, "a whole number of probes", "1: the first probe over the mark"),
                   default=1,
                   help="stop only once this many probes in a row reach --stop-at (the copy appears as a jump; a stop "
                        "at the first probe after it keeps a copy too fresh to survive long documents: run 5)")
    w.add_argument("--stop-above", type=float, default=None,
                   help="the stop band's top (%%): a probe or confirmation over it is an overshoot; the stage goes "
                        "back to the last probe under it (weights, AdamW, batches) and probes --refine-by times as "
                        "often, --refines times at most (the copy forms as a jump: run 11 went 10.4 -> 70.8 -> 91.7 %% "
                        "in 100 steps); default: no top")
    w.add_argument("--refine-by", default=5, help="how much denser the probes get at an overshoot",
                   type=_whole_number(2, "a whole number", "5: a probe every 10 steps after probes every 50"))
    w.add_argument("--refines", type=int, default=2,
                   help="overshoots to go back from; after that an overshoot stops the stage, saying so")
    w.add_argument("--confirm-per-length", type=int, default=0,
                   help="before stopping, check the probe's verdict on this many new documents per training length "
                        "(0: stop on the probe alone)")
    w.add_argument("--demo-workers", type=int, default=1, help="processes rolling the oracle's demonstrations (each "
                   "holds its own engine on the device and scores up to 512 rollouts at once: on an H200 8 fit "
                   "beside an evaluation in most runs and ran out once (run 20), 6 fit, 14 ran out of memory)")
    w.add_argument("--demo-split", default="demo", help="family of demonstration documents (another name, other "
                   "documents: a continued warm start trains on new ones)")
    w.add_argument("--schedule", choices=("constant", "cosine"), default="constant",
                   help="learning rate after the warm-up: constant, or a cosine to 10 %% over the stage")
    w.add_argument("--max-minutes", type=float, default=0.0, help="stop (and save) after this wall time (0: no cap)")
    w.add_argument("--write-share", type=_share, default=0.0,
                   help="share of each batch drawn from the rows that first write the code into memory (one per "
                        "rollout; 0: every trained row alike)")
    for flag, rule in RESTART_FLAGS.items():
        w.add_argument(flag, default=None, type=_percent(rule.what, rule.example), help=rule.help)
    w.add_argument("--restarts", default=None, help="attempts after the first, at most (with --restart-reversed or "
                   "--restart-flips; default 2); if every attempt reads as much, the one least over its limits is "
                   "kept, saying so, and so it is when the --max-minutes left are fewer than the rejected attempt "
                   "took, or when an attempt begun again ends before its probe stops it",
                   type=_whole_number(1, "a whole number of attempts after the first", "2: three warm starts at most"))
    w.add_argument("--device", default=dev)
    w.set_defaults(run=stage_warmstart)

    r = sub.add_parser("rl", help="3. GRPO with the seed's reward and variant (every memory update and the answer "
                       "trained, the reward divided among them)")
    r.add_argument("--init", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--steps", type=int, default=16)
    r.add_argument("--prompts", type=int, default=24, help="documents per step")
    r.add_argument("--samples", type=int, default=8, help="rollouts per document (a GRPO group)")
    r.add_argument("--lr", type=float, default=5e-5, help="AdamW learning rate (5e-4 wrecked run 2's policy)")
    r.add_argument("--steps-per-rollout", type=int, default=1,
                   help="optimizer steps per rollout batch, each over an equal share of whole rollouts (slime's "
                        "--num-steps-per-rollout)")
    r.add_argument("--kl-coef", type=float, default=0.001,
                   help="slime's --kl-loss-coef to the weights RL starts from (the seed: 0.001; 0 = no KL loss)")
    r.add_argument("--kl-type", default="low_var_kl", choices=("k1", "k2", "k3", "low_var_kl"),
                   help="slime's --kl-loss-type (the seed: low_var_kl)")
    r.add_argument("--lr-warmup", type=int, default=0,
                   help="optimizer steps of linear warm-up from 0 (Megatron's --lr-warmup-iters; the seed: none)")
    r.add_argument("--weight-decay", type=float, default=0.1, help="AdamW's (the seed: 0.1)")
    r.add_argument("--eps-clip", type=_positive, default=SEED_CLIP["eps_clip"], help="PPO clip below 1 (the seed's)")
    r.add_argument("--eps-clip-high", type=_positive, default=SEED_CLIP["eps_clip_high"],
                   help="PPO clip above 1 (the seed's: clip-higher; = --eps-clip for a symmetric clip)")
    r.add_argument("--sampler", default=DEFAULT_SAMPLER, choices=SAMPLERS,
                   help="how the rollouts' engine draws a sampled token (HFEngine's sampler: the same distribution; "
                        "inverse_cdf draws one uniform per row, batched)")
    r.add_argument("--resume", action="store_true",
                   help="--init is an RL checkpoint of this arm: continue its curve, documents and AdamW state")
    r.add_argument("--skip-flat", action=argparse.BooleanOptionalAction, default=False,
                   help="no optimizer step when every group has one reward (every advantage 0); --no-skip-flat "
                        "undoes a --skip-flat given earlier on the line")
    r.add_argument("--tf32", action="store_true", help="TF32 matmuls in the update (generation stays fp32)")
    r.add_argument("--micro-batch", type=int, default=64)
    r.add_argument("--permute", action="store_true", help="the control: rewards permuted within each group")
    r.add_argument("--draw", type=_whole_number(0, "a whole number", "1: a second RL arm"), default=0,
                   help="another draw of RL from the same start: its own documents and sampling seeds (0: the "
                        "run's, which its control shares); whether RL's gain is the start's or RL's own luck")
    r.add_argument("--no-audit", action="store_true", help="skip the per-step `check` audit (never in a reported run)")
    r.add_argument("--max-minutes", type=float, default=0.0, help="stop stepping after this wall time (0: no cap)")
    r.add_argument("--device", default=dev)
    r.set_defaults(run=stage_rl)

    e = sub.add_parser("eval", help="4. the seed's RULER-HQA protocol on held-out documents")
    e.add_argument("--ckpt", required=True)
    e.add_argument("--name", required=True)
    e.add_argument("--out", required=True)
    e.add_argument("--device", default=dev)
    e.set_defaults(run=stage_eval)

    c = sub.add_parser("compare", help="paired comparison (McNemar) of evaluations of the same documents")
    c.add_argument("evals", nargs="+", help="eval files; the first is the base (e.g. the warm start)")
    c.add_argument("--metric", default="sub_em_strict", choices=P.METRICS)
    c.add_argument("--out", default="")
    c.set_defaults(run=stage_compare)

    v = sub.add_parser("curves", help="RL's training curve beside its control's, window by window (paired by step)")
    v.add_argument("rl", help="RL's stage.json")
    v.add_argument("control", help="its permuted-reward control's stage.json (the same run)")
    v.add_argument("--window", type=int, default=10, help="steps per window")
    v.add_argument("--out", default="")
    v.set_defaults(run=stage_curves)

    t = sub.add_parser("table", help="print the seed's table from eval JSON files")
    t.add_argument("evals", nargs="+")
    t.add_argument("--out", default="")
    t.set_defaults(run=stage_table)

    args = p.parse_args()
    if args.stage == "warmstart" and args.stop_above is not None and args.stop_above <= args.stop_at:
        p.error(f"--stop-above {args.stop_above} must be over --stop-at {args.stop_at}: the stop band is "
                "[--stop-at, --stop-above]")
    restart = next((flag for flag, rule in RESTART_FLAGS.items() if rule.key in _restart_limits(args)), None) \
        if args.stage == "warmstart" else None
    if restart and args.schedule == "cosine" and args.max_minutes:
        p.error(f"{restart} with --schedule cosine and --max-minutes: the cosine runs over the stage's time "
                "budget, which a restart cannot begin again; use --schedule constant, or a cosine over --max-steps "
                "(--max-minutes 0)")
    if args.stage == "warmstart" and args.restarts is not None and not restart:
        p.error(f"--restarts {args.restarts} without --restart-reversed or --restart-flips: nothing would begin "
                "again; add --restart-reversed PCT (20: a fifth of the answers reversed) or --restart-flips PCT (10: "
                "a tenth of the copied digits flipped), or drop --restarts")
    if restart and args.restarts is None:
        args.restarts = 2
    if args.stage == "warmstart" and args.refines < 0:
        p.error(f"--refines {args.refines}: a count of overshoots to go back from, 0 or more")
    args.run(args)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


if __name__ == "__main__":
    main()
