"""The small-scale MemAgent reproduction (examples/memagent/small_scale) on CPU with a tiny model: the oracle
through MemAgent's graph, its training rows, the per-step `check` audit, the evaluation and the table."""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import types
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "examples" / "memagent" / "small_scale"
sys.path.insert(0, str(HERE))

import pipeline as P  # noqa: E402

CFG = P.ReproConfig(chunk_tokens=128, memory_tokens=24, final_tokens=16, train_min_tokens=200, train_max_tokens=450,
                    eval_lengths=[200, 400], eval_per_length=2)


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> Any:
    from agentgraphs.engines.hf import HFEngine

    return HFEngine.from_dir(tiny_model_dir, device="cpu", batching=True, seed=0)


@pytest.fixture(scope="module")
def rows(engine: Any) -> list[dict[str, Any]]:
    return P.needle_rows(engine.tokenizer, [200, 330, 450], "test", CFG)


def test_pipeline_docstring_examples_run() -> None:
    """tests/test_doctests.py covers the packages; this example's own modules are checked here."""
    import doctest

    import publish
    import reproduce

    result = doctest.testmod(P, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 10 and result.failed == 0
    for module in (publish, reproduce):
        result = doctest.testmod(module)
        assert result.attempted >= 1 and result.failed == 0, module


def test_a_json_written_by_the_pipeline_is_whole_or_the_old_one(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """run_in_calls.sh takes an evaluation whose file exists as done: a write killed halfway (the machine's limit)
    must leave the old file or none, never a truncated one."""
    path = tmp_path / "eval_rl.json"
    P.write_json(path, {"results": [1, 2]})
    real = Path.write_text

    def killed_halfway(self: Path, text: str, *args: Any, **kwargs: Any) -> int:
        real(self, text[: len(text) // 2], *args, **kwargs)
        raise KeyboardInterrupt  # the signal, in the middle of the write

    monkeypatch.setattr(Path, "write_text", killed_halfway)
    with pytest.raises(KeyboardInterrupt):
        P.write_json(path, {"results": list(range(1000))})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"results": [1, 2]}
    P.write_json(path, {"results": [3]})
    assert json.loads(path.read_text()) == {"results": [3]}


def test_needles_sit_inside_one_chunk(engine: Any, rows: list[dict[str, Any]]) -> None:
    tok = engine.tokenizer
    for row in rows:
        ids = tok.encode(row["metadata"]["context"], add_special_tokens=False)
        chunks = [tok.decode(ids[i:i + CFG.chunk_tokens]) for i in range(0, len(ids), CFG.chunk_tokens)]
        needle = f"is {row['label'][0]}."
        assert sum(needle in c for c in chunks) == 1
        assert "The secret code of" in next(c for c in chunks if needle in c)


def test_oracle_rollouts_are_training_rows(engine: Any, rows: list[dict[str, Any]]) -> None:
    """The oracle's text, the model's ids and log-probs; to_train_data trains exactly the engine's outputs."""
    data = P.oracle_data(engine, rows, CFG)
    tok = engine.tokenizer
    per_row = [-(-len(tok.encode(r["metadata"]["context"], add_special_tokens=False)) // CFG.chunk_tokens) + 1
               for r in rows]
    assert len(data["tokens"]) == sum(per_row)  # one sequence per memory update + one for the answer
    texts = [tok.decode(t[len(t) - n:]) for t, n in zip(data["tokens"], data["response_lengths"])]
    first = texts[: per_row[0]]
    needle = next(i for i, t in enumerate(first) if t.startswith("The secret code of"))
    assert all(t == "No previous memory<|im_end|>" for t in first[:needle])
    assert all(t == first[needle] for t in first[needle: per_row[0] - 1])  # kept verbatim once seen
    assert first[-1] == f"\\boxed{{{rows[0]['label'][0]}}}<|im_end|>"
    for tokens, n, mask, lps in zip(data["tokens"], data["response_lengths"], data["loss_masks"],
                                    data["rollout_log_probs"]):
        assert mask == [1] * n and len(lps) == n
        assert lps == pytest.approx(engine.score(tokens[:-n], tokens[-n:], 1.0), abs=1e-4)


def test_first_writes_are_the_rows_that_read_the_code_out_of_a_chunk(engine: Any, rows: list[dict[str, Any]]) -> None:
    """`first_writes` on real oracle rows (the Qwen2.5 tokenizer): one row per rollout, the memory update whose
    chunk holds the needle, read here from the decoded texts, not from digit ids."""
    data = P.oracle_data(engine, rows, CFG)
    texts = [engine.tokenizer.decode(t[len(t) - n:]) for t, n in zip(data["tokens"], data["response_lengths"])]
    starts = [i for i, index in enumerate(data["sample_indices"]) if i == 0 or data["sample_indices"][i - 1] != index]
    expected = []
    for start, end, row in zip(starts, [*starts[1:], len(texts)], rows, strict=True):
        needle = next(i for i in range(start, end) if texts[i].startswith("The secret code of"))
        assert all(t == "No previous memory<|im_end|>" for t in texts[start:needle])
        assert row["label"][0] in texts[needle]
        expected.append(needle)
    assert P.first_writes(data, P.digit_ids(engine.tokenizer)) == expected
    # --demo-workers: parts that each rolled one document, merged, keep their rollouts apart
    import reproduce as R

    parts = [dict(P.oracle_data(engine, [row], CFG)) for row in rows]
    assert all(set(part["sample_indices"]) == {0} for part in parts)  # each part numbers its rollouts from 0
    merged = R._merged(parts, [1] * len(parts))
    assert merged["tokens"] == data["tokens"] and merged["loss_masks"] == data["loss_masks"]
    assert P.first_writes(merged, P.digit_ids(engine.tokenizer)) == expected
    assert P.digit_ids(engine.tokenizer) == {engine.tokenizer.convert_tokens_to_ids(str(d)) for d in range(10)}


def test_a_warm_start_batch_draws_its_share_of_first_writes() -> None:
    """`warmstart --write-share`: that share of each batch comes from the first-write rows, the rest uniformly
    from every trained row; share 0 draws exactly what the stage drew before the flag (runs 4-16 replay)."""
    import reproduce as R
    import torch

    trained, writes = list(range(100)), [7, 31, 64]
    rng, old = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    for _ in range(3):
        assert R._batch_rows(trained, writes, 16, 0.0, rng) == [
            trained[int(i)] for i in torch.randint(len(trained), (16,), generator=old)]
    rng = torch.Generator().manual_seed(1)
    drawn = [R._batch_rows(trained, writes, 16, 0.5, rng) for _ in range(200)]
    assert all(len(b) == 16 and set(b[:8]) <= set(writes) for b in drawn)
    rest = [r for b in drawn for r in b[8:]]
    assert len(set(rest)) > 90  # uniform over all 100 rows
    assert sum(r in writes for r in rest) < 0.1 * len(rest)
    for bad in ("1", "-0.1", "half"):
        refused = subprocess.run([sys.executable, str(HERE / "reproduce.py"), "warmstart", "--init", "m", "--out",
                                  "o", "--write-share", bad], capture_output=True, text=True, timeout=120, cwd=ROOT,
                                 check=False)
        assert refused.returncode == 2 and f"--write-share: {bad!r}: a share of each batch" in refused.stderr


def test_an_oracle_out_of_device_memory_is_refused_saying_what_to_lower(engine: Any,
                                                                         rows: list[dict[str, Any]]) -> None:
    """Run 6 lost a device call to 14 demonstration workers on one H200: the refusal names the knob."""
    import torch

    class FailingScorer:  # the engine, except that scoring raises `error` (out of device memory as CUDA's would)
        def __init__(self, error: Exception) -> None:
            self.error = error

        def __getattr__(self, name: str) -> Any:
            return getattr(engine, name)

        async def score_async(self, *args: Any, **kwargs: Any) -> list[float]:
            raise self.error

    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 384.00 MiB.")
    with pytest.raises(P.OracleOutOfMemory, match=r"ran out of device memory.*lower `--demo-workers`") as info:
        P.oracle_data(FailingScorer(oom), rows, CFG)
    assert "Tried to allocate 384.00 MiB" in str(info.value)  # the device's own words kept
    # another failure, even one that mentions memory, is not taken for the device's: it is named as it is
    with pytest.raises(RuntimeError, match=r"oracle rollout 0 .*graph raised ValueError: OutOfMemoryError") as info:
        P.oracle_data(FailingScorer(ValueError("OutOfMemoryError in a message")), rows, CFG)
    assert not isinstance(info.value, P.OracleOutOfMemory)


def _gpu_shim(tmp_path: Path, answer: str | None) -> dict[str, str]:
    """An environment whose PATH holds only the tools run_in_calls.sh's GPU functions call, and an nvidia-smi that
    answers ANSWER for each of two cards (None: no nvidia-smi at all)."""
    shim = tmp_path / "bin"
    shim.mkdir(exist_ok=True)
    if answer is not None:
        (shim / "nvidia-smi").write_text(f"#!/bin/sh\necho '{answer}'\necho '{answer}'\n")  # two cards
        (shim / "nvidia-smi").chmod(0o755)
    for tool in ("awk", "head"):  # so that PATH holds no other nvidia-smi
        if not (shim / tool).exists():
            (shim / tool).symlink_to(shutil.which(tool))
    return {"PATH": str(shim)}


def _gpu_function(tmp_path: Path, answer: str | None, call: str) -> subprocess.CompletedProcess[str]:
    functions = "\n".join(_script_function(name) for name in ("gpu_gib", "demo_workers", "eval_fits_beside"))
    return subprocess.run([shutil.which("bash") or "bash", "-c", f"{functions}\n{call}"], capture_output=True,
                          text=True, env=_gpu_shim(tmp_path, answer), timeout=30, check=False)


@pytest.mark.parametrize(("answer", "beside", "workers"), [
    ("143771", "1", "5"),  # an H200's 140.4 GiB beside the untrained model's evaluation (32 GiB)
    ("143771", "0", "7"),  # an H200 alone (a later call's round: the evaluation is done)
    ("81559", "1", "2"),  # an H100's 79.6 GiB: run 33's 8 and run 34's 4 ran out beside the evaluation
    ("81559", "0", "4"),  # an H100 alone: run 33's and run 34's later calls, 4 fit
    ("24576", "1", "1"),  # a 24 GiB card: one, never none
    ("NVIDIA-SMI has failed because it couldn't communicate with the driver", "1", "8"),  # no answer: runs 3-32's
    (None, "0", "8"),  # no nvidia-smi at all
])
def test_run_in_calls_picks_the_demonstration_workers_the_devices_memory_holds(tmp_path: Path, answer: str | None,
                                                                               beside: str, workers: str) -> None:
    """Run 33 began on an H100 with the H200's 8 demonstration workers and lost its first call to the device's
    memory, and run 34 its first with 4 (the workers up to 18.4 GiB each beside the evaluation's 32.2): unset,
    DEMO_WORKERS is read from the first GPU's memory as nvidia-smi reports it, and from whether the untrained model's
    evaluation runs beside them."""
    done = _gpu_function(tmp_path, answer, f"demo_workers {beside}")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"{workers}\n", "")


@pytest.mark.parametrize(("answer", "arms", "fits"), [
    ("143771", 2, True),  # an H200: RL, its control and the warm start's evaluation together (runs 3-32)
    ("143771", 3, True),  # and a second draw (RL_DRAWS=2, run 29)
    ("81559", 2, False),  # an H100: run 34's control ran out beside RL (29.4 GiB) and the evaluation (21.7)
    ("81559", 1, True),
    (None, 2, True),  # no nvidia-smi: as runs 3-33
])
def test_run_in_calls_evaluates_the_warm_start_beside_rl_only_where_the_gpu_holds_both(
        tmp_path: Path, answer: str | None, arms: int, fits: bool) -> None:
    done = _gpu_function(tmp_path, answer, f"eval_fits_beside {arms}")
    assert (done.returncode == 0, done.stdout, done.stderr) == (fits, "", "")


def test_run_in_calls_stops_every_arm_and_the_call_when_one_arm_fails(tmp_path: Path) -> None:
    """Run 34's control ran out of memory at its first step and RL stepped alone for 7 minutes, which no target can
    read: the first arm to fail stops the others, and the call ends, saying which arm and its log's last line."""
    results = tmp_path / "results"
    results.mkdir()
    (results / "rl.log").write_text("step 3: reward 0.1\n")
    (results / "rl_permuted.log").write_text("Traceback ...\ntorch.OutOfMemoryError: CUDA out of memory.\n")
    (tmp_path / "out").mkdir()
    lives = tmp_path / "rl_lived"  # written only if the healthy arm is not stopped
    script = (f'r={results}; out={tmp_path / "out"}; arms=(rl rl_permuted)\n'
              'stamp() { echo "$*" | tee -a "$r/calls.log"; }\n'
              'pack() { tar czf "$out/results.tgz" -C "$r" .; }\n'
              f'{_script_function("watch_arms")}\n'
              f'(sleep 6; touch {lives}) > /dev/null 2>&1 & rl=$!\n'  # as the arms: output to their logs
              '(sleep 1; exit 1) & control=$!\n'
              'watch_arms "$rl" "$control"; echo "not reached"\n')
    started = time.monotonic()
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    took = time.monotonic() - started
    assert done.returncode == 1 and done.stderr == "" and took < 5, (done, took)
    assert done.stdout.splitlines() == [
        f"RL arm rl_permuted failed (exit 1; its log: {results}/rl_permuted.log): torch.OutOfMemoryError: CUDA out "
        "of memory.",
        "the other arms were stopped with it (RL without its control is no result): fix the cause and call again; "
        "the arms begin again from where the last whole call left them"]
    assert "calls.log" in _packed(tmp_path / "out" / "results.tgz")
    time.sleep(6 - took + 1)
    assert not lives.exists()  # the healthy arm was stopped, not left to run on


@pytest.mark.parametrize(("answer", "first"), [("81559", True), ("143771", False)])
def test_run_in_calls_evaluates_the_warm_start_first_where_the_gpu_holds_it_or_the_arms(
        tmp_path: Path, answer: str, first: bool) -> None:
    """run_in_calls.sh's `step_rl` with a stand-in for reproduce.py that logs when each stage begins and ends: on an
    H100 the warm start's evaluation runs alone, and the arms begin after it with its seconds taken from theirs; on
    an H200 the three begin together, as in runs 3-33."""
    work, results, out = tmp_path / "work", tmp_path / "work" / "results", tmp_path / "out"
    results.mkdir(parents=True)
    out.mkdir()
    events = tmp_path / "events"
    fake = tmp_path / "reproduce"  # `$R STAGE ...`: eval writes its --out after 2 s; rl logs its --max-minutes
    fake.write_text(f"""#!/bin/sh
stage=$1; shift
echo "$stage begins $*" >> {events}
if [ "$stage" = eval ]; then sleep 2; while [ "$1" != --out ]; do shift; done; echo '{{}}' > "$2"; fi
echo "$stage ends" >> {events}
""")
    fake.chmod(0o755)
    names = ("left", "cap", "as_minutes", "stamp", "pack", "gpu_gib", "eval_fits_beside", "evaluate", "rl_s",
             "all_begun", "flags", "probe_stopped", "step_rl", "watch_arms")
    functions = "\n".join(_script_function(name) for name in names)
    script = (f"set -u\nw={work}; r={results}; out={out}; R={fake}; t0=$(date +%s); BUDGET=300\n"
              "RL_PROMPTS=2 RL_SAMPLES=2 RL_LR=1e-4 RL_STEPS_PER_ROLLOUT=1 RL_WARMUP=0 RL_KL=0\n"
              "RL_SAMPLER=x RL_ARGS=''\n"
              "RL_DRAWS=1; arms=(rl rl_permuted); chosen=''; warm=$w/warm1; declare -A started=()\n"
              f"{functions}\nstep_rl 120; wait\n")
    (work / "warm1").mkdir()
    (work / "warm1" / "stage.json").write_text(json.dumps({"stop": {"reason": "probe 40.0 %"}, "curve": []}))
    env = {**_gpu_shim(tmp_path, answer), "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0 and done.stderr == "", done
    lines = events.read_text().splitlines()
    order = [line.split(" ")[0] + " " + line.split(" ")[1] for line in lines]
    minutes = [float(line.split("--max-minutes ")[1].split()[0]) for line in lines if line.startswith("rl begins")]
    assert len(minutes) == 2 and minutes[0] == minutes[1]
    if first:
        assert order[:2] == ["eval begins", "eval ends"] and order.count("rl begins") == 2
        assert 1.9 <= minutes[0] <= 1.97  # 120 s less the evaluation's 2-3 s
        assert "the warm start's evaluation first: the GPU (79.6 GiB) holds it or 2 RL arms, not both" in done.stdout
    else:
        assert order.index("eval ends") > order.index("rl begins")  # begun together
        assert minutes[0] == 2.0 and "evaluation first" not in done.stdout


def test_run_in_calls_waits_for_arms_that_end_well(tmp_path: Path) -> None:
    script = (f'{_script_function("watch_arms")}\n'
              '(sleep 1) & a=$!; (sleep 3) & b=$!\n'
              'watch_arms "$a" "$b"; echo "returned $?"\n')
    started = time.monotonic()
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "returned 0\n", "")
    assert 3 <= time.monotonic() - started < 10  # both waited for


def test_a_shorter_secret_code_is_read_and_answered_by_the_oracle(engine: Any) -> None:
    """`value_digits` makes the task easier for a model trained from scratch: the answer is that many digits,
    and the oracle carries exactly that value from the section through the memory into the box."""
    cfg = CFG.model_copy(update={"value_digits": 2})
    rows = P.needle_rows(engine.tokenizer, [200, 330], "two-digit", cfg)
    assert all(len(r["label"][0]) == 2 and r["label"][0].isdigit() for r in rows)
    assert all(f"is {r['label'][0]}." in r["metadata"]["context"] for r in rows)
    data = P.oracle_data(engine, rows[:1], cfg)
    tok = engine.tokenizer
    last = data["tokens"][-1][-data["response_lengths"][-1]:]
    assert tok.decode(last) == f"\\boxed{{{rows[0]['label'][0]}}}<|im_end|>"


def test_the_audit_passes_real_rollouts_and_stops_a_tampered_one(engine: Any, rows: list[dict[str, Any]]) -> None:
    import asyncio

    from agentgraphs.context import AgentContext
    from agentgraphs.memagent import SPEC
    from agentgraphs.records import sample_fields
    from agentgraphs.testing.slime_sample import Sample

    ctx = AgentContext(policy=engine, tokenizer=engine.tokenizer, sampling=P.sampling(CFG, 1.0))
    rollouts = asyncio.run(P.run_all(rows[:2], ctx, P.options(CFG), 8))
    samples = []
    for i, r in enumerate(rollouts):
        fields = sample_fields(r, SPEC)
        fields["status"] = Sample.Status(fields["status"])
        samples.append(Sample(group_index=0, index=i, **fields))
    log: list[dict[str, Any]] = []
    report = P.audit_step(engine.model, rollouts, samples, 1.0, log)
    assert report.ok and report.rescored_tokens == sum(sum(s["loss_mask"]) for x in samples
                                                       for s in x.train_metadata["turns"])
    assert log[-1]["max_abs_delta"] <= 1e-4 and log[-1]["breaches"] == 0
    # the seed's variant: every memory update and the final answer are trained, the reward divided among them
    nodes = [t["node"] for t in rollouts[0].turns]
    assert nodes[-1] == "final_answer" and all(t["trainable"] for t in rollouts[0].turns)
    assert len(samples[0].train_metadata["turns"]) == nodes.count("memory_update") + 1
    assert samples[0].train_metadata["reward_split"] == "divide"
    tampered = copy.deepcopy(samples)
    seq = tampered[1].train_metadata["turns"][0]
    seq["rollout_log_probs"][0] += 0.5
    with pytest.raises(P.AuditFailed, match="logprob_mismatch"):
        P.audit_step(engine.model, rollouts, tampered, 1.0, log)


def test_warm_start_learning_rate_warms_up_then_follows_its_schedule() -> None:
    import argparse

    import reproduce as R

    args = argparse.Namespace(lr=1e-3, warmup=10, max_steps=100, max_minutes=0.0, schedule="constant")
    assert [R._warmstart_lr(args, s, 0.0) for s in (1, 5, 10, 90)] == pytest.approx([1e-4, 5e-4, 1e-3, 1e-3])
    args.schedule = "cosine"  # a cosine from 100 % to 10 % over the stage: 55 % half-way
    assert [R._warmstart_lr(args, s, 0.0) for s in (10, 50, 100)] == pytest.approx([9.78e-4, 5.5e-4, 1e-4], rel=1e-3)
    args.max_minutes = 2.0  # the time budget counts when it runs out first: half of it spent at step 10
    assert R._warmstart_lr(args, 10, 60.0) == pytest.approx(5.5e-4)


def test_the_warm_start_probe_counts_reversed_codes_at_the_training_lengths(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's `probe_reversed`: the share (%) of answers at the training lengths that are the gold code
    with its digits swapped; a longer document's answers and a palindrome code (51 and 15 differ, 77 does not)
    never count. Its `probe_off_memory`: the share of those answers that are not the final memory's last
    number (the 15 given from a memory ending in 51, the 3 from one ending in 30; the 82 is the memory's)."""
    import reproduce as R

    def doc(length: int, gold: str, answer: str, last: str) -> dict[str, Any]:
        right = float(answer == f"\\boxed{{{gold}}}")
        return {"length": length, "gold": gold, "answer": answer, "sub_em_strict": right, "sub_em": right,
                "digits": right, "status": "completed", "needle_chunk": 1, "memory_codes": [["", 2], [last, 1]]}

    results = [doc(1000, "51", "\\boxed{15}", "51"), doc(1000, "51", "\\boxed{51}", "51"),
               doc(2000, "77", "\\boxed{77}", "77"), doc(2000, "30", "\\boxed{3}", "30"),
               doc(4000, "28", "\\boxed{82}", "82"), doc(8000, "46", "\\boxed{64}", "46")]
    monkeypatch.setattr(R.P, "evaluate", lambda engine, probe, cfg: results)
    cfg = P.ReproConfig()  # the example's sizes: trained at 1K-4K, evaluated to 32K
    assert cfg.train_lengths == [1000, 2000, 4000]
    scores = R._probe(None, [], cfg)
    assert scores["probe_reversed"] == 40.0  # 2 of the 5 answers at 1K-4K (51 -> 15, 28 -> 82); 8K not counted
    assert scores["probe_strict"] == 40.0 and scores["probe_off_memory"] == 40.0
    # the confirmation before a stop reads the same share on its own new documents, beside its strict score
    asked = []
    monkeypatch.setattr(R.P, "eval_rows", lambda tokenizer, cfg, lengths, n, split, pool: asked.append(split) or
                        [{}] * (n * len(lengths)))
    point: dict[str, Any] = {}
    args = argparse.Namespace(confirm_per_length=2)
    assert R._confirm(types.SimpleNamespace(tokenizer=None), cfg, args, 7, point, None) == 40.0
    assert point == {"confirm_strict": 40.0, "confirm_reversed": 40.0, "confirm_off_memory": 40.0,
                     "confirm_flips": [0, 0]} and asked == ["confirm-7"]  # one code per document: none copied
    # no answer given from a memory that holds a code: no share to read, and the log says so
    for r in results:
        r["memory_codes"] = [["", 3]]
    assert R._probe(None, [], cfg)["probe_off_memory"] is None and R._shown(None) == "-"
    # `probe_flips`: the digits memory updates copied at the training lengths, and those that came out as another
    # digit with the rest of the code unchanged (51 -> 51 -> 57: the 1 flipped; 30 -> 3: a change, not a flip)
    copies = [{**doc(1000, "51", "\\boxed{57}", "57"), "memory_codes": [["", 1], ["51", 2], ["57", 1]]},
              {**doc(2000, "30", "\\boxed{3}", "3"), "memory_codes": [["", 2], ["30", 1], ["3", 1]]},
              {**doc(8000, "46", "\\boxed{46}", "46"), "memory_codes": [["", 1], ["46", 5]]}]  # 8K: not read
    assert R._flips(copies, cfg) == [6, 1] and R._flip_share([6, 1]) == "16.7% of 6"
    assert R._flip_share([0, 0]) == "- (no code copied)"


def _roll(engine: Any, rows: list[dict[str, Any]], reply: Any) -> list[Any]:
    import asyncio

    from agentgraphs.context import AgentContext
    from agentgraphs.testing.scripted import ScriptedPolicy

    ctx = AgentContext(policy=ScriptedPolicy(engine, reply, name="oracle"), tokenizer=engine.tokenizer,
                       sampling=P.sampling(CFG, 1.0))
    return asyncio.run(P.run_all(rows, ctx, P.options(CFG), 8))


def _repro_stage(monkeypatch: pytest.MonkeyPatch, *argv: str) -> None:
    """`python reproduce.py ARGV...`, in this process (so that a test can script the probe)."""
    import reproduce as R

    monkeypatch.setattr(sys, "argv", ["reproduce.py", *argv])
    R.main()


def _tiny_repro_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The model stage at a size a warm start steps on CPU in milliseconds (one training length: 150 tokens)."""
    model = tmp_path / "model"
    _repro_stage(monkeypatch, "model", "--out", str(model), "--hidden-size", "32", "--layers", "1", "--heads", "2",
                 "--kv-heads", "1", "--intermediate-size", "64", "--chunk-tokens", "128", "--memory-tokens", "24",
                 "--final-tokens", "16", "--train-min-tokens", "150", "--train-max-tokens", "250", "--eval-lengths",
                 "150", "--eval-per-length", "1")
    return model


def _script_probe(monkeypatch: pytest.MonkeyPatch, probes: list[tuple[Any, ...]],
                  confirms: list[tuple[Any, ...]] = ()) -> None:
    """The warm start's probe and confirmation read these (strict, reversed) shares, and (strict, reversed,
    [copied digits, flipped]) where a test gives its flips (none copied otherwise: a tiny CPU model scores 0), in
    the order asked; the training stays real."""
    import reproduce as R

    asked, confirmed = iter(probes), iter(confirms)

    def probe(engine: Any, rows: Any, cfg: Any) -> dict[str, Any]:
        strict, reversed_, *flips = next(asked)
        return {"probe_strict": strict, "probe_reversed": reversed_, "probe_digits": 0.0, "probe_off_memory": None,
                "probe_flips": flips[0] if flips else [0, 0]}
    monkeypatch.setattr(R, "_probe", probe)

    def confirm(engine: Any, cfg: Any, args: Any, step: int, point: dict[str, Any], pool: Any) -> float | None:
        if args.confirm_per_length <= 0:
            return None
        strict, reversed_, *flips = next(confirmed)
        point["confirm_strict"], point["confirm_reversed"] = strict, reversed_
        point["confirm_flips"] = flips[0] if flips else [0, 0]
        return point["confirm_strict"]
    monkeypatch.setattr(R, "_confirm", confirm)


def test_an_overshooting_warm_start_goes_back_exactly_and_lands_in_the_band(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`warmstart --stop-above`: a probe over the band's top sends the stage back to the last probe under it
    (weights, AdamW's moments, the batch sampler) and probes more often from there. The probe's scores are
    scripted (a tiny CPU model scores 0); the training is real, and on CPU bit-reproducible: the run that went
    back must end with the very weights and losses of a run that never overshot."""
    import torch
    from safetensors.torch import load_file

    def scripted(probes: list[float], confirms: list[float] = ()) -> None:  # the scores, in the order asked
        _script_probe(monkeypatch, [(p, 0.0) for p in probes], [(c, 0.0) for c in confirms])

    model = _tiny_repro_model(tmp_path, monkeypatch)

    def warm(name: str, *flags: str) -> dict[str, Any]:
        _repro_stage(monkeypatch, "warmstart", "--init", str(model), "--out", str(tmp_path / name), "--demos", "3",
                     "--batch", "4", "--warmup", "2", "--max-steps", "8", "--probe-per-length", "1", "--device", "cpu",
                     "--stop-at", "30", *flags)
        return json.loads((tmp_path / name / "stage.json").read_text())

    scripted([40.0, 45.0])  # never overshoots: probes at steps 3 and 4, both in the band: stop at 4
    straight = warm("straight", "--eval-every", "1", "--eval-from", "3", "--settle", "2")
    scripted([0.0, 80.0, 40.0, 45.0])  # step 2 under, step 4 over -> back to 2; then 3 and 4 in the band
    back = warm("back", "--eval-every", "2", "--eval-from", "2", "--settle", "2", "--stop-above", "50",
                "--refine-by", "2")
    assert back["stop"]["overshoots"] == [{"step": 4, "probe_strict": 80.0, "back_to": 2, "probe_every": 1}]
    assert back["stop"]["step"] == straight["stop"]["step"] == 4
    assert back["stop"]["reason"].startswith("probe strict sub_em 45.0% in the band 30.0-50.0% at step 4")
    assert "after 1 overshoot" in back["stop"]["reason"]
    assert [p["step"] for p in back["curve"]] == [1, 2, 3, 4]  # the steps gone back over are not in the curve
    assert [p["loss"] for p in back["curve"]] == [p["loss"] for p in straight["curve"]]
    a, b = load_file(tmp_path / "back" / "model.safetensors"), load_file(tmp_path / "straight" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # 4 steps, not 6

    scripted([0.0, 40.0, 40.0], [90.0, 35.0])  # the probe at 4 is in, its confirmation over: back to 2
    confirmed = warm("confirmed", "--eval-every", "2", "--eval-from", "2", "--stop-above", "50", "--refine-by", "2",
                     "--confirm-per-length", "1")
    assert confirmed["stop"]["overshoots"] == [{"step": 4, "probe_strict": 40.0, "confirm_strict": 90.0,
                                                "back_to": 2, "probe_every": 1}]
    assert confirmed["stop"]["step"] == 3 and "confirmed on new documents: 35.0%" in confirmed["stop"]["reason"]
    scripted([0.0, 80.0])  # no refinement left: the overshoot stops the stage, and says so
    spent = warm("spent", "--eval-every", "2", "--eval-from", "2", "--stop-above", "50", "--refines", "0")
    assert spent["stop"]["step"] == 4 and spent["stop"]["overshoots"] == []
    assert "over the band's top 50.0% with no refinement left (--refines 0)" in spent["stop"]["reason"]
    # each figure says where it sits, and the confirmation decides (run 13, call 1, read "probe 52.1% in the band
    # 30.0-50.0%" for a probe over the top whose confirmation, 44.8 %, was in the band)
    for probe, confirm, said in (
            (80.0, 40.0, ("probe strict sub_em 80.0% over the band's top 50.0% at step 4, confirmed on new documents: "
                          "40.0% in the band 30.0-50.0% (the confirmation decides)")),
            (40.0, 90.0, ("probe strict sub_em 40.0% in the band 30.0-50.0% at step 4, confirmed on new documents: "
                          "90.0% over the band's top 50.0% with no refinement left (--refines 0) (the confirmation "
                          "decides)"))):
        scripted([0.0, probe], [confirm])
        decided = warm("decided", "--eval-every", "2", "--eval-from", "2", "--stop-above", "50", "--refines", "0",
                       "--confirm-per-length", "1")
        assert decided["stop"]["step"] == 4 and decided["stop"]["reason"] == said
    scripted([0.0, 40.0, 45.0])  # the same stop, half of each batch from the rows that first write the code
    shared = warm("shared", "--eval-every", "1", "--eval-from", "2", "--settle", "2", "--write-share", "0.5")
    assert shared["args"]["write_share"] == 0.5 and shared["stop"]["step"] == 4
    assert [p["loss"] for p in shared["curve"]] != [p["loss"] for p in straight["curve"]]
    monkeypatch.setattr(P, "first_writes", lambda data, digits: [])  # as if no rollout wrote its code
    with pytest.raises(SystemExit, match=r"--write-share: 0 rows first write a digit into memory for 3 oracle "
                                         r"rollouts, where each writes its code once"):
        warm("none", "--eval-every", "1", "--eval-from", "2", "--write-share", "0.5")
    for flags, said in ((["--stop-above", "20"], "--stop-above 20.0 must be over --stop-at 30.0"),
                        (["--refine-by", "1"], "--refine-by: '1': a whole number, 2 or more"),
                        (["--probe-per-length", "0"],
                         "--probe-per-length: '0': a whole number of documents, 1 or more"),
                        (["--refines", "-1"], "--refines -1: a count of overshoots")):
        bad = subprocess.run([sys.executable, str(HERE / "reproduce.py"), "warmstart", "--init", str(model), "--out",
                              str(tmp_path / "x"), *flags], capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert bad.returncode == 2 and said in bad.stderr, bad.stderr


def test_a_warm_start_that_stops_reversing_codes_begins_again_from_its_init(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`warmstart --restart-reversed PCT`: a stop whose answers read PCT % or more reversed (the probe's and the
    confirmation's pooled) is rejected, and the warm start begins again from the init weights with a fresh AdamW,
    its warm-up and batches of its own seed, `--restarts` times at most; if every attempt reverses as much, the
    least reversed is kept. The probe's readings are scripted (a tiny CPU model scores 0); the training is real and
    on CPU bit-reproducible, so each claim is checked on the weights and losses."""
    import reproduce as R
    import torch
    from safetensors.torch import load_file

    def scripted(probes: list[tuple[float, float]], confirms: list[tuple[float, float]] = ()) -> None:
        _script_probe(monkeypatch, probes, confirms)

    drawn: list[list[int]] = []  # every step's training rows, in order
    batch_rows = R._batch_rows

    def recorded(*a: Any) -> list[int]:
        drawn.append(batch_rows(*a))
        return drawn[-1]
    monkeypatch.setattr(R, "_batch_rows", recorded)
    model = _tiny_repro_model(tmp_path, monkeypatch)

    def warm(name: str, *flags: str) -> tuple[dict[str, Any], dict[str, Any]]:
        drawn.clear()
        _repro_stage(monkeypatch, "warmstart", "--init", str(model), "--out", str(tmp_path / name), "--demos", "3",
                     "--batch", "4", "--warmup", "2", "--max-steps", "6", "--probe-per-length", "1", "--device", "cpu",
                     "--stop-at", "30", "--eval-every", "2", "--eval-from", "2", *flags)
        return json.loads((tmp_path / name / "stage.json").read_text()), load_file(tmp_path / name /
                                                                                   "model.safetensors")

    def same(a: dict[str, Any], b: dict[str, Any]) -> bool:
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    scripted([(40.0, 50.0)])  # without the flag a reversing stop stands, and the stage is as it always was
    plain, plain_w = warm("plain")
    plain_rows = list(drawn)
    assert plain["stop"]["reason"] == "probe strict sub_em 40.0% >= 30.0% at step 2" and plain["stop"]["step"] == 2
    assert "rejected" not in plain["stop"] and "attempt" not in plain["stop"]

    scripted([(40.0, 50.0), (40.0, 0.0)])  # attempt 1 reverses half its answers: rejected; attempt 2 none: kept
    again, again_w = warm("again", "--restart-reversed", "20")
    stop = again["stop"]
    assert stop["reason"] == ("probe strict sub_em 40.0% >= 30.0% at step 2, reversed 0.0% under --restart-reversed "
                              "20.0% in attempt 2, after 1 restart (stop['rejected'])")
    assert (stop["attempt"], stop["reversed"], stop["step"]) == (1, 0.0, 2) and again["args"]["restarts"] == 2
    [first] = stop["rejected"]
    assert {k: first[k] for k in ("attempt", "reversed", "step", "reason", "probe_strict", "probe_reversed")} == {
        "attempt": 0, "reversed": 50.0, "step": 2, "reason": plain["stop"]["reason"], "probe_strict": 40.0,
        "probe_reversed": 50.0}
    # the rejected attempt is the plain run (the flag changes nothing before a stop), and the kept one trained on
    # other batches: its own seed
    assert drawn[:2] == plain_rows and drawn[2:] != plain_rows and len(drawn) == 4
    assert [p["loss"] for p in first["curve"]] == [p["loss"] for p in plain["curve"]]
    assert [p["step"] for p in again["curve"]] == [1, 2] and not same(again_w, plain_w)

    # begun again from the init weights, with a fresh AdamW and warm-up: on the same batches, attempt 2 trains
    # exactly as attempt 1 did (kept moments, weights or lr would each change its losses and weights)
    monkeypatch.setattr(R, "_batch_rows", lambda trained, writes, batch, share, rng: trained[:batch])
    scripted([(40.0, 50.0), (40.0, 0.0)])
    fixed, fixed_w = warm("fixed", "--restart-reversed", "20")
    scripted([(40.0, 0.0)])
    once, once_w = warm("once", "--restart-reversed", "20")
    assert [p["loss"] for p in fixed["curve"]] == [p["loss"] for p in fixed["stop"]["rejected"][0]["curve"]] == [
        p["loss"] for p in once["curve"]]
    assert same(fixed_w, once_w) and once["stop"]["rejected"] == [] and once["stop"]["attempt"] == 0
    monkeypatch.setattr(R, "_batch_rows", recorded)

    # every attempt reverses as much: the least reversed (attempt 2, 30 %) is kept, weights and curve, saying so
    scripted([(40.0, 50.0), (40.0, 30.0), (40.0, 40.0)])
    kept, kept_w = warm("kept", "--restart-reversed", "20", "--restarts", "2")
    assert kept["stop"]["reason"] == (
        "probe strict sub_em 40.0% >= 30.0% at step 2, reversed 30.0%: every one of the 3 attempts read "
        "--restart-reversed 20.0% or more (--restarts 2): kept attempt 2, the least reversed (stop['rejected'])")
    assert [(r["attempt"], r["reversed"]) for r in kept["stop"]["rejected"]] == [(0, 50.0), (2, 40.0)]
    assert kept["stop"]["attempt"] == 1 and same(kept_w, again_w)  # attempt 2 of both runs: the same seed
    assert [p["loss"] for p in kept["curve"]] == [p["loss"] for p in again["curve"]]

    # the probe's and the confirmation's answers pooled: all of the probe's 1 and none of the confirmation's 3
    # reversed read 25 %
    scripted([(40.0, 100.0)], [(40.0, 0.0)])
    pooled, _ = warm("pooled", "--restart-reversed", "30", "--confirm-per-length", "3")
    assert pooled["stop"]["reversed"] == 25.0 and pooled["stop"]["rejected"] == []
    scripted([(40.0, 100.0), (40.0, 0.0)], [(40.0, 0.0), (40.0, 0.0)])  # 25 % reaches --restart-reversed 25
    pooled, _ = warm("pooled2", "--restart-reversed", "25", "--confirm-per-length", "3", "--restarts", "1")
    assert [r["reversed"] for r in pooled["stop"]["rejected"]] == [25.0] and pooled["stop"]["attempt"] == 1

    # a first attempt that never stops on its probe ends at the step cap (or the time budget): nothing to read
    scripted([(0.0, 0.0), (0.0, 0.0), (0.0, 0.0)])
    capped, _ = warm("capped", "--restart-reversed", "20")
    assert capped["stop"]["reason"] == "max_steps 6 reached" and capped["stop"]["attempt"] == 0
    assert capped["stop"]["rejected"] == [] and [p["step"] for p in capped["curve"]] == [1, 2, 3, 4, 5, 6]
    # an attempt begun again that never stops on its probe does not replace the stop rejected before it (run 30's
    # second attempt ran out of time at a probe of 4.2 %, and RL began there): the rejected stop, in the band, is
    # kept, weights and curve, and the unfinished attempt is kept in the file
    scripted([(40.0, 50.0), (0.0, 0.0), (0.0, 0.0), (0.0, 0.0)])
    unfinished, unfinished_w = warm("unfinished", "--restart-reversed", "20")
    stop = unfinished["stop"]
    assert stop["reason"] == (
        "probe strict sub_em 40.0% >= 30.0% at step 2, reversed 50.0%: attempt 2 ended (max_steps 6 reached) before "
        "its probe stopped it (its last probe: strict sub_em 0.0% at step 6): kept attempt 1, the least reversed "
        "(stop['unfinished'])")
    assert (stop["attempt"], stop["reversed"], stop["rejected"]) == (0, 50.0, [])
    left = stop["unfinished"]
    assert (left["attempt"], left["step"], left["probe_strict"]) == (1, 6, 0.0)
    assert [p["step"] for p in stop["unfinished"]["curve"]] == [1, 2, 3, 4, 5, 6]
    assert [p["step"] for p in unfinished["curve"]] == [1, 2] and same(unfinished_w, plain_w)

    # a restart needs the time its rejected attempt took: with less of --max-minutes left, the stop is kept. The
    # clock is scripted (each probe takes 200 s of it); the training is real
    clock = [0.0]
    monkeypatch.setattr(R, "time", types.SimpleNamespace(perf_counter=lambda: clock[0], strftime=R.time.strftime))

    def timed(name: str, minutes: str, probes: list[tuple[float, float]]) -> tuple[dict[str, Any], dict[str, Any]]:
        scripted(probes)
        probe = R._probe

        def slow(*a: Any) -> dict[str, Any]:
            clock[0] += 200.0
            return probe(*a)
        monkeypatch.setattr(R, "_probe", slow)
        return warm(name, "--restart-reversed", "20", "--max-minutes", minutes)
    short, short_w = timed("short", "5", [(40.0, 50.0)])  # 100 s left of 300, under the 200 s attempt 1 took
    assert short["stop"]["reason"] == (
        "probe strict sub_em 40.0% >= 30.0% at step 2, reversed 50.0%: not begun again: 100 s of the time budget "
        "left, under the 200 s it took to its stop: kept attempt 1, the least reversed")
    assert (short["stop"]["attempt"], short["stop"]["rejected"]) == (0, []) and same(short_w, plain_w)
    roomy, roomy_w = timed("roomy", "10", [(40.0, 50.0), (40.0, 0.0)])  # 400 s left: begun again, as without a clock
    assert roomy["stop"]["attempt"] == 1 and [r["seconds"] for r in roomy["stop"]["rejected"]] == [200.0]
    assert same(roomy_w, again_w)

    for flags, said in ((["--restart-reversed", "0"], "--restart-reversed: '0': a share of answers in %, over 0"),
                        (["--restart-reversed", "120"], "--restart-reversed: '120': a share of answers in %"),
                        (["--restart-reversed", "a fifth"], "--restart-reversed: 'a fifth': a share of answers"),
                        (["--restarts", "0"], "--restarts: '0': a whole number of attempts after the first, 1 or more"),
                        (["--restarts", "3"], ("--restarts 3 without --restart-reversed or --restart-flips: "
                                               "nothing would begin again")),
                        (["--restart-flips", "0"], "--restart-flips: '0': a share of copied digits in %, over 0"),
                        (["--restart-flips", "10", "--schedule", "cosine", "--max-minutes", "5"],
                         "--restart-flips with --schedule cosine and --max-minutes: the cosine runs over"),
                        (["--restart-reversed", "20", "--schedule", "cosine", "--max-minutes", "5"],
                         "--restart-reversed with --schedule cosine and --max-minutes: the cosine runs over")):
        capsys.readouterr()
        with pytest.raises(SystemExit) as refused:  # argparse's refusal, before anything loads
            _repro_stage(monkeypatch, "warmstart", "--init", str(model), "--out", str(tmp_path / "x"), *flags)
        assert refused.value.code == 2 and said in capsys.readouterr().err


def test_a_warm_start_that_flips_digits_begins_again_from_its_init(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """`warmstart --restart-flips PCT`: a stop whose memory updates flipped PCT % or more of the digits they copied
    (the probe's and the confirmation's copies pooled) is rejected and begun again as `--restart-reversed` begins
    it; a stop with nothing copied has nothing to read and stands. With both flags, a stop over either is rejected,
    and if every attempt is, the one least over its limits is kept. The readings are scripted; the training is real."""
    model = _tiny_repro_model(tmp_path, monkeypatch)

    def warm(name: str, probes: list[tuple[Any, ...]], *flags: str, confirms: list[tuple[Any, ...]] = ()) -> dict:
        _script_probe(monkeypatch, probes, confirms)
        _repro_stage(monkeypatch, "warmstart", "--init", str(model), "--out", str(tmp_path / name), "--demos", "3",
                     "--batch", "4", "--warmup", "2", "--max-steps", "6", "--probe-per-length", "1", "--device", "cpu",
                     "--stop-at", "30", "--eval-every", "2", "--eval-from", "2", *flags)
        return json.loads((tmp_path / name / "stage.json").read_text())["stop"]

    stop = warm("flips", [(40.0, 0.0, [100, 30]), (40.0, 0.0, [100, 5])], "--restart-flips", "10")
    assert stop["reason"] == ("probe strict sub_em 40.0% >= 30.0% at step 2, digits flipped 5.0% under "
                              "--restart-flips 10.0% in attempt 2, after 1 restart (stop['rejected'])")
    assert (stop["attempt"], stop["flips"], "reversed" in stop) == (1, 5.0, False)
    [first] = stop["rejected"]
    assert (first["attempt"], first["flips"], first["probe_flips"]) == (0, 30.0, [100, 30])
    # the probe's copies and the confirmation's pooled: 5 of 10 and 4 of 90 read 9 %, under 10
    stop = warm("pooled", [(40.0, 0.0, [10, 5])], "--restart-flips", "10", "--confirm-per-length", "3",
                confirms=[(40.0, 0.0, [90, 4])])
    assert (stop["flips"], stop["attempt"], stop["rejected"]) == (9.0, 0, [])
    stop = warm("none", [(40.0, 0.0)], "--restart-flips", "10")  # nothing copied: nothing to read, the stop stands
    assert stop["flips"] is None and stop["reason"].endswith(", digits flipped - under --restart-flips 10.0%")
    # both rules: attempt 1 reverses (50/20 of its limit), attempt 2 flips (20/10), attempt 3 both (25/20, 15/10):
    # every one is over, and attempt 3, whose worse reading is least over its limit (1.5x), is kept
    stop = warm("both", [(40.0, 50.0, [100, 0]), (40.0, 0.0, [100, 20]), (40.0, 25.0, [100, 15])],
                "--restart-reversed", "20", "--restart-flips", "10")
    assert stop["reason"] == (
        "probe strict sub_em 40.0% >= 30.0% at step 2, reversed 25.0%, digits flipped 15.0%: every one of the 3 "
        "attempts read --restart-reversed 20.0% or --restart-flips 10.0% or more (--restarts 2): kept attempt 3, the "
        "least over its limits (stop['rejected'])")
    assert (stop["attempt"], stop["reversed"], stop["flips"]) == (2, 25.0, 15.0)
    assert [(r["attempt"], r["reversed"], r["flips"]) for r in stop["rejected"]] == [(0, 50.0, 0.0), (1, 0.0, 20.0)]


def test_the_filler_a_model_was_made_with_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 qwen25: Any) -> None:
    """`model` keeps its filler in repro.json (varied by default, uniform on request) and every stage draws its
    documents from it; a repro.json from before the setting (runs 3-29's) reads as uniform, so those
    checkpoints resume and re-evaluate on their own documents."""
    model = _tiny_repro_model(tmp_path, monkeypatch)
    assert json.loads((model / P.CONFIG_FILE).read_text())["sentence_lengths"] == "varied"
    cfg = P.ReproConfig.load(model)
    assert set(cfg.filler_pool(qwen25).token_counts) != {11}
    old = json.loads((model / P.CONFIG_FILE).read_text())
    del old["sentence_lengths"]
    (model / P.CONFIG_FILE).write_text(json.dumps(old))
    assert P.ReproConfig.load(model).sentence_lengths == "uniform"
    assert set(P.ReproConfig.load(model).filler_pool(qwen25).token_counts) == {11}
    uniform = tmp_path / "uniform"
    _repro_stage(monkeypatch, "model", "--out", str(uniform), "--hidden-size", "32", "--layers", "1", "--heads", "2",
                 "--kv-heads", "1", "--intermediate-size", "64", "--sentence-lengths", "uniform")
    assert P.ReproConfig.load(uniform).sentence_lengths == "uniform"
    rows = {fill: P.needle_rows(qwen25, [1500], "probe", P.ReproConfig(sentence_lengths=fill))[0]
            for fill in ("uniform", "varied")}
    assert rows["uniform"]["metadata"]["context"] != rows["varied"]["metadata"]["context"]
    assert rows["uniform"]["label"] == rows["varied"]["label"]  # the same needle: only the filler differs


def test_memory_codes_follow_the_code_call_by_call_and_place_a_miss(engine: Any, rows: list[dict[str, Any]]) -> None:
    """The oracle through MemAgent's graph: no code before the needle's chunk, the gold from the update that
    read it to the answer. An oracle that reverses the code in the update after storing it (where there is
    one) misses with the code reversed, lost in memory; one that answers it reversed loses it answering."""
    tok = engine.tokenizer
    longer = [*rows, *P.needle_rows(tok, [440] * 8, "flush", CFG)]  # 4 chunks each: some end at a sentence end inside
    chunks = [-(-len(tok.encode(r["metadata"]["context"], add_special_tokens=False)) // CFG.chunk_tokens)
              for r in longer]
    flushed = 0
    for row, rollout, n in zip(longer, _roll(engine, longer, P.oracle_reply), chunks):
        at, gold = row["metadata"]["needle_chunk"], row["label"][0]
        assert P.memory_codes(rollout, tok) == [""] * (at + 1) + [gold] * (n - at)  # n updates + the answer
        result = P.result_of(row, rollout, tok)
        assert P.miss_step(result) == "right"
        # the chunks that end at a sentence's end, as the plain tokenizer cuts the document: a period last
        ids, size = tok.encode(row["metadata"]["context"], add_special_tokens=False), CFG.chunk_tokens
        ends = [tok.decode(ids[min((k + 1) * size, len(ids)) - 1]) for k in range(n)]
        assert result["flush_chunks"] == [k for k, end in enumerate(ends) if end == "."]
        flushed += len(result["flush_chunks"]) - 1  # besides the last chunk, which ends the document
        assert P.needle_free_writes([result]) == {"flush": [len([k for k in result["flush_chunks"] if k < at]), 0],
                                                  "other": [at - len([k for k in result["flush_chunks"] if k < at]), 0]}
        # the memory texts: the initial memory to the needle's chunk, then the needle sentence the document holds
        needle = re.search(r"The secret code of [A-Z][a-z]+ [A-Z][a-z]+ is \d+\.", row["metadata"]["context"])
        assert result["memory_texts"] == [["No previous memory", at + 1], [needle.group(), n - at]]
        assert P.blank_memory([result]) == {"updates": [at, 0], "stored_from_initial": [1, 1],
                                            "stored_from_other": [0, 0]}
        assert P.held_code_returns([result]) == {"changed": 0, "returned": 0, "at_answer": 0, "gold_elsewhere": 0}
    assert flushed > 0  # varied sentences: some chunk inside a document ends at a sentence's end

    stored: dict[str, str] = {}  # the memory sentence as the oracle first stored it, by document question

    def reverse_in_memory(call: Any) -> str:
        reply, text = P.oracle_reply(call), call.prompt_text
        memory = P._between(text, "<memory>\n", "\n</memory>")
        if "<section>\n" not in text or not P.NEEDLE.search(memory):
            return reply
        first = stored.setdefault(P._between(text, "<problem>", "</problem>"), memory)
        code = P.NEEDLE.search(first).group(1)  # reverse the stored code once, then carry it
        return first.replace(f"is {code}.", f"is {code[::-1]}.") if memory == first else memory

    def reverse_answering(call: Any) -> str:
        reply = P.oracle_reply(call)
        return "\\boxed{" + reply[7:-1][::-1] + "}" if reply.startswith("\\boxed{") else reply

    later = [r for r, n in zip(longer, chunks) if r["metadata"]["needle_chunk"] < n - 1]  # an update after the needle
    assert later, "the fixture needs a document whose needle is not in its last chunk"
    for row, rollout in zip(later, _roll(engine, later, reverse_in_memory)):
        result = P.result_of(row, rollout, tok)
        assert (P.answer_kind(result), P.miss_step(result)) == ("reversed", "lost_in_memory")
        assert P.held_code_returns([result]) == {"changed": 1, "returned": 0, "at_answer": 0, "gold_elsewhere": 0}
    for row, rollout in zip(rows, _roll(engine, rows, reverse_answering)):
        result = P.result_of(row, rollout, tok)
        assert (P.answer_kind(result), P.miss_step(result)) == ("reversed", "lost_answering")
    kinds = P.answer_kinds([P.result_of(r, o, tok) for r, o in zip(rows, _roll(engine, rows, reverse_answering))],
                           [r["metadata"]["length"] for r in rows])
    assert kinds == {"right": 0, "reversed": len(rows), "one_place": 0, "other_code": 0, "unboxed": 0,
                     "stored_wrong": 0, "lost_in_memory": 0, "lost_answering": len(rows), "not_completed": 0}


def test_memory_texts_show_a_blank_memory_left_and_a_code_kept_twice(engine: Any, rows: list[dict[str, Any]]) -> None:
    """`memory_texts` through MemAgent's graph, with policies that do what the codes alone cannot show: one that
    leaves the initial memory for a sentence with no code at the first update (a fact kept as None, its text
    not), and one that stores the needle, appends another digit (now the last number, so `memory_codes` reads a
    change; a short one, under the memory's token cap), then drops it (the gold comes back: it was held as the
    first number)."""
    tok = engine.tokenizer
    longer = [*rows, *P.needle_rows(tok, [440] * 8, "flush", CFG)]
    chunks = [-(-len(tok.encode(r["metadata"]["context"], add_special_tokens=False)) // CFG.chunk_tokens)
              for r in longer]
    early = [r for r in longer if r["metadata"]["needle_chunk"] >= 1]
    assert early, "the fixture needs a document whose needle is not in its first chunk"

    def leave_blank(call: Any) -> str:
        reply, memory = P.oracle_reply(call), P._between(call.prompt_text, "<memory>\n", "\n</memory>")
        return "Nothing found yet." if reply == memory == "No previous memory" else reply

    for row, rollout in zip(early, _roll(engine, early, leave_blank)):
        result, at = P.result_of(row, rollout, tok), row["metadata"]["needle_chunk"]
        assert result["memory_texts"][:2] == [["No previous memory", 1], [None, at]]
        assert result["memory_codes"][0] == ["", at + 1]  # the codes alone read the same as the oracle's
        assert P.blank_memory([result]) == {"updates": [1, 1], "stored_from_initial": [0, 0],
                                            "stored_from_other": [1, 1]}

    def twice(call: Any) -> str:
        reply, memory = P.oracle_reply(call), P._between(call.prompt_text, "<memory>\n", "\n</memory>")
        found = P.NEEDLE.search(memory)
        if "<section>\n" not in call.prompt_text or not found:
            return reply
        other = (int(found.group(1)[0]) + 1) % 10
        return f"{found.group()} {other}" if memory == found.group() else found.group()

    later = [r for r, n in zip(longer, chunks) if r["metadata"]["needle_chunk"] < n - 2]  # two updates after it
    assert later, "the fixture needs a document with two chunks after its needle's"
    for row, rollout in zip(later, _roll(engine, later, twice)):
        result, gold = P.result_of(row, rollout, tok), row["label"][0]
        codes = P.codes_by_call(result)
        first = codes.index(gold)
        assert codes[first + 1] != gold and codes[first + 2] == gold
        assert P.texts_by_call(result)[first + 1] == f"{P.texts_by_call(result)[first]} {codes[first + 1]}"
        assert P.held_code_returns([result]) == {"changed": 1, "returned": 1,
                                                 "at_answer": int(codes[-1] == gold), "gold_elsewhere": 1}


def test_evaluation_scores_as_the_seed_and_prints_its_table(engine: Any) -> None:
    rows = P.eval_rows(engine.tokenizer, CFG, [200], 2, "eval")
    results = P.evaluate(engine, rows, CFG)
    assert [r["length"] for r in results] == [200, 200]
    for r in results:  # an untrained model: no box, so the seed's sub_em counts a hit and the strict one does not
        assert r["sub_em_strict"] == 0.0 and (r["sub_em"] == 1.0) == (r["answered"] == 0.0)
    for r, row in zip(results, rows):  # one memory code per engine call: each update's and the answer's
        ids = engine.tokenizer.encode(row["metadata"]["context"], add_special_tokens=False)
        assert sum(n for _, n in r["memory_codes"]) == -(-len(ids) // CFG.chunk_tokens) + 1
        assert r["needle_chunk"] == row["metadata"]["needle_chunk"]
    table = P.by_length(results)
    assert table["200"]["n"] == 2 and P.pooled(results, [200]) == 0.0
    text = P.seed_table([{"name": "untrained", "by_length": table}], "sub_em_strict")
    assert text.splitlines()[0] == "| model | 200 |" and "| untrained | 0.00 |" in text


@pytest.mark.slow
def test_stages_chain_on_cpu(tmp_path: Path, tiny_model_dir: Path, engine: Any) -> None:
    """model -> warmstart -> rl -> eval -> table, each a process resuming from the previous checkpoint; the
    warm start's demonstrations rolled by two worker processes over two disjoint families of documents."""
    script = [sys.executable, str(HERE / "reproduce.py")]

    def run(*args: str) -> str:
        out = subprocess.run(script + list(args), capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        return out.stdout

    w = tmp_path
    run("model", "--out", str(w / "model"), "--hidden-size", "32", "--layers", "1", "--heads", "2", "--kv-heads", "1",
        "--intermediate-size", "64", "--chunk-tokens", "128", "--memory-tokens", "24", "--final-tokens", "16",
        "--train-min-tokens", "150", "--train-max-tokens", "250", "--eval-lengths", "150", "--eval-per-length", "2")
    run("warmstart", "--init", str(w / "model"), "--out", str(w / "warm"), "--demos", "5", "--batch", "8",
        "--max-steps", "3", "--eval-every", "1", "--eval-from", "1", "--probe-per-length", "1", "--device", "cpu",
        "--demo-workers", "2", "--schedule", "cosine", "--stop-at", "0", "--settle", "2", "--confirm-per-length", "1")
    stage = json.loads((w / "warm" / "stage.json").read_text())
    # a mark of 0 % is reached by every probe; --settle 2 waits for the second in a row (step 2), and the stop
    # for the confirmation on new documents, asked only then
    assert stage["stop"]["step"] == 2
    assert "(2 probes in a row), confirmed on new documents: 0.0%" in stage["stop"]["reason"]
    assert {"probe_strict", "probe_digits", "probe_reversed", "confirm_strict", "confirm_reversed"} <= set(
        stage["curve"][-1])
    assert "probe_strict" in stage["curve"][0] and "confirm_strict" not in stage["curve"][0]
    bad = subprocess.run(script + ["warmstart", "--init", str(w / "model"), "--out", str(w / "x"), "--settle", "0"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "--settle: '0': a whole number of probes, 1 or more" in bad.stderr
    cfg = P.ReproConfig.load(w / "model")
    tok = engine.tokenizer  # the same Qwen2.5 vocabulary
    docs = [r["metadata"]["context"] for k, n in ((0, 3), (1, 2))
            for r in P.needle_rows(tok, P.random_lengths(cfg, n, f"demo-{k}"), f"demo-{k}", cfg)]
    # one sequence per memory update and one for the answer, over the five documents of both workers
    assert stage["sequences"] == sum(-(-len(tok.encode(d, add_special_tokens=False)) // cfg.chunk_tokens) + 1
                                     for d in docs)
    run("rl", "--init", str(w / "warm"), "--out", str(w / "rl"), "--steps", "1", "--prompts", "2", "--samples", "2",
        "--device", "cpu", "--skip-flat", "--eps-clip-high", "0.25")
    rl_stage = json.loads((w / "rl" / "stage.json").read_text())
    # what the trainer ran with: the flag's clip above 1, the seed's below
    assert (rl_stage["trainer"]["eps_clip"], rl_stage["trainer"]["eps_clip_high"]) == (0.2, 0.25)
    curve = rl_stage["curve"]
    assert curve[0]["audit"]["breaches"] == 0 and curve[0]["sequences"] > 0
    # an untrained model never answers right: every group flat, so --skip-flat took no optimizer step
    assert curve[0]["reward_std"] == 0.0 and curve[0]["skipped"] == 1.0
    assert curve[0]["group_means"] == [0.0, 0.0] and curve[0]["flat_groups"] == 2
    # a second run of two optimizer steps per rollout batch, resumed in another process: the curve and AdamW go on
    arm = ("--prompts", "2", "--samples", "2", "--device", "cpu", "--steps-per-rollout", "2", "--lr-warmup", "3",
           "--sampler", "inverse_cdf")
    run("rl", "--init", str(w / "warm"), "--out", str(w / "rl2"), "--steps", "1", *arm)
    shutil.copytree(w / "rl2", w / "rl2_first")
    run("rl", "--init", str(w / "rl2"), "--out", str(w / "rl2"), "--steps", "2", "--resume", *arm)
    stage = json.loads((w / "rl2" / "stage.json").read_text())
    # each save commits with stage.json, moved in last, which holds every other file's sha256 (read here by plain
    # hashlib); a save cut after the new files moved in but before its stage.json leaves the last call's stage.json
    # beside them, and --resume refuses it instead of mixing one call's curve with another's weights and moments
    import hashlib
    assert sorted(p.name for p in (w / "rl2").iterdir()) == sorted([*stage["files"], "stage.json"])
    assert {"model.safetensors", "optimizer.pt"} <= set(stage["files"])
    assert all(hashlib.sha256((w / "rl2" / n).read_bytes()).hexdigest() == d for n, d in stage["files"].items())
    shutil.copytree(w / "rl2", w / "rl2_cut")
    shutil.copy(w / "rl2_first" / "stage.json", w / "rl2_cut" / "stage.json")
    cut = subprocess.run(script + ["rl", "--init", str(w / "rl2_cut"), "--out", str(w / "rl2_cut"), "--steps", "3",
                                   "--resume", *arm], capture_output=True, text=True, cwd=ROOT, check=False)
    assert cut.returncode != 0 and re.search(
        rf"--resume: {re.escape(str(w / 'rl2_cut'))}/(model\.safetensors|optimizer\.pt) is not the file "
        rf"{re.escape(str(w / 'rl2_cut' / 'stage.json'))} was saved with \(a save cut short, or a file changed "
        r"since\): the checkpoint's parts disagree", cut.stderr), cut.stderr
    assert [c["step"] for c in stage["curve"]] == [0, 1] and len(stage["calls"]) == 2
    assert [c["optimizer_steps"] for c in stage["curve"]] == [2, 2]
    assert stage["calls"][0]["seed"] != stage["calls"][1]["seed"]  # the resumed part samples with other seeds
    # the seed's KL loss to where RL started, in both parts; the warm-up goes on where the first call left it
    assert stage["reference"] == str(w / "warm") and stage["args"]["kl_coef"] == 0.001
    assert [c["sampler"] for c in stage["calls"]] == ["inverse_cdf"] * 2
    # computed (nan without the KL loss) and 0: every group is flat here, so no gradient ever moved the weights
    assert [c["kl"] for c in stage["curve"]] == [0.0, 0.0]
    assert [c["lr"] for c in stage["curve"]] == [5e-5 / 3, 5e-5]  # optimizer steps 0-1, then 2-3 of a 3-step ramp
    import torch
    adam = torch.load(w / "rl2" / "optimizer.pt")
    assert {float(s["step"]) for s in adam["state"].values()} == {4.0}  # 2 + 2: the first call's moments went on
    refused = subprocess.run(script + ["rl", "--init", str(w / "rl2"), "--out", str(w / "rl2"), "--steps", "3",
                                       "--resume", "--lr", "1e-3", *arm], capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode != 0 and "lr was 5e-05, now 0.001" in refused.stderr
    # the seed's clip (0.2 below, 0.3 above) unless told otherwise; a resumed run keeps its clip too
    assert (stage["trainer"]["eps_clip"], stage["trainer"]["eps_clip_high"]) == (0.2, 0.3)
    refused = subprocess.run(script + ["rl", "--init", str(w / "rl2"), "--out", str(w / "rl2"), "--steps", "3",
                                       "--resume", "--eps-clip-high", "0.2", *arm], capture_output=True, text=True,
                             cwd=ROOT)
    assert refused.returncode != 0 and "eps_clip_high was 0.3, now 0.2" in refused.stderr
    refused = subprocess.run(script + ["rl", "--init", str(w / "rl2"), "--out", str(w / "rl2"), "--steps", "3",
                                       "--resume", "--draw", "1", *arm], capture_output=True, text=True, cwd=ROOT,
                             check=False)
    assert refused.returncode != 0 and "draw was 0, now 1" in refused.stderr  # another draw is another arm
    bad = subprocess.run(script + ["rl", "--init", str(w / "warm"), "--out", str(w / "rl3"), "--draw", "-1"],
                         capture_output=True, text=True, cwd=ROOT, check=False)
    assert bad.returncode == 2 and "--draw: '-1': a whole number, 0 or more (1: a second RL arm)" in bad.stderr
    bad = subprocess.run(script + ["rl", "--init", str(w / "warm"), "--out", str(w / "rl3"), "--eps-clip", "0"],
                         capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "--eps-clip: '0': a clip range is a number over 0" in bad.stderr
    run("eval", "--ckpt", str(w / "rl"), "--name", "RL", "--out", str(w / "eval.json"), "--device", "cpu")
    printed = run("table", str(w / "eval.json"))
    assert "| RL |" in printed and "strict sub_em" in printed


def _eval_file(path: Path, name: str, scores: dict[int, list[int]]) -> str:
    """An evaluation whose misses answer the gold reversed at 1K and a code with one digit in place elsewhere."""
    def gold(n: int, i: int) -> str:
        return f"{n // 1000}{i + 5}"  # 1K: 15, 16, ...: no palindrome

    def answer(n: int, i: int, s: int) -> str:
        g = gold(n, i)
        return "\\boxed{" + (g if s else g[::-1] if n == 1000 else g[:-1] + "x") + "}"
    results = [{"length": n, "gold": gold(n, i), "answer": answer(n, i, s), "sub_em_strict": s, "em": s,
                "sub_em": 1, "answered": 1} for n, ss in scores.items() for i, s in enumerate(ss)]
    by_length = {str(n): {"sub_em_strict": 100 * sum(ss) / len(ss)} for n, ss in scores.items()}
    path.write_text(json.dumps({"name": name, "train_lengths": [1000, 2000], "by_length": by_length,
                                "results": results}))
    return str(path)


def test_compare_pairs_documents_and_counts_mcnemar_by_hand(tmp_path: Path) -> None:
    base = _eval_file(tmp_path / "w.json", "warm", {1000: [0, 0, 1, 1], 2000: [0, 0, 0, 1], 16000: [0, 1, 0, 0]})
    rl = _eval_file(tmp_path / "r.json", "RL", {1000: [1, 1, 1, 0], 2000: [1, 1, 0, 1], 16000: [1, 1, 0, 0]})
    out = tmp_path / "cmp.json"
    printed = subprocess.run([sys.executable, str(HERE / "reproduce.py"), "compare", base, rl, "--out", str(out)],
                             capture_output=True, text=True, cwd=ROOT, check=True).stdout
    row = json.loads(out.read_text())["vs_base"][0]
    # by hand at 1K-2K: 3 of 8 -> 6 of 8; won 4 (1K #0 #1, 2K #0 #1), lost 1 (1K #3); z = 3 / sqrt(5)
    assert row["training_lengths"] == {"documents": 8, "before": 37.5, "after": 75.0, "gain_points": 37.5,
                                       "won": 4, "lost": 1, "mcnemar_z": 1.34}
    assert row["8x_and_more"]["won"] == 1 and row["kept_at_8x"] == round(50.0 / 75.0, 3)  # 16K is 8x 2K
    assert "+37.50 points, won 4 / lost 1, McNemar z +1.34" in printed
    # the misses by kind: warm misses 1K #0 #1 (reversed) and 2K #0-#2 (one digit in place); RL 1K #3, 2K #2
    answers = json.loads(out.read_text())["answers"]
    assert answers["warm"]["training_lengths"] == {"right": 3, "reversed": 2, "one_place": 3, "other_code": 0,
                                                   "unboxed": 0}
    assert answers["RL"]["training_lengths"] == {"right": 6, "reversed": 1, "one_place": 1, "other_code": 0,
                                                 "unboxed": 0}
    assert answers["RL"]["8x_and_more"] == {"right": 2, "reversed": 0, "one_place": 2, "other_code": 0, "unboxed": 0}
    assert "RL: answers at [1000, 2000]: right 6, reversed 1, one_place 1" in printed
    other = _eval_file(tmp_path / "o.json", "other", {1000: [1, 1, 1, 1, 1], 2000: [1, 1, 1, 1]})
    refused = subprocess.run([sys.executable, str(HERE / "reproduce.py"), "compare", base, other],
                             capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 1 and "not of the same documents" in refused.stderr
    assert "Traceback" not in refused.stderr and refused.stderr.startswith(other)  # which file, no traceback


# run_in_calls.sh at a size a 2-core CPU runs in about a minute and a half. The script keeps 50 s of a call for
# loading and saving the RL processes: a call of BUDGET 65 s steps RL 15 s; the second call (80 s) steps what
# is left after its warm start round (30 s less the round's time). RL_TOTAL_S 88 with the script's 60 s
# tolerance means "done at 28 s": the second call ends short of it, a later one reaches it. Warm start rounds
# never reach the probe mark (101 %), so both run, and RL follows the last in its own call. The fourth call is
# the user's last (LAST_CALL=1): RL for what it leaves after the evaluations (~20 s), then the evaluations.
CALLS_ENV = {
    "MODEL_ARGS": "--hidden-size 32 --layers 1 --heads 2 --kv-heads 1 --intermediate-size 64 --chunk-tokens 128 "
                  "--memory-tokens 16 --final-tokens 10 --train-min-tokens 100 --train-max-tokens 120 "
                  "--eval-lengths 110",
    "EVAL_PER_LENGTH": "2", "DEMOS": "4", "DEMO_WORKERS": "1", "WS_ARGS": "--batch 8 --max-steps 2",
    "WS_EVAL_EVERY": "2", "WS_EVAL_FROM": "2", "PROBE": "1", "CONFIRM": "1", "WS_STOP_AT": "101", "WS_ROUNDS": "2",
    "WS_STOP_ABOVE": "102", "WS_REFINES": "1", "WS_RESTART_REVERSED": "20", "WS_RESTART_FLIPS": "10",
    "WS_RESTARTS": "1",
    "RL_PROMPTS": "2", "RL_SAMPLES": "2", "RL_STEPS_PER_ROLLOUT": "2", "RL_WARMUP": "3", "RL_MIN_S": "30",
    "RL_TOTAL_S": "88", "EVAL_S": "30",
    # an untrained model never scores: every group is flat, and --skip-flat would take no AdamW step to resume
    "RL_ARGS": "--no-skip-flat",
}
BUDGET, ROUND_2_BUDGET, SHORT_BUDGET, RL_DONE_S = 65, 80, 20, 88 - 60
LAST_BUDGET, LAST_EVAL_S = 120, 50  # RL: 120 - 50 - 50 (loading and saving the arms) = 20 s, less the call's start
VERDICTS = re.compile(r"call ends after warm start round \d|.*: call again.*|evaluations next call.*|all stages done")


def _packed(tgz: Path) -> dict[str, str]:
    """The text files of OUT/results.tgz (what the user gets back from a call), by name."""
    with tarfile.open(tgz) as tar:
        return {m.name.removeprefix("./"): tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}


def _calls_env(tmp_path: Path) -> dict[str, str]:
    """run_in_calls.sh's environment for a CPU run: CALLS_ENV's sizes, and a `python3` on PATH that is this
    interpreter, with its torch and agentgraphs (the script runs `python3`)."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (shim / "python3").chmod(0o755)
    return {**os.environ, **CALLS_ENV, "PATH": f"{shim}{os.pathsep}{os.environ['PATH']}"}


def _rl_arm(d: Path) -> dict[str, Any] | None:
    """An RL arm's stage file as a call left it, with the step count of AdamW's state beside it."""
    import torch

    if not (d / "stage.json").exists():
        return None
    stage = json.loads((d / "stage.json").read_text())
    steps = {float(s["step"]) for s in torch.load(d / "optimizer.pt")["state"].values()}
    return {**stage, "adam_steps": steps}


@pytest.mark.slow
def test_run_in_calls_does_the_next_stages_call_after_call(tmp_path: Path, agentgraphs_cache: Path) -> None:
    """run_in_calls.sh as a user runs it: fresh processes `bash run_in_calls.sh OUT WORK`, called again until it
    prints "all stages done"; what each call did, read from its output, OUT/results.tgz and the checkpoints."""
    out, work = tmp_path / "out", tmp_path / "work"
    env = _calls_env(tmp_path)
    calls: list[dict[str, Any]] = []
    for i in range(8):
        # the second call: the last warm start round, then RL; the third: a user's shorter call, under RL_MIN_S;
        # the fourth: the last call
        budget = {1: ROUND_2_BUDGET, 2: SHORT_BUDGET, 3: LAST_BUDGET}.get(i, BUDGET)
        last_call = {"LAST_CALL": "1", "EVAL_S": str(LAST_EVAL_S)} if i == 3 else {}
        done = subprocess.run(["bash", str(HERE / "run_in_calls.sh"), str(out), str(work)], capture_output=True,
                              text=True, env={**env, "BUDGET": str(budget), **last_call}, cwd=ROOT,
                              timeout=budget + 120, check=False)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        if i == 0:  # round 1 done: the run WS_ROUND_FROM=untrained goes on from here, below
            shutil.copytree(work, tmp_path / "fresh_draw")
        said = [m.group(1) for m in re.finditer(r"^\[\d\d:\d\d:\d\d\] (.*)$", done.stdout, re.MULTILINE)]
        packed = _packed(out / "results.tgz")
        calls.append({"said": said, "packed": packed, "work": sorted(p.name for p in work.iterdir()),
                      "rl": _rl_arm(work / "rl"), "control": _rl_arm(work / "rl_permuted")})
        # every call ends saying what it did, and the results it packs already hold that line
        assert said[0] == f"call starts, budget {budget}s" and VERDICTS.fullmatch(said[-1]), said
        assert packed["calls.log"].splitlines()[-1].endswith(said[-1])
        if said[-1] == "all stages done":
            break
    else:
        pytest.fail(f"no 'all stages done' after {len(calls)} calls: {[c['said'][-1] for c in calls]}")

    first, second, short = calls[:3]
    # 1: the model, its evaluation beside the first warm start round (waited for), and the call ends
    assert first["said"][1] == "model" and first["said"][2].startswith(f"warm start round 1 from {work / 'model'},")
    assert first["said"][-1] == "call ends after warm start round 1"
    assert {"eval_untrained.json", "warmstart1_stage.json", "model.log"} <= set(first["packed"])
    ws1 = json.loads(first["packed"]["warmstart1_stage.json"])
    assert ws1["stop"]["reason"] == "max_steps 2 reached"  # under the probe mark: another round follows
    assert ws1["args"]["stop_above"] == 102.0 and ws1["args"]["refines"] == 1 and ws1["stop"]["overshoots"] == []
    assert (ws1["args"]["restart_reversed"], ws1["args"]["restart_flips"], ws1["args"]["restarts"]) == (
        20.0, 10.0, 1)  # WS_RESTART_REVERSED, WS_RESTART_FLIPS, WS_RESTARTS
    assert ws1["stop"]["attempt"] == 0 and ws1["stop"]["rejected"] == []  # no probe stop: nothing to begin again from
    # 2: a second round on new documents, from the first; WS_ROUNDS reached, so RL and its control start from it
    # in the same call (RL_MIN_S was left), and end short of RL_TOTAL_S: "call again"
    assert second["said"][1].startswith(f"warm start round 2 from {work / 'warm1'}")
    ws2 = json.loads(second["packed"]["warmstart2_stage.json"])
    assert ws2["args"]["init"] == str(work / "warm1") and ws2["args"]["demo_split"] == "demo2"
    went_on = [s for s in second["said"] if s.startswith("warm start done")]
    assert len(went_on) == 1 and re.fullmatch(r"warm start done after round 2, \d+ s left: RL in this call", went_on[0])
    assert int(went_on[0].split(", ")[1].split()[0]) >= 30  # RL_MIN_S
    assert second["said"][second["said"].index(went_on[0]) + 1].startswith(f"RL and control from {work / 'warm2'},")
    probe = [c for c in ws2["curve"] if "probe_strict" in c][-1]  # no stop by the probe: the log says so
    assert second["said"][second["said"].index(went_on[0]) + 2] == (
        f"RL starts from a warm start its probe never stopped ({ws2['stop']['reason']}; its last probe read "
        f"{probe['probe_strict']:.1f} % at step {probe['step']}): as it stands; the warm start's evaluation says "
        "where RL began")
    ended = re.fullmatch(r"call ends after (\d+) s of RL: call again", second["said"][-1])
    assert ended and int(ended.group(1)) == int(second["rl"]["seconds"]) < RL_DONE_S
    assert {"rl_stage.json", "rl_permuted_stage.json", "eval_warmstart.json"} <= set(second["packed"])
    assert not {"eval_rl.json", "table.md", "compare.json"} & set(second["packed"])
    # 3: RL not done, but the call is shorter than RL_MIN_S: nothing started, nothing changed
    assert len(short["said"]) == 2 and re.fullmatch(r"too little time left for RL \(\d+ s, RL_MIN_S=30\): call again "
                                                    r"\(with BUDGET over RL_MIN_S\)", short["said"][1])
    assert short["work"] == second["work"] == ["model", "results", "rl", "rl_draws", "rl_permuted", "warm1", "warm2",
                                               "ws_round_from"]
    assert (work / "rl_draws").read_text() == "1\n"  # the arms RL began with (RL_DRAWS), which its calls keep
    assert short["rl"] == second["rl"] and short["control"] == second["control"]
    # 4, the last call: both arms resumed from their own checkpoints, with their AdamW state and curve, for what
    # the call leaves after the evaluations (RL_TOTAL_S aside), then the evaluations and the table: done
    assert len(calls) == 4
    final = calls[3]
    more = re.fullmatch(r"last call: RL (\d+) s more, then the evaluations", final["said"][1])
    assert more and 10 <= int(more.group(1)) <= LAST_BUDGET - LAST_EVAL_S - 50
    assert re.fullmatch(rf"RL and control resumed after {ended.group(1)} s, 0\.\d\d min each", final["said"][2])
    assert "evaluations" in final["said"][3:] and final["said"][-1] == "all stages done"
    for arm, d in (("rl", "rl"), ("control", "rl_permuted")):
        before, after = second[arm], final[arm]
        assert len(before["calls"]) == 1 and len(after["calls"]) == 2
        assert all(c["resume"] and c["init"] == str(work / d) for c in after["calls"][1:])
        assert after["reference"] == before["reference"] == str(work / "warm2")  # the KL loss's, in every call
        n = len(before["curve"])
        assert after["curve"][:n] == before["curve"] and len(after["curve"]) > n
        assert [c["step"] for c in after["curve"]] == list(range(len(after["curve"])))  # no gap, no repeat
        # AdamW's step count: every optimizer step of all calls (2 a step), so each call went on from the
        # last's moments rather than a fresh optimizer
        for stage in (before, after):
            assert stage["adam_steps"] == {float(sum(c["optimizer_steps"] for c in stage["curve"]))}
        assert all(c["optimizer_steps"] == 2 for c in after["curve"])
        # the time asked for, stepped (the step that crosses it ends the call's stepping; minutes to 2 places)
        assert after["seconds"] >= before["seconds"] + int(more.group(1)) - 1
    packed = final["packed"]
    evals = {f: json.loads(packed[f"eval_{f}.json"]) for f in ("untrained", "warmstart", "rl", "rl_permuted")}
    assert {f: e["ckpt"] for f, e in evals.items()} == {
        "untrained": str(work / "model"), "warmstart": str(work / "warm2"), "rl": str(work / "rl"),
        "rl_permuted": str(work / "rl_permuted")}
    assert all(len(e["results"]) == 2 for e in evals.values())  # EVAL_PER_LENGTH at the one length
    table = packed["table.md"]
    for name in ("untrained", "warm start", "RL", "RL, permuted rewards (control)"):
        assert table.count(f"| {name} |") == 2  # sub_em as the seed scores it, and strict
    compare = json.loads(packed["compare.json"])
    assert compare["base"] == "warm start" and [r["name"] for r in compare["vs_base"]] == [
        "RL", "RL, permuted rewards (control)"]
    assert all(r["training_lengths"]["documents"] == 2 for r in compare["vs_base"])
    curves = json.loads(packed["curves.json"])["windows"]  # RL's curve beside its control's, from the stage files
    steps = min(len(final["rl"]["curve"]), len(final["control"]["curve"]))
    assert curves[0]["steps"][0] == 0 and curves[-1]["steps"][1] == steps - 1
    assert curves[0]["reward"]["rl"] == pytest.approx(
        sum(c["reward_mean"] for c in final["rl"]["curve"][:10]) / len(final["rl"]["curve"][:10]), abs=1e-3)
    assert (work / "ws_round_from").read_text() == "last\n"  # the default, which the run's calls keep
    # WS_ROUND_FROM=untrained: round 2 is a fresh draw from the untrained model on its own documents, and with no
    # round stopped by its probe RL starts from the round whose last probe read highest (here round 1's, set to
    # 50 %: the CPU model's probes read 0). Round 1 began from the untrained model either way; the run's file
    # that says where its later rounds begin is the one thing the copy changes
    drawn_fresh = tmp_path / "fresh_draw"
    (drawn_fresh / "ws_round_from").unlink()
    ws1_path = drawn_fresh / "warm1" / "stage.json"
    ws1 = json.loads(ws1_path.read_text())
    probed = max(i for i, c in enumerate(ws1["curve"]) if "probe_strict" in c)
    ws1["curve"][probed]["probe_strict"] = 50.0
    ws1_path.write_text(json.dumps(ws1))
    round2 = subprocess.run(["bash", str(HERE / "run_in_calls.sh"), str(out), str(drawn_fresh)], capture_output=True,
                            text=True, env={**env, "BUDGET": str(ROUND_2_BUDGET), "WS_ROUND_FROM": "untrained"},
                            cwd=ROOT, timeout=ROUND_2_BUDGET + 120, check=False)
    assert round2.returncode == 0, round2.stdout[-3000:] + round2.stderr[-3000:]
    said = [m.group(1) for m in re.finditer(r"^\[\d\d:\d\d:\d\d\] (.*)$", round2.stdout, re.MULTILINE)]
    assert said[1].startswith(f"warm start round 2 from {drawn_fresh / 'model'}, "), said
    ws2 = json.loads((drawn_fresh / "warm2" / "stage.json").read_text())
    assert ws2["args"]["init"] == str(drawn_fresh / "model") and ws2["args"]["demo_split"] == "demo2"
    probe2 = [c["probe_strict"] for c in ws2["curve"] if "probe_strict" in c][-1]
    taken = said.index(next(s for s in said if s.startswith("warm start done after round 2"))) + 1
    assert said[taken:taken + 3] == [
        ("RL starts from warm start round 1 of 2 (WS_ROUND_FROM=untrained: each round a fresh draw from the untrained "
         f"model, none stopped by its probe; round 1's last probe read highest, 50.0 %; round 2's {probe2:.1f} %)"),
        f"RL and control from {drawn_fresh / 'warm1'}, {said[taken + 1].split(', ')[1]}",
        (f"RL starts from a warm start its probe never stopped (max_steps 2 reached; its last probe read 50.0 % at "
         f"step {ws1['curve'][probed]['step']}): as it stands; the warm start's evaluation says where RL began")]
    for d in ("rl", "rl_permuted"):
        assert json.loads((drawn_fresh / d / "stage.json").read_text())["reference"] == str(drawn_fresh / "warm1")
    assert json.loads((drawn_fresh / "results" / "eval_warmstart.json").read_text())["ckpt"] == str(
        drawn_fresh / "warm1")
    assert (drawn_fresh / "ws_round_from").read_text() == "untrained\n"
    # a run's rounds begin one way: a call with the other is refused before anything runs, as is another value
    for d, asked, began in ((work, "untrained", "last"), (drawn_fresh, "last", "untrained")):
        other = subprocess.run(["bash", str(HERE / "run_in_calls.sh"), str(out), str(d)], capture_output=True,
                               text=True, env={**env, "WS_ROUND_FROM": asked, "RESUME": "1"}, cwd=ROOT, timeout=60,
                               check=False)
        assert other.returncode == 2 and other.stdout == "" and other.stderr.startswith(
            f"WS_ROUND_FROM={asked}: this run's warm start began with WS_ROUND_FROM={began} ({d / 'ws_round_from'})"
            f", which decides its rounds' init and the round RL starts from; set WS_ROUND_FROM={began} on every "
            "call of it"), other.stderr
    wrong = subprocess.run(["bash", str(HERE / "run_in_calls.sh"), str(out), str(work)], capture_output=True,
                           text=True, env={**env, "WS_ROUND_FROM": "first"}, cwd=ROOT, timeout=60, check=False)
    assert wrong.returncode == 2 and wrong.stdout == "" and wrong.stderr == (
        "WS_ROUND_FROM=first: set last (each warm start round from the one before, the default) or untrained (each "
        "from the untrained model: a fresh draw)\n")
    # a last call that cannot start RL before the evaluations says so and changes nothing; a LAST_CALL that is
    # neither 0 nor 1 is refused before anything runs
    fresh = tmp_path / "fresh"  # the warm start done, RL never started
    shutil.copytree(work, fresh, ignore=shutil.ignore_patterns("rl", "rl_permuted", "rl_draws"))
    short_last = subprocess.run(["bash", str(HERE / "run_in_calls.sh"), str(out), str(fresh)], capture_output=True,
                                text=True, env={**env, "BUDGET": str(LAST_EVAL_S + 55), **last_call}, cwd=ROOT,
                                timeout=120, check=False)
    assert short_last.returncode == 0 and re.search(
        r"\] too little time left for RL before the evaluations \(\d+ s, EVAL_S=50\): call again \(with a larger "
        r"BUDGET\)\n$", short_last.stdout), short_last.stdout
    assert sorted(p.name for p in fresh.iterdir()) == ["model", "results", "warm1", "warm2", "ws_round_from"]
    refused = subprocess.run(["bash", str(HERE / "run_in_calls.sh"), str(out), str(fresh)], capture_output=True,
                             text=True, env={**env, "LAST_CALL": "yes"}, cwd=ROOT, timeout=60, check=False)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == "LAST_CALL=yes: set 1 (this call ends the run) or 0 (the default)\n"
    # RL_DRAWS=2: a second RL arm from the same start, its own documents and seeds, stepped, resumed and evaluated
    # beside the others, in the table and the comparison after the control; any other count is refused
    drawn = tmp_path / "drawn"  # the warm start done and evaluated; no RL arm, no later evaluation
    shutil.copytree(work, drawn, ignore=shutil.ignore_patterns("rl", "rl_permuted", "rl_draws", "eval_rl*",
                                                               "rl*_stage.json", "table.md", "compare.json",
                                                               "curves.json"))
    three = {**env, "RL_DRAWS": "2", "RL_TOTAL_S": "0"}
    begun = subprocess.run(["bash", str(HERE / "run_in_calls.sh"), str(out), str(drawn)], capture_output=True,
                           text=True, env={**three, "BUDGET": str(BUDGET), "EVAL_S": "100"}, cwd=ROOT,
                           timeout=BUDGET + 120, check=False)
    assert begun.returncode == 0, begun.stdout[-3000:] + begun.stderr[-3000:]
    assert re.search(rf"\] RL, control and RL's second draw from {re.escape(str(drawn / 'warm2'))}, ", begun.stdout)
    arms = {d: _rl_arm(drawn / d) for d in ("rl", "rl_permuted", "rl_draw1")}
    assert all(arms.values()), begun.stdout
    ended = subprocess.run(["bash", str(HERE / "run_in_calls.sh"), str(out), str(drawn)], capture_output=True,
                           text=True, env={**three, "BUDGET": str(LAST_BUDGET), **last_call, "RESUME": "1"}, cwd=ROOT,
                           timeout=LAST_BUDGET + 120, check=False)
    assert ended.returncode == 0 and ended.stdout.endswith("] all stages done\n"), ended.stdout[-3000:] + ended.stderr
    assert re.search(r"\] RL, control and RL's second draw resumed after \d+ s, ", ended.stdout)
    later = {d: _rl_arm(drawn / d) for d in arms}
    for d, arm in later.items():
        assert arm["curve"][:len(arms[d]["curve"])] == arms[d]["curve"] and len(arm["curve"]) > len(arms[d]["curve"])
        assert arm["adam_steps"] == {float(sum(c["optimizer_steps"] for c in arm["curve"]))}
    draw, rl = later["rl_draw1"], later["rl"]
    assert (draw["args"]["draw"], rl["args"]["draw"], later["rl_permuted"]["args"]["draw"]) == (1, 0, 0)
    assert not draw["permuted"]
    # its rollouts, like the other arms', were audited by `check_run` before each update (invariants 1-3, every
    # trained token re-scored): what publish.py counts in the run's audit total
    assert all(c["audit"]["breaches"] == 0 and c["audit"]["rescored_tokens"] > 0 for c in draw["curve"])
    assert [c["init"] for c in draw["calls"]] == [str(drawn / "warm2"), str(drawn / "rl_draw1")]
    assert draw["calls"][0]["seed"] == rl["calls"][0]["seed"] + 7_000_003  # each call: its part's seed, drawn anew
    assert draw["calls"][1]["seed"] == draw["calls"][0]["seed"] + 1_000_003 * len(arms["rl_draw1"]["curve"])
    packed = _packed(out / "results.tgz")
    evaluation = json.loads(packed["eval_rl_draw1.json"])
    assert evaluation["name"] == "RL, second draw" and evaluation["ckpt"] == str(drawn / "rl_draw1")
    assert packed["table.md"].count("| RL, second draw |") == 2
    assert [r["name"] for r in json.loads(packed["compare.json"])["vs_base"]] == [
        "RL", "RL, permuted rewards (control)", "RL, second draw"]
    assert json.loads(packed["rl_draw1_stage.json"]) == {k: v for k, v in draw.items() if k != "adam_steps"}
    wrong = subprocess.run(["bash", str(HERE / "run_in_calls.sh"), str(out), str(drawn)], capture_output=True,
                           text=True, env={**env, "RL_DRAWS": "3"}, cwd=ROOT, timeout=60, check=False)
    assert wrong.returncode == 2 and wrong.stdout == "" and wrong.stderr.startswith("RL_DRAWS=3: set 1 (RL and its ")
    for d, draws, began in ((drawn, "1", "2"), (work, "2", "1")):  # a run's arms go on together: not another count
        other = subprocess.run(["bash", str(HERE / "run_in_calls.sh"), str(out), str(d)], capture_output=True,
                               text=True, env={**env, "RL_DRAWS": draws, "RESUME": "1"}, cwd=ROOT, timeout=60,
                               check=False)
        assert other.returncode == 2 and other.stdout == "" and other.stderr.startswith(
            f"RL_DRAWS={draws}: this run's RL began with RL_DRAWS={began} ({d / 'rl_draws'}), and its arms go on "
            f"together; set RL_DRAWS={began} on every call of it"), other.stderr


def _script_function(name: str) -> str:
    """A shell function of run_in_calls.sh, its definition as the script holds it (to call it alone in a test)."""
    script = (HERE / "run_in_calls.sh").read_text()
    start = script.index(f"{name}() {{")
    return script[start:script.index("\n}\n", start) + 3]


def test_run_in_calls_says_when_rl_starts_from_a_warm_start_its_probe_did_not_stop(tmp_path: Path) -> None:
    """run_in_calls.sh's `probe_stopped` (whether a round goes on, and the line the call log gets when RL starts
    fresh) on published stage files: run 21's last round (its time budget ended it one step after an unconfirmed
    probe), run 19's (stopped by its probe: nothing to say), and a stage whose step cap came before any probe."""
    function = _script_function("probe_stopped")
    env = _calls_env(tmp_path)  # the script's `python3`: this interpreter

    def said(stage: dict[str, Any]) -> tuple[int, str]:
        (tmp_path / "stage.json").write_text(json.dumps(stage))
        done = subprocess.run(["bash", "-c", f'{function}\nprobe_stopped "$1"', "-", str(tmp_path)],
                              capture_output=True, text=True, env=env, timeout=60, check=False)
        assert done.stderr == ""
        return done.returncode, done.stdout

    results = ROOT / "bench" / "results"
    run21 = json.loads((results / "memagent_small_scale_run21.json").read_text())["warmstart_stage"]
    why = "time budget of 8.58 min spent; its last probe read 43.8 % at step 1374, its confirmation 28.1 %\n"
    assert said(run21) == (1, why)
    run19 = json.loads((results / "memagent_small_scale_run19.json").read_text())["warmstart_stage"]
    assert run19["stop"]["reason"].startswith("probe") and said(run19) == (0, "")
    capped = {"stop": {"reason": "max_steps 2 reached"}, "curve": [{"step": 1, "loss": 7.0}, {"step": 2, "loss": 6.0}]}
    assert said(capped) == (1, "max_steps 2 reached; no probe ran\n")


def test_run_in_calls_best_round_takes_the_round_whose_last_probe_read_highest(tmp_path: Path) -> None:
    """run_in_calls.sh's `best_round` (with WS_ROUND_FROM=untrained, the round RL starts from when no round's probe
    stopped it) on published rounds none of whose probes stopped: run 30's first (its last probe 0.0 %) and run 21's
    two (6.2 % and 43.8 %), in either order; on a tie the later; a round no probe read comes last."""
    function = _script_function("best_round")
    env = _calls_env(tmp_path)  # the script's `python3`: this interpreter
    results = ROOT / "bench" / "results"
    run30 = json.loads((results / "memagent_small_scale_run30.json").read_text())["warmstart_earlier_rounds"][0]
    run21 = json.loads((results / "memagent_small_scale_run21.json").read_text())
    first21, last21 = run21["warmstart_earlier_rounds"][0], run21["warmstart_stage"]
    unprobed = {"stop": {"reason": "max_steps 2 reached"}, "curve": [{"step": 1, "loss": 7.0}]}

    def best(*rounds: dict[str, Any]) -> list[str]:
        work = tmp_path / f"work{len(list(tmp_path.glob('work*')))}"
        for k, stage in enumerate(rounds, 1):
            (work / f"warm{k}").mkdir(parents=True)
            (work / f"warm{k}" / "stage.json").write_text(json.dumps(stage))
        done = subprocess.run(["bash", "-c", f'{function}\nbest_round "$1" "$2"', "-", str(work), str(len(rounds))],
                              capture_output=True, text=True, env=env, timeout=60, check=False)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        return done.stdout.removesuffix("\n").split("\t")

    assert best(run30, last21) == ["2", "43.8 %", "round 1's 0.0 %"]
    assert best(last21, run30) == ["1", "43.8 %", "round 2's 0.0 %"]
    assert best(first21, last21, run30) == ["2", "43.8 %", "round 1's 6.2 %, round 3's 0.0 %"]
    assert best(last21, last21) == ["2", "43.8 %", "round 1's 43.8 %"]  # a tie: the later
    assert best(unprobed, run30) == ["2", "0.0 %", "round 1's no probe"]
    assert best(unprobed) == ["1", "no probe", ""]


@pytest.mark.slow
def test_run_in_calls_packs_a_cut_call_and_refuses_to_resume_a_lost_run(tmp_path: Path,
                                                                        agentgraphs_cache: Path) -> None:
    """Run 13 lost its run twice: the device machine was given back between calls, so the next call found an empty
    /tmp and silently started over; and its last call, killed at the device's limit just before packing, returned
    nothing. Now a call with RESUME=1 refuses a WORK_DIR with no run, before anything runs, and a signal (the
    machine's limit) stops the stages and packs what is done."""
    import signal

    out, work = tmp_path / "out", tmp_path / "work"
    env = _calls_env(tmp_path)
    script = ["bash", str(HERE / "run_in_calls.sh"), str(out), str(work)]

    lost = subprocess.run(script, capture_output=True, text=True, env={**env, "RESUME": "1"}, cwd=ROOT, timeout=60,
                          check=False)
    assert lost.returncode == 3 and lost.stdout == ""
    assert lost.stderr == (f"RESUME=1: WORK_DIR {work} holds no model, so there is no run to go on with (on the device "
                           "machine: it was given back between calls, and this call's fresh machine has an empty "
                           "/tmp). Nothing was run. Start the run again from its first call (RESUME=0).\n")
    assert not out.exists() and not work.exists()  # refused before anything was made
    wrong = subprocess.run(script, capture_output=True, text=True, env={**env, "RESUME": "yes"}, cwd=ROOT, timeout=60,
                           check=False)
    assert wrong.returncode == 2
    assert wrong.stderr == "RESUME=yes: set 1 (this call goes on with a run) or 0 (the default)\n"

    # a call cut while its warm start trains (a probe mark never reached, a step cap never met) and the untrained
    # model's evaluation runs beside it: the whole process group gets SIGTERM, as `timeout` and the device send it
    long_warm = {"BUDGET": "300", "WS_STOP_AT": "101", "WS_ARGS": "--batch 8 --max-steps 100000"}
    call = subprocess.Popen(script, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**env, **long_warm}, cwd=ROOT, start_new_session=True)
    log = work / "results" / "calls.log"
    deadline = time.monotonic() + 120
    while not (log.exists() and "warm start round 1" in log.read_text()):
        assert call.poll() is None and time.monotonic() < deadline, "the call never reached its warm start"
        time.sleep(0.5)
    time.sleep(3)
    os.killpg(call.pid, signal.SIGTERM)
    stdout, _ = call.communicate(timeout=60)
    assert call.returncode == 128 + signal.SIGTERM
    said = re.findall(r"^\[\d\d:\d\d:\d\d\] (.*)$", stdout, re.MULTILINE)
    assert re.fullmatch(r"call cut by SIGTERM after \d+ s: packed what was done \(a stage cut short runs again in "
                        r"the next call\)", said[-1]), said
    packed = _packed(out / "results.tgz")
    assert packed["calls.log"].splitlines()[-1].endswith(said[-1]) and "model.log" in packed
    assert "warmstart1_stage.json" not in packed and not (work / "warm1" / "stage.json").exists()
    # the stages were stopped with it (`timeout` runs each in a process group of its own, which the signal to the
    # call's group does not reach): no process is left working in WORK_DIR
    def working() -> list[str]:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                text = cmdline.read_bytes().replace(b"\0", b" ").decode()
            except OSError:  # gone meanwhile
                continue
            if str(work) in text:
                found.append(text)
        return found
    assert working() == []

    # the model survived the cut: a RESUME=1 call goes on from it (the cut warm start round runs again)
    again = subprocess.run(script, capture_output=True, text=True, env={**env, "RESUME": "1", "BUDGET": "2"},
                           cwd=ROOT, timeout=120, check=False)
    said = re.findall(r"^\[\d\d:\d\d:\d\d\] (.*)$", again.stdout, re.MULTILINE)
    assert again.returncode == 0 and said[0] == "call starts, budget 2s" and "model" not in said, again.stdout
    assert said[1].startswith(f"warm start round 1 from {work / 'model'},")


def test_curves_put_rl_beside_its_control_step_by_step(tmp_path: Path) -> None:
    def arm(path: Path, permuted: bool, init: str, steps: list[tuple[float, float, float, int | None]],
            prompts: int = 16, draw: int | None = None) -> str:  # draw None: a stage file from before `rl --draw`
        curve = [{"step": i, "reward_mean": r, "entropy": e, "kl": k, **({} if f is None else {"flat_groups": f})}
                 for i, (r, e, k, f) in enumerate(steps)]
        call = {"init": init, "prompts": prompts, **({} if draw is None else {"draw": draw})}
        path.write_text(json.dumps({"permuted": permuted, "calls": [call], "curve": curve}))
        return str(path)

    nan = float("nan")  # a skipped step's entropy
    rl = arm(tmp_path / "rl.json", False, "w", [(0.25, 0.1, 0.0, 2), (0.5, 0.2, 0.01, 4), (0.75, 0.3, 0.02, 0)])
    control = arm(tmp_path / "c.json", True, "w", [(0.25, 0.1, 0.0, 2), (0.25, nan, 0.03, 8), (0.0, 0.5, 0.05, 16),
                                                   (0.5, 0.5, 0.5, 0)])  # a 4th step RL did not take: left out
    out = tmp_path / "curves.json"
    printed = subprocess.run([sys.executable, str(HERE / "reproduce.py"), "curves", rl, control, "--window", "2",
                              "--out", str(out)], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    windows = json.loads(out.read_text())["windows"]
    # by hand: steps 0-1 RL (0.25 + 0.5) / 2, control (0.25 + 0.25) / 2, difference (0 + 0.25) / 2; the NaN
    # entropy is left out of the control's mean; step 2 alone in the second window
    assert windows == [
        {"steps": [0, 1], "reward": {"rl": 0.375, "control": 0.25}, "difference": 0.125,
         "entropy": {"rl": 0.15, "control": 0.1}, "kl": {"rl": 0.005, "control": 0.015},
         "flat_groups": {"rl": 3.0, "control": 5.0}},
        {"steps": [2, 2], "reward": {"rl": 0.75, "control": 0.0}, "difference": 0.75,
         "entropy": {"rl": 0.3, "control": 0.5}, "kl": {"rl": 0.02, "control": 0.05},
         "flat_groups": {"rl": 0.0, "control": 16.0}}]
    assert "0-1 | 0.375 / 0.25 (+0.125)" in printed
    older = arm(tmp_path / "old.json", False, "w", [(0.5, 0.1, 0.0, None)])  # before run 9: no flat groups kept
    assert P.curve_windows(json.loads(Path(older).read_text()), json.loads(Path(control).read_text()), 10)[0][
        "flat_groups"] == {"rl": None, "control": 2.0}  # one step both took
    drawn0 = arm(tmp_path / "new.json", False, "w", [(0.5, 0.1, 0.0, 0)], draw=0)  # draw 0 is the older files' arm
    assert P.curve_windows(json.loads(Path(drawn0).read_text()), json.loads(Path(control).read_text()), 10)[0][
        "difference"] == 0.25
    for a, b, said in ((control, rl, "RL's stage file first"),
                       (rl, arm(tmp_path / "x.json", True, "v", []), "RL's init is 'w' and the control's 'v'"),
                       (rl, arm(tmp_path / "y.json", True, "w", [], prompts=8),
                        "RL's prompts is 16 and the control's 8"),
                       # RL's second draw rolls other documents than the control: not paired with it step by step
                       (arm(tmp_path / "d.json", False, "w", [(0.5, 0.1, 0.0, 0)], draw=1), control,
                        "RL's draw is 1 and the control's 0")):
        refused = subprocess.run([sys.executable, str(HERE / "reproduce.py"), "curves", a, b],
                                 capture_output=True, text=True, cwd=ROOT)
        assert refused.returncode == 1 and said in refused.stderr and "Traceback" not in refused.stderr
    with pytest.raises(ValueError, match="window=0"):
        P.curve_windows(json.loads(Path(rl).read_text()), json.loads(Path(control).read_text()), 0)


@pytest.mark.parametrize("run", ["run8", "run9", "run10", "run11", "run12", "run14", "run17", "run19", "run21",
                                 "run23", "run26", "run27", "run28", "run29", "run30", "run32", "run35", "run36",
                                 "run37", "run38", "run39"])
def test_a_published_runs_figures_follow_from_its_documents(run: str) -> None:
    """bench/results/memagent_small_scale_<run>.json: every score, paired count and verdict it publishes is
    re-derived here from its per-document results by plain arithmetic (no pipeline helper)."""
    published = json.loads((ROOT / "bench" / "results" / f"memagent_small_scale_{run}.json").read_text())
    train, at_8x = [1000, 2000, 4000], [32000]

    def score(evaluation: dict[str, Any], lengths: list[int]) -> float:
        hits = [r["sub_em_strict"] for r in evaluation["results"] if r["length"] in lengths]
        return 100 * sum(hits) / len(hits)

    evals = {k: published[f"eval_{k}"] for k in ("untrained", "warmstart", "rl", "rl_permuted")}
    for evaluation in evals.values():
        assert len(evaluation["results"]) == 48 * 6
        for n, row in evaluation["by_length"].items():
            assert row["sub_em_strict"] == pytest.approx(score(evaluation, [int(n)]), abs=0.01)
        assert evaluation["train_strict"] == pytest.approx(score(evaluation, train), abs=0.01)
    base = evals["warmstart"]
    for arm, shown in zip(("rl", "rl_permuted"), published["compare_strict"]["vs_base"]):
        pairs = [(b["sub_em_strict"], a["sub_em_strict"]) for b, a in zip(base["results"], evals[arm]["results"])
                 if b["length"] in train]
        assert [b["gold"] for b in base["results"]] == [a["gold"] for a in evals[arm]["results"]]  # same documents
        won, lost = sum(a > b for b, a in pairs), sum(a < b for b, a in pairs)
        assert shown["training_lengths"]["won"] == won and shown["training_lengths"]["lost"] == lost
        assert shown["training_lengths"]["mcnemar_z"] == pytest.approx((won - lost) / math.sqrt(won + lost), abs=0.01)
        gain = score(evals[arm], train) - score(base, train)
        assert shown["training_lengths"]["gain_points"] == pytest.approx(gain, abs=0.01)
        assert shown["kept_at_8x"] == pytest.approx(score(evals[arm], at_8x) / score(evals[arm], train), abs=0.01)
    targets, (rl, control) = published["targets"], published["compare_strict"]["vs_base"]
    assert targets["rl_gain_points_ge_15"]["passed"] == (rl["training_lengths"]["gain_points"] >= 15)
    # 32K kept at 0.8x of a training-length score that reaches the start band's floor: a ratio of two scores near
    # 0 keeps nothing (run 30: 8.3 % at 32K of 7.6 % at 1K-4K)
    floor = published["warmstart_stage"]["args"]["stop_at"]
    assert targets["keeps_80pct_at_8x"]["passed"] == (rl["kept_at_8x"] >= 0.8 and score(evals["rl"], train) >= floor)
    assert ("under_floor" in targets["keeps_80pct_at_8x"]) == (score(evals["rl"], train) < floor) == (
        run in ("run30", "run38"))
    assert targets["control_within_noise"]["passed"] == (abs(control["training_lengths"]["mcnemar_z"]) < 1.96)
    assert targets["untrained_strict_near_0"]["passed"] == (score(evals["untrained"], train) == 0.0)
    audits = [p["audit"] for arm in ("rl_stage", "rl_permuted_stage") for p in published[arm]["curve"]]
    assert targets["every_rollout_checked"]["rollouts"] == sum(a["rollouts"] for a in audits) > 0
    assert targets["every_rollout_checked"]["passed"] == (sum(a["breaches"] for a in audits) == 0)
    # run 9 on: the paired comparisons beyond the training lengths, and RL against its own control
    longer = [8000, 16000, 32000]
    assert ("paired_more" in published) == (run != "run8")
    for label, arms in published.get("paired_more", {}).items():
        spans = {"8K-32K": longer, "32K": at_8x, "all": train + longer, "RL_vs_control_1K-4K": train}
        compared = ({"RL": (evals["rl_permuted"], evals["rl"])} if label.startswith("RL_vs") else
                    {"RL": (base, evals["rl"]), "control": (base, evals["rl_permuted"])})
        for arm, (before, after) in compared.items():
            shown = arms if label.startswith("RL_vs") else arms[arm]
            pairs = [(b["sub_em_strict"], a["sub_em_strict"]) for b, a in zip(before["results"], after["results"])
                     if b["length"] in spans[label]]
            won, lost = sum(a > b for b, a in pairs), sum(a < b for b, a in pairs)
            assert (shown["documents"], shown["won"], shown["lost"]) == (len(pairs), won, lost)
            assert shown["mcnemar_z"] == pytest.approx((won - lost) / math.sqrt(won + lost), abs=0.01)
            assert shown["before"] == pytest.approx(score(before, spans[label]), abs=0.01)
            assert shown["after"] == pytest.approx(score(after, spans[label]), abs=0.01)
            assert shown["gain_points"] == pytest.approx(shown["after"] - shown["before"], abs=0.011)
    # run 10 on: RL's curve beside its control's, 10 steps at a time, re-derived from the two stage files
    assert ("curves" in published) == (run not in ("run8", "run9"))
    if "curves" in published:
        rl_curve, control_curve = published["rl_stage"]["curve"], published["rl_permuted_stage"]["curve"]
        n = min(len(rl_curve), len(control_curve))
        for w, start in zip(published["curves"]["windows"], range(0, n, 10), strict=True):
            a, b = rl_curve[start:min(start + 10, n)], control_curve[start:min(start + 10, n)]
            assert w["steps"] == [start, start + len(a) - 1]
            assert w["reward"]["rl"] == pytest.approx(sum(s["reward_mean"] for s in a) / len(a), abs=1e-3)
            assert w["reward"]["control"] == pytest.approx(sum(s["reward_mean"] for s in b) / len(b), abs=1e-3)
            assert w["difference"] == pytest.approx(w["reward"]["rl"] - w["reward"]["control"], abs=2e-3)
            assert w["kl"]["control"] == pytest.approx(sum(s["kl"] for s in b) / len(b), abs=1e-3)


PUBLISHED_META = {  # what publish.py is told (the rest it reads from the packed files)
    "run11": ["--changes-from", "10", "--failure", ("call 1 first failed at import (the carried wheels lacked "
                                                     "sniffio; 3.5 s, nothing ran); it was rerun at once with "
                                                     "BUDGET=530")],
    "run12": ["--changes-from", "11"],
    "run14": ["--changes-from", "12", "--failure", ("a first attempt (22:11-22:19 device clock, BUDGET=535) stopped "
                                                     "its warm start at step 600 (confirmed 43.8 %) and ran 4 RL "
                                                     "steps; the machine was given back before call 2, whose "
                                                     "RESUME=1 was refused in 1.5 s (rc 3). The run was started again "
                                                     "from nothing (this file)")],
    "run17": ["--changes-from", "14"],
    "run19": ["--changes-from", "18", "--failure", ("Six machine starts refused (11:49-12:53 UTC, 90 device-seconds "
                                                     "each, 541 in all), five of them answered with a ~10 minute wait; "
                                                     "the seventh started. The run then went in two chained calls with "
                                                     "no failure; 67 device-seconds were left.")],
    "run21": ["--changes-from", "20"],
    "run23": ["--changes-from", "21"],
    "run26": ["--changes-from", "23"],
    "run27": ["--changes-from", "21"],
    "run28": ["--changes-from", "27"],
    "run29": ["--changes-from", "28"],
    "run30": ["--changes-from", "29"],
    "run32": ["--changes-from", "30", "--failure", ("Four machine starts were refused first (12:02-12:27 UTC: three "
                                                     "tries of 90-91 device-seconds, two refusals of 15 s), 301 "
                                                     "device-seconds in all; the fifth start took 361 s. The three "
                                                     "calls then chained with no failure; 41 device-seconds were "
                                                     "left.")],
    "run35": ["--changes-from", "32", "--failure", ("Three machine starts were refused first (21:33-21:46 UTC: 181, 90 "
                                                     "and 15 device-seconds, 286 in all); the fourth brought an H200. "
                                                     "The two calls then chained with no failure; 207 device-seconds "
                                                     "were left and the machine was given back.")],
    "run36": ["--changes-from", "35"],  # the machine came at the first try: no failure
    "run37": ["--changes-from", "36"],  # the machine came at the first try: no failure
    "run38": ["--changes-from", "37"],  # the machine came at the first try (an H100 for an H200): no failure
    "run39": ["--changes-from", "38"],  # the machine came at the first try (an H100 for an H200): no failure
}


@pytest.mark.parametrize("run", ["run11", "run12", "run14", "run17", "run19", "run21", "run23", "run26", "run27",
                                 "run28", "run29", "run30", "run32", "run35", "run36", "run37", "run38",
                                 "run39"])
def test_publish_packs_a_runs_files_into_the_file_bench_keeps(run: str, tmp_path: Path) -> None:
    """publish.py on the files a run's last call packed gives back the published results file. Its audit
    totals, training rewards and target verdicts were worked out by separate scripts for these runs; its paired
    figures (`paired_more`, rounded as `compare.json` rounds) are re-derived by plain arithmetic in the test
    above."""
    published = json.loads((ROOT / "bench" / "results" / f"memagent_small_scale_{run}.json").read_text())
    results = tmp_path / "results"  # what `tar xzf results.tgz` gives: the packed files, by their names
    results.mkdir()
    earlier = published.get("warmstart_earlier_rounds", [])  # a warm start in rounds: round k in warmstart<k>
    later = published.get("warmstart_later_rounds", [])  # the rounds after the one RL started from (run 38)
    for k, stage in enumerate([*earlier, None, *later], 1):
        if stage is not None:
            (results / f"warmstart{k}_stage.json").write_text(json.dumps(stage))
    files = {f"warmstart{len(earlier) + 1}_stage.json": "warmstart_stage", "rl_stage.json": "rl_stage",
             "rl_permuted_stage.json": "rl_permuted_stage", "compare.json": "compare_strict", "curves.json": "curves",
             **{f"eval_{k}.json": f"eval_{k}" for k in ("untrained", "warmstart", "rl", "rl_permuted")}}
    for name, key in files.items():
        (results / name).write_text(json.dumps(published[key]))
    (results / "table.md").write_text(published["table"])
    (results / "calls.log").write_text(published["calls_log"])
    changes = next(v for k, v in published.items() if k.startswith("changes_from_run_"))
    out = tmp_path / "published.json"
    publish = [sys.executable, str(HERE / "publish.py"), str(results), "--out", str(out), "--when", published["when"],
               "--command", published["command"], "--device-seconds", str(published["device_seconds"]),
               "--changes", changes, "--machine", published["machine"], *PUBLISHED_META[run]]
    done = subprocess.run(publish, capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text()) == published
    verdicts = {k: "PASS" if t["passed"] else "MISS" for k, t in published["targets"].items()}
    assert done.stdout.splitlines() == [f"{k}: {v}" for k, v in verdicts.items()]
    # a results directory without the last call's files, or with an evaluation in the wrong place, is refused
    (results / "curves.json").unlink()
    refused = subprocess.run(publish, capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert refused.returncode == 1 and refused.stderr.startswith(f"{results / 'curves.json'}: missing; unpack the "
                                                                 "results.tgz of the run's last call")
    (results / "curves.json").write_text(json.dumps(published["curves"]))
    (results / "eval_rl.json").write_text(json.dumps(published["eval_rl_permuted"]))
    refused = subprocess.run(publish, capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert refused.returncode == 1
    assert refused.stderr == "eval_rl.json: its model is 'RL, permuted rewards (control)', not 'RL'\n"
    (results / "eval_rl.json").write_text(json.dumps(published["eval_rl"]))
    unaudited = copy.deepcopy(published["rl_permuted_stage"])
    unaudited["curve"][3]["audit"] = None  # what `rl --no-audit` writes
    (results / "rl_permuted_stage.json").write_text(json.dumps(unaudited))
    refused = subprocess.run(publish, capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert refused.returncode == 1 and refused.stderr.startswith("RL steps not audited (control step 3): every "
                                                                 "rollout of a published run is checked")
    (results / "rl_permuted_stage.json").write_text(json.dumps(published["rl_permuted_stage"]))
    (results / "compare.json").write_text(json.dumps({**published["compare_strict"], "lengths_8x": []}))
    refused = subprocess.run(publish, capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert refused.returncode == 1 and refused.stderr.startswith("compare.json: no evaluation length is 8x the "
                                                                 "longest training length 4000")
    swapped = {**published["compare_strict"], "vs_base": published["compare_strict"]["vs_base"][::-1]}
    (results / "compare.json").write_text(json.dumps(swapped))  # the control's row where RL's is read
    refused = subprocess.run(publish, capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert refused.returncode == 1 and refused.stderr.startswith(
        "compare.json compares ['warm start', 'RL, permuted rewards (control)', 'RL']; the targets read RL")
    # one more round: the round RL started from is the one the warm start's evaluation read (the last, or with
    # WS_ROUND_FROM=untrained an earlier one), every other kept beside it, in order; an evaluation of no round's
    # checkpoint, or of two, is refused
    import publish as B

    (results / "compare.json").write_text(json.dumps(published["compare_strict"]))
    k = len(earlier) + len(later) + 2
    start = published["warmstart_stage"]
    last = {**start, "args": {**start["args"], "demo_split": f"demo{k}", "out": f"/tmp/repro/warm{k}"}}
    (results / f"warmstart{k}_stage.json").write_text(json.dumps(last))
    meta = {"when": "w", "command": "c", "device_seconds": 1, "changes_from": 1, "changes": "x", "failures": []}
    kept = B.published(results, **meta)  # RL began from the round before the last: the evaluation's
    assert kept["warmstart_stage"] == start and kept["warmstart_later_rounds"] == [*later, last]
    assert kept.get("warmstart_earlier_rounds", []) == earlier
    assert kept["targets"] == published["targets"] and kept["audit"] == published["audit"]
    evaluated_last = {**published["eval_warmstart"], "ckpt": last["args"]["out"]}
    (results / "eval_warmstart.json").write_text(json.dumps(evaluated_last))
    more = B.published(results, **meta)
    assert more["warmstart_stage"] == last and "warmstart_later_rounds" not in more
    assert more["warmstart_earlier_rounds"] == [*earlier, start, *later]
    assert len(earlier) == (run in ("run21", "run28", "run30"))  # runs 21, 28 and 30 warmed up in two rounds
    assert len(later) == (run == "run38")  # run 38's RL began from round 1 of 2
    for ckpt, matched in (("/tmp/elsewhere/warm1", 0), (start["args"]["out"], 2)):
        (results / "eval_warmstart.json").write_text(json.dumps({**published["eval_warmstart"], "ckpt": ckpt}))
        if matched == 2:
            (results / f"warmstart{k}_stage.json").write_text(json.dumps({**last, "args": start["args"]}))
        with pytest.raises(B.Unpublishable, match=rf"^eval_warmstart.json evaluated {ckpt}, which is {matched} of "
                                                  rf"the warm start rounds' checkpoints \(warmstart1_stage.json: "):
            B.published(results, **meta)


RUN29_ARMS = ("untrained", "warmstart", "rl", "rl_permuted")


def _run29_packed(tmp_path: Path, *also: str) -> tuple[dict[str, Any], Path]:
    """Run 29's published file, and a results folder under `tmp_path` holding what its last call packed that
    publish.py reads: the stage files, curves, table and call log, and the files `also` names (`compare.json`,
    `eval_<arm>.json`) as published; a test writes the others."""
    published = json.loads((ROOT / "bench" / "results" / "memagent_small_scale_run29.json").read_text())
    results = tmp_path / "results"
    results.mkdir()
    files = {"warmstart1_stage.json": "warmstart_stage", "rl_stage.json": "rl_stage", "curves.json": "curves",
             "rl_permuted_stage.json": "rl_permuted_stage", "compare.json": "compare_strict",
             **{f"eval_{k}.json": f"eval_{k}" for k in RUN29_ARMS}}
    for name, key in files.items():
        if name in also or not (name.startswith("eval_") or name == "compare.json"):
            (results / name).write_text(json.dumps(published[key]))
    (results / "table.md").write_text(published["table"])
    (results / "calls.log").write_text(published["calls_log"])
    return published, results


def test_publish_counts_codes_written_before_the_needle(tmp_path: Path) -> None:
    """Evaluations that keep `flush_chunks` (since "Chunk alignment"): publish.py counts, per evaluation, the codes
    written into an empty memory before the needle, by the kind of chunk read; counted here by a plain loop on run
    29's files given the flush chunks its documents hold before a needle (10, 21, ...). Evaluations that keep
    them only in part are refused by name; runs 3-29's, which keep none, publish as before (the test above)."""
    published, results = _run29_packed(tmp_path, "compare.json")
    arms = RUN29_ARMS
    for arm in arms:
        evaluation = copy.deepcopy(published[f"eval_{arm}"])
        for r in evaluation["results"]:
            r["flush_chunks"] = [k for k in range(r["length"] // 512) if k % 11 == 10]
        (results / f"eval_{arm}.json").write_text(json.dumps(evaluation))
    import publish as B

    meta = {"when": "w", "command": "c", "device_seconds": 1, "changes_from": 29, "changes": "x", "failures": []}
    out = B.published(results, **meta)
    for arm in arms:
        counts = {"flush": [0, 0], "other": [0, 0]}
        held = {"last": [0, 0], "flush": [0, 0], "other": [0, 0]}
        for r in out[f"eval_{arm}"]["results"]:
            if r["status"] in ("failed", "aborted"):
                continue
            codes = [code for code, times in r["memory_codes"] for _ in range(times)]
            for k in range(r["needle_chunk"]):
                if k + 1 < len(codes) and not codes[k]:
                    kind = "flush" if k % 11 == 10 else "other"
                    counts[kind][0] += 1
                    counts[kind][1] += bool(codes[k + 1])
            k = r["needle_chunk"] + 1  # the held code, update by update, to its first change
            while k + 1 < len(codes) and codes[k] == r["gold"]:
                kind = "last" if k + 2 == len(codes) else "flush" if k % 11 == 10 else "other"
                held[kind][0] += 1
                held[kind][1] += codes[k + 1] != r["gold"]
                k += 1
        assert out["needle_free_writes"][arm] == counts and out["held_code_changes"][arm] == held
    assert out["held_code_changes"]["rl"]["last"][0] > 0 and out["held_code_changes"]["rl"]["flush"][0] > 0
    assert out["needle_free_writes"]["rl"] == {"flush": [179, 0], "other": [2740, 0]}  # run 29 wrote none
    assert out["targets"] == published["targets"] and out["audit"] == published["audit"]
    (results / "eval_rl.json").write_text(json.dumps(published["eval_rl"]))  # one evaluation from before
    with pytest.raises(B.Unpublishable, match=r"eval_rl.json: no flush_chunks, where the other evaluations keep"):
        B.published(results, **meta)


def test_publish_reads_what_the_memories_held(tmp_path: Path) -> None:
    """Evaluations that keep `memory_texts` (since "Confused digits"): publish.py keeps, per evaluation,
    how the initial memory fared before the needle, whether a changed held code came back, and with what, the
    answers that are not the final memory's last number, at 1K-4K and 8K-32K, and the digits its copies flipped.
    Built
    on run 29's files, with texts that agree with their codes (a third of the documents leave the initial memory
    for a text with no code after the first update; every other changed held code keeps the gold as its first
    number) and counted by a plain loop; evaluations that keep texts only in part are refused by name."""
    published, results = _run29_packed(tmp_path, "compare.json")
    arms = RUN29_ARMS
    for arm in arms:
        evaluation = copy.deepcopy(published[f"eval_{arm}"])
        for i, r in enumerate(evaluation["results"]):
            codes = [code for code, times in r["memory_codes"] for _ in range(times)]
            texts: list[str | None] = []
            for k, code in enumerate(codes):
                if not code:
                    texts.append(None if i % 3 == 0 and 1 <= k <= r["needle_chunk"] else "No previous memory")
                elif i % 2 and code != r["gold"] and r["gold"] in codes[:k]:
                    texts.append(f"The secret code is {r['gold']}. Or {code}.")
                else:
                    texts.append(f"The secret code is {code}.")
            r["memory_texts"] = [[t, 1] for t in texts]
        (results / f"eval_{arm}.json").write_text(json.dumps(evaluation))
    import publish as B

    meta = {"when": "w", "command": "c", "device_seconds": 1, "changes_from": 29, "changes": "x", "failures": []}
    out = B.published(results, **meta)
    assert "needle_free_writes" not in out  # no flush_chunks kept: those readings need them
    for arm in arms:
        blank = {"updates": [0, 0], "stored_from_initial": [0, 0], "stored_from_other": [0, 0]}
        returns = {"changed": 0, "returned": 0, "at_answer": 0, "gold_elsewhere": 0}
        answers = {group: {"answers": 0, "off_last": 0, "elsewhere": 0} for group in ("1K-4K", "8K-32K")}
        for r in out[f"eval_{arm}"]["results"]:
            if r["status"] in ("failed", "aborted"):
                continue
            texts = [t for t, times in r["memory_texts"] for _ in range(times)]
            codes = [code for code, times in r["memory_codes"] for _ in range(times)]
            boxed = re.findall(r"\\boxed\{([^{}]*)\}", r["answer"])
            if boxed and boxed[-1].strip() and codes[-1]:
                cell = answers["1K-4K" if r["length"] <= 4000 else "8K-32K"]
                cell["answers"] += 1
                cell["off_last"] += boxed[-1].strip() != codes[-1]
                cell["elsewhere"] += boxed[-1].strip() != codes[-1] and f"is {boxed[-1].strip()}. Or" in texts[-1]
            k = 0
            while k < r["needle_chunk"] and texts[k] == "No previous memory":
                blank["updates"][0] += 1
                blank["updates"][1] += texts[k + 1] != "No previous memory"
                k += 1
            kind = "stored_from_initial" if texts[r["needle_chunk"]] == "No previous memory" else "stored_from_other"
            blank[kind][0] += 1
            blank[kind][1] += codes[r["needle_chunk"] + 1] == r["gold"]
            held = codes[r["needle_chunk"] + 1:]
            if held and held[0] == r["gold"] and any(c != r["gold"] for c in held):
                first = next(j for j, c in enumerate(held) if c != r["gold"])
                returns["changed"] += 1
                returns["returned"] += r["gold"] in held[first:]
                returns["at_answer"] += held[-1] == r["gold"]
                returns["gold_elsewhere"] += f"is {r['gold']}. Or" in (texts[r["needle_chunk"] + 1 + first] or "")
        assert out["blank_memory"][arm] == blank and out["held_code_returns"][arm] == returns
        assert out["answers_off_memory"][arm] == answers
        assert out["digit_flips"][arm] == _digit_flips(out[f"eval_{arm}"]["results"])
    assert out["blank_memory"]["rl"]["stored_from_other"][0] > 0 and out["blank_memory"]["rl"]["updates"][1] > 0
    assert out["held_code_returns"]["rl"]["gold_elsewhere"] > 0
    assert out["held_code_returns"]["rl"]["returned"] > out["held_code_returns"]["rl"]["gold_elsewhere"]
    assert 0 < out["answers_off_memory"]["rl"]["8K-32K"]["elsewhere"] < out["answers_off_memory"]["rl"]["8K-32K"][
        "off_last"]
    assert out["digit_flips"]["rl"]["7"][1] > 0.25 * out["digit_flips"]["rl"]["7"][0]  # run 29's RL flipped its 7s
    assert out["targets"] == published["targets"] and out["audit"] == published["audit"]
    (results / "eval_rl_permuted.json").write_text(json.dumps(published["eval_rl_permuted"]))  # one from before
    with pytest.raises(B.Unpublishable, match=r"^eval_rl_permuted.json: no memory_texts, where the other evaluat"):
        B.published(results, **meta)


def test_publish_keeps_a_second_rl_draw_beside_the_run(tmp_path: Path) -> None:
    """A run with RL_DRAWS=2 packs a second RL arm (`rl_draw1_stage.json`, `eval_rl_draw1.json`, a fourth row in
    `compare.json`): publish.py keeps it beside the run, its figures against the warm start and the first arm, its
    rollouts in the audit total, and the targets still read the first arm. Built on run 29's files, the second arm
    standing in as run 29's RL evaluated on the control's answers, compared by `reproduce.py compare` itself."""
    published, results = _run29_packed(tmp_path, *(f"eval_{k}.json" for k in RUN29_ARMS))
    second = {**published["rl_stage"], "args": {**published["rl_stage"]["args"], "draw": 1}}
    (results / "rl_draw1_stage.json").write_text(json.dumps(second))
    evaluation = {**published["eval_rl_permuted"], "name": "RL, second draw"}
    (results / "eval_rl_draw1.json").write_text(json.dumps(evaluation))

    def compare(*names: str) -> None:
        files = [str(results / f"eval_{n}.json") for n in names]
        done = subprocess.run([sys.executable, str(HERE / "reproduce.py"), "compare", *files,
                               "--out", str(results / "compare.json")], capture_output=True, text=True, cwd=ROOT,
                              timeout=120, check=False)
        assert done.returncode == 0, done.stderr

    import publish as B

    meta = {"when": "w", "command": "c", "device_seconds": 1, "changes_from": 28, "changes": "x", "failures": []}
    compare("warmstart", "rl", "rl_permuted")  # the comparison of a run without the second arm: refused
    with pytest.raises(B.Unpublishable, match=r"compare.json compares \['warm start', 'RL', 'RL, permuted rewards "
                       r"\(control\)'\].* eval_rl_permuted.json eval_rl_draw1.json`"):
        B.published(results, **meta)
    compare("warmstart", "rl", "rl_permuted", "rl_draw1")
    out = B.published(results, **meta)
    train = [1000, 2000, 4000]
    warm, first, drawn = (r["results"] for r in (published["eval_warmstart"], published["eval_rl"], evaluation))
    won, lost, gain, z = _paired(first, drawn, train)
    figures = out["second_draw"]["vs_first_draw"]
    assert (figures["won"], figures["lost"], figures["documents"]) == (won, lost, 144)
    assert _printed(figures["gain_points"], plus=True) == gain and figures["mcnemar_z"] == round(z, 2)
    won, lost, gain, _ = _paired(warm, drawn, train)
    assert (out["second_draw"]["vs_warm_start"]["won"], out["second_draw"]["vs_warm_start"]["lost"]) == (won, lost)
    assert out["second_draw"]["kept_at_8x"] == round(float(_kept_at_32k({"eval_rl": evaluation}, "rl")), 3)
    assert out["rl_draw1_stage"] == second and out["eval_rl_draw1"] == evaluation
    assert out["audit"]["rollouts"] == published["audit"]["rollouts"] + sum(
        c["audit"]["rollouts"] for c in second["curve"])  # the second arm's rollouts were trained on: checked too
    assert out["targets"] == {**published["targets"], "every_rollout_checked": {**out["audit"], "passed": True}}
    for k in ("rl_gain_points_ge_15", "keeps_80pct_at_8x", "control_within_noise"):  # the first arm's, as before
        assert out["targets"][k] == published["targets"][k]
    # a second arm that is not `rl --draw 1`, or an evaluation of another model, is refused by name
    (results / "rl_draw1_stage.json").write_text(json.dumps(published["rl_stage"]))
    with pytest.raises(B.Unpublishable, match=r"rl_draw1_stage.json is not RL's second draw \(`rl --draw 1`"):
        B.published(results, **meta)
    (results / "rl_draw1_stage.json").write_text(json.dumps(second))
    (results / "eval_rl_draw1.json").write_text(json.dumps(published["eval_rl"]))
    with pytest.raises(B.Unpublishable, match="eval_rl_draw1.json: its model is 'RL', not 'RL, second draw'"):
        B.published(results, **meta)
    unaudited = copy.deepcopy(second)
    unaudited["curve"][2]["audit"] = None
    (results / "eval_rl_draw1.json").write_text(json.dumps(evaluation))
    (results / "rl_draw1_stage.json").write_text(json.dumps(unaudited))
    with pytest.raises(B.Unpublishable, match=r"RL steps not audited \(RL draw 1 step 2\)"):
        B.published(results, **meta)


# the example README's "Results in short": run | warm start | RL | RL at 32K | control | figures file
RESULT_ROW = re.compile(r"^\| \**(\d+)\**[^|]*" + r"\|([^|]*)" * 4 + r"\| `memagent_small_scale_run\1\.json` \|$",
                        re.MULTILINE)
SHOWN = re.compile(r"(\d+\.\d) %(?: \(([+-]\d+\.\d)(?:, z (-?\d+\.\d))?)?")


def _strict_score(results: list[dict[str, Any]], lengths: list[int]) -> Fraction:
    """Strict sub_em (%) of the per-document results at `lengths`, as an exact fraction."""
    hits = [r["sub_em_strict"] for r in results if r["length"] in lengths]
    return Fraction(100 * round(sum(hits)), len(hits))


def _won_lost(before: list[dict[str, Any]], after: list[dict[str, Any]], lengths: list[int]) -> tuple[int, int]:
    """Documents at `lengths` that `after` gets right and `before` not (won), and the other way (lost)."""
    pairs = [(b["sub_em_strict"], a["sub_em_strict"]) for b, a in zip(before, after, strict=True)
             if b["length"] in lengths]
    return sum(a > b for b, a in pairs), sum(a < b for b, a in pairs)


def _paired(before: list[dict[str, Any]], after: list[dict[str, Any]], lengths: list[int]
            ) -> tuple[int, int, str, float]:
    """`after` against `before` at `lengths`, paired by document: won, lost, the strict sub_em gain as a section
    prints it (one place, signed) and McNemar's z."""
    won, lost = _won_lost(before, after, lengths)
    gain = _strict_score(after, lengths) - _strict_score(before, lengths)
    return won, lost, _printed(gain, 1, plus=True), (won - lost) / math.sqrt(won + lost)


def _printed(x: Fraction | float, places: int = 1, plus: bool = False) -> str:
    """x to `places` with halves rounded up (exact arithmetic: a figure is not rounded twice)."""
    q = math.floor(abs(Fraction(x)) * 10 ** places + Fraction(1, 2))
    sign = "-" if x < 0 and q else ("+" if plus else "")
    return f"{sign}{q // 10 ** places}.{q % 10 ** places:0{places}d}"


def _shown(x: Fraction | float, places: int = 1, plus: bool = False) -> set[str]:
    """x as printed to `places`: halves rounded up, or (an exact half only) to even, as Python prints."""
    return {_printed(x, places, plus), f"{float(x):+.{places}f}" if plus else f"{float(x):.{places}f}"}


@pytest.mark.parametrize("run", [5, 6, 7, 8, 9, 10, 11, 12, 14, 17, 19, 21, 23, 26, 27, 28, 29, 30, 32, 35, 36, 37,
                                 38, 39])
def test_the_results_table_shows_what_each_runs_file_holds(run: int) -> None:
    """Each row of the example README's results table (runs 5-29: every one whose file holds the final
    evaluations the row shows) against the per-document results in bench/results: every score, gain and paired
    z it prints, to the digit it prints (from exact fractions: a z rounded twice, 5.2496 -> 5.25 -> 5.3, fails)."""
    rows = {int(m.group(1)): m.groups()[1:] for m in RESULT_ROW.finditer((HERE / "README.md").read_text())}
    warm_cell, rl_cell, far_cell, control_cell = rows[run]
    published = json.loads((ROOT / "bench" / "results" / f"memagent_small_scale_run{run}.json").read_text())
    warm, rl, control = (published[f"eval_{k}"]["results"] for k in ("warmstart", "rl", "rl_permuted"))

    score, shown = _strict_score, _shown

    def z(before: list[dict[str, Any]], after: list[dict[str, Any]], lengths: list[int]) -> float:
        won, lost = _won_lost(before, after, lengths)
        return (won - lost) / math.sqrt(won + lost)  # irrational or whole: never a tie at the shown digit

    def check(cell: str, before: list[dict[str, Any]], after: list[dict[str, Any]], lengths: list[int]) -> None:
        found = SHOWN.search(cell)
        assert found, cell
        value, gain, shown_z = found.groups()
        assert value in shown(score(after, lengths)), cell
        if gain is not None:
            assert gain in shown(score(after, lengths) - score(before, lengths), plus=True), cell
        if shown_z is not None:
            assert shown_z in shown(z(before, after, lengths)), cell
        kept = re.search(r"\((\d\.\d\d)x\)", cell)
        if kept:
            assert kept.group(1) in shown(score(after, [32000]) / score(after, [1000, 2000, 4000]), 2), cell

    train = [1000, 2000, 4000]
    assert SHOWN.search(warm_cell).group(1) in shown(score(warm, train))
    check(rl_cell, warm, rl, train)
    check(far_cell, warm, rl, [32000])
    check(control_cell, warm, control, train)


def test_run_13s_lost_calls_hold_what_bench_readme_says() -> None:
    """Run 13 was lost (the machine given back between calls); its first two calls' packed files came back and
    are kept. bench/README's "Run 13, lost" table rows and audit line, rebuilt here from those files."""
    readme = (ROOT / "bench" / "README.md").read_text()
    section = readme[readme.index("**Run 13, lost**"):readme.index("**Run 14**")]
    kept = ROOT / "bench" / "results" / "memagent_small_scale_run13_lost"
    audits, rollouts = [], []
    for call in (1, 2):
        files = _packed(kept / f"call{call}_results.tgz")
        stop = json.loads(files["warmstart1_stage.json"])["stop"]
        warm = json.loads(files["eval_warmstart.json"])["results"]
        assert {r["length"] for r in warm} == {1000, 2000, 4000, 8000, 16000, 32000}
        train, far = _strict_score(warm, [1000, 2000, 4000]), _strict_score(warm, [32000])
        shots = stop["overshoots"]
        if len({s["step"] for s in shots}) == 1:
            gone = f"{len(shots)} ({shots[0]['step']}: {shots[0]['probe_strict']:.1f} %, twice)"
        else:
            gone = f"{len(shots)} (" + ", ".join(f"{s['step']}: {s['probe_strict']:.1f} %" for s in shots) + ")"
        confirmed = _confirmed(stop)
        rl = json.loads(files["rl_stage.json"])
        row = (f"| {call} | step {stop['step']} | {gone} | {confirmed} % | {_printed(train)} % | {_printed(far)} % | "
               f"{_printed(far / train, 2)}x | {len(rl['curve'])} ({int(rl['seconds'])}) |")
        assert row in section.splitlines(), row
        for arm in ("rl_stage.json", "rl_permuted_stage.json"):
            curve = json.loads(files[arm])["curve"]
            audits += [c["audit"] for c in curve]
            rollouts.append([c["reward_mean"] for c in curve])
    total = {k: sum(a[k] for a in audits) for k in ("rollouts", "sequences", "rescored_tokens")}
    assert len(audits) == 36 and all(a["breaches"] == 0 and a["over_threshold"] == 0 for a in audits)
    said = (f"The 18 RL steps of each arm that came back (calls 1-2: {total['rollouts']:,} rollouts, "
            f"{total['sequences']:,} sequences, {round(total['rescored_tokens'] / 1000)}K trained tokens)")
    assert said in " ".join(section.split()), said
    assert f"max |delta| {max(a['max_abs_delta'] for a in audits):.1e}".replace("e-0", "e-") in section
    rl2, control2 = rollouts[2], rollouts[3]  # call 2's arms, steps 0 and 9
    assert (f"RL {rl2[0]:.2f} -> {rl2[9]:.2f}, control {control2[0]:.2f} -> {control2[9]:.2f}"
            in " ".join(section.split()))


def _bench_section(start: str, end: str) -> str:
    """bench/README's text from `start` to `end`, whitespace folded (a figure may be wrapped across lines)."""
    readme = (ROOT / "bench" / "README.md").read_text()
    return " ".join(readme[readme.index(start):readme.index(end)].split())


def _check_run_section(section: str, published: dict[str, Any]) -> None:
    """A run's bench/README section against its published file: the score table (strict sub_em per length), the
    paired figures, the answer table and the 10-step curve table, each rebuilt from the per-document results and
    the two arms' stage files."""
    evals = {k: published[f"eval_{k}"]["results"] for k in ("untrained", "warmstart", "rl", "rl_permuted")}
    train, longer = [1000, 2000, 4000], [8000, 16000, 32000]
    rl_stage, control_stage = published["rl_stage"], published["rl_permuted_stage"]
    labels = {"untrained": "untrained", "warmstart": "warm start",
              "rl": f"RL after {rl_stage['seconds'] / 60:.1f} min ({len(rl_stage['curve'])} steps)",
              "rl_permuted": f"RL, permuted rewards (control), {control_stage['seconds'] / 60:.1f} min"}
    for key, label in labels.items():
        cells = [_printed(_strict_score(evals[key], [n]), 2) for n in train + longer]
        total = _printed(_strict_score(evals[key], train))
        if key in ("rl", "rl_permuted"):
            total = f"**{total}**"
        assert f"| {label} | {' | '.join(cells)} | {total} |" in section, label

    def paired(before: str, after: str, lengths: list[int]) -> tuple[int, int, str, str]:
        won, lost, gain, z = _paired(evals[before], evals[after], lengths)
        return won, lost, gain, f"{z:.2f}"

    won, lost, gain, z = paired("warmstart", "rl", train)
    assert f"at 1K-4K won {won} / lost {lost} (**{gain} points, z {z}**)" in section
    for arm, span, lengths in (("rl", "8K-32K", longer), ("rl", "32K", [32000]), ("rl_permuted", "8K-32K", longer)):
        won, lost, gain, z = paired("warmstart", arm, lengths)
        assert f"at {span} won {won} / lost {lost} ({gain}, z {z})" in section, (arm, span)
    won, lost, gain, z = paired("warmstart", "rl_permuted", train)
    assert f"The control at 1K-4K won {won} / lost {lost} (**{gain}, z {z}**)" in section
    won, lost, gain, z = paired("rl_permuted", "rl", train)
    assert f"RL vs its own control at 1K-4K {gain} (z {z})" in section
    answers = published["compare_strict"]["answers"]
    kinds = ("right", "reversed", "one_place", "other_code", "unboxed", "stored_wrong", "lost_in_memory",
             "lost_answering")
    for name, shown in answers.items():
        row = f"| {name} | " + " | ".join(str(shown["training_lengths"][k]) for k in kinds) + " |"
        assert row in section, row
    n = min(len(rl_stage["curve"]), len(control_stage["curve"]))  # as `curves` pairs them: the shorter arm's steps
    for k, (a, b) in enumerate(zip(_windows(rl_stage["curve"][:n]), _windows(control_stage["curve"][:n]),
                                   strict=True)):
        start = 10 * k

        def mean(steps: list[dict[str, Any]], key: str, places: int) -> str:
            return f"{sum(s[key] for s in steps) / len(steps):.{places}f}"

        difference = (sum(s["reward_mean"] for s in a) / len(a)) - (sum(s["reward_mean"] for s in b) / len(b))
        row = (f"| {start}-{start + len(a) - 1} | {mean(a, 'reward_mean', 2)} / {mean(b, 'reward_mean', 2)} | "
               f"{difference:+.2f} | {mean(a, 'entropy', 3)} / {mean(b, 'entropy', 3)} | "
               f"{mean(a, 'kl', 3)} / {mean(b, 'kl', 3)} | {mean(a, 'flat_groups', 1)} / {mean(b, 'flat_groups', 1)} |")
        assert row in section, row


def test_run_14s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 14": its score table, paired figures, answer table and curve table, rebuilt here from
    the published file's per-document results and stage files; the first attempt's line from its packed call."""
    section = _bench_section("**Run 14**", "**Run 15, lost**")
    _check_run_section(section, json.loads((ROOT / "bench" / "results" / "memagent_small_scale_run14.json")
                                           .read_text()))
    train = [1000, 2000, 4000]
    first = _packed(ROOT / "bench" / "results" / "memagent_small_scale_run14_first_attempt" / "call1_results.tgz")
    stop = json.loads(first["warmstart1_stage.json"])["stop"]
    shots = ", ".join(f"{s['step']}: {s['probe_strict']:.1f} %" for s in stop["overshoots"])
    warm = json.loads(first["eval_warmstart.json"])["results"]
    steps = {len(json.loads(first[arm])["curve"]) for arm in ("rl_stage.json", "rl_permuted_stage.json")}
    confirmed = _confirmed(stop)
    assert (f"went back from {len(stop['overshoots'])} overshoots ({shots}), stopped its warm start at step "
            f"{stop['step']} (confirmed {confirmed} %; evaluated {_printed(_strict_score(warm, train))} % at 1K-4K, "
            f"{_printed(_strict_score(warm, [32000]))} % at 32K) and ran {steps.pop()} RL steps"
            ).replace("from 2 overshoots", "from two overshoots") in section


def test_run_15s_lost_call_holds_what_bench_readme_says() -> None:
    """Run 15 was lost after its first call: bench/README's "Run 15, lost" against that call's packed files."""
    section = _bench_section("**Run 15, lost**", "**Run 19**")
    call = _packed(ROOT / "bench" / "results" / "memagent_small_scale_run15_lost" / "call1_results.tgz")
    probes = [(int(m.group(1)), m.group(2)) for m in re.finditer(r"step (\d+): loss [\d.]+, probe strict sub_em "
                                                                  r"([\d.]+)%", call["warmstart1.log"])]
    last_step, last_probe = probes[-1]
    assert f"the call ended at step {last_step} ({last_probe} %)" in section
    assert json.loads(call["warmstart1_stage.json"])["stop"]["reason"] == "time budget of 8.02 min spent"
    assert "in the call's 8.0 minutes" in section
    spans = [[float(p) for step, p in probes if lo <= step <= hi] for lo, hi in ((0, 800), (850, 1050), (1100, 1300))]
    assert (f"probe {min(spans[0]):.0f}-{max(spans[0]):.1f} % to step 800, {min(spans[1]):.0f}-{max(spans[1]):.1f} % "
            f"to step 1050, then {min(spans[2]):.1f}-{max(spans[2]):.1f} % at steps 1100-1300") in section
    assert all(float(p) < 30 for _, p in probes)  # never in the band: no stop, RL never began
    untrained = json.loads(call["eval_untrained.json"])["results"]
    assert len(untrained) == 48 * 6 and sum(r["sub_em_strict"] for r in untrained) == 0
    assert "RL" not in call["calls.log"]


def test_where_the_copy_formed_in_each_warm_start() -> None:
    """bench/README's table "Where the copy forms" (runs 4-16), each row from that warm start's curve: the first
    probe at >= 10 % and >= 30 % strict sub_em, and the step it stopped at (time: the call's budget ran out)."""
    section = _bench_section("Where the copy forms.", "**Run 17**")
    results = ROOT / "bench" / "results"
    stages = {f"run {n}": json.loads((results / f"memagent_small_scale_run{n}.json").read_text())["warmstart_stage"]
              for n in (4, 5, 6, 7, 8, 9, 10, 11, 12, 14)}
    kept = {"run 13, call 1": "run13_lost/call1", "run 13, call 2": "run13_lost/call2",
            "run 14, first attempt": "run14_first_attempt/call1", "run 15": "run15_lost/call1",
            "run 16": "run16_stopped/call1"}
    for name, where in kept.items():
        folder, call = where.split("/")
        files = _packed(results / f"memagent_small_scale_{folder}" / f"{call}_results.tgz")
        stages[name] = json.loads(files["warmstart1_stage.json"])

    def first(curve: list[dict[str, Any]], mark: float) -> str:
        step = _first_probe(curve, mark)
        return "-" if step is None else str(step)

    for name, stage in stages.items():
        assert stage["args"]["init"].endswith("/model") and stage["args"]["demo_split"] == "demo1", name
        timed_out = stage["stop"]["reason"].startswith("time budget")
        stopped = f"{len(stage['curve'])} (time)" if timed_out else str(stage["stop"]["step"])
        row = f"| {name} | {first(stage['curve'], 10)} | {first(stage['curve'], 30)} | {stopped} |"
        assert row in section, row
    assert section.count("| run ") == len(stages) == 15


def test_run_16s_call_holds_what_bench_readme_says() -> None:
    """Run 16 was stopped after its first call (its copy never formed): bench/README's "Run 16, stopped"
    against that call's packed files."""
    section = _bench_section("**Run 16, stopped**", "Where the copy forms.")
    call = _packed(ROOT / "bench" / "results" / "memagent_small_scale_run16_stopped" / "call1_results.tgz")
    probes = [(int(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4))) for m in re.finditer(
        r"step (\d+): loss ([\d.]+), probe strict sub_em ([\d.]+)%, digits right ([\d.]+)%", call["warmstart1.log"])]
    losses = [loss for step, loss, _, _ in probes if step >= 250]
    assert f"loss {min(losses):.2f}-{max(losses):.2f} from step 250 to {probes[-1][0]}" in section
    assert f"probe {min(p for _, _, p, _ in probes):.0f}-{max(p for _, _, p, _ in probes):.1f} %" in section
    digits = [d for _, _, _, d in probes]
    assert f"digits right {math.floor(min(digits)):.0f}-{round(max(digits)):.0f} %" in section
    stage = json.loads(call["warmstart1_stage.json"])
    assert stage["stop"]["reason"] == f"time budget of {stage['args']['max_minutes']} min spent"
    assert f"the call ended after step {len(stage['curve'])}" in section
    untrained = json.loads(call["eval_untrained.json"])["results"]
    assert len(untrained) == 48 * 6 and sum(r["sub_em_strict"] for r in untrained) == 0


def test_the_write_share_warm_start_holds_what_bench_readme_says() -> None:
    """bench/README's paragraph on the one `--write-share 0.5` warm start, against its stage file; its "4 of 15
    by step 450" against the table of uniform warm starts above it."""
    section = _bench_section("Where the copy forms.", "**Run 17**")
    stage = json.loads((ROOT / "bench" / "results" / "memagent_small_scale_write_share" / "warmstart_stage.json")
                       .read_text())
    assert stage["args"]["write_share"] == 0.5 and stage["args"]["demo_split"] == "demo1"
    probes = [(c["step"], c["probe_strict"]) for c in stage["curve"] if "probe_strict" in c]
    formed = next(k for k, (_, score) in enumerate(probes) if score >= 30)
    (before, low), (at, high) = probes[formed - 1], probes[formed]
    assert f"formed between steps {before} and {at} (probe {low:.1f} -> {high:.1f} %)" in section
    shots = stage["stop"]["overshoots"]
    assert all(s["back_to"] == at for s in shots) and len(shots) == 2
    assert (f"went back to step {at}, whose replays read {shots[1]['probe_strict']:.1f} % (step {shots[1]['step']}) "
            f"and {probes[-1][1]:.1f} % ({probes[-1][0]})") in section
    confirmed = re.search(r"confirmed on new documents: (\d+\.\d)% over the band's top", stage["stop"]["reason"])
    assert f"stopped at {stage['stop']['step']} over the band (confirmed {confirmed.group(1)} %" in section
    uniform = re.findall(r"\| run [^|]+\| [^|]+\| (\d+|-) \| [^|]+ \|", section)
    assert len(uniform) == 15
    assert f"({sum(x != '-' and int(x) <= at for x in uniform)} of 15 by step {at})" in section


def test_run_17s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 17" (three calls, RL's lr halved, the write-share warm start): its tables and paired
    figures as for run 14, and each figure of its reading (the warm start's probes and replay, the calls' gaps,
    the arms' speed, entropy, all-wrong groups, KL and the answers' reversals) from the published file."""
    section = _bench_section("**Run 17**", "**Run 19**")
    published = json.loads((ROOT / "bench" / "results" / "memagent_small_scale_run17.json").read_text())
    _check_run_section(section, published)
    rl, control = published["rl_stage"], published["rl_permuted_stage"]
    assert {rl["args"]["lr"], control["args"]["lr"]} == {5e-05} and {rl["args"]["kl_coef"]} == {0.01}
    assert published["warmstart_stage"]["args"]["write_share"] == 0.5
    # the warm start: its probes, the step it went back to, the replayed loss, the confirmation and its times
    stage = published["warmstart_stage"]
    probes = {c["step"]: c for c in stage["curve"] if "probe_strict" in c}
    (shot,) = stage["stop"]["overshoots"]
    assert (f"probe {probes[250]['probe_strict']:.1f} % at step 250, **{probes[300]['probe_strict']:.1f} %** at 300, "
            f"{shot['probe_strict']:.1f} % at {shot['step']}") in section and shot["back_to"] == 300
    log = published["calls_log"]
    assert stage["stop"]["step"] == 310 and f"probed at 310 ({probes[310]['probe_strict']:.1f} %, 2 probes" in section
    confirmed = _confirmed(stage["stop"])
    assert (f"confirmed {confirmed} % on 96 new documents ({round(stage['stop']['seconds'])} s; demonstrations "
            f"{round(stage['demo_s'])} s)") in section
    assert f"a loss of {probes[310]['loss']:.3f}" in section
    first_warm = [p for p in stage["curve"] if p.get("probe_strict", 0) >= 30]
    assert first_warm[0]["step"] == 300 and "the copy formed at step 300, the earliest of all 17 runs" in section
    left = re.search(r"warm start done after round 1, (\d+) s left", log).group(1)
    assert f"RL began in call 1 with {left} s left" in section
    starts = [_clock(s) for s in re.findall(r"\[([\d:]+)\] call starts", log)]
    ends = [_clock(s) for s in re.findall(r"\[([\d:]+)\] call ends after", log)]
    assert len(starts) == 3 and len(ends) == 2
    assert f"the gaps between calls were {starts[1] - ends[0]} and {starts[2] - ends[1]} s" in section
    # the arms' time and speed
    for name, arm in (("RL", rl), ("the control", control)):
        assert f"{name} {round(arm['seconds']):,} s ({len(arm['curve'])} steps)" in section, name
    assert (f"rollouts {sum(c['rollout_s'] for c in rl['curve']) / len(rl['curve']):.1f} s, update "
            f"{sum(c['train_s'] for c in rl['curve']) / len(rl['curve']):.1f} s") in section
    # why RL stopped short: its reward, entropy, the all-wrong groups, the reversed codes
    rewards = [c["reward_mean"] for c in rl["curve"]]
    assert f"rose from {rewards[0]:.2f} (step 0) to {sum(rewards[10:20]) / 10:.2f} over steps 10-19" in section
    assert f"({sum(rewards[-10:]) / 10:.2f} over the last 10 steps)" in section
    windows = _windows(rl["curve"])
    entropy = [sum(c["entropy"] for c in w) / len(w) for w in windows[1:]]
    assert (f"entropy fell from {rl['curve'][0]['entropy']:.3f} to {min(entropy):.3f}-{max(entropy):.3f} a window"
            in section)
    wrong = [sum(g == 0 for c in w for g in c["group_means"]) / sum(len(c["group_means"]) for c in w)
             for w in windows]
    assert f"({round(100 * min(wrong))}-{round(100 * max(wrong))} % of groups all wrong" in section
    answers = {k: v["training_lengths"] for k, v in published["compare_strict"]["answers"].items()}
    misses = {k: 144 - v["right"] for k, v in answers.items()}
    assert (f"{answers['RL']['reversed']} of its {misses['RL']} misses are the code's two digits reversed (the start "
            f"had {answers['warm start']['reversed']} of {misses['warm start']})") in section
    # the control held: its KL to the start below RL's in every window
    kl = [(sum(c["kl"] for c in a) / len(a), sum(c["kl"] for c in b) / len(b))
          for a, b in zip(windows, _windows(control["curve"]), strict=True)]
    assert all(c < r for r, c in kl)
    assert f"stayed under RL's in every window ({min(c for _, c in kl):.3f}-{max(c for _, c in kl):.3f})" in section
    every = [1000, 2000, 4000, 8000, 16000, 32000]
    before, after = published["eval_warmstart"]["results"], published["eval_rl_permuted"]["results"]
    won, lost = _won_lost(before, after, every)
    gain = _strict_score(after, every) - _strict_score(before, every)
    assert f"over all 288 documents won {won} / lost {lost} ({_printed(gain)})" in section
    audit = published["audit"]
    assert (f"{audit['rollouts']:,} rollouts, {audit['sequences']:,} sequences, "
            f"{audit['rescored_tokens'] / 1e6:.2f}M trained tokens") in section


def _first_probe(curve: list[dict[str, Any]], mark: float) -> int | None:
    """The step of a warm start's first probe at or over `mark` % strict sub_em (None: no probe reached it)."""
    return next((c["step"] for c in curve if c.get("probe_strict", -1) >= mark), None)


def _confirmed(stop: dict[str, Any]) -> str:
    """The confirmation's strict sub_em (%) as a warm start's stop reason prints it."""
    return re.search(r"confirmed on new documents: (\d+\.\d)%", stop["reason"]).group(1)


def _windows(curve: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A stage's curve in the 10-step windows bench/README's curve tables show (the last one may be shorter)."""
    return [curve[k:k + 10] for k in range(0, len(curve), 10)]


def _clock(hms: str) -> int:
    """Seconds since midnight of a calls.log stamp, HH:MM:SS."""
    h, m, s = (int(x) for x in hms.split(":"))
    return 3600 * h + 60 * m + s


# the runs lost after a call that evaluated their warm start: the packed files of the last call that came back
KEPT_CALLS = {18: "memagent_small_scale_run18_lost/call1_results.tgz",
              20: "memagent_small_scale_run20_lost/call2_results.tgz"}


def _kept_call(run: int) -> dict[str, str]:
    """A lost run's last call, its packed files as they came back."""
    return _packed(ROOT / "bench" / "results" / KEPT_CALLS[run])


def _warm_start_results(runs: tuple[int, ...]) -> dict[int, list[dict[str, Any]]]:
    """Each run's evaluated warm start (per-document results): its published file, or a lost run's kept call."""
    results = ROOT / "bench" / "results"
    return {n: json.loads(_kept_call(n)["eval_warmstart.json"])["results"] if n in KEPT_CALLS else
            json.loads((results / f"memagent_small_scale_run{n}.json").read_text())["eval_warmstart"]["results"]
            for n in runs}


def _warm_start_reversals(runs: tuple[int, ...]) -> dict[int, int]:
    """How many of each run's warm start's 144 answers at 1K-4K are the code reversed."""
    return {n: P.answer_kinds(r, [1000, 2000, 4000])["reversed"] for n, r in _warm_start_results(runs).items()}


def _audit_line(*arms: dict[str, Any], scored: str = "re-scored before training") -> str:
    """The RL arms' audit totals as a run's section prints them (rollouts, sequences, trained tokens, breaches,
    the largest |delta|), summed over every step of each arm's stage file."""
    audits = [c["audit"] for arm in arms for c in arm["curve"]]
    total = {k: sum(a[k] for a in audits) for k in ("rollouts", "sequences", "rescored_tokens", "breaches")}
    tokens = total["rescored_tokens"]  # as bench/README counts tokens: 935K, 1.18M
    shown = f"{tokens / 1e6:.2f}M" if round(tokens / 1000) >= 1000 else f"{round(tokens / 1000)}K"
    return (f"{total['rollouts']:,} rollouts, {total['sequences']:,} sequences, "
            f"{shown} trained tokens {scored}, {total['breaches']} breaches, max "
            f"|delta| {max(a['max_abs_delta'] for a in audits):.1e}".replace("e-0", "e-"))


def _check_audits(section: str, published: dict[str, Any], *arms: dict[str, Any]) -> None:
    """The arms' audit line is in the section, and their per-step audits sum to the published totals."""
    assert _audit_line(*arms) in section
    audits = [c["audit"] for arm in arms for c in arm["curve"]]
    assert {k: sum(a[k] for a in audits) for k in ("rollouts", "sequences", "rescored_tokens")} == {
        k: published["audit"][k] for k in ("rollouts", "sequences", "rescored_tokens")}


def _check_arms_and_one_round(section: str, published: dict[str, Any], log: str, *, workers: int, minutes: str,
                              control_reward: str = "fell") -> dict[str, Any]:
    """A run on run 32's plan whose warm start took one round: the arms' steps and seconds against the plan's 20
    minutes, their audits and training rewards (what the control's did: `control_reward`, as `_training_rewards`
    takes it), and the round's workers and length as its section and log show them. The round's args."""
    rl, control, stage = published["rl_stage"], published["rl_permuted_stage"], published["warmstart_stage"]
    n = len(rl["curve"])
    rollouts, updates = (sum(c[key] for c in rl["curve"]) / n for key in ("rollout_s", "train_s"))
    assert (f"RL stepped {n} times in {rl['seconds']:,.0f} s ({rl['seconds'] / 60:.1f} of the 20 minutes the plan "
            f"gave them; rollouts {rollouts:.1f} s, update {updates:.1f} s a step), the control "
            f"{len(control['curve'])} in {control['seconds']:,.0f} s") in section
    _check_audits(section, published, rl, control)
    assert _training_rewards(published, control_reward) in section
    assert "warmstart_earlier_rounds" not in published and log.count("warm start round") == 1
    assert "No second round ran." in section
    args = stage["args"]
    assert (args["demo_workers"], args["demo_split"], args["init"]) == (workers, "demo1", "/tmp/repro/model")
    assert f"warm start round 1 from /tmp/repro/model, {minutes} min, {workers} demonstration workers" in log
    assert (f"`demo1`, {stage['demo_s']:.0f} s with {workers} workers; a round of {args['max_minutes']:.2f} minutes"
            in section)
    return args


def _audit_row_entry(n: int, audit: dict[str, Any]) -> str:
    """Run n's entry in the targets table's rollout-check row, from its published audit (which must be clean)."""
    assert (audit["breaches"], audit["over_threshold"]) == (0, 0)
    tokens = audit["rescored_tokens"]  # as the row counts tokens: 522K, 1.22M
    shown = f"{tokens / 1e6:.2f}M" if round(tokens / 1000) >= 1000 else f"{round(tokens / 1000)}K"
    return (f"Run {n}: {audit['rollouts']:,} rollouts ({audit['sequences']:,} sequences, "
            f"{shown} tokens), 0 breaches, max "
            f"{audit['max_abs_delta']:.1e}".replace("e-0", "e-"))


def _warm_start_line(warm: list[dict[str, Any]], codes: str) -> str:
    """A warm start's evaluation as a run's section prints it: 1K-4K and 32K strict sub_em, the kept ratio, the
    codes reversed (`codes`: "code" or "codes", as the count reads) and its two other kinds of miss."""
    train = [1000, 2000, 4000]
    kinds = P.answer_kinds(warm, train)
    return (f"{_printed(_strict_score(warm, train))} % at 1K-4K ({kinds['right']} of 144), "
            f"{_printed(_strict_score(warm, [32000]))} % at 32K "
            f"({_printed(_strict_score(warm, [32000]) / _strict_score(warm, train), 2)}x), {kinds['reversed']} {codes} "
            f"reversed; its misses: one digit in place {kinds['one_place']}, another code {kinds['other_code']}")


def _refined_stop(stage: dict[str, Any], shot_at: int, stopped_at: int) -> list[str]:
    """A warm start that went back 50 steps from one overshoot (its probe at `shot_at`), probed every 10 steps and
    stopped at `stopped_at` in its first attempt: what a run's section says of it (the overshoot, the fine probes up
    to the stop and the confirmation; the stop, its time and its reversals)."""
    stop, probes = stage["stop"], {c["step"]: c for c in stage["curve"] if "probe_strict" in c}
    (shot,) = stop["overshoots"]
    assert (shot["step"], shot["back_to"], shot["probe_every"]) == (shot_at, shot_at - 50, 10)
    assert (stop["step"], stop["attempt"], stop["rejected"]) == (stopped_at, 0, [])
    back, every, at = shot["back_to"], shot["probe_every"], probes[stop["step"]]
    fine = ", ".join(f"{probes[s]['probe_strict']:.1f} % at {s}" for s in range(back + every, stop["step"] + 1, every))
    return [(f"The probe at {shot['step']} read {shot['probe_strict']:.1f} %, over the band's top, so it went back to "
             f"{back} and probed every {every} steps: {fine}, two in a row in the band, confirmed "
             f"{_confirmed(stop)} %"),
            (f"it stopped at {stop['step']} ({round(stop['seconds'])} s), in its first attempt, {stop['reversed']:.1f} "
             f"% reversed (the probe {at['probe_reversed']:.1f} %, the confirmation {at['confirm_reversed']:.1f} %)")]


def _rl_in_calls(log: str) -> tuple[list[int], int, list[tuple[str, str]], list[int]]:
    """A run whose RL began in its warm start's call, read from its calls.log: each call's budget, the seconds that
    call had left when its warm start was done (checked against its budget and the log's clock), the arms' "time
    budget spent" lines (minutes, steps) in order, and the seconds from each call's end to the next call's start."""
    starts = [(m.start(), *m.groups()) for m in re.finditer(r"\[([\d:]+)\] call starts, budget (\d+)s", log)]
    done = re.search(r"\[([\d:]+)\] warm start done after round \d+, (\d+) s left", log)
    _, began, budget = [s for s in starts if s[0] < done.start()][-1]  # the call the warm start ended in
    assert int(done.group(2)) == int(budget) - (_clock(done.group(1)) - _clock(began))
    spent = re.findall(r"time budget of ([\d.]+) min spent after (\d+) steps", log)
    ended = re.findall(r"\[([\d:]+)\] call ends", log)
    gaps = [_clock(start) - _clock(end) for (_, start, _), end in zip(starts[1:], ended, strict=True)]
    return [int(budget) for *_, budget in starts], int(done.group(2)), spent, gaps


def _arms_time(rl: dict[str, Any], control: dict[str, Any]) -> str:
    """The two RL arms' time as a run's section prints it: minutes each, steps, and RL's mean rollout and update
    seconds a step (the arms step together: as many steps each)."""
    n = len(rl["curve"])
    assert len(control["curve"]) == n
    rollouts, updates = (sum(c[key] for c in rl["curve"]) / n for key in ("rollout_s", "train_s"))
    return (f"{rl['seconds'] / 60:.1f} minutes each in all ({n} steps; rollouts {rollouts:.1f} s, update "
            f"{updates:.1f} s a step)")


def _training_rewards(published: dict[str, Any], control: str) -> str:
    """RL's training reward over its first 5 steps and its last 10, and the control's (`control`: what it did,
    "stayed flat" or "fell"), as a run's section prints them (publish.py's `training_reward_at_t1`)."""
    shown = published["training_reward_at_t1"]
    return (f"training reward rose ({shown['rl']['steps_0_4']:.2f} over its first 5 steps, "
            f"{shown['rl']['last_10']:.2f} over the last 10) while the control's {control} "
            f"({shown['control']['steps_0_4']:.2f} -> {shown['control']['last_10']:.2f})")


def _went_back(overshoots: list[dict[str, Any]]) -> str:
    """A warm start's overshoots as a run's section lists them: "STEP: PROBE %, back to STEP; ..."."""
    return "; ".join(f"{s['step']}: {s['probe_strict']:.1f} %, back to {s['back_to']}" for s in overshoots)


def _reversed_count(point: dict[str, Any], args: dict[str, Any]) -> int:
    """Answers reversed at a warm start's stop, its probe's and confirmation's pooled (their sizes from the stage's
    args: per length, over the three training lengths)."""
    probe, confirm = 3 * args["probe_per_length"], 3 * args["confirm_per_length"]
    return round((point["probe_reversed"] * probe + point["confirm_reversed"] * confirm) / 100)


def _left_after_warm_start(log: str) -> int:
    """Seconds a call had left when its warm start stopped on its probe (its budget less the time since it began)."""
    began, budget = re.findall(r"\[([\d:]+)\] call starts, budget (\d+)s", log)[0]
    (stopped,) = re.findall(r"\[([\d:]+)\] stopped: probe", log)
    return int(budget) - (_clock(stopped) - _clock(began))


def test_reversed_codes_across_the_runs_hold_what_bench_readme_says() -> None:
    """bench/README's table "Reversed codes across the runs": each row from that run's published evaluations
    (`answer_kind` at 1K-4K), and the reading under it (which starts reversed a fifth, what RL reversed after,
    where run 17's reversals came in)."""
    section = _bench_section("Reversed codes across the runs.", "**Run 19**")
    train, runs = [1000, 2000, 4000], (4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 17)
    counted: dict[int, dict[str, dict[str, int]]] = {}
    for run in runs:
        published = json.loads((ROOT / "bench" / "results" / f"memagent_small_scale_run{run}.json").read_text())
        counted[run] = {arm: P.answer_kinds(published[f"eval_{arm}"]["results"], train) for arm in ("warmstart", "rl")}
        ws, rl = counted[run]["warmstart"], counted[run]["rl"]
        gain = _printed(Fraction(100 * (rl["right"] - ws["right"]), 144), plus=True)
        row = f"| {run} | {ws['right']} | {ws['reversed']} | {rl['right']} | {rl['reversed']} | {gain} |"
        assert row in section, row
    assert len(re.findall(r"\| \d+ \| \d+ \| \d+ \| \d+ \| \d+ \| [+-]\d+\.\d \|", section)) == len(runs)
    reversing = [r for r in runs if counted[r]["warmstart"]["reversed"] >= 144 / 5]
    assert reversing == [8, 12, 17]
    assert "Three starts reversed a fifth or more of their codes (runs 8, 12 and 17" in section
    starts = [counted[r]["warmstart"]["reversed"] for r in reversing]
    after = [counted[r]["rl"]["reversed"] for r in reversing]
    assert f"{min(starts)}-{max(starts)}) and RL still reversed {min(after)}-{max(after)} after" in section
    others = max(counted[r]["rl"]["reversed"] for r in runs if r not in reversing)
    assert f"in the other eight RL never reversed more than {others}" in section
    run17 = json.loads((ROOT / "bench" / "results" / "memagent_small_scale_run17.json").read_text())["eval_rl"]
    swapped = [r for r in run17["results"] if r["length"] in train and P.answer_kind(r) == "reversed"]
    carried = sum(P.miss_step(r) == "lost_in_memory" for r in swapped)
    assert f"{carried} of run 17's {len(swapped)} reversed RL answers had the code stored right" in section


def test_run_18s_lost_call_holds_what_bench_readme_says() -> None:
    """Run 18 was lost after its first call (the machine given back before call 2): bench/README's "Run 18,
    lost" against that call's packed files: the warm start's probes and stop, its evaluation and RL's call-1
    steps."""
    section = _bench_section("**Run 18, lost**", "Write-share warm starts and reversed codes.")
    call = _kept_call(18)
    stage = json.loads(call["warmstart1_stage.json"])
    assert stage["args"]["write_share"] == 0 and stage["args"]["demo_split"] == "demo1"
    probes = {int(m.group(1)): m.group(2) for m in re.finditer(r"step (\d+): loss [\d.]+, probe strict sub_em "
                                                                r"([\d.]+)%", call["warmstart1.log"])}
    (shot,) = stage["stop"]["overshoots"]
    assert (f"probe {probes[350]} % at 350, {probes[400]} % at 400, {probes[450]} % at 450: over the band's top, "
            f"back to {shot['back_to']})") in section and (shot["step"], shot["back_to"]) == (450, 400)
    stop = next(c for c in stage["curve"] if c["step"] == stage["stop"]["step"])
    assert (f"stopped at {stop['step']} ({stop['probe_strict']:.1f} %, 2 probes in a row; reversed "
            f"{stop['probe_reversed']:.1f} %)") in section
    confirmed = _confirmed(stage["stop"])
    assert f"confirmed {confirmed} % on 96 new documents" in section
    train = [1000, 2000, 4000]
    warm = json.loads(call["eval_warmstart.json"])["results"]
    kinds = P.answer_kinds(warm, train)
    assert (f"{_printed(_strict_score(warm, train))} % at 1K-4K ({kinds['right']} of 144 right, {kinds['reversed']} "
            f"reversed), {_printed(_strict_score(warm, [32000]))} % at 32K") in section
    untrained = json.loads(call["eval_untrained.json"])["results"]
    assert len(untrained) == 48 * 6 and sum(r["sub_em_strict"] for r in untrained) == 0
    left = re.search(r"warm start done after round 1, (\d+) s left", call["calls.log"]).group(1)
    rl_s = re.search(r"call ends after (\d+) s of RL", call["calls.log"]).group(1)
    steps = {len(json.loads(call[arm])["curve"]) for arm in ("rl_stage.json", "rl_permuted_stage.json")}
    assert {json.loads(call[arm])["args"]["lr"] for arm in ("rl_stage.json", "rl_permuted_stage.json")} == {5e-5}
    assert f"began in call 1 with {left} s left and stepped {steps.pop()} steps each ({rl_s} s)" in section
    assert not steps  # both arms stepped alike


def test_write_share_warm_starts_and_reversals_hold_what_bench_readme_says() -> None:
    """bench/README's table of the `--write-share 0.5` warm starts beside run 18's uniform one, each row from
    that start's stage file and evaluation, and the reading under it (the reversals of the flag's starts against
    every uniform start with an evaluation, where the copy formed, what the probe told)."""
    section = _bench_section("Write-share warm starts and reversed codes.", "**Run 19**")
    results, train = ROOT / "bench" / "results", [1000, 2000, 4000]
    run17 = json.loads((results / "memagent_small_scale_run17.json").read_text())
    run18 = _kept_call(18)
    draws = results / "memagent_small_scale_write_share_draws"
    starts = {  # name in the table: (stage, evaluated results)
        "run 17 (`--write-share 0.5`)": (run17["warmstart_stage"], run17["eval_warmstart"]["results"]),
        **{f"draw {name} (`--write-share 0.5`)": (json.loads((draws / split / "warmstart_stage.json").read_text()),
                                                 json.loads((draws / split / "eval_warmstart.json").read_text())
                                                 ["results"]) for name, split in (("A", "demo1"), ("B", "demo2"))},
        "run 18 (uniform)": (json.loads(run18["warmstart1_stage.json"]),
                             json.loads(run18["eval_warmstart.json"])["results"])}
    reversals = {}
    for name, (stage, evaluated) in starts.items():
        assert (stage["args"]["write_share"] == 0.5) == ("write-share" in name), name
        formed = _first_probe(stage["curve"], 30)
        stop = next(c for c in stage["curve"] if c["step"] == stage["stop"]["step"])
        probe_reversed = f"{stop['probe_reversed']:.1f} %" if "probe_reversed" in stop else "-"
        confirmed = _confirmed(stage["stop"])
        kinds = P.answer_kinds(evaluated, train)
        swapped = [r for r in evaluated if r["length"] in train and P.answer_kind(r) == "reversed"]
        where = [P.miss_step(r) for r in swapped]
        reversals[name] = (kinds["reversed"], where.count("stored_wrong"))
        row = (f"| {name} | {stage['args']['demo_split']} | {formed} | {stop['step']} | "
               f"{stop['probe_strict']:.1f} % / {probe_reversed} | {confirmed} % | "
               f"{_printed(_strict_score(evaluated, train))} % ({kinds['right']}) | {kinds['reversed']} | "
               f"{where.count('stored_wrong')} / {where.count('lost_in_memory')} | "
               f"{_printed(_strict_score(evaluated, [32000]))} % |")
        assert row in section, row
        assert len(swapped) == kinds["reversed"] == where.count("stored_wrong") + where.count("lost_in_memory")
    flagged = sorted(n for name, (n, _) in reversals.items() if "write-share" in name)
    assert f"The three starts with the flag reversed {flagged[0]}, {flagged[1]} and {flagged[2]} of their 144 " \
           f"codes (median {flagged[1]})" in section
    stored = sorted(s for name, (_, s) in reversals.items() if "write-share" in name)
    assert f"({stored[0]}-{stored[-1]} of their reversals; run 18's: {reversals['run 18 (uniform)'][1]} of " \
           f"{reversals['run 18 (uniform)'][0]})" in section
    # every uniform warm start with an evaluation: its reversals and its 1K-4K score
    uniform = _warm_start_results((4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 18))
    counted = {n: P.answer_kinds(r, train)["reversed"] for n, r in uniform.items()}
    banded = sorted(n for n, r in uniform.items() if 30 <= _strict_score(r, train) <= 55)
    assert banded == [4, 5, 10, 12, 14, 18]
    rev = sorted(counted[n] for n in banded)
    assert f"reversed {rev[0]}-{rev[-1]} (median {(rev[2] + rev[3]) / 2:g})" in section
    assert f"(runs 4-12, 14, 18) a median of {sorted(counted.values())[5]}" in section
    # where the copy formed: the flag's four starts (the first, alone, in its own folder) against the uniform ones
    alone = json.loads((results / "memagent_small_scale_write_share" / "warmstart_stage.json").read_text())
    first_30 = [_first_probe(s["curve"], 30)
                for s in (alone, *(stage for name, (stage, _) in starts.items() if "write-share" in name))]
    assert f"by step 450 ({min(first_30)}-{max(first_30)})" in section and max(first_30) <= 450
    copy_table = _bench_section("Where the copy forms.", "**Run 17**")
    early = [x for x in re.findall(r"\| run [^|]+\| [^|]+\| (\d+|-) \| [^|]+ \|", copy_table)
             if x != "-" and int(x) <= 450]
    formed_18 = _first_probe(starts["run 18 (uniform)"][0]["curve"], 30)
    assert f"against {len(early) + (formed_18 <= 450)} of the 16 uniform ones" in section
    # what the probe told: draw B's probe at step 360 (an overshoot) and at its stop
    (shot,) = [s for s in starts["draw B (`--write-share 0.5`)"][0]["stop"]["overshoots"] if s["step"] == 360]
    log = (draws / "demo2" / "warmstart.log").read_text()
    assert re.search(r"step 360: loss [\d.]+, probe strict sub_em [\d.]+%, digits right [\d.]+%, reversed 20\.8%", log)
    assert shot["back_to"] == 350 and "probe at step 360 (8 steps on, before it went back) read 20.8 %" in section


def test_run_19s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 19" (run 18's plan in two calls): its tables and paired figures as for run 14, and each
    figure of its reading (the warm start's probes, reversals and stop, the arms' time, the training reward, the
    audits, and the reversals of every uniform start and of every RL run's start) from the kept files."""
    section = _bench_section("**Run 19**", "**Run 20, lost**")
    results, train = ROOT / "bench" / "results", [1000, 2000, 4000]
    published = json.loads((results / "memagent_small_scale_run19.json").read_text())
    _check_run_section(section, published)
    flat = " ".join(section.split())
    rl, control, stage = published["rl_stage"], published["rl_permuted_stage"], published["warmstart_stage"]
    assert {rl["args"]["lr"], control["args"]["lr"]} == {5e-05} and {rl["args"]["kl_coef"]} == {0.01}
    assert stage["args"]["write_share"] == 0.0 and published["device_seconds"] == 1192
    (refusals,) = published["failures"]
    assert "Six machine starts refused (11:49-12:53 UTC, 90 device-seconds each, 541 in all)" in refusals
    assert "Six machine starts were refused first (11:49-12:53 UTC, 90 device-seconds each, 541 in all" in flat
    log = published["calls_log"]
    (ended,), starts = re.findall(r"\[([\d:]+)\] call ends after", log), re.findall(r"\[([\d:]+)\] call starts", log)
    assert len(starts) == 2 and "LAST_CALL=1" in published["command"]
    assert f"sent {_clock(starts[1]) - _clock(ended)} s after the first returned" in flat
    # the warm start: where the copy formed, the two overshoots, the stop and its reversed shares
    probes = {c["step"]: c for c in stage["curve"] if "probe_strict" in c}
    assert _first_probe(stage["curve"], 30) == 300
    assert (f"probe {probes[250]['probe_strict']:.1f} % at step 250, {probes[300]['probe_strict']:.1f} % at 300, "
            f"{stage['stop']['overshoots'][0]['probe_strict']:.1f} % at 350") in flat
    first, second = stage["stop"]["overshoots"]
    assert (first["step"], first["back_to"], second["step"], second["back_to"]) == (350, 300, 310, 300)
    assert (f"(350: {first['probe_strict']:.1f} %; 310: {second['probe_strict']:.1f} %, confirmed "
            f"{second['confirm_strict']:.1f} %) and stopped at {stage['stop']['step']}") in flat
    stop = probes[stage["stop"]["step"]]
    assert f"(probe {stop['probe_strict']:.1f} %, 2 probes in a row)" in flat
    assert (f"over the band ({_confirmed(stage['stop'])} %) with no refinement left "
            f"({round(stage['stop']['seconds'])} s; demonstrations {round(stage['demo_s'])} s)") in flat
    assert (f"**{stop['probe_reversed']:.1f} %** of its answers reversed (the confirmation "
            f"{stop['confirm_reversed']:.1f} %)") in flat
    logs = [_kept_call(18)["warmstart1.log"]] + [
        (results / "memagent_small_scale_write_share_draws" / split / "warmstart.log").read_text()
        for split in ("demo1", "demo2")]  # every probe of the other three starts, overshoots included
    read = [float(x) for log in logs
            for x in re.findall(r"probe strict sub_em [\d.]+%, digits right [\d.]+%, reversed ([\d.]+)%", log)]
    assert len(read) > 20 and max(read) == 22.9 < stop["probe_reversed"] and "read at most 22.9 % at any probe" in flat
    warm = published["eval_warmstart"]["results"]
    kinds = P.answer_kinds(warm, train)
    where = [P.miss_step(r) for r in warm if r["length"] in train and P.answer_kind(r) == "reversed"]
    assert (f"{_printed(_strict_score(warm, train))} % at 1K-4K ({kinds['right']} of 144), "
            f"{_printed(_strict_score(warm, [32000]))} % at 32K "
            f"({_printed(_strict_score(warm, [32000]) / _strict_score(warm, train), 2)}x), **{kinds['reversed']} codes "
            f"reversed** ({where.count('stored_wrong')} stored reversed, {where.count('lost_in_memory')} reversed "
            f"later)") in flat
    # the arms: time, speed, the training reward at temperature 1.0
    for name, arm in (("RL", rl), ("the control", control)):
        assert f"{name} {round(arm['seconds'])} s ({len(arm['curve'])} steps)" in flat, name
    assert (f"(rollouts {sum(c['rollout_s'] for c in rl['curve']) / len(rl['curve']):.1f} s, update "
            f"{sum(c['train_s'] for c in rl['curve']) / len(rl['curve']):.1f} s, the audit)") in flat
    for arm in (rl, control):  # the published training reward, re-derived from the stage files
        rewards = [c["reward_mean"] for c in arm["curve"]]
        key = "rl" if arm is rl else "control"
        assert published["training_reward_at_t1"][key] == {"steps_0_4": round(sum(rewards[:5]) / 5, 3),
                                                            "last_10": round(sum(rewards[-10:]) / 10, 3)}
    shown = published["training_reward_at_t1"]
    assert (f"from {shown['rl']['steps_0_4']:.2f} over steps 0-4 to {shown['rl']['last_10']:.2f} over the last 10, "
            f"the control's stayed at {shown['control']['steps_0_4']:.2f}-{shown['control']['last_10']:.2f}") in flat
    after = P.answer_kinds(published["eval_rl"]["results"], train)
    assert after["right"] - kinds["right"] == 2 and "RL got 2 more documents right" in flat
    assert (f"one digit in place {kinds['one_place']} -> {after['one_place']}, another code {kinds['other_code']} "
            f"-> {after['other_code']}) and turned them into the two right digits in the wrong order (reversed "
            f"{kinds['reversed']} -> {after['reversed']})") in flat
    assert _audit_line(rl, control) in flat
    # every uniform start with an evaluation, and what RL made of the starts that reversed most
    reversing = _warm_start_reversals((4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 17, 18, 19))
    uniform = {n: c for n, c in reversing.items() if n != 17}  # run 17's start had --write-share 0.5
    counts = sorted(uniform.values())
    assert len(counts) == 12 and f"the reversals are {counts[0]}-{counts[-1]}, median {(counts[5] + counts[6]) / 2:g}" \
        in flat
    heavy = sorted(n for n, c in uniform.items() if c >= 29)
    assert heavy == [8, 12, 19] and "three of them reversed 29 or more (runs 8, 12, 19)" in flat
    evaluated = {n: json.loads((results / f"memagent_small_scale_run{n}.json").read_text())
                 for n in reversing if n != 18}  # the runs with an RL result
    gains = {n: float(_strict_score(e["eval_rl"]["results"], train) - _strict_score(e["eval_warmstart"]["results"],
                                                                                    train))
             for n, e in evaluated.items()}
    over = sorted(n for n in evaluated if reversing[n] >= 28)
    assert over == [8, 12, 17, 19]
    assert ("gained " + f"{min(gains[n] for n in over):.1f}-{max(gains[n] for n in over):.1f} points (runs 8, 12, 17, "
            "19: " + ", ".join(f"{gains[n]:+.1f}" for n in over) + ")") in flat
    passed = sorted(n for n, e in evaluated.items() if e["targets"]["rl_gain_points_ge_15"]["passed"])
    assert passed == [9, 14] and max(reversing[n] for n in passed) == 6
    assert "both runs that met RL's target started from one reversing 6 or fewer (runs 9, 14)" in flat
    rl_kinds = P.answer_kinds(published["eval_rl"]["results"], train)
    assert (f"the row 19: {kinds['right']} right, {kinds['reversed']} reversed; RL {rl_kinds['right']} right, "
            f"{rl_kinds['reversed']} reversed, {gains[19]:+.1f}") in flat
    run14 = evaluated[14]["rl_stage"]
    assert (f"run 14 gained {gains[14]:+.1f} in {run14['seconds'] / 60:.1f} minutes from a start reversing "
            f"{reversing[14]}") in flat


def test_run_20s_lost_calls_hold_what_bench_readme_says() -> None:
    """Run 20 (run 18's plan with `--restart-reversed 20`) was lost after its second call: bench/README's "Run 20,
    lost" against that call's packed files (the warm start, its stop's reversed reading, its evaluation, both
    arms' 20 steps and audits), and the write-share try of the rule after it against its own files."""
    section = _bench_section("**Run 20, lost**", "**Run 21**")
    kept = ROOT / "bench" / "results" / "memagent_small_scale_run20_lost"
    call, train = _kept_call(20), [1000, 2000, 4000]
    log = call["calls.log"]
    (ended,) = re.findall(r"\[([\d:]+)\] call ends after warm", log)
    starts = re.findall(r"\[([\d:]+)\] call starts", log)
    assert len(starts) == 2 and f"sent back to back ({_clock(starts[1]) - _clock(ended)} s apart)" in section
    # the warm start: the rule on, its probes, the overshoot, the stop and its reversed reading
    stage = json.loads(call["warmstart1_stage.json"])
    args, stop = stage["args"], stage["stop"]
    assert (args["write_share"], args["restart_reversed"], args["restarts"]) == (0.0, 20.0, 2)
    probes = {c["step"]: c for c in stage["curve"] if "probe_strict" in c}
    assert (f"probe {probes[800]['probe_strict']:.1f} % at step 800, {probes[950]['probe_strict']:.1f} % at 950, "
            f"{probes[1000]['probe_strict']:.1f} % at 1000 and 1050, {probes[1100]['probe_strict']:.1f} % at 1100"
            ) in section and probes[1000]["probe_strict"] == probes[1050]["probe_strict"] < 30
    assert _first_probe(stage["curve"], 30) == 1100 and _first_probe(stage["curve"], 12) == 800
    (shot,) = stop["overshoots"]
    at = probes[stop["step"]]
    assert (f"({_went_back([shot])}) and it stopped at "
            f"{stop['step']} (probe {at['probe_strict']:.1f} %, 2 probes in a row), confirmed {_confirmed(stop)} % on "
            f"96 new documents ({round(stop['seconds'])} s; demonstrations {round(stage['demo_s'])} s)") in section
    assert (stop["attempt"], stop["rejected"], stop["reversed"]) == (0, [], 0.0)
    assert at["probe_reversed"] == at["confirm_reversed"] == 0.0 and stop["reason"].endswith(
        "reversed 0.0% under --restart-reversed 20.0%")
    assert "stop read **0.0 %** reversed (the probe 0.0 %, the confirmation 0.0 %)" in section
    warm = json.loads(call["eval_warmstart.json"])["results"]
    kinds = P.answer_kinds(warm, train)
    ratio = _strict_score(warm, [32000]) / _strict_score(warm, train)
    assert (f"{_printed(_strict_score(warm, train))} % at 1K-4K ({kinds['right']} of 144), "
            f"{_printed(_strict_score(warm, [32000]))} % at 32K ({_printed(ratio, 2)}x), **{kinds['reversed']} codes "
            f"reversed**; its misses are another kind: one digit in place {kinds['one_place']}, another code "
            f"{kinds['other_code']} (stored wrong {kinds['stored_wrong']}, lost in memory {kinds['lost_in_memory']}, "
            f"lost answering {kinds['lost_answering']})") in section
    untrained = json.loads(call["eval_untrained.json"])["results"]
    assert len(untrained) == 48 * 6 and sum(r["sub_em_strict"] for r in untrained) == 0
    assert "call ends after warm start round 1" in log and "The copy took call 1 (its 555 s)" in section
    # the arms: 20 steps each, their time and speed, the curves table, the training reward and the audits
    rl, control = json.loads(call["rl_stage.json"]), json.loads(call["rl_permuted_stage.json"])
    assert {rl["args"]["lr"], control["args"]["lr"]} == {5e-05} and {rl["args"]["kl_coef"]} == {0.01}
    assert len(rl["curve"]) == len(control["curve"]) == 20 and (rl["permuted"], control["permuted"]) == (False, True)
    rollout_s, train_s = (sum(c[k] for c in rl["curve"]) / 20 for k in ("rollout_s", "train_s"))
    assert (f"RL and the control 20 steps each ({round(rl['seconds'])} s and {round(control['seconds'])} s; rollouts "
            f"{rollout_s:.1f} s, update {train_s:.1f} s a step)") in section
    for (first, last), rows in zip(((0, 9), (10, 19)), _windows(rl["curve"]), strict=True):
        twin = control["curve"][first:last + 1]

        def mean(curve: list[dict[str, Any]], key: str) -> float:
            return sum(c[key] for c in curve) / len(curve)
        assert (f"| {first}-{last} | {mean(rows, 'reward_mean'):.2f} / {mean(twin, 'reward_mean'):.2f} | "
                f"{mean(rows, 'reward_mean') - mean(twin, 'reward_mean'):+.2f} | {mean(rows, 'entropy'):.3f} / "
                f"{mean(twin, 'entropy'):.3f} | {mean(rows, 'kl'):.3f} / {mean(twin, 'kl'):.3f} | "
                f"{mean(rows, 'flat_groups'):.1f} / {mean(twin, 'flat_groups'):.1f} |") in section
    rewards = {arm: [c["reward_mean"] for c in s["curve"]] for arm, s in (("rl", rl), ("control", control))}
    assert (f"({sum(rewards['rl'][:5]) / 5:.2f} over steps 0-4 to {sum(rewards['rl'][-10:]) / 10:.2f} over the last "
            "10; run 19: 0.32 to 0.50), the control flat "
            f"({sum(rewards['control'][:5]) / 5:.2f} -> {sum(rewards['control'][-10:]) / 10:.2f})") in section
    shown = json.loads((ROOT / "bench" / "results" / "memagent_small_scale_run19.json").read_text())
    assert (f"{shown['training_reward_at_t1']['rl']['steps_0_4']:.2f} to "
            f"{shown['training_reward_at_t1']['rl']['last_10']:.2f}") == "0.32 to 0.50"
    assert _audit_line(rl, control, scored="re-scored") in section
    assert not any(name.startswith("eval_rl") for name in call)  # no evaluation of either arm came back
    # every uniform start with an evaluation, run 20's included
    reversing = _warm_start_reversals((4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 18, 19, 20))
    assert reversing[20] == kinds["reversed"]
    counts = sorted(reversing.values())
    assert len(counts) == 13 and f"the reversals are now {counts[0]}-{counts[-1]}, median {counts[6]}" in section
    assert sorted(n for n, c in reversing.items() if c == 0) == [9, 11, 20] and "as runs 9 and 11" in section
    heavy = sorted(n for n, c in reversing.items() if c >= 0.2 * 144)
    assert heavy == [8, 12, 19] and "reversed 29 or more of their 144 codes (runs 8, 12, 19)" in section
    assert min(reversing[n] for n in heavy) == 29
    # the write-share try of the rule: the out-of-memory first try, then six workers and no copy by step 800
    oom = (kept / "write_share_restart" / "first_try_oom.log").read_text()
    held = [float(x) for x in re.findall(r"Process \d+ has ([\d.]+) GiB memory in use", oom.split("\n")[-2])]
    assert len(held) == 7 and f"seven workers held {min(held):.1f}-{max(held):.1f} GiB each" in section
    assert "this process has 4.03 GiB memory in use" in oom and "the eighth ran out at 4.0 GiB" in section
    assert "GPU 0 has a total capacity of 139.80 GiB" in oom and "on the 139.8 GiB card" in section
    ws = json.loads((kept / "write_share_restart" / "warmstart_stage.json").read_text())
    assert (ws["args"]["write_share"], ws["args"]["demo_workers"], ws["args"]["restart_reversed"]) == (0.5, 6, 20.0)
    ws_log = (kept / "write_share_restart" / "warmstart.log").read_text()
    assert re.search(r"8192 oracle rollouts -> \d+ training sequences \(\d+ trained tokens\) in 99\.8s", ws_log)
    assert "six workers rolled the 8,192 demonstrations in 99.8 s" in section and ws["demo_s"] == 99.8
    ws_probes = [c["probe_strict"] for c in ws["curve"] if "probe_strict" in c]
    assert ws["curve"][-1]["step"] >= 800 and max(ws_probes) == 2.08 and min(ws_probes) == 0.0
    assert "probes 0.0-2.1 % from step 150 to 800" in section
    assert ws["stop"]["reason"] == "time budget of 5.3 min spent" and ws["stop"]["rejected"] == []


def test_run_21s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 21" (run 20's plan in three calls): its tables and paired figures as for run 14, and
    each figure of its reading (both warm start rounds, the unconfirmed stop the time budget ended, the arms' time,
    the audits, where the copy formed against runs 18-20, and the control's fall against every run's start
    entropy) from the kept files."""
    section = _bench_section("**Run 21**", "**Run 22, lost**")
    results, train = ROOT / "bench" / "results", [1000, 2000, 4000]
    published = json.loads((results / "memagent_small_scale_run21.json").read_text())
    _check_run_section(section, published)
    rl, control, stage = published["rl_stage"], published["rl_permuted_stage"], published["warmstart_stage"]
    (first,) = published["warmstart_earlier_rounds"]
    assert {rl["args"]["lr"], control["args"]["lr"]} == {5e-05} and {rl["args"]["kl_coef"]} == {0.01}
    assert (stage["args"]["write_share"], stage["args"]["restart_reversed"]) == (0.0, 20.0)
    assert published["device_seconds"] == 1701 and "1,701 device-seconds" in section
    log = published["calls_log"]
    ends, starts = re.findall(r"\[([\d:]+)\] call ends after", log), re.findall(r"\[([\d:]+)\] call starts", log)
    gaps = [_clock(s) - _clock(e) for e, s in zip(ends, starts[1:], strict=True)]
    assert len(starts) == 3 and f"sent back to back ({gaps[0]} and {gaps[1]} s apart)" in section
    # round 1: no copy, its time budget; round 2: the copy, two overshoots, an unconfirmed stop, the time budget
    probes = [c["probe_strict"] for c in first["curve"] if "probe_strict" in c]
    assert (first["args"]["demo_split"], stage["args"]["demo_split"]) == ("demo1", "demo2")
    assert (f"(call 1; demonstrations `demo1`, {round(first['demo_s'])} s): no copy in {first['stop']['step']:,} "
            f"steps (probes {min(probes):.1f}-{max(probes):.1f} % from step 150 to 1300); its time budget "
            f"({first['args']['max_minutes']} min)") in section and first["stop"]["reason"].startswith("time budget")
    at = {c["step"]: c for c in stage["curve"] if "probe_strict" in c}
    assert _first_probe(first["curve"], 30) is None and _first_probe(stage["curve"], 10) == 750
    assert _first_probe(stage["curve"], 30) == 1250 and round(stage["demo_s"]) == 102
    assert (f"from step 750 (probe {at[750]['probe_strict']:.1f} %; {at[1250]['probe_strict']:.1f} % at 1250, "
            f"{at[1350]['probe_strict']:.1f} % at 1350)") in section
    shots = stage["stop"]["overshoots"]
    assert f"went back twice ({_went_back(shots)})" in section
    assert (f"at step 1374 two probes in a row sat in the band ({at[1372]['probe_strict']:.1f} %, "
            f"{at[1374]['probe_strict']:.1f} %), but the confirmation on 96 new documents read "
            f"**{at[1374]['confirm_strict']:.1f} %**, under the 30 % mark") in section
    assert at[1374]["confirm_strict"] < stage["args"]["stop_at"] <= at[1374]["probe_strict"]
    stop = stage["stop"]
    assert stop["step"] == 1375 and stop["reason"] == f"time budget of {stage['args']['max_minutes']} min spent"
    assert "reversed" not in stop and at[1374]["confirm_reversed"] == 0.0  # the rule read no stop
    assert f"its time budget ({stage['args']['max_minutes']} min) ended the round one step later, at 1375" in section
    warm = published["eval_warmstart"]["results"]
    kinds = P.answer_kinds(warm, train)
    assert _warm_start_line(warm, "codes") in section
    # the arms: what the last call left them, their speed, the audits
    assert rl["seconds"] == control["seconds"] and len(rl["curve"]) == len(control["curve"]) == 17
    assert (f"{round(rl['seconds'])} s each ({len(rl['curve'])} steps; rollouts "
            f"{sum(c['rollout_s'] for c in rl['curve']) / 17:.1f} s, update "
            f"{sum(c['train_s'] for c in rl['curve']) / 17:.1f} s a step), {rl['seconds'] / 60:.1f} minutes") in section
    assert _audit_line(rl, control) in section
    # where the copy formed, against runs 18-20 (the same model, demonstrations and training settings)
    assert (f"~2,560 steps ({first['stop']['step']:,} + {_first_probe(stage['curve'], 30):,})" in section
            and first["stop"]["step"] + 1250 == 2562)
    formed = [_first_probe(json.loads(_kept_call(18)["warmstart1_stage.json"])["curve"], 30),
              _first_probe(json.loads((results / "memagent_small_scale_run19.json").read_text())["warmstart_stage"]
                           ["curve"], 30),
              _first_probe(json.loads(_kept_call(20)["warmstart1_stage.json"])["curve"], 30)]
    assert formed == [400, 300, 1100] and "runs 18-20: 400, 300, 1,100" in section
    after = P.answer_kinds(published["eval_rl"]["results"], train)
    assert after["right"] - kinds["right"] == 10 and "(10 more right; another code 18 -> 10)" in section
    assert (kinds["other_code"], after["other_code"]) == (18, 10)
    shown = published["training_reward_at_t1"]["control"]
    assert f"stayed flat ({shown['steps_0_4']:.2f} -> {shown['last_10']:.2f})" in section
    # the control's fall against each run's start: sampling entropy over the control's first 5 steps, paired z
    entropy, z, anchor = {}, {}, {}
    for n in (5, 6, 7, 8, 9, 10, 11, 12, 14, 17, 19, 21):
        run = json.loads((results / f"memagent_small_scale_run{n}.json").read_text())
        curve = run["rl_permuted_stage"]["curve"][:5]
        entropy[n] = sum(c["entropy"] for c in curve) / len(curve)
        won, lost = _won_lost(run["eval_warmstart"]["results"], run["eval_rl_permuted"]["results"], train)
        z[n], anchor[n] = (won - lost) / math.sqrt(won + lost), run["rl_permuted_stage"]["args"]["kl_coef"]
    weak = [n for n in entropy if anchor[n] <= 0.01]
    assert weak == [5, 6, 7, 8, 9, 10, 14, 17, 19, 21] and {anchor[11], anchor[12]} == {0.05}
    sharp = [n for n in weak if entropy[n] < 0.11]
    assert sharp == [7, 9, 10, 21] and all(z[n] < -1.96 for n in sharp)
    assert f"z {max(z[n] for n in sharp if n != 21):.2f} to {min(z[n] for n in sharp):.2f}, and {z[21]:.2f} here" \
        in section
    rest = [n for n in weak if n not in sharp]
    assert 0.12 <= min(entropy[n] for n in rest) and max(entropy[n] for n in rest) < 0.225
    assert [n for n in rest if z[n] < -1.96] == [6, 14] and "two fell (runs 6, 14) and four held" in section
    assert all(entropy[n] < 0.11 and abs(z[n]) < 1.96 for n in (11, 12))
    assert (f"{entropy[21]:.2f} over the control's first 5 steps against {entropy[17]:.2f} and {entropy[19]:.2f}"
            in section)
    # the starts that reversed no code, the rule's untested path
    reversing = _warm_start_reversals((4, 5, 6, 7, 8, 9, 10, 11, 12, 14, 18, 19, 20, 21))
    assert sorted(n for n, c in reversing.items() if c == 0) == [9, 11, 20, 21]
    assert "four uniform starts reversed none, runs 9, 11, 20, 21" in section


def test_run_22s_lost_call_holds_what_bench_readme_says() -> None:
    """Run 22 (run 21's plan) was lost after call 1; bench/README's "Run 22, lost" against that call's packed
    files: both warm start attempts (the rejected one's stop and reversed reading, the kept one's), the restart
    rule's first firing on a GPU, the untrained evaluation and why RL did not begin in that call."""
    section = _bench_section("**Run 22, lost**", "**Run 23**")
    call = _packed(ROOT / "bench" / "results" / "memagent_small_scale_run22_lost" / "call1_results.tgz")
    stage, log = json.loads(call["warmstart1_stage.json"]), call["calls.log"]
    args, stop = stage["args"], stage["stop"]
    assert (args["write_share"], args["restart_reversed"], args["restarts"], args["demo_split"]) == (
        0.0, 20.0, 2, "demo1")
    assert f"(demonstrations `demo1`, {round(stage['demo_s'])} s)" in section
    # attempt 1: its copy, overshoots, stop, the confirmation that decided, and the reading that rejected it
    (first,) = stop["rejected"]
    first_probes = {c["step"]: c["probe_strict"] for c in first["curve"] if "probe_strict" in c}
    assert first["attempt"] == 0 and _first_probe(first["curve"], 30) == 450  # a rejected attempt keeps its curve
    assert f"the copy formed at step 450 (probe {first_probes[400]:.1f} % at 400, {first_probes[450]:.1f} % at 450)" \
        in section
    assert f"went back twice ({_went_back(first['overshoots'])}) and it stopped at {first['step']}" in section
    assert (f"(probe {first['probe_strict']:.1f} %, 2 probes in a row), its confirmation "
            f"{first['confirm_strict']:.1f} % on 96 new documents, over the top") in section
    assert "with no refinement left (--refines 2) (the confirmation decides)" in first["reason"]
    assert first["probe_reversed"] == first["confirm_reversed"] == first["reversed"] >= args["restart_reversed"]
    pooled = _reversed_count(first, args)
    assert f"both read **{first['reversed']:.1f} %** of their answers reversed ({pooled} of 144 pooled)" in section
    assert "attempt 1 stopped with 20.8% of its answers reversed (>= --restart-reversed 20.0%)" in call[
        "warmstart1.log"]
    # attempt 2: from the model's weights, its probes, overshoots and kept stop
    probes = {c["step"]: c for c in stage["curve"] if "probe_strict" in c}
    assert _first_probe(stage["curve"], 30) == 350 and stop["attempt"] == 1
    assert (f"(probe {probes[300]['probe_strict']:.1f} % at 300, {probes[350]['probe_strict']:.1f} % at 350)"
            in section)
    at = probes[stop["step"]]
    assert (f"went back twice ({_went_back(stop['overshoots'])}) and it stopped at {stop['step']} (probe "
            f"{at['probe_strict']:.1f} %, 2 probes in a row), confirmed {_confirmed(stop)} %") in section
    kept = _reversed_count(at, args)
    assert stop["reversed"] == pytest.approx(100 * kept / 144, abs=0.01) and stop["reversed"] < args["restart_reversed"]
    assert (f"It read {at['probe_reversed']:.1f} % reversed on its probe and {at['confirm_reversed']:.1f} % on its "
            f"confirmation: {stop['reversed']:.1f} % pooled ({kept} of 144)") in section
    assert f"reversed {kept} answers of 144 where the first reversed {pooled}" in section
    assert f"({round(stop['seconds'])} s for both attempts and the demonstrations)" in section
    assert f"a probe earlier ({_first_probe(stage['curve'], 30)} against 450)" in section
    # the untrained evaluation, and a call that ended before RL
    untrained = json.loads(call["eval_untrained.json"])["results"]
    assert len(untrained) == 48 * 6 and sum(r["sub_em_strict"] for r in untrained) == 0
    left = _left_after_warm_start(log)
    assert f"The call ended with {left} s left, under `RL_MIN_S=150`" in section and left < 150
    assert "call ends after warm start round 1" in log and not any(n.startswith(("rl", "eval_warm")) for n in call)


def _run21s_plan(n: int, end: str, device_seconds: int, lr: float = 5e-5, rounds: int = 1
                 ) -> tuple[str, dict[str, Any]]:
    """Run n on run 21's plan, its warm start in `rounds` rounds (a uniform start with --restart-reversed 20; RL and
    its control at `lr` with the KL coefficient 0.01): its bench/README section (up to `end`) checked as every run's
    is, its settings and device time against its published file. The section (whitespace folded) and the file."""
    section = _bench_section(f"**Run {n}**", end)
    published = json.loads((ROOT / "bench" / "results" / f"memagent_small_scale_run{n}.json").read_text())
    _check_run_section(section, published)
    rl, control, stage = published["rl_stage"], published["rl_permuted_stage"], published["warmstart_stage"]
    assert len(published.get("warmstart_earlier_rounds", [])) == rounds - 1
    assert {rl["args"]["lr"], control["args"]["lr"]} == {lr}
    assert {rl["args"]["kl_coef"], control["args"]["kl_coef"]} == {0.01}
    assert (stage["args"]["write_share"], stage["args"]["restart_reversed"]) == (0.0, 20.0)
    assert published["device_seconds"] == device_seconds and f"{device_seconds:,} device-seconds" in section
    return section, published


def _check_clean_stop(section: str, stop: dict, args: dict, *, step: int, seconds: int) -> None:
    """A warm start that stopped in its first attempt after 2 overshoots, under both restart rules (runs 37, 39):
    its stop as the file holds it, and the section's sentence saying so."""
    assert (stop["step"], stop["attempt"], stop["rejected"], round(stop["seconds"])) == (step, 0, [], seconds)
    assert len(stop["overshoots"]) == 2
    assert stop["reversed"] < args["restart_reversed"] == 20 and stop["flips"] < args["restart_flips"] == 10
    assert (f"it stopped there ({round(stop['seconds'])} s), in its first attempt, after 2 overshoots, "
            f"{stop['reversed']:.1f} % reversed (under `WS_RESTART_REVERSED=20`) and {stop['flips']:.1f} % of its "
            "copied digits flipped (under `WS_RESTART_FLIPS=10`): neither rule began it again") in section


def _check_more_pairs(section: str, published: dict[str, Any]) -> tuple[tuple[Any, ...], ...]:
    """The paired figures a run's section shows beyond every run's (RL and its control over all 288 documents, the
    control at 32K), from the evaluations and against publish.py's `paired_more`; returns (RL over all lengths, the
    control over all lengths, the control at 32K, the control at 8K-32K), each `_paired`'s (won, lost, gain, z)."""
    warm, after = published["eval_warmstart"]["results"], published["eval_rl"]["results"]
    held_back = published["eval_rl_permuted"]["results"]
    longer = [8000, 16000, 32000]
    everything = [1000, 2000, 4000, *longer]
    more_pairs = published["paired_more"]["all"]
    rl_all, held_all = _paired(warm, after, everything), _paired(warm, held_back, everything)
    held_32, held_far = _paired(warm, held_back, [32000]), _paired(warm, held_back, longer)
    assert (more_pairs["RL"]["won"], more_pairs["RL"]["lost"]) == rl_all[:2]
    assert (more_pairs["control"]["won"], more_pairs["control"]["lost"]) == held_all[:2]
    assert (f"over all 288 documents won {rl_all[0]} / lost {rl_all[1]} ({rl_all[2]}, z {rl_all[3]:.2f}); RL vs its "
            "own control") in section
    assert (f"at 32K won {held_32[0]} / lost {held_32[1]} ({held_32[2]}, z {held_32[3]:.2f}); over all 288 "
            "documents") in section
    assert (f"over all 288 documents won {held_all[0]} / lost {held_all[1]} ({held_all[2]}, z {held_all[3]:.2f}). "
            "Answers at 1K-4K") in section
    return rl_all, held_all, held_32, held_far


def _run32s_plan(n: int, end: str, *, when: str, card: str, calls: str, device_seconds: int, kl: float = 0.01
                 ) -> tuple[str, dict[str, Any]]:
    """Run n on run 32's plan (RL and its control at lr 1e-4 with the KL coefficient `kl`): its bench/README
    section (up to `end`) checked as every run's is, its clock, card, calls and device time against its published
    file. The section (whitespace folded) and the file."""
    section = _bench_section(f"**Run {n}**", end)
    published = json.loads((ROOT / "bench" / "results" / f"memagent_small_scale_run{n}.json").read_text())
    _check_run_section(section, published)
    rl, control = published["rl_stage"], published["rl_permuted_stage"]
    assert {rl["args"]["lr"], control["args"]["lr"]} == {1e-4}
    assert {rl["args"]["kl_coef"], control["args"]["kl_coef"]} == {kl}
    assert published["when"] == f"{when} UTC (device clock)" and card in published["machine"]
    assert f"({when} by the device's clock, one {card}, {calls} device calls" in section
    assert published["device_seconds"] == device_seconds
    assert f"{device_seconds:,} device-seconds with the machine's start" in section
    return section, published


def _published_runs() -> dict[int, dict[str, Any]]:
    """Every numbered run's results file in bench/results, by number, in order."""
    paths = {int(p.stem.removeprefix("memagent_small_scale_run")): p
             for p in (ROOT / "bench" / "results").glob("memagent_small_scale_run*.json")}
    return {n: json.loads(paths[n].read_text()) for n in sorted(paths)}


def _evaluated_runs(first: int, last: int) -> dict[int, dict[str, Any]]:
    """Every published run from `first` to `last` whose file holds the five targets' verdicts, by number."""
    return {n: f for n, f in _published_runs().items() if first <= n <= last and "targets" in f}


def test_run_23s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 23" (run 21's plan in two calls): its tables and paired figures as for run 14, and each
    figure of its reading (the unconfirmed pair of probes and the stop after it, what call 1 left, the arms' time
    and steps, the audits, the control's start entropy against the four controls that fell) from the kept files."""
    section, published = _run21s_plan(23, "**Run 24, lost**", 1002)
    results, train = ROOT / "bench" / "results", [1000, 2000, 4000]
    rl, control, stage = published["rl_stage"], published["rl_permuted_stage"], published["warmstart_stage"]
    log = published["calls_log"]
    (ended,) = re.findall(r"\[([\d:]+)\] call ends after warm", log)
    starts = re.findall(r"\[([\d:]+)\] call starts", log)
    assert len(starts) == 2 and f"(sent {_clock(starts[1]) - _clock(ended)} s after call 1 returned)" in section
    # the warm start: a late copy, two probes in the band not confirmed, the stop one probe later
    probes = {c["step"]: c for c in stage["curve"] if "probe_strict" in c}
    early = [c["probe_strict"] for step, c in probes.items() if step <= 950]
    assert _first_probe(stage["curve"], 30) == 1000 and round(stage["demo_s"]) == 104
    assert (f"(probes {min(early):.1f}-{max(early):.1f} % from step 150 to 950; {probes[1000]['probe_strict']:.1f} % "
            f"at 1000, {probes[1050]['probe_strict']:.1f} % at 1050, {probes[1100]['probe_strict']:.1f} % at 1100)"
            ) in section
    assert probes[1050]["confirm_strict"] < stage["args"]["stop_at"] <= probes[1000]["probe_strict"]
    assert f"but the confirmation read {probes[1050]['confirm_strict']:.1f} %, under the 30 % mark" in section
    stop = stage["stop"]
    assert (stop["step"], stop["attempt"], stop["rejected"], stop["overshoots"]) == (1100, 0, [], [])
    assert (f"the next one was confirmed, {_confirmed(stop)} %, and the warm start stopped there "
            f"({round(stop['seconds'])} s), in its first attempt: it read {stop['reversed']:.1f} % reversed (the probe "
            f"{probes[1100]['probe_reversed']:.1f} %, the confirmation {probes[1100]['confirm_reversed']:.1f} %)"
            ) in section
    warm = published["eval_warmstart"]["results"]
    kinds = P.answer_kinds(warm, train)
    assert _warm_start_line(warm, "code") in section
    left = _left_after_warm_start(log)
    assert left < 100 and f"Call 1 ended with {left} s left, under `RL_MIN_S=100`" in section
    # the arms: what the last call left them, their speed, the audits, the training rewards
    assert len(rl["curve"]) == len(control["curve"]) == 12 and round(rl["seconds"] / 60, 1) == 5.2
    assert (f"5.2 minutes each ({len(rl['curve'])} steps; rollouts "
            f"{sum(c['rollout_s'] for c in rl['curve']) / 12:.1f} s, update "
            f"{sum(c['train_s'] for c in rl['curve']) / 12:.1f} s a step)") in section
    assert _audit_line(rl, control) in section
    after = P.answer_kinds(published["eval_rl"]["results"], train)
    assert after["right"] - kinds["right"] == 10
    assert (f"one digit in place {kinds['one_place']} -> {after['one_place']}, lost in memory "
            f"{kinds['lost_in_memory']} -> {after['lost_in_memory']}") in section
    shown = published["training_reward_at_t1"]
    last_two = sum(c["reward_mean"] for c in rl["curve"][-2:]) / 2
    assert (f"({shown['rl']['steps_0_4']:.2f} -> {shown['rl']['last_10']:.2f} over the last 10 steps, "
            f"{last_two:.2f} over the last 2) while the control's stayed flat "
            f"({shown['control']['steps_0_4']:.2f} -> {shown['control']['last_10']:.2f})") in section
    run21 = json.loads((results / "memagent_small_scale_run21.json").read_text())
    assert run21["targets"]["rl_gain_points_ge_15"]["after_7.1_min"] == published["targets"][
        "rl_gain_points_ge_15"]["after_5.2_min"]  # "the same gain from the same score as run 21's 17 steps"
    assert _strict_score(run21["eval_warmstart"]["results"], train) == _strict_score(warm, train)
    # the control's start entropy against the four sharp starts whose control fell, and their lengths
    entropy = sum(c["entropy"] for c in control["curve"][:5]) / 5
    assert entropy < 0.11 and f"(entropy {entropy:.2f} over its first 5 steps)" in section
    steps = [len(json.loads((results / f"memagent_small_scale_run{n}.json").read_text())["rl_permuted_stage"]["curve"])
             for n in (7, 9, 10, 21)]
    assert f"stepped {min(steps)}-{max(steps)} times" in section and min(steps) > 12


def test_run_25s_lost_call_holds_what_bench_readme_says() -> None:
    """Run 25 (run 21's plan) was lost after call 1; bench/README's "Run 25, lost" against that call's packed files:
    the warm start's probes (a copy forming, never two probes in a row in the band), the time budget that ended it,
    the untrained evaluation and a call that ended with no RL."""
    section = _bench_section("**Run 25, lost**", "**Run 26**")
    call = _packed(ROOT / "bench" / "results" / "memagent_small_scale_run25_lost" / "call1_results.tgz")
    stage, log = json.loads(call["warmstart1_stage.json"]), call["calls.log"]
    args, stop = stage["args"], stage["stop"]
    assert (args["write_share"], args["restart_reversed"], args["demo_split"]) == (0.0, 20.0, "demo1")
    assert f"(demonstrations `demo1`, {round(stage['demo_s'])} s)" in section
    probes = {c["step"]: c["probe_strict"] for c in stage["curve"] if "probe_strict" in c}
    early = [v for step, v in probes.items() if step <= 600]
    again = [v for step, v in probes.items() if 650 < step <= 1000]
    assert (f"probes {min(early):.1f}-{max(early):.1f} % from step 150 to 600, {probes[650]:.1f} % at 650, "
            f"{min(again):.1f}-{max(again):.1f} % again to 1000, then {probes[1050]:.1f} % at 1050, "
            f"{probes[1100]:.1f} % at 1100 and {probes[1150]:.1f} % at 1150") in section
    assert max(probes) == stop["step"] == 1150 and stop["reason"] == f"time budget of {args['max_minutes']} min spent"
    assert f"where its time budget ({args['max_minutes']} min) ended it" in section
    in_band = [args["stop_at"] <= probes[s] <= args["stop_above"] for s in sorted(probes)]
    assert not any(a and b for a, b in itertools.pairwise(in_band))  # "not formed (the stop asks 2 probes in a row)"
    untrained = json.loads(call["eval_untrained.json"])["results"]
    assert len(untrained) == 48 * 6 and sum(r["sub_em_strict"] for r in untrained) == 0
    assert "call ends after warm start round 1" in log and not any(n.startswith(("rl", "eval_warm")) for n in call)


def test_run_26s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 26" (run 23's plan in two calls): its tables and paired figures as for run 14, and each
    figure of its reading (the stop in the copy's rise, the start's stored-wrong codes against every evaluated start,
    RL in both calls, the audits, the flat groups against the other starts under 60 %, the stops as early as this
    one, the RL minutes of the runs that met the target) from the kept files."""
    section, published = _run21s_plan(26, "**Run 27**", 1145)
    results, train = ROOT / "bench" / "results", [1000, 2000, 4000]
    rl, control, stage = published["rl_stage"], published["rl_permuted_stage"], published["warmstart_stage"]
    # the warm start: an early copy, one overshoot, probes every 10 steps and a stop 10 steps after the copy
    probes = {c["step"]: c for c in stage["curve"] if "probe_strict" in c}
    early = [c["probe_strict"] for step, c in probes.items() if step <= 450]
    went_back, stopped = _refined_stop(stage, 550, 530)
    assert round(stage["demo_s"]) == 112 and stopped in section
    assert (f"(probes {min(early):.1f}-{max(early):.1f} % from step 150 to 450; {probes[500]['probe_strict']:.1f} % "
            f"at 500). {went_back}") in section
    assert 530 - _first_probe(stage["curve"], 30) == 10
    warm = published["eval_warmstart"]["results"]
    kinds = P.answer_kinds(warm, train)
    assert f"{_warm_start_line(warm, 'codes')}, and {kinds['stored_wrong']} codes stored wrong" in section
    earlier = (9, 10, 11, 12, 14, 17, 19, 21, 23)  # every published run whose file holds an evaluated start
    files = {n: json.loads((results / f"memagent_small_scale_run{n}.json").read_text()) for n in earlier}
    files[26] = published
    stored = {n: P.answer_kinds(files[n]["eval_warmstart"]["results"], train)["stored_wrong"] for n in earlier}
    assert kinds["stored_wrong"] > max(stored.values())
    assert f"the most of any evaluated start (runs 9-23: {min(stored.values())}-{max(stored.values())})" in section
    # RL in both calls: what call 1 left, the arms' steps there and in the last call, their speed, the audits
    log = published["calls_log"]
    budgets, left, spent, (gap,) = _rl_in_calls(log)
    assert budgets == [530, 540] and left >= 100
    assert f"Call 1 had {left} s left, so RL and the control began in it" in section
    assert spent == [("2.0", "5"), ("2.0", "5"), ("6.33", "21"), ("6.33", "21")]
    assert "(2.0 minutes, 5 steps each)" in section and "stepped them 6.3 minutes more" in section
    assert f"(sent {gap} s after call 1 returned)" in section
    assert len(rl["curve"]) == 21 and round(rl["seconds"] / 60, 1) == 9.1 and _arms_time(rl, control) in section
    assert _audit_line(rl, control) in section
    assert f"RL's {_training_rewards(published, 'stayed flat')}" in section
    after, held = P.answer_kinds(published["eval_rl"]["results"], train), P.answer_kinds(
        published["eval_rl_permuted"]["results"], train)
    assert (kinds["right"] - after["right"], after["reversed"] - kinds["reversed"]) == (3, 5)
    assert (f"5 more reversed ({kinds['reversed']} -> {after['reversed']}, as many as the control's), 11 fewer with "
            f"another code ({kinds['other_code']} -> {after['other_code']})") in section
    assert held["reversed"] == after["reversed"] and kinds["other_code"] - after["other_code"] == 11
    # the flat groups of RL's first 10 steps, most at reward 0, against the other starts under 60 % that record them
    first = rl["curve"][:10]
    zero = sum(g == 0 for c in first for g in c["group_means"])
    assert zero > sum(c["flat_groups"] for c in first) / 2
    assert f"{sum(c['flat_groups'] for c in first) / 10:.1f} of 16 groups flat over RL's first 10 steps" in section

    def flat(n: int) -> float:
        curve = files[n]["rl_stage"]["curve"][:10]
        return sum(c["flat_groups"] for c in curve) / len(curve)

    under = [n for n in earlier if _strict_score(files[n]["eval_warmstart"]["results"], train) < 60]
    assert under == [10, 12, 14, 17, 19, 21, 23]
    low, high = [flat(n) for n in (10, 14, 19, 21, 23)], [flat(n) for n in (12, 17)]
    assert (f"against {min(low):.1f}-{max(low):.1f} in runs 10, 14, 19, 21 and 23 and {min(high):.1f}-"
            f"{max(high):.1f} in runs 12 and 17") in section
    assert max(low + high) < sum(c["flat_groups"] for c in first) / 10
    # runs 14, 17 and 19 stopped as soon after their copy; the runs whose RL met the target had 11 minutes or more
    after_copy = [files[n]["warmstart_stage"]["stop"]["step"] - _first_probe(files[n]["warmstart_stage"]["curve"], 30)
                  for n in (14, 17, 19)]
    assert f"also stopped {min(after_copy)}-{max(after_copy)} steps after" in section
    met = {n: f["targets"]["rl_gain_points_ge_15"] for n, f in files.items() if "targets" in f}
    minutes = {n: f["rl_stage"]["seconds"] / 60 for n, f in files.items()}
    assert [n for n, t in met.items() if t["passed"]] == [9, 14] and min(minutes[9], minutes[14]) >= 11
    assert f"{minutes[23]:.1f}-{minutes[26]:.1f} minutes of it" in section
    assert files[14]["rl_stage"]["args"]["lr"] == 2 * rl["args"]["lr"]


def test_run_27s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 27" (run 21's plan in three calls): its tables and paired figures as for run 14, and each
    figure of its reading (a copy that slipped back, the overshoot and the stop, RL over three calls, the audits,
    the training rewards, and the runs at each lr and anchor: what their RL and their control did) from the kept
    files."""
    section, published = _run21s_plan(27, "**Run 28**", 1706)
    train = [1000, 2000, 4000]
    rl, control, stage = published["rl_stage"], published["rl_permuted_stage"], published["warmstart_stage"]
    # the warm start: a copy at 600 that slipped back, an overshoot at 750, probes every 10 steps, the stop at 730
    probes = {c["step"]: c for c in stage["curve"] if "probe_strict" in c}
    early = [c["probe_strict"] for step, c in probes.items() if step <= 550]
    assert round(stage["demo_s"]) == 104 and all(said in section for said in _refined_stop(stage, 750, 730))
    assert (f"probes {min(early):.1f}-{max(early):.1f} % from step 150 to 550; {probes[600]['probe_strict']:.1f} % "
            f"at 600, then {probes[650]['probe_strict']:.1f} % at 650 and {probes[700]['probe_strict']:.1f} % at 700"
            ) in section
    assert probes[650]["probe_strict"] < probes[600]["probe_strict"] and probes[700]["probe_strict"] < 10
    warm = published["eval_warmstart"]["results"]
    kinds = P.answer_kinds(warm, train)
    assert kinds["reversed"] == 1
    assert f"{_warm_start_line(warm, 'code')}, and {kinds['stored_wrong']} codes stored wrong" in section
    # RL over the three calls: what call 1 left, each call's budget and steps, the gaps between calls, the speed
    log = published["calls_log"]
    budgets, left, spent, gaps = _rl_in_calls(log)
    assert budgets == [555, 560, 585] and left >= 150
    assert f"Call 1 had {left} s left, so RL and the control began in it (4 steps each)" in section
    assert spent == [("1.87", "4")] * 2 + [("8.5", "24")] * 2 + [("7.08", "42")] * 2
    assert "stepped them 8.5 minutes more, to 24 steps" in section
    assert "7.08 minutes more before its evaluations" in section
    assert (f"call 2 (sent {gaps[0]} s after call 1 returned)" in section
            and f"the last call (sent {gaps[1]} s after call 2 returned)" in section)
    assert len(rl["curve"]) == 42 and round(rl["seconds"] / 60, 1) == 18.0 and _arms_time(rl, control) in section
    assert _audit_line(rl, control) in section
    assert f"its {_training_rewards(published, 'fell')}" in section
    assert f"{sum(c['flat_groups'] for c in rl['curve'][:10]) / 10:.1f} of 16 over RL's first 10 steps" in section
    after = P.answer_kinds(published["eval_rl"]["results"], train)
    ahead = after["right"] - kinds["right"]
    assert f"{ahead} right answers ahead of its start ({kinds['right']} -> {after['right']})" in section
    # the runs at each lr and anchor (every published run whose RL warmed its lr up): RL's target and the control's
    files = _evaluated_runs(5, 27)

    def runs(lr: float, anchors: tuple[float, ...]) -> list[int]:
        return sorted(n for n, f in files.items() if f["rl_stage"]["args"]["lr"] == lr
                      and f["rl_stage"]["args"]["kl_coef"] in anchors)

    def passed(ns: list[int], target: str) -> list[int]:
        return [n for n in ns if files[n]["targets"][target]["passed"]]

    half = runs(5e-5, (0.01,))
    assert half == [17, 19, 21, 23, 26, 27] and passed(half, "rl_gain_points_ge_15") == []
    gains = {n: files[n]["compare_strict"]["vs_base"][0]["training_lengths"]["gain_points"] for n in half}
    minutes = {n: files[n]["rl_stage"]["seconds"] / 60 for n in half}
    assert (f"gained {min(gains.values()):.1f} to {max(gains.values()):+.1f} at 1K-4K with "
            f"{min(minutes.values()):.1f}-{max(minutes.values()):.1f} minutes of RL") in section
    by_minutes = [gains[n] for n in sorted(half, key=minutes.get)]
    assert by_minutes != sorted(by_minutes)  # "in no order of their minutes"
    assert len(passed(half, "control_within_noise")) == 5 and "their controls held in five of the six" in section
    assert max(minutes, key=minutes.get) == 17 and sorted(minutes.values())[-2] == minutes[27]
    full = runs(1e-4, (0.001, 0.01))
    assert full == [5, 6, 7, 8, 9, 10, 14]
    assert passed(full, "rl_gain_points_ge_15") == [9, 14] and passed(full, "control_within_noise") == [5, 8]
    assert "RL met its target in two runs (9 and 14) and the control held in two (5 and 8)" in section
    anchored = runs(1e-4, (0.05,))
    assert anchored == [11, 12] and passed(anchored, "control_within_noise") == anchored
    assert passed(anchored, "rl_gain_points_ge_15") == []
    assert files[14]["rl_stage"]["args"]["kl_coef"] == rl["args"]["kl_coef"] and "`RL_LR=1e-4`" in section
    # the table of every such run: each row from its per-document results, its stage file and its verdicts
    assert sorted(files) == sorted(full + anchored + half)
    assert all(f["rl_stage"]["args"]["lr_warmup"] for f in files.values())

    def gain(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> str:
        _, _, points, z = _paired(before, after, train)
        return f"{points} ({z:+.2f})"

    rows, verdict = [], {True: "PASS", False: "MISS"}
    for n in sorted(files):
        f = files[n]
        warm, args, other = f["eval_warmstart"]["results"], f["rl_stage"]["args"], f["rl_permuted_stage"]["args"]
        assert (other["lr"], other["kl_coef"]) == (args["lr"], args["kl_coef"])
        lr = f"{args['lr']:.0e}".replace("e-0", "e-")
        rows.append(f"| {n} | {lr} | {args['kl_coef']} | {f['rl_stage']['seconds'] / 60:.1f} "
                    f"({len(f['rl_stage']['curve'])}) | {_printed(_strict_score(warm, train))} % | "
                    f"{gain(warm, f['eval_rl']['results'])} | {gain(warm, f['eval_rl_permuted']['results'])} | "
                    f"{verdict[f['targets']['rl_gain_points_ge_15']['passed']]} | "
                    f"{verdict[f['targets']['control_within_noise']['passed']]} |")
    assert [row for row in rows if row not in section] == []
    assert len(re.findall(r"\| \d+ \| \de-\d \| ", section)) == len(rows) == 15  # no row the files do not hold


def _warm_start_steps(f: dict[str, Any]) -> int:
    """A published run's warm-start steps to the start RL got: its round's, and those of each round it began from
    (every earlier round in runs 3-30; none under WS_ROUND_FROM=untrained, whose rounds begin from the model)."""
    rounds = {w["args"]["out"]: w for w in [*f.get("warmstart_earlier_rounds", []), f["warmstart_stage"],
                                            *f.get("warmstart_later_rounds", [])]}
    steps, at = 0, f["warmstart_stage"]
    while at is not None:
        steps += at["stop"]["step"]
        at = rounds.get(at["args"]["init"])
    return steps


def test_warm_start_steps_follow_the_rounds_a_start_began_from() -> None:
    """`_warm_start_steps` (the steps the readings of runs 28-30 rank starts by) sums a start's round and the
    rounds it went on from: both of run 30's, none but its own for a round begun from the untrained model."""
    run30 = _published_runs()[30]
    (first,), second = run30["warmstart_earlier_rounds"], run30["warmstart_stage"]
    assert second["args"]["init"] == first["args"]["out"]
    assert _warm_start_steps(run30) == first["stop"]["step"] + second["stop"]["step"] == 1498 + 450
    fresh = {**second, "args": {**second["args"], "init": first["args"]["init"]}}  # round 2 from the model
    assert _warm_start_steps({**run30, "warmstart_stage": fresh}) == 450
    taken_first = {**run30, "warmstart_stage": first, "warmstart_later_rounds": [fresh]}
    del taken_first["warmstart_earlier_rounds"]
    assert _warm_start_steps(taken_first) == 1498


def _rl_start_entropy(f: dict[str, Any]) -> float:
    """A published run's RL entropy at the trained tokens over its first 5 steps."""
    return sum(c["entropy"] for c in f["rl_stage"]["curve"][:5]) / 5


def _kept_at_32k(f: dict[str, Any], arm: str = "warmstart") -> Fraction:
    """The share of its 1K-4K strict score an arm of a published run keeps at 32K."""
    results = f[f"eval_{arm}"]["results"]
    return _strict_score(results, [32000]) / _strict_score(results, [1000, 2000, 4000])


def _gain_z(f: dict[str, Any], arm: str) -> str:
    """An arm of a published run against its warm start at 1K-4K, as a setting's table prints it: "+1.4 (+0.33)"."""
    _, _, points, z = _paired(f["eval_warmstart"]["results"], f[f"eval_{arm}"]["results"], [1000, 2000, 4000])
    return f"{points} ({z:+.2f})"


def _setting_row(n: int, f: dict[str, Any]) -> str:
    """Run n's row of the table that sets the runs of run 14's RL setting side by side (runs 28 and 29's sections)."""
    rounds = 1 + len(f.get("warmstart_earlier_rounds", []))
    kinds = {k: f["compare_strict"]["answers"][k]["training_lengths"]["one_place"] for k in ("warm start", "RL")}
    shown = f["training_reward_at_t1"]["rl"]
    return (f"| {n} | {rounds}, {_warm_start_steps(f):,} | "
            f"{_printed(_strict_score(f['eval_warmstart']['results'], [1000, 2000, 4000]))} % "
            f"({_printed(_kept_at_32k(f), 2)}x) | {_rl_start_entropy(f):.3f} | {f['rl_stage']['seconds'] / 60:.1f} "
            f"({len(f['rl_stage']['curve'])}) | {shown['steps_0_4']:.2f} -> {shown['last_10']:.2f} | "
            f"{_gain_z(f, 'rl')} | {kinds['warm start']} -> {kinds['RL']} | {_gain_z(f, 'rl_permuted')} |")


def _rl_gains(files: dict[int, dict[str, Any]]) -> dict[int, Fraction]:
    """Each published run's RL gain over its warm start, strict sub_em at 1K-4K (points)."""
    train = [1000, 2000, 4000]
    return {n: _strict_score(f["eval_rl"]["results"], train) - _strict_score(f["eval_warmstart"]["results"], train)
            for n, f in files.items()}


def _rl_against_control(files: dict[int, dict[str, Any]]
                        ) -> tuple[dict[int, tuple[int, int, str, float]], list[Fraction]]:
    """RL against its permuted-reward control at 1K-4K in each run: paired (won, lost, gain, z) by run, and the
    strict-score margins of RL over the control, smallest first."""
    train = [1000, 2000, 4000]
    paired = {n: _paired(f["eval_rl_permuted"]["results"], f["eval_rl"]["results"], train) for n, f in files.items()}
    margins = sorted(_strict_score(f["eval_rl"]["results"], train)
                     - _strict_score(f["eval_rl_permuted"]["results"], train) for f in files.values())
    return paired, margins


def _controls_that_grew(files: dict[int, dict[str, Any]]) -> list[int]:
    """The runs whose permuted-reward control ended over its warm start at 1K-4K."""
    train = [1000, 2000, 4000]
    return [n for n, f in files.items() if _strict_score(f["eval_rl_permuted"]["results"], train)
            > _strict_score(f["eval_warmstart"]["results"], train)]


def _sign_test(gains: list[Fraction]) -> tuple[int, float]:
    """How many of the gains are over 0, and the two-sided sign test's p for that many or fewer of the rest."""
    rose = sum(g > 0 for g in gains)
    return rose, 2 * sum(math.comb(len(gains), k) for k in range(len(gains) - rose + 1)) / 2 ** len(gains)


def test_run_28s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 28" (run 27's plan at lr 1e-4): its tables and paired figures as for run 14, and each figure
    of its reading (a warm start over two rounds, RL from call 2 on, the audits, run 14 beside it, and what every run
    from run 5 on says of RL against its control) from the kept files."""
    section, published = _run21s_plan(28, "**Run 29**", 1710, lr=1e-4, rounds=2)
    train, longer = [1000, 2000, 4000], [8000, 16000, 32000]
    rl, control = published["rl_stage"], published["rl_permuted_stage"]
    # the warm start: round 1 to its time budget (probes in the band, confirmations under it), round 2's stop
    (first,), second = published["warmstart_earlier_rounds"], published["warmstart_stage"]
    assert (first["args"]["demo_split"], second["args"]["demo_split"]) == ("demo1", "demo2")
    assert second["args"]["init"] == first["args"]["out"]
    assert round(first["demo_s"]) == 106 and round(second["demo_s"]) == 98
    one = {c["step"]: c for c in first["curve"] if "probe_strict" in c}
    early = [c["probe_strict"] for step, c in one.items() if step <= 900]
    assert (f"probes {min(early):.1f}-{max(early):.1f} % from step 150 to 900, then "
            + ", ".join(f"{one[k]['probe_strict']:.1f} % at {k}" for k in (950, 1000, 1050, 1100))
            + f" and {one[1150]['probe_strict']:.1f} % at 1150") in section
    band = [one[k]["probe_strict"] for k in (1200, 1250, 1300, 1350)]
    listed = f"{', '.join(f'{v:.1f}' for v in band[:-1])} and {band[-1]:.1f} %"
    assert all(30 <= v <= 50 for v in band) and f"from 1200 to 1350 were in the band ({listed})" in section
    confirms = [one[k]["confirm_strict"] for k in (1250, 1300, 1350)]
    assert max(confirms) < first["args"]["stop_at"] and "confirm_strict" not in one[1200]
    assert f"read {confirms[0]:.1f} %, {confirms[1]:.1f} % and {confirms[2]:.1f} %, under the 30 % mark" in section
    stop = first["stop"]
    assert (stop["step"], stop["reason"]) == (1350, f"time budget of {first['args']['max_minutes']} min spent")
    assert (f"the round's time budget ({first['args']['max_minutes']} min) ended it at 1350 "
            f"({round(stop['seconds'])} s)") in section
    two, stop = {c["step"]: c for c in second["curve"] if "probe_strict" in c}, second["stop"]
    assert (f"{two[150]['probe_strict']:.1f} % at 150, {two[200]['probe_strict']:.1f} % at 200, 250 and 300 (the "
            f"confirmations at 250 and 300: {two[250]['confirm_strict']:.1f} % and {two[300]['confirm_strict']:.1f} "
            f"%), {two[350]['probe_strict']:.1f} % at 350, confirmed {_confirmed(stop)} % on 96 new documents"
            ) in section
    assert len({two[k]["probe_strict"] for k in (200, 250, 300)}) == 1
    assert (stop["step"], stop["attempt"], stop["rejected"], stop["overshoots"]) == (350, 0, [], [])
    assert f"it stopped there ({round(stop['seconds'])} s), in its first attempt, {stop['reversed']:.1f} % reversed" \
        in section
    assert f"{first['stop']['step'] + stop['step']:,} warm-start steps in all" in section
    warm = published["eval_warmstart"]["results"]
    answers = published["compare_strict"]["answers"]
    start = answers["warm start"]["training_lengths"]
    assert f"{_warm_start_line(warm, 'codes')}, and {start['stored_wrong']} codes stored wrong" in section
    files, every = _evaluated_runs(5, 28), _published_runs()

    def kept(n: int) -> Fraction:  # the share of its 1K-4K score run n's warm start kept at 32K
        return _kept_at_32k(every[n])

    # runs 3 and 4, the earlier runs with an evaluated start, kept less too (run 4's also prints 0.87x)
    assert kept(28) > max(kept(n) for n in [3, 4, *files] if n < 28)
    assert (f"of any evaluated start (runs 5-27: {_printed(min(kept(n) for n in files if n < 28), 2)}-"
            f"{_printed(max(kept(n) for n in files if n < 28), 2)}x)") in section
    # RL from call 2 on: what that call left, each call's budget and steps, the gaps between calls, the speed
    budgets, left, spent, gaps = _rl_in_calls(published["calls_log"])
    assert budgets == [555, 560, 585] and "warm start done after round 2" in published["calls_log"]
    assert f"Call 2 had {left} s left after its warm start, so RL and the control began in it (4.87 minutes, 12 steps" \
        in section
    assert spent == [("4.87", "12")] * 2 + [("7.08", "30")] * 2 and "7.08 minutes more, to 30 steps" in section
    assert f"Round 2 (call 2, sent {gaps[0]} s after call 1 returned;" in section
    assert f"the last call (sent {gaps[1]} s after call 2 returned)" in section
    assert len(rl["curve"]) == 30 and _arms_time(rl, control) in section
    assert _audit_line(rl, control) in section
    won, lost, gain, z = _paired(warm, published["eval_rl"]["results"], [32000])
    assert f"RL lost at 32K what its start had kept (won {won} / lost {lost})" in section and gain.startswith("-")
    won, lost, gain, z = _paired(warm, published["eval_rl_permuted"]["results"], train + longer)
    assert f"over all 288 documents it fell, z {z:.2f}" in section and z < -1.96
    # run 14 beside it: every RL setting alike, the two rows, and the figures the reading draws from them
    r14 = files[14]
    differ = {k for k in rl["args"] if rl["args"][k] != r14["rl_stage"]["args"][k]}
    assert differ == {"max_minutes"} and rl["trainer"] == r14["rl_stage"]["trainer"]
    assert (rl["args"]["prompts"], rl["args"]["samples"], rl["args"]["steps_per_rollout"],
            rl["args"]["lr_warmup"]) == (16, 16, 2, 10)

    steps, entropy, gain_z = _warm_start_steps, _rl_start_entropy, _gain_z
    for n in (14, 28):
        assert _setting_row(n, files[n]) in section, n
    gains = _rl_gains(files)
    assert round(gains[14] - gains[28]) == 33 and "the two gains are 33 points apart" in section
    assert f"ran {_printed(Fraction(steps(published), steps(r14)))} times as many steps" in section
    assert abs(entropy(published) / entropy(r14) - 0.5) < 0.05 and "half run 14's entropy" in section
    assert (f"run 9 began at {entropy(files[9]):.3f} and gained {_printed(gains[9], plus=True)}, run 19 at "
            f"{entropy(files[19]):.3f} and gained {_printed(gains[19], plus=True)}") in section
    assert entropy(files[9]) < entropy(published) < entropy(r14) < entropy(files[19]) and gains[9] > gains[19]
    # what sixteen runs can say: runs a setting, the range of RL's gains, and RL against its control in every run
    settings = [(f["rl_stage"]["args"]["lr"], f["rl_stage"]["args"]["kl_coef"]) for n, f in files.items() if n < 28]
    counts = [settings.count(k) for k in set(settings)]
    assert f"holds one to {['one', 'two', 'three', 'four', 'five', 'six'][max(counts) - 1]} runs a setting" in section
    assert min(counts) == 1 and len(files) == 16 and "over the sixteen runs from run 5 on" in section
    assert (f"span {_printed(gains[28], plus=True)} to {_printed(gains[14], plus=True)}, nearly the whole range"
            f" of RL's gains over the sixteen runs from run 5 on ({_printed(min(gains.values()))} to "
            f"{_printed(max(gains.values()), plus=True)})") in section
    ahead, over = _rl_against_control(files)
    assert over[0] > 0 and all(won > lost for won, lost, _, _ in ahead.values())
    assert (f"RL ends ahead of its permuted-reward control at 1K-4K ({_printed(over[0], plus=True)} to "
            f"{_printed(over[-1], plus=True)}; here {ahead[28][2]}, z {ahead[28][3]:.2f})") in section
    grew = _controls_that_grew(files)
    grown = gain_z(files[11], "rl_permuted").split()[0]
    assert grew == [11] and f"the control gained over its start in one of them (run 11, {grown})" in section
    rose, sign_p = _sign_test(list(gains.values()))
    assert (f"RL gained over its start in fourteen of the sixteen (a sign test over the runs: p {sign_p:.3f}, "
            f"two-sided), {_printed(sum(gains.values()) / len(gains), plus=True)} points on average") in section
    assert rose == 14 and len(gains) == 16


def _ranks(xs: list[Fraction | int]) -> list[Fraction]:
    """Each value's rank among xs (1 = the smallest), ties given the mean of the ranks they share."""
    order = sorted(xs)
    return [Fraction(2 * order.index(x) + 1 + order.count(x), 2) for x in xs]


def _spearman(xs: list[Fraction | int], ys: list[Fraction | int]) -> float:
    """Spearman's rank correlation: Pearson's over the ranks (ties averaged)."""
    a, b = _ranks(xs), _ranks(ys)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True))
    return float(cov) / math.sqrt(float(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)))


def test_ranks_and_spearman_follow_their_textbook_values() -> None:
    assert _ranks([10, 30, 20, 20]) == [1, 4, Fraction(5, 2), Fraction(5, 2)]
    assert _spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert _spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert _spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)  # 1 - 6 * 4 / (5 * 24)


def test_run_29s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 29" (run 28's plan, unchanged): its tables and paired figures as for run 14, and each figure
    of its reading (a warm start in one round with two overshoots, a call that ended before RL, the audits, the three
    runs of run 14's RL setting side by side, what seventeen runs say) from the kept files; and the example README's
    count of the runs that passed four targets."""
    section, published = _run21s_plan(29, "**Chunk alignment**", 1615, lr=1e-4)
    train, longer = [1000, 2000, 4000], [8000, 16000, 32000]
    rl, control, stage = published["rl_stage"], published["rl_permuted_stage"], published["warmstart_stage"]
    files = _evaluated_runs(5, 29)
    run28 = files[28]
    assert published["command"] == run28["command"]  # the plan and calls, unchanged
    # the warm start: a copy in two probes, two overshoots back to step 700, the stop at 702 on its confirmation
    probes = {c["step"]: c for c in stage["curve"] if "probe_strict" in c}
    early = [c["probe_strict"] for step, c in probes.items() if step <= 600]
    assert round(stage["demo_s"]) == 116 and stage["args"]["demo_split"] == "demo1"
    assert (f"probes {min(early):.1f}-{max(early):.1f} % from step 150 to 600, then "
            f"{probes[650]['probe_strict']:.1f} % at 650 and {probes[700]['probe_strict']:.1f} % at 700") in section
    stop = stage["stop"]
    (at750, at710) = stop["overshoots"]
    assert (at750["step"], at750["back_to"], at710["step"], at710["back_to"]) == (750, 700, 710, 700)
    top = stage["args"]["stop_above"]
    assert stage["args"]["stop_at"] <= at750["probe_strict"] <= top < at750["confirm_strict"]
    assert at710["probe_strict"] > top
    assert (f"at 750 the probe read {at750['probe_strict']:.1f} %, in the band, but its confirmation "
            f"{_printed(at750['confirm_strict'])} %, over the band's top; at 710 the probe read "
            f"{_printed(at710['probe_strict'])} %") in section
    assert (stop["step"], stop["attempt"], stop["rejected"]) == (702, 0, [])
    assert (f"At 702 the probe read {_printed(probes[702]['probe_strict'])} % and the confirmation, on 96 new "
            f"documents, {_confirmed(stop)} %, in the band (the confirmation decides): it stopped there "
            f"({round(stop['seconds'])} s), in its first attempt, {stop['reversed']:.1f} % reversed") in section
    warm = published["eval_warmstart"]["results"]
    start = published["compare_strict"]["answers"]["warm start"]["training_lengths"]
    assert (f"{_warm_start_line(warm, 'codes')}, {start['unboxed']} answers with no box, and {start['stored_wrong']} "
            "codes stored wrong") in section
    under = probes[702]["confirm_strict"] - float(_strict_score(warm, train))
    assert round(under) == 14 and "14 points under its confirmation" in section
    # every start up to this run's with a confirmation at its stop: confirmation less evaluation (as the section,
    # written at run 29, reads them)
    gaps, every = {}, {n: f for n, f in _published_runs().items() if n <= 29}
    for n, f in every.items():
        stopped = f.get("warmstart_stage", {}).get("stop") or {}
        at_stop = [c for c in f.get("warmstart_stage", {}).get("curve", [])
                   if c["step"] == stopped.get("step") and "confirm_strict" in c]
        if at_stop and "eval_warmstart" in f:
            evaluated = float(_strict_score(f["eval_warmstart"]["results"], train))
            gaps[n] = at_stop[-1]["confirm_strict"] - evaluated
    others = [g for n, g in gaps.items() if n != 29]
    assert len(gaps) == 16 and max(others) < under
    assert (f"the widest gap of the sixteen runs with both (in the other fifteen the evaluation read from "
            f"{max(others):.1f} points under its confirmation to {-min(others):.1f} over)") in section
    steepest = max((b["probe_strict"] - a["probe_strict"], b["step"]) for a, b in itertools.pairwise(probes.values()))
    assert steepest[1] == 700 and "at a stop two steps after the copy's steepest rise" in section
    # call 1 ended before RL; RL ran in calls 2 and 3
    log = published["calls_log"]
    left = _left_after_warm_start(log)
    assert left < 150 and "RL_MIN_S=150" in published["command"] and "call ends after warm start round 1" in log
    assert f"Call 1 had {left} s left after its warm start, under `RL_MIN_S=150`, so it ended there" in section
    starts = re.findall(r"\[([\d:]+)\] call starts, budget (\d+)s", log)
    ended = re.findall(r"\[([\d:]+)\] call ends", log)
    gaps = [_clock(s) - _clock(e) for (s, _), e in zip(starts[1:], ended, strict=True)]
    assert [int(b) for _, b in starts] == [555, 560, 585]
    assert f"Call 2 (sent {gaps[0]} s after call 1 returned)" in section
    assert f"the last call (sent {gaps[1]} s after call 2 returned)" in section
    spent = re.findall(r"time budget of ([\d.]+) min spent after (\d+) steps", log)
    assert spent == [("8.5", "20")] * 2 + [("7.08", "38")] * 2
    assert "ran RL and the control 8.50 minutes, 20 steps each" in section
    assert "stepped them 7.08 minutes more, to 38 steps" in section
    assert _arms_time(rl, control) in section and _audit_line(rl, control) in section
    assert f"RL's {_training_rewards(published, 'stayed flat')}" in section
    # the targets: four pass, 32K misses against RL's own training-length score
    verdicts = {k: t["passed"] for k, t in published["targets"].items()}
    assert [k for k, ok in verdicts.items() if not ok] == ["keeps_80pct_at_8x"]
    after = published["eval_rl"]["results"]
    assert f"32K misses ({_printed(_kept_at_32k(published, 'rl'), 2)}x)" in section
    won, lost, _, _ = _paired(warm, after, [32000])
    assert (f"RL raised 32K from {_printed(_strict_score(warm, [32000]))} % to "
            f"{_printed(_strict_score(after, [32000]))} % (won {won} / lost {lost})") in section
    assert (f"({_printed(_strict_score(warm, train))} -> {_printed(_strict_score(after, train))} %)" in section
            and f"its start kept {_printed(_kept_at_32k(published), 2)}x" in section)
    far, near = P.answer_kinds(after, [32000]), P.answer_kinds(after, train)
    misses = 48 - far["right"]
    assert far["stored_wrong"] + far["lost_in_memory"] + far["lost_answering"] == misses
    ratio = Fraction(far["lost_in_memory"], 48) / Fraction(near["lost_in_memory"], 144)
    assert (f"Of RL's {misses} misses at 32K, {far['lost_in_memory']} are codes it stored right that a later memory "
            f"update changed, {_printed(ratio)} times their share at 1K-4K ({near['lost_in_memory']} of "
            f"144); {far['stored_wrong']} were stored wrong") in section
    _, _, _, z = _paired(warm, published["eval_rl_permuted"]["results"], train + longer)
    assert 1.96 <= z < 1.965 and f"(over all 288 documents z {z:.2f}, at the edge of its noise)" in section
    answers = published["compare_strict"]["answers"]
    assert start["unboxed"] == 7 and {answers[k]["training_lengths"]["unboxed"] for k in answers} == {7, 0}
    # the largest gain of any run with a warm start and RL evaluated
    gains = _rl_gains({n: f for n, f in every.items() if "eval_rl" in f and "eval_warmstart" in f})
    assert max(gains, key=gains.get) == 29 and {3, 4, 5, 28} <= set(gains)
    assert "(+50.7, z 8.21: the largest of any run)" in section
    # the three runs of run 14's RL setting, side by side
    setting = [n for n, f in files.items() if (f["rl_stage"]["args"]["lr"], f["rl_stage"]["args"]["kl_coef"])
               == (1e-4, 0.01)]
    assert setting == [14, 28, 29] and "the three runs of this RL setting gained" in section
    for n in setting:
        assert _setting_row(n, files[n]) in section, n
    assert f"{_rl_start_entropy(run28):.3f}" == f"{_rl_start_entropy(published):.3f}" == "0.080"
    assert "Run 29 began RL at run 28's entropy (0.080 both)" in section
    assert (_warm_start_steps(published), _warm_start_steps(run28)) == (702, 1700)
    assert "Its start was trained 702 steps in one round, where run 28's took 1,700 in two" in section
    gains = _rl_gains(files)
    rho = _spearman([_warm_start_steps(f) for f in files.values()], list(gains.values()))
    assert f"the warm start's steps do not order RL's gains (Spearman's rho {rho:.2f})" in section and abs(rho) < 0.3
    # what seventeen runs say
    assert len(files) == 17 and "What seventeen runs say" in section
    ahead, over = _rl_against_control(files)
    assert over[0] > 0 and all(won > lost for won, lost, _, _ in ahead.values())
    assert (f"in all seventeen from run 5 on ({_printed(over[0], plus=True)} to {_printed(over[-1], plus=True)}; here "
            f"{ahead[29][2]}, z {ahead[29][3]:.2f})") in section
    grew = _controls_that_grew(files)
    assert grew == [11, 29]
    grown29 = _paired(warm, published["eval_rl_permuted"]["results"], train)
    assert (f"in two of them (run 11, {_gain_z(files[11], 'rl_permuted').split()[0]}; run 29, {grown29[2]}, z "
            f"{grown29[3]:.2f})") in section
    rose, sign_p = _sign_test(list(gains.values()))
    assert rose == 15 and (f"RL gained over its start in fifteen of the seventeen (a sign test over the runs: p "
                           f"{sign_p:.3f}, two-sided), {_printed(sum(gains.values()) / len(gains), plus=True)} points "
                           "on average") in section
    passed = {k: [n for n, f in files.items() if f["targets"][k]["passed"]] for k in published["targets"]}
    assert passed["rl_gain_points_ge_15"] == [9, 14, 29]
    assert {files[n]["rl_stage"]["args"]["lr"] for n in passed["rl_gain_points_ge_15"]} == {1e-4}
    at_1e4 = [n for n, f in files.items() if f["rl_stage"]["args"]["lr"] == 1e-4]
    assert len(at_1e4) == 11 and "each at lr 1e-4, as eleven of the seventeen were" in section
    assert passed["keeps_80pct_at_8x"] == [6, 7, 8, 9, 11, 12, 14, 17]
    assert "32K's in eight (runs 6-9, 11, 12, 14 and 17)" in section
    count = {n: sum(t["passed"] for t in f["targets"].values()) for n, f in files.items()}
    assert max(count.values()) == 4 and [n for n, c in count.items() if c == 4] == [8, 9, 11, 12, 14, 17, 29]
    assert "seven have passed four (runs 8, 9, 11, 12, 14, 17 and 29)" in section
    example = " ".join((HERE / "README.md").read_text().split())
    assert "four at once in runs 8, 9, 11, 12, 14, 17, 29" in example and "all five in run 39 alone" in example
    # the next run's reason: each target has passed in some run of this setting
    assert all(any(files[n]["targets"][k]["passed"] for n in setting) for k in published["targets"])
    assert "Each of the five targets has passed in some run of this RL setting (runs 14, 28 and 29)" in section


def _document_flush_chunks(tok: Any, document: str, size: int) -> list[int]:
    """The chunks of a document that end at a sentence's end, cut as MemAgent's graph cuts it (`flush_chunks` of
    a rollout of the document reads the same: test_memory_codes_follow_the_code_call_by_call_and_place_a_miss)."""
    from agentgraphs.chat import encode_text
    from agentgraphs.memagent.graph import chunk_ids, chunk_spans

    ids = encode_text(tok, document)
    return [k for k, spans in enumerate(chunk_spans(len(ids), size, None))
            if P.ends_sentence(tok.decode(chunk_ids(ids, spans)))]


def _pre_needle_flush(tok: Any, rows: list[dict[str, Any]], size: int) -> tuple[int, int]:
    """Of the chunks read before the needle in `rows`: how many, and how many end at a sentence's end."""
    before = [(k, row["metadata"]["needle_chunk"]) for row in rows
              for k in _document_flush_chunks(tok, row["metadata"]["context"], size)]
    return sum(row["metadata"]["needle_chunk"] for row in rows), sum(1 for k, at in before if k < at)


def test_chunk_alignment_section_shows_what_its_files_hold(qwen25: Any) -> None:
    """bench/README's "Chunk alignment": every figure from the published evaluations of runs 9-29 and their
    documents, rebuilt from their seeds with the filler they were made of (each document's gold checked against
    the file, so the rebuilt documents are theirs), and the training coverage with both fillers."""
    section = _bench_section("**Chunk alignment**", "**Confused digits**")
    old = P.ReproConfig(value_digits=2, sentence_lengths="uniform")
    rows = P.eval_rows(qwen25, old, old.eval_lengths, 48, "eval")
    flush = [_document_flush_chunks(qwen25, r["metadata"]["context"], old.chunk_tokens) for r in rows]
    before = {k for f, r in zip(flush, rows) for k in f if k < r["metadata"]["needle_chunk"]}
    assert sorted(before) == [10, 21, 32, 43, 54] and "only chunks 10, 21, 32, 43 and 54 end exactly" in section
    assert 512 == 46 * 11 + 6 and "512 = 46 x 11 + 6 tokens" in section
    runs = {n: f for n, f in _published_runs().items() if n <= 29 and "memory_codes" in f["eval_rl"]["results"][0]}
    assert sorted(runs) == [9, 10, 11, 12, 14, 17, 19, 21, 23, 26, 27, 28, 29]
    assert "thirteen runs that keep memory codes (9-12, 14, 17, 19, 21, 23 and 26-29)" in section
    arms = ("warmstart", "rl", "rl_permuted")
    writes = {}
    for n, published in runs.items():
        for arm in arms:
            results = published[f"eval_{arm}"]["results"]
            assert [(x["gold"], x["needle_chunk"]) for x in results] == [
                (r["label"][0], r["metadata"]["needle_chunk"]) for r in rows]  # the run's own documents
            writes[n, arm] = P.needle_free_writes([{**x, "flush_chunks": f} for x, f in zip(results, flush)])
    for n in (10, 19, 26, 27, 11, 17):
        cells = " | ".join(f"{writes[n, a]['flush'][1]} of {writes[n, a]['flush'][0]}" for a in arms)
        scores = " / ".join(f"{runs[n][f'eval_{a}']['by_length']['32000']['sub_em_strict']:.2f}" for a in arms)
        assert f"| {n} | {cells} | {scores} |" in section
    every_arm = [n for n in runs if all(writes[n, a]["flush"][1] >= 0.8 * writes[n, a]["flush"][0] for a in arms)]
    some = [n for n in runs if any(writes[n, a]["flush"][1] for a in arms)]
    assert every_arm == [10, 19, 26, 27] and sorted(set(some) - set(every_arm)) == [11, 17]
    for n in every_arm:  # the first code with no needle read comes after chunk 10, in nearly every document
        first = []
        for x in runs[n]["eval_rl"]["results"]:
            codes = [code for code, times in x["memory_codes"] for _ in range(times)]
            first += [k for k in range(x["needle_chunk"]) if not codes[k] and codes[k + 1]][:1]
        assert first.count(10) >= 0.8 * len(first) and len(first) >= 40
    readme = " ".join((ROOT / "bench" / "README.md").read_text().split())
    assert ("in runs 10, 19, 26 and 27 every arm wrote a code with no needle read after chunk 10, an artifact of "
            "filler sentences all 11 tokens long") in readme  # the 8x target's row
    assert [n for n in runs if n not in some] == [9, 12, 14, 21, 23, 28, 29]
    assert "Runs 9, 12, 14, 21, 23, 28 and 29: none in any arm" in section
    alike = [n for n in every_arm if len({tuple(writes[n, a]["flush"]) for a in arms}) == 1]
    assert alike == [10, 19, 27] and "(runs 10, 19 and 27, every arm alike)" in section
    assert (writes[17, "warmstart"]["flush"][1], writes[17, "rl"]["flush"][1]) == (17, 0)
    assert (writes[11, "warmstart"]["flush"][1], writes[11, "rl_permuted"]["flush"][1]) == (1, 49)
    pooled = {kind: [sum(w[kind][i] for w in writes.values()) for i in (0, 1)] for kind in ("flush", "other")}
    assert len(writes) == 39 and "Over the 39 evaluations" in section
    (reads, wrote), (other_reads, other_wrote) = pooled["flush"], pooled["other"]
    assert (f"{wrote:,} of {reads:,} such reads ({_printed(Fraction(100 * wrote, reads))} %) wrote a code, against "
            f"{other_wrote} of {other_reads:,} reads of the other chunks before a needle "
            f"({_printed(Fraction(100 * other_wrote, other_reads), 3)} %)") in section
    # the next run's last call: run 29's evaluated two arms in 80 s and ended 569 s after it began
    log = runs[29]["calls_log"]
    began = _clock(re.findall(r"\[(\d\d:\d\d:\d\d)\] call starts, budget 585s", log)[0])
    evaluations = _clock(re.search(r"\[(\d\d:\d\d:\d\d)\] evaluations", log).group(1))
    evaluated = max(_clock(t) for t in re.findall(r"\[(\d\d:\d\d:\d\d)\] RL[,:]", log))
    done = _clock(re.search(r"\[(\d\d:\d\d:\d\d)\] all stages done", log).group(1))
    assert (evaluated - evaluations, done - began) == (80, 569)
    assert "evaluated two arms in parallel in 80 s and ended 569 s after it began" in section
    assert "RL_DRAWS=2 EVAL_S=150 LAST_CALL=1 RESUME=1 BUDGET=585" in section
    # after the needle: held codes changed, by the chunk read, at the training lengths and at 8K-32K
    held: dict[str, dict[str, list[int]]] = {"1K-4K": {}, "8K-32K": {}}
    last = {}
    for n, published in runs.items():
        last[n] = [0, 0]
        for arm in arms:
            results = [{**x, "flush_chunks": f} for x, f in zip(published[f"eval_{arm}"]["results"], flush)]
            for group, lengths in (("1K-4K", (1000, 2000, 4000)), ("8K-32K", (8000, 16000, 32000))):
                counts = P.held_code_changes([x for x in results if x["length"] in lengths])
                for kind, (reads, changed) in counts.items():
                    cell = held[group].setdefault(kind, [0, 0])
                    cell[0], cell[1] = cell[0] + reads, cell[1] + changed
                last[n] = [last[n][0] + counts["last"][0], last[n][1] + counts["last"][1]]

    def share(cell: list[int]) -> str:
        return f"{cell[1]:,} of {cell[0]:,}"

    def pct(cell: list[int]) -> str:
        return _printed(Fraction(100 * cell[1], cell[0]))

    train, far = held["1K-4K"], held["8K-32K"]
    assert (f"changed a held code at {share(train['flush'])} reads at 1K-4K ({pct(train['flush'])} %) and "
            f"{share(far['flush'])} at 8K-32K ({pct(far['flush'])} %), other chunks at {share(train['other'])} "
            f"({pct(train['other'])} %) and {share(far['other'])} ({pct(far['other'])} %)") in section
    assert f"at {share(train['last'])} ({pct(train['last'])} %) and {share(far['last'])} ({pct(far['last'])} %)" \
        in section
    over = [n for n, (reads, changed) in last.items() if changed > 0.3 * reads]
    assert over == [12, 17, 19]
    shares = f"{pct(last[12])}, {pct(last[17])} and {pct(last[19])} %"
    assert f"over 30 % of its reads in runs 12, 17 and 19 ({shares} over their three arms)" in section
    rl_passed = [n for n in runs if runs[n]["targets"]["rl_gain_points_ge_15"]["passed"]]
    assert rl_passed == [9, 14, 29] and not set(rl_passed) & set(some) and "(9, 14 and 29) wrote none" in section
    # training coverage: 400 training documents of split demo1, and the 8K-32K evaluation documents, both fillers
    for fill, (train_words, eval_words) in {"uniform": ("none of the 858", None),
                                            "varied": ("91 of the same 858", "236 of 2,666")}.items():
        cfg = P.ReproConfig(value_digits=2, sentence_lengths=fill)
        train = P.needle_rows(qwen25, P.random_lengths(cfg, 400, "demo1"), "demo1", cfg)
        read, ending = _pre_needle_flush(qwen25, train, cfg.chunk_tokens)
        assert read == 858 and f"{train_words} chunks" in section
        assert ending == (0 if fill == "uniform" else 91)
        if eval_words:
            assert f"({_printed(Fraction(100 * ending, read))} %)" in section
            longer = [r for r in P.eval_rows(qwen25, cfg, cfg.eval_lengths, 48, "eval")
                      if r["metadata"]["length"] >= 8000]
            read, ending = _pre_needle_flush(qwen25, longer, cfg.chunk_tokens)
            share = _printed(Fraction(100 * ending, read))
            assert f"{ending} of {read:,} in the 8K-32K evaluation documents ({share} %)" in section


def _pct(x: Fraction) -> int:
    """A share in whole percent, halves rounded up."""
    return math.floor(100 * x + Fraction(1, 2))


def _digit_flips(results: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Per digit, [reads, flips] over every copy a memory update made of a code its memory held: a plain loop."""
    out = {d: [0, 0] for d in "0123456789"}
    for r in results:
        if r["status"] in ("failed", "aborted"):
            continue
        codes = [code for code, times in r["memory_codes"] for _ in range(times)]
        for k in range(len(codes) - 1):
            for i, digit in enumerate(codes[k]):
                if digit not in out:  # another script's digit (an untrained model's noise): not a code's
                    continue
                out[digit][0] += 1
                nxt = codes[k + 1]
                out[digit][1] += (len(nxt) == len(codes[k]) and nxt[i] != digit
                                  and nxt[:i] + nxt[i + 1:] == codes[k][:i] + codes[k][i + 1:])
    return out


def test_confused_digits_section_shows_what_its_files_hold() -> None:
    """bench/README's "Confused digits": every figure from the published evaluations of runs 9-29, counted by
    plain loops over their memory codes and answers (`pipeline.digit_flips`, `held_code_returns` and
    `answers_off_memory` checked against the loops)."""
    section = _bench_section("**Confused digits**", "**Run 30**")
    runs = {n: f for n, f in _published_runs().items() if n <= 29 and "memory_codes" in f["eval_rl"]["results"][0]}
    arms = ("warmstart", "rl", "rl_permuted")
    gain = {}
    for n, published in runs.items():  # RL vs its start at 1K-4K, exact: (won - lost) of the documents
        paired = published["compare_strict"]["vs_base"][0]["training_lengths"]
        gain[n] = Fraction(100 * (paired["won"] - paired["lost"]), paired["documents"])
    # per digit, the copies that flipped it; the digits at 25 % or more
    confused: dict[tuple[int, str], dict[str, Fraction]] = {}
    for n, published in runs.items():
        cells = []
        for arm in arms:
            flips = _digit_flips(published[f"eval_{arm}"]["results"])
            assert P.digit_flips(published[f"eval_{arm}"]["results"]) == flips
            confused[n, arm] = {d: Fraction(f, r) for d, (r, f) in flips.items() if r and 4 * f >= r}
            cells.append(", ".join(f"{d} ({_pct(x)} %)" for d, x in confused[n, arm].items()) or "none")
        assert f"| {n} | {' | '.join(cells)} | {_printed(gain[n], plus=True)} |" in section
    many = [n for n in runs if len(confused[n, "warmstart"]) >= 3]
    none = [n for n in runs if not confused[n, "warmstart"]]
    assert many == [10, 21, 23, 26, 27, 28] and none == [9, 11, 12, 14, 17, 19]
    rates = [_pct(x) for n in many for x in confused[n, "warmstart"].values()]
    assert f"In six runs the copies turned some digits into others at {min(rates)}-{max(rates)} % of their copies" \
        in section
    assert f"flipping them at {min(rates)}-{max(rates)} % of their copies, and RL gained " \
           f"{_printed(min(gain[n] for n in many), plus=True)} to {_printed(max(gain[n] for n in many), plus=True)}" \
           in " ".join((ROOT / "README.md").read_text().split())
    assert "Six starts flipped three digits or more (runs 10, 21, 23, 26, 27 and 28): RL gained " \
           f"{_printed(min(gain[n] for n in many), plus=True)} to {_printed(max(gain[n] for n in many), plus=True)}" \
           in section
    same = {n: (set(confused[n, "rl"]) - set(confused[n, "warmstart"]), set(confused[n, "warmstart"]) -
                set(confused[n, "rl"])) for n in many}
    assert [n for n in many if same[n] == (set(), set())] == [21, 23, 26, 27]
    assert (len(same[10][0]), len(same[10][1]), len(same[28][0]), len(same[28][1])) == (1, 0, 0, 1)
    assert "(exactly in runs 21, 23, 26 and 27; run 10's one more, run 28's one fewer)" in section
    passed = [n for n in none if runs[n]["targets"]["rl_gain_points_ge_15"]["passed"]]
    assert passed == [9, 14] and "RL's target passed in two of them (9 and 14)" in section
    assert _printed(Fraction(P.pooled(runs[11]["eval_warmstart"]["results"], [1000, 2000, 4000]))) == "96.5"
    assert "run 11's start was at its ceiling (96.5 %)" in section
    assert "every RL run whose start reversed 28 or more codes gained 1.4-13.9 points (runs 8, 12, 17, 19" in \
        " ".join((ROOT / "bench" / "README.md").read_text().split())
    start29, rl29 = confused[29, "warmstart"], confused[29, "rl"]
    assert f"Run 29's start flipped two, 6 and 7 ({_pct(start29['6'])} and {_pct(start29['7'])} %), and RL gained " \
           f"{_printed(gain[29], plus=True)} while its model flipped a 7 at {_pct(rl29['7'])} % of copies" in section
    assert list(rl29) == ["7"]
    # the flips pair up: run 29's one-digit changes of a code held in memory, by the pair of digits
    for arm, words in (("warmstart", "in run 29's start, {} of {} turned"), ("rl", "in its RL, {} of {}.")):
        pairs: dict[frozenset[str], int] = {}
        for r in runs[29][f"eval_{arm}"]["results"]:
            codes = [code for code, times in r["memory_codes"] for _ in range(times)]
            for a, b in itertools.pairwise(codes):
                changed = [i for i in range(len(a)) if len(b) == len(a) and a[i] != b[i]]
                if a and len(changed) == 1:
                    pair = frozenset((a[changed[0]], b[changed[0]]))
                    pairs[pair] = pairs.get(pair, 0) + 1
        assert max(pairs, key=pairs.get) == frozenset("67")
        assert words.format(pairs[frozenset("67")], sum(pairs.values())) in section
    # held codes that changed and came back, per run over its three arms
    per_run: dict[int, dict[str, list[int]]] = {}
    for n, published in runs.items():
        row = {"changed": [0, 0, 0], "swings": [0, 0], "answers": [0, 0]}
        for arm in arms:
            mine = [0, 0, 0]
            results = published[f"eval_{arm}"]["results"]
            for r in results:
                if r["status"] in ("failed", "aborted"):
                    continue
                codes = [code for code, times in r["memory_codes"] for _ in range(times)]
                if codes[-1] not in ("", r["gold"]):  # the final memory's last number is another code
                    row["answers"][0] += 1
                    row["answers"][1] += r["sub_em_strict"] == 1.0
                held = codes[r["needle_chunk"] + 1:]
                if not held or held[0] != r["gold"]:
                    continue
                changes = sum(a != b for a, b in itertools.pairwise(held))
                if changes == 0:
                    continue
                first = next(k for k, code in enumerate(held) if code != r["gold"])
                mine[0] += 1
                mine[1] += r["gold"] in held[first:]
                mine[2] += held[-1] == r["gold"]
                if changes >= 3:
                    row["swings"][0] += 1
                    row["swings"][1] += len(set(held)) == 2
            assert list(P.held_code_returns(results).values()) == mine
            row["changed"] = [a + b for a, b in zip(row["changed"], mine)]
        per_run[n] = row
        changed, back, kept = row["changed"]
        assert (f"| {n} | {changed} | {back} | {kept} | {row['swings'][1]} of {row['swings'][0]} | "
                f"{row['answers'][1]} of {row['answers'][0]} |") in section
    total = [sum(r["changed"][i] for r in per_run.values()) for i in range(3)]
    assert len(runs) * len(arms) == 39 and "Over the 39 evaluations" in section
    assert (f"{total[1]} of {total[0]:,} changed held codes came back ({_printed(Fraction(100 * total[1], total[0]))} "
            f"%), and {total[2]} were held again") in section

    def came_back(n: int) -> Fraction:
        return Fraction(per_run[n]["changed"][1], per_run[n]["changed"][0])

    back_many, back_few = [10, 21, 23, 27, 28, 29], [9, 11, 12, 17, 19]
    assert min(map(came_back, back_many)) > max(came_back(n) for n in (*back_few, 14, 26))
    assert (_pct(min(map(came_back, back_many))), _pct(max(map(came_back, back_many)))) == (23, 66)
    assert max(map(came_back, back_few)) < Fraction(6, 100)
    assert "in runs 10, 21, 23 and 27-29 between 23 and 66 % came back, in runs 9, 11, 12, 17 and 19 at most 6 %" \
        in section
    # answers that are not the final memory's last number, at 1K-4K, beside RL's gain
    off: dict[tuple[int, str], Fraction] = {}
    for n, published in runs.items():
        printed = []
        for arm in arms:
            count = [0, 0]
            for r in published[f"eval_{arm}"]["results"]:
                if r["length"] > 4000 or r["status"] in ("failed", "aborted"):
                    continue
                boxed = re.findall(r"\\boxed\{([^{}]*)\}", r["answer"])
                last = [code for code, times in r["memory_codes"] for _ in range(times)][-1]
                if boxed and boxed[-1].strip() and last:
                    count[0] += 1
                    count[1] += boxed[-1].strip() != last
            assert P.answers_off_memory(published[f"eval_{arm}"]["results"], [1000, 2000, 4000]) == {
                "answers": count[0], "off_last": count[1]}
            off[n, arm] = Fraction(count[1], count[0])
            printed.append(f"{count[1]} of {count[0]}")
        assert f"| {n} | {' | '.join(printed)} | {_printed(gain[n], plus=True)} |" in section
    coin, learned = [10, 21, 23, 27, 28], [14, 29]
    others = [n for n in runs if n not in (*coin, *learned)]

    def span(values: Any) -> str:
        values = [_pct(v) for v in values]
        return f"{min(values)}-{max(values)} %"

    def gains(ns: list[int]) -> str:
        return f"{_printed(min(gain[n] for n in ns), plus=True)} to {_printed(max(gain[n] for n in ns), plus=True)}"

    assert f"left its memory's last number in {span(off[n, 'warmstart'] for n in coin)} of documents, RL kept that " \
           f"share ({span(off[n, 'rl'] for n in coin)}) and gained {gains(coin)}" in section
    assert max(gain[n] for n in coin) < 15 <= min(gain[n] for n in learned)
    starts = " and ".join(str(_pct(off[n, "warmstart"])) for n in learned)
    after = " and ".join(str(_pct(off[n, "rl"])) for n in learned)
    both = " and ".join(_printed(gain[n], plus=True) for n in learned)
    assert f"in runs 14 and 29 the start's share was {starts} %, RL cut it to {after} % and gained {both}" in section
    assert f"in the other six it was {span(off[n, 'warmstart'] for n in others)} and RL gained {gains(others)}" \
        in section
    assert len(others) == 6 and max(off[n, "warmstart"] for n in others) < min(off[n, "warmstart"] for n in learned)
    # run 29's RL by whether the code holds a 6 or a 7, at 1K-4K, 8K-16K and 32K
    words = []
    for has in (False, True):
        for lengths in ((1000, 2000, 4000), (8000, 16000), (32000,)):
            picked = [r for r in runs[29]["eval_rl"]["results"]
                      if r["length"] in lengths and bool(set(r["gold"]) & set("67")) == has]
            right = sum(r["sub_em_strict"] == 1.0 for r in picked)
            words.append((right, len(picked), _printed(Fraction(100 * right, len(picked)))))
    clean, mixed = words[:3], words[3:]
    assert (f"RL answered {clean[0][0]} of the {clean[0][1]} documents at 1K-4K whose code holds neither a 6 nor a 7 "
            f"({clean[0][2]} %), {clean[1][0]} of {clean[1][1]} at 8K-16K ({clean[1][2]} %) and {clean[2][0]} of "
            f"{clean[2][1]} at 32K ({clean[2][2]} %: "
            f"{_printed(Fraction(clean[2][0] * clean[0][1], clean[2][1] * clean[0][0]), 2)}x of 1K-4K)") in section
    assert ("its training lengths by more, and on codes with neither a 6 nor a 7, the digits its start confused, "
            "kept 0.90x: see \"Confused digits\"") in " ".join((ROOT / "bench" / "README.md").read_text().split())
    assert ("of those with a 6 or a 7, " + ", ".join(f"{r} of {t} ({x} %)" for r, t, x in mixed[:2]) +
            f" and {mixed[2][0]} of {mixed[2][1]} ({mixed[2][2]} %)") in section
    # not two codes in one memory: RL's first step, trained tokens per sequence
    per_sequence = {n: Fraction(f["rl_stage"]["curve"][0]["trained_tokens"], f["rl_stage"]["curve"][0]["sequences"])
                    for n, f in runs.items()}
    rest = [x for n, x in per_sequence.items() if n != 17]
    assert f"{_printed(min(rest), 2)}-{_printed(max(rest), 2)} in every run but 17 " \
           f"({_printed(per_sequence[17], 2)})" in section
    # storing at the needle's chunk, by where it sat, over the runs "Chunk alignment" finds with no code written at
    # a chunk ending a sentence (its test re-derives them), in documents whose memory held no code before it
    alignment = _bench_section("**Chunk alignment**", "**Confused digits**")
    assert "Runs 9, 12, 14, 21, 23, 28 and 29: none in any arm" in alignment
    assert "over the seven runs that \"Chunk alignment\" finds writing none (9, 12, 14, 21, 23, 28 and 29)" in section
    stored = {arm: {"early": [0, 0], "late": [0, 0]} for arm in arms}
    for n in (9, 12, 14, 21, 23, 28, 29):
        for arm in arms:
            for r in runs[n][f"eval_{arm}"]["results"]:
                if r["status"] in ("failed", "aborted") or 4 <= r["needle_chunk"] <= 15:
                    continue
                codes = [c for c, t in r["memory_codes"] for _ in range(t)]
                if any(codes[:r["needle_chunk"] + 1]):
                    continue
                cell = stored[arm]["early" if r["needle_chunk"] <= 3 else "late"]
                cell[0] += 1
                cell[1] += codes[r["needle_chunk"] + 1] == r["gold"]

    def pct(cell: list[int]) -> str:
        return _printed(Fraction(100 * cell[1], cell[0]))

    early, late = stored["rl"]["early"], stored["rl"]["late"]
    assert (f"RL stored the gold at the needle's chunk in {early[1]} of {early[0]:,} documents whose needle sat in "
            f"chunks 0-3 ({pct(early)} %) and {late[1]} of {late[0]} where it sat in chunk 16 or later "
            f"({pct(late)} %)") in section
    warm, control = stored["warmstart"], stored["rl_permuted"]
    assert (f"the warm start {pct(warm['early'])} and {pct(warm['late'])} %, the control {pct(control['early'])} and "
            f"{pct(control['late'])} %") in section
    # RL repaired no start's confusion: every digit a start flipped at 25 % or more, RL's model did too, but two
    kept = [(n, d, _pct(confused[n, "rl"].get(d) or Fraction(P.digit_flips(runs[n]["eval_rl"]["results"])[d][1],
                                                                P.digit_flips(runs[n]["eval_rl"]["results"])[d][0])))
            for n in runs for d in confused[n, "warmstart"] if d not in confused[n, "rl"]]
    assert kept == [(28, "8", 20), (29, "6", 20)]
    assert "its model flipped the same digits at 25 % or more, but run 28's 8 and run 29's 6, at 20 % each" in section
    # early and late starts: confused digits once in runs 9-19, every time in 21-29 (29's least); what differed
    early_runs, late_runs = [n for n in runs if n <= 19], [n for n in runs if n >= 21]
    assert len(early_runs) == 7 and len(late_runs) == 6
    assert [n for n in early_runs if confused[n, "warmstart"]] == [10] and all(confused[n, "warmstart"]
                                                                              for n in late_runs)
    assert min(late_runs, key=lambda n: len(confused[n, "warmstart"])) == 29
    assert "The starts of runs 9-19 (seven evaluated) confused digits once (run 10); those of runs 21-29 (six) " \
           "every time, run 29's least" in section
    stages = {n: runs[n]["warmstart_stage"] for n in runs}
    differ = {k for k in set().union(*(s["args"] for s in stages.values()))
              if len({json.dumps(s["args"].get(k)) for s in stages.values()}) > 1}
    # the round's split, init and out (a second round's), its time budget (what its call left), and four settings
    assert differ == {"demo_split", "init", "out", "max_minutes", "eval_every", "eval_from", "stop_above", "refines",
                      "refine_by", "write_share", "restart_reversed", "restarts"}
    assert [n for n in runs if stages[n]["args"].get("demo_split") != "demo1"] == [21, 28]
    assert [n for n in runs if stages[n]["args"].get("eval_every") != 50] == [9]
    assert [n for n in runs if stages[n]["args"].get("stop_above") is not None] == [n for n in runs if n >= 12]
    assert [n for n in runs if stages[n]["args"].get("write_share")] == [17]
    assert [n for n in runs if stages[n]["args"].get("restart_reversed") is not None] == late_runs
    assert all(stages[n]["stop"]["attempt"] == 0 and not stages[n]["stop"]["rejected"] for n in late_runs)
    assert all(s["stop"]["attempt"] == 0 and not s["stop"]["rejected"] for n in (21, 28)
               for s in runs[n]["warmstart_earlier_rounds"])
    assert "the probe's cadence (run 9), the band's top (runs 12 on), the write share (run 17) and the restart " \
           "rule (runs 21 on, which began none of them again)" in section
    # read before RL begins: the share of copied digits flipped at 1K-4K, on 144 documents
    share = {}
    for n in runs:
        at_train = [r for r in runs[n]["eval_warmstart"]["results"] if r["length"] <= 4000]
        assert len(at_train) == 144
        counts = _digit_flips(at_train)
        share[n] = Fraction(sum(f for _, f in counts.values()), sum(r for r, _ in counts.values()))
    clean_starts = [n for n in runs if not confused[n, "warmstart"]]
    confusing = [n for n in runs if len(confused[n, "warmstart"]) >= 3]

    def flip_span(ns: list[int]) -> str:
        return f"{_printed(100 * min(share[n] for n in ns))}-{_printed(100 * max(share[n] for n in ns))} %"

    assert f"the six clean starts' memory updates flipped {flip_span(clean_starts)} of the digits they copied, the " \
           f"six confusing ones {flip_span(confusing)}, run 29's {_printed(100 * share[29])} %" in section
    assert max(share[n] for n in clean_starts) < Fraction(10, 100) < share[29] < min(share[n] for n in confusing)
    assert "WS_RESTART_FLIPS=10 WS_RESTARTS=2" in section and "(run 29's one attempt took 371 s of call 1's 555)" \
        in section
    assert round(stages[29]["stop"]["seconds"]) == 371 and "call starts, budget 555s" in runs[29]["calls_log"]


def test_run_30s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 30" (run 29's plan with --restart-flips 10): its tables and paired figures as for run 14,
    and each figure of its reading (a first round with no stop, a second whose first attempt was rejected and begun
    again without the time to stop, the start RL got, the 8x target's floor, the steps to a stop against the
    confusion) from the kept files."""
    section, published = _run21s_plan(30, "**Run 31, lost**", 1724, lr=1e-4, rounds=2)
    train = [1000, 2000, 4000]
    every = _published_runs()
    assert published["command"] == every[29]["command"].replace("WS_RESTARTS=2", "WS_RESTART_FLIPS=10 WS_RESTARTS=2")
    (first,), second = published["warmstart_earlier_rounds"], published["warmstart_stage"]
    assert {first["args"]["restart_flips"], second["args"]["restart_flips"]} == {10.0}

    def flipped(c: dict[str, Any], key: str = "probe_flips") -> Fraction:
        return Fraction(100 * c[key][1], c[key][0])

    def span(points: list[dict[str, Any]], read: Callable[[dict[str, Any]], float | Fraction]) -> str:
        return f"{_printed(min(map(read, points)))}-{_printed(max(map(read, points)))} %"
    # round 1: its time budget, no stop; the flips high from its first probe
    one = [c for c in first["curve"] if "probe_strict" in c]
    assert (first["stop"]["step"], first["stop"]["reason"]) == (1498, "time budget of 8.1 min spent")
    assert round(first["demo_s"]) == 102 and (one[0]["step"], one[-1]["step"]) == (150, 1450)
    assert (f"probes {span(one, lambda c: c['probe_strict'])} from step 150 to 1,450 (digits right "
            f"{span(one, lambda c: c['probe_digits'])})") in section
    assert (f"flipped {span(one, flipped)} of the digits they copied at every probe, from the first "
            f"({_printed(flipped(one[0]))} % at step 150)") in section
    # round 2, attempt 1: in the band, over the flips limit, rejected; begun again without its time
    stop = second["stop"]
    (rejected,) = stop["rejected"]
    assert (rejected["attempt"], rejected["step"], stop["attempt"]) == (0, 1080, 1) and round(second["demo_s"]) == 95
    tried = [c for c in rejected["curve"] if "probe_strict" in c]
    (shot,) = rejected["overshoots"]
    assert (f"Attempt 1: probes {span(tried, lambda c: c['probe_strict'])}, flips {span(tried, flipped)}; an "
            f"overshoot at step 1,100 ({_printed(shot['probe_strict'])} %) sent it back to 1,050") in section
    assert (shot["step"], shot["back_to"]) == (1100, 1050)
    copied = rejected["probe_flips"][0] + rejected["confirm_flips"][0]
    changed = rejected["probe_flips"][1] + rejected["confirm_flips"][1]
    assert rejected["flips"] == pytest.approx(100 * changed / copied, abs=0.005)
    assert rejected["flips"] >= second["args"]["restart_flips"]
    assert (f"at 1,080 the probe read {_printed(rejected['probe_strict'])} % and its confirmation "
            f"{_printed(rejected['confirm_strict'])} %, in the band, {rejected['reversed']:.1f} % reversed, with "
            f"{changed} of the {copied} copied digits flipped ({_printed(Fraction(100 * changed, copied))} %)") \
        in section
    budget = 60 * second["args"]["max_minutes"]
    left = budget - second["curve"][0]["s"]  # the time left as attempt 2 took its first step
    assert (round(rejected["seconds"]), round(left), round(budget)) == (317, 102, 515)
    assert ("it began again from round 1's weights, 317 s into the attempt, with 102 s of the round's 515 left"
            in section)
    kept = [c for c in second["curve"] if "probe_strict" in c]
    assert stop["reason"].startswith("time budget of 8.58 min spent in attempt 2") and stop["step"] == 450
    assert (f"Attempt 2: probes {span(kept, lambda c: c['probe_strict'])}, flips {span(kept, flipped)}; the round's "
            f"time ended it at step 450 (probe {_printed(kept[-1]['probe_strict'])} %)") in section
    # the calls, RL's time, the audits, the training rewards
    log = published["calls_log"]
    starts = re.findall(r"\[([\d:]+)\] call starts, budget (\d+)s", log)
    ended = re.findall(r"\[([\d:]+)\] call ends", log)
    gaps = [_clock(s) - _clock(e) for (s, _), e in zip(starts[1:], ended, strict=True)]
    assert [int(b) for _, b in starts] == [555, 560, 585] and "call ends after warm start round 1" in log
    assert f"(call 2, sent {gaps[0]} s after call 1 returned;" in section
    assert f"The last call (sent {gaps[1]} s after call 2 returned)" in section
    rl, control = published["rl_stage"], published["rl_permuted_stage"]
    assert _arms_time(rl, control) in section and _audit_line(rl, control) in section
    rewards = published["training_reward_at_t1"]
    assert (f"RL's training reward stayed flat ({rewards['rl']['steps_0_4']:.2f} over its first 5 steps, "
            f"{rewards['rl']['last_10']:.2f} over the last 10), as did the control's "
            f"({rewards['control']['steps_0_4']:.2f} -> {rewards['control']['last_10']:.2f})") in section
    # the targets: three pass; 32K's ratio of two scores near 0 is under the floor
    targets = published["targets"]
    assert [k for k, t in targets.items() if not t["passed"]] == ["rl_gain_points_ge_15", "keeps_80pct_at_8x"]
    after = published["eval_rl"]["results"]
    floor = targets["keeps_80pct_at_8x"]["under_floor"]
    assert floor["floor"] == second["args"]["stop_at"] == 30.0 and "(`--stop-at`, 30 %)" in section
    assert (f"RL read {_printed(_strict_score(after, [32000]))} % there and {_printed(_strict_score(after, train))} % "
            f"at 1K-4K, {_printed(_kept_at_32k(published, 'rl'), 2)}x") in section
    kept_08 = {n: float(_strict_score(f["eval_rl"]["results"], train)) for n, f in every.items()  # the earlier files
               if n < 30 and "targets" in f and f["targets"]["keeps_80pct_at_8x"]["passed"]}
    assert 30 not in kept_08 and kept_08[6] < floor["floor"] and min(v for n, v in kept_08.items() if n != 6) >= 58
    assert (f"every one that kept 0.8x was at 58 % or more, but run 6's "
            f"{_printed(_kept_at_32k(every[6], 'rl'), 2)}x of {_printed(kept_08[6])} %") in section
    # the start: no copy yet
    warm = published["eval_warmstart"]["results"]
    answers = published["compare_strict"]["answers"]["warm start"]["training_lengths"]
    off = published["answers_off_memory"]["warmstart"]["1K-4K"]
    counts = _digit_flips([r for r in warm if r["length"] in train])
    copies, flips = sum(c for c, _ in counts.values()), sum(f for _, f in counts.values())
    assert (f"{answers['stored_wrong']} of its 144 codes at 1K-4K were stored wrong, {off['off_last']} of its "
            f"{off['answers']} answers were not its final memory's last number, and its memory updates flipped "
            f"{flips} of the {copies} digits they copied there ({_printed(Fraction(100 * flips, copies))} %)") \
        in section
    others = [Fraction(100 * f, c) for d, (c, f) in counts.items() if d != "0"]
    assert counts["0"][1] == 0 and f"every digit but 0 (0 of {counts['0'][0]}) at " \
        f"{round(min(others))}-{round(max(others))} %" in section
    windows = published["curves"]["windows"]
    assert {f"{w['reward']['rl']:.2f}" for w in windows} == {"0.07", "0.08"} and "stayed at 0.07-0.08" in section
    # the flips limit's evidence, as "Confused digits" derives it
    confused = _bench_section("**Confused digits**", "**Run 30**")
    assert "the six clean starts' memory updates flipped 0.4-4.5 %" in confused and "run 29's 15.3 %" in confused
    assert "the six confusing ones 16.7-23.5 %" in confused and "(clean starts 0.4-4.5 %, confusing ones 15.3-23.5 %)" \
        in section
    assert min(min(map(flipped, tried)), min(map(flipped, kept))) >= 13.6 and "read 13.6 % or more" in section
    both = [*tried, *kept]  # the example README says the two rounds' probes in whole percents
    example = " ".join((HERE / "README.md").read_text().split())
    rounds = [[round(f(map(flipped, probes))) for f in (min, max)] for probes in (one, both)]
    assert (f"run 30's probes read {rounds[0][0]}-{rounds[0][1]} % through its first round, from the untrained model "
            f"on, and {rounds[1][0]}-{rounds[1][1]} % through its second") in example
    # the steps to a stop against the confusion "Confused digits" reads
    assert ("The starts of runs 9-19 (seven evaluated) confused digits once (run 10); those of runs 21-29 (six) "
            "every time") in confused
    clean = [9, 11, 12, 14, 17, 19]
    steps = {n: _warm_start_steps(every[n]) for n in (*clean, 10, 21, 23, 26, 27, 28, 29)}
    confusing = [steps[n] for n in (10, 21, 23, 26, 27, 28, 29)] + [first["stop"]["step"] + rejected["step"]]
    calm = [steps[n] for n in clean]
    assert f"stopped after {min(calm):,}-{max(calm):,} steps" in section
    assert f"after {min(confusing):,}-{max(confusing):,}, every start that needed a second round" in section
    assert [n for n, f in every.items() if f.get("warmstart_earlier_rounds")] == [21, 28, 30]

    def u(a: list[int], b: list[int]) -> Fraction:  # pairs where a's start took fewer steps (ties half)
        return sum((Fraction(x < y) + Fraction(x == y, 2) for x in a for y in b), Fraction(0))
    pooled = calm + confusing
    seen = u(calm, confusing)
    extreme = sum(u([pooled[i] for i in pick], [pooled[i] for i in range(len(pooled)) if i not in pick]) >= seen
                  for pick in itertools.combinations(range(len(pooled)), len(calm)))
    p = 2 * extreme / math.comb(len(pooled), len(calm))
    assert (seen, len(calm) * len(confusing)) == (39, 48)
    assert f"a clean start had taken fewer steps in 39 of the 48 pairs (Mann-Whitney, p {p:.3f} two-sided)" in section
    # the next run's restart has the time only after an early stop: run 29's left too little for another attempt
    w29 = every[29]["warmstart_stage"]
    room, took = 60 * w29["args"]["max_minutes"], w29["stop"]["seconds"]
    attempt = took - w29["curve"][0]["s"]  # from its first step to its stop
    assert room - took < attempt
    assert (round(took), round(room), round(room - took), round(attempt)) == (371, 479, 108, 251)
    assert ("(run 29's stopped 371 s into its round's 479, leaving 108 s for a second attempt that would need some "
            "251)") in section


def _plan_commands(start: str, end: str) -> list[dict[str, str]]:
    """The `run_in_calls.sh` commands bench/README shows from `start` to `end` (its indented blocks, continued
    lines joined), each as its environment's assignments."""
    readme = (ROOT / "bench" / "README.md").read_text()
    begins = readme.index(start)
    text = readme[begins:readme.index(end, begins)]
    block = "\n".join(line[4:] for line in text.splitlines() if line.startswith("    "))
    commands = [c for c in block.replace("\\\n", " ").splitlines() if c.startswith("env ")]
    assert all(c.endswith("bash examples/memagent/small_scale/run_in_calls.sh $OUT /tmp/repro") for c in commands)
    return [dict(re.findall(r"(\w+)=(\S+)", c.split(" bash ")[0])) for c in commands]


def test_run_31_lost_shows_its_call_and_the_next_plan() -> None:
    """bench/README's "Run 31, lost" (nothing came back): its call 1 and the next run's calls are run 30's with
    WS_ROUND_FROM=untrained, every variable one `run_in_calls.sh` reads and a value it takes; its reasons from the
    kept files (run 30's first round, the clean starts' steps, the runs that went on to a second round)."""
    run30 = _plan_commands("**Run 30**", "- Warm start, round 1")
    lost, *plan = _plan_commands("**Run 31, lost**", "**Run 32**")
    assert [lost, *plan] == [{**c, "WS_ROUND_FROM": "untrained"} for c in (run30[0], *run30)]
    script = (HERE / "run_in_calls.sh").read_text()
    assert all(f'"${{{name}:=' in script for c in plan for name in c), [n for c in plan for n in c
                                                                      if f'"${{{n}:=' not in script]
    assert "case \"$WS_ROUND_FROM\" in last|untrained)" in script
    section = _bench_section("**Run 31, lost**", "**Run 32**")
    every = _published_runs()
    (first,) = every[30]["warmstart_earlier_rounds"]
    assert (first["stop"]["step"], first["stop"]["reason"]) == (1498, "time budget of 8.1 min spent")
    assert "run 30's round 1 took 8.1 minutes for 1,498 steps" in section
    calm = [_warm_start_steps(every[n]) for n in (9, 11, 12, 14, 17, 19)]
    assert f"the six clean starts stopped after {min(calm):,}-{max(calm):,} steps" in section
    went_on = [n for n, f in every.items() if f.get("warmstart_earlier_rounds")]
    assert went_on == [21, 28, 30] and "three starts went on (runs 21, 28, 30)" in section
    assert not (ROOT / "bench" / "results" / "memagent_small_scale_run31.json").exists()  # nothing came back


def test_run_32s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 32" (run 31's plan, its last call cut to the device time left): its tables and paired
    figures as for run 14, its calls against run 31's plan, and each figure of its reading (the warm start's probes,
    overshoots and stop, the calls' gaps, the arms' time, the audits, the training rewards, the one document short)
    from the kept files."""
    section, published = _run21s_plan(32, "**Run 33, stopped**", 1714, lr=1e-4)
    train = [1000, 2000, 4000]
    every = _published_runs()
    # the calls: run 31's plan (run 30's with WS_ROUND_FROM=untrained), the last call's budget what was left
    lost, *plan = _plan_commands("**Run 31, lost**", "**Run 32**")
    shown = _plan_commands("**Run 32**", "- Warm start, round 1")
    assert shown == [lost, {**plan[-1], "BUDGET": "270"}]
    calls = [dict(re.findall(r"(\w+)=(\S+)", c.split(" bash ")[0])) for c in published["command"].split("; then ")]
    assert plan[0] == lost  # run 31's plan shows call 1 and the last call; call 2 is call 1 with RESUME=1 BUDGET=560
    assert calls == [lost, {**lost, "RESUME": "1", "BUDGET": "560"}, {**plan[-1], "BUDGET": "270"}]
    log = published["calls_log"]
    starts = re.findall(r"\[([\d:]+)\] call starts, budget (\d+)s", log)
    ended = re.findall(r"\[([\d:]+)\] call ends", log)
    gaps = [_clock(s) - _clock(e) for (s, _), e in zip(starts[1:], ended, strict=True)]
    assert [int(b) for _, b in starts] == [555, 560, 270]
    assert (f"went on in call 2 (sent {gaps[0]} s after call 1 returned) and in the last call (sent {gaps[1]} s"
            in section)
    left = int(re.search(r"warm start done after round 1, (\d+) s left", log).group(1))
    assert f"RL began in call 1 with {left} s left" in section
    # the warm start: one round, its probes, two overshoots, a stop on the confirmation
    stage = published["warmstart_stage"]
    assert "warmstart_earlier_rounds" not in published and stage["args"]["stop_above"] == 50.0
    probes = {c["step"]: c["probe_strict"] for c in stage["curve"] if "probe_strict" in c}
    early = [v for step, v in probes.items() if step <= 300]
    assert (f"probes {min(early):.1f}-{max(early):.1f} % from step 150 to 300, {probes[350]:.1f} % at 350 and "
            f"{probes[400]:.1f} % at 400") in section
    stop = stage["stop"]
    shots = stop["overshoots"]
    assert [(s["step"], s["back_to"], s["probe_every"]) for s in shots] == [(450, 400, 10), (410, 400, 2)]
    assert len(shots) == stage["args"]["refines"]
    assert (f"the probe at 450 read {shots[0]['probe_strict']:.1f} %, over the band's top, and went back to 400 "
            f"(probes every 10 steps), the one at 410 read {shots[1]['probe_strict']:.1f} %") in section
    assert (stop["step"], stop["attempt"], stop["rejected"], round(stop["seconds"])) == (402, 0, [], 248)
    assert (f"at 402 the probe read {probes[402]:.1f} % and its confirmation on 96 new documents "
            f"{_confirmed(stop)} %, in the band") in section
    assert stage["args"]["stop_at"] <= float(_confirmed(stop)) <= stage["args"]["stop_above"] < probes[402]
    assert (f"{stop['reversed']:.1f} % reversed and {stop['flips']:.1f} % of its copied digits flipped, both under "
            "their limits") in section
    assert stop["reversed"] < stage["args"]["restart_reversed"] and stop["flips"] < stage["args"]["restart_flips"]
    assert round(stage["demo_s"]) == 108 and "demonstrations `demo1`, 108 s" in section
    warm = published["eval_warmstart"]["results"]
    assert _warm_start_line(warm, "codes") in section
    # the arms: their time against the plan's, the audits, the training rewards
    rl, control = published["rl_stage"], published["rl_permuted_stage"]
    assert _arms_time(rl, control) in section and _audit_line(rl, control) in section
    assert int(lost["RL_TOTAL_S"]) == 20 * 60 and "of the 20 the plan gave them" in section
    assert _training_rewards(published, "fell") in section
    last = [c["reward_mean"] for c in rl["curve"][-10:]]
    windows = {f"{sum(c['reward_mean'] for c in w) / len(w):.2f}" for w in _windows(rl["curve"])[-2:]}
    assert windows == {"0.49", "0.46"} and "still 0.46-0.49 at the end" in section and len(last) == 10
    # the targets: four pass; RL's gain one document short
    targets = published["targets"]
    assert [k for k, t in targets.items() if not t["passed"]] == ["rl_gain_points_ge_15"]
    after = published["eval_rl"]["results"]
    right = [sum(r["sub_em_strict"] for r in x if r["length"] in train) for x in (warm, after)]
    assert right[1] - right[0] == 21 and math.ceil(Fraction(15 * 144, 100)) == 22
    assert "(21 more documents right of 144; 15 points would need 22)" in section
    assert f"32K kept {_printed(_kept_at_32k(published, 'rl'), 2)}x of RL's training-length score" in section
    assert (f"32K from {_printed(_kept_at_32k(published), 2)}x to {_printed(_kept_at_32k(published, 'rl'), 2)}x"
            in section)
    kinds, moved = P.answer_kinds(warm, train), P.answer_kinds(after, train)
    assert (f"stored codes wrong ({kinds['stored_wrong']} -> {moved['stored_wrong']}) or half-copied them (one digit "
            f"in place {kinds['one_place']} -> {moved['one_place']}, another code {kinds['other_code']} -> "
            f"{moved['other_code']}); the reversed codes grew ({kinds['reversed']} -> {moved['reversed']})") in section
    # the start against the clean starts "Confused digits" reads, and runs 14 and 29
    calm = [_warm_start_steps(every[n]) for n in (9, 11, 12, 14, 17, 19)]
    assert min(calm) <= _warm_start_steps(published) <= max(calm)
    assert f"inside the {min(calm):,}-{max(calm):,} of the six clean starts" in section
    for n in (14, 29):
        start = _strict_score(every[n]["eval_warmstart"]["results"], train)
        assert f"{_printed(start)} %" in section
    assert _strict_score(warm, train) == 50
    # the example README's paragraph on this run (what the runs from run 5 on say: run 35's test)
    example = " ".join((HERE / "README.md").read_text().split())
    won, lost, gain, z = _paired(warm, after, train)
    assert (f"+14.6 at 1K-4K (z {z:.2f}; won {won}, lost {lost}), one document short" in example
            and gain == "+14.6")
    far = _paired(warm, after, [32000])
    assert f"32K kept {_printed(_kept_at_32k(published, 'rl'), 2)}x ({far[2]}, z {far[3]:.2f})" in example
    held = _paired(warm, published["eval_rl_permuted"]["results"], train)
    assert f"the control held ({held[2]}, z {held[3]:.2f})" in example
    assert sum(t["passed"] for t in published["targets"].values()) == 4 and "every rollout checked: four targets" \
        in example


def test_run_33s_calls_hold_what_bench_readme_says() -> None:
    """Run 33 was stopped before RL (an H100 where the plan was sized on an H200, then two warm start rounds that
    formed no copy): bench/README's "Run 33, stopped" against the last call's packed files, which hold all three."""
    section = _bench_section("**Run 33, stopped**", "**Run 34, control lost**")
    call = _packed(ROOT / "bench" / "results" / "memagent_small_scale_run33_stopped" / "call3_results.tgz")
    log = call["calls.log"]
    # call 1: the H200's 8 workers ran out of the H100's memory beside the evaluation, whose 31.4 GiB the error names
    assert "pipeline.OracleOutOfMemory: oracle rollout 0" in log and "GPU 0 has a total capacity of 79.18 GiB" in log
    assert "Process 665 has 31.43 GiB memory in use" in log and "3.2-10.3 GiB each" in section
    # the workers: the seven others the failing one names, and itself ("this process")
    used = [float(g) for g in re.findall(r"(?:Process \d+|this process) has ([\d.]+) GiB", log) if float(g) < 31]
    assert len(used) == 8 and (min(used), max(used)) == (3.23, 10.28)
    assert log.count("call starts") == 3 and log.count("warm start round 1 from") == 2  # call 2 began round 1 again
    for k, (minutes, steps, demo_s) in {1: ("8.58", 1327, "114 s"), 2: ("9.0", 1475, None)}.items():
        stage = json.loads(call[f"warmstart{k}_stage.json"])
        assert stage["args"]["demo_workers"] == 4 and stage["args"]["demo_split"] == f"demo{k}"
        assert stage["args"]["init"] == "/tmp/repro/model"  # round 2 too: WS_ROUND_FROM=untrained
        assert stage["stop"]["reason"] == f"time budget of {minutes} min spent" and len(stage["curve"]) == steps
        assert f"the call ended after step {steps} ({minutes} minutes)" in section
        if demo_s:
            assert f"{stage['demo_s']:.0f} s" == demo_s and f"`demo{k}`, {demo_s} with 4 workers" in section
        probes = [(int(m[0]), float(m[1]), float(m[2]), float(m[3])) for m in re.findall(
            r"step (\d+): loss ([\d.]+), probe strict sub_em ([\d.]+)%, digits right ([\d.]+)%",
            call[f"warmstart{k}.log"])]
        losses = [loss for step, loss, _, _ in probes if step >= 250]
        assert f"loss {min(losses):.2f}-{max(losses):.2f} from step 250 to {probes[-1][0]}" in section
        assert all(p < 30 for _, _, p, _ in probes)  # never the band's floor: no stop, RL never began
        early = [(p, d) for step, _, p, d in probes if k == 2 or step <= 1200]
        assert f"probe 0-{max(p for p, _ in early):.1f} %" in section
        assert (f"digits right {math.floor(min(d for _, d in early)):.0f}-{round(max(d for _, d in early)):.0f} %"
                in section)
    rise = re.findall(r"step (12[5-9]\d|1300): loss [\d.]+, probe strict sub_em ([\d.]+)%, digits right ([\d.]+)%",
                      call["warmstart1.log"])
    assert rise == [("1250", "6.2", "24.0"), ("1300", "20.8", "47.9")]
    assert "6.2 % (digits right 24.0 %) at step 1250 and 20.8 % (digits right 47.9 %) at step 1300" in section
    assert "RL" not in log and "eval_rl.json" not in call and "eval_warmstart.json" not in call
    untrained = json.loads(call["eval_untrained.json"])["results"]
    assert len(untrained) == 48 * 6 and sum(r["sub_em_strict"] for r in untrained) == 0


def test_run_34s_calls_hold_what_bench_readme_says() -> None:
    """Run 34 lost its control to the H100's memory and RL stepped alone: bench/README's "Run 34, control lost"
    against the last call's packed files, which hold all three calls' log."""
    section = _bench_section("**Run 34, control lost**", "**Run 35**")
    call = _packed(ROOT / "bench" / "results" / "memagent_small_scale_run34_control_lost" / "call3_results.tgz")
    log = call["calls.log"]
    # call 1: 4 workers ran out beside the untrained model's evaluation (32.2 GiB)
    first = log[log.index("pipeline.OracleOutOfMemory"):log.index("call ends after warm start round 1")]
    assert "Process 674 has 32.18 GiB memory in use" in first and "4 demonstration workers" in log
    workers = [float(g) for g in re.findall(r"(?:Process 81\d|this process) has ([\d.]+) GiB", first)]
    assert len(workers) == 4 and (min(workers), max(workers)) == (4.0, 18.37)
    assert "the 4 workers (4.0-18.4 GiB) ran out beside the untrained model's evaluation (32.2 GiB)" in section
    assert log.count("call starts") == 3 and log.count("warm start round 1 from /tmp/repro/model") == 2
    stage = json.loads(call["warmstart1_stage.json"])
    assert (stage["args"]["demo_workers"], stage["args"]["demo_split"], stage["args"]["init"]) == (
        4, "demo1", "/tmp/repro/model")
    assert stage["stop"]["reason"] == "time budget of 8.58 min spent" and len(stage["curve"]) == 1348
    assert f"`demo1`, {stage['demo_s']:.0f} s with 4 workers" in section
    assert "the call ended after step 1348 (8.58 minutes)" in section and "1,348 steps in 8.58 minutes" in section
    probes = [(int(m[0]), float(m[1]), float(m[2]), float(m[3])) for m in re.findall(
        r"step (\d+): loss ([\d.]+), probe strict sub_em ([\d.]+)%, digits right ([\d.]+)%", call["warmstart1.log"])]
    losses = [loss for step, loss, _, _ in probes if step >= 250]
    assert f"loss {min(losses):.2f}-{max(losses):.2f} from step 250 to {probes[-1][0]}" in section
    early = [(p, d) for step, _, p, d in probes if step <= 1150]
    assert f"probe 0-{max(p for p, _ in early):.1f} % and digits right {math.floor(min(d for _, d in early)):.0f}-" \
           f"{round(max(d for _, d in early)):.0f} % to step 1150" in section
    late = [(p, d) for step, _, p, d in probes if step > 1150]
    assert late == [(14.6, 32.3), (10.4, 33.3), (8.3, 21.9)] and all(p < 30 for _, _, p, _ in probes)
    # call 3: the control ran out at its first step; RL stepped alone
    assert "Process 1725 has 21.68 GiB" in log and "Process 1726 has 29.35 GiB" in log
    assert "this process has 28.01 GiB" in log
    assert "(28.0 GiB beside RL's 29.4 and the warm start's evaluation's 21.7)" in section
    assert not re.search(r"step \d+: reward", call["rl_permuted.log"]) and "eval_rl_permuted.json" not in call
    rl = json.loads(call["rl_stage.json"])
    rewards = [c["reward_mean"] for c in rl["curve"]]
    assert rl["steps"] == 23 and not rl["permuted"] and rl["args"]["init"] == "/tmp/repro/warm1"
    assert "23 steps in 7.08 minutes" in section and f"reward {min(rewards):.2f}-{max(rewards):.2f}" in section
    assert f"{sum(rewards[:5]) / 5:.3f} over the first five steps, {sum(rewards[-5:]) / 5:.3f} over the last five" \
        in section
    deltas = [c["audit"]["max_abs_delta"] for c in rl["curve"]]
    assert all(c["audit"] is not None for c in rl["curve"]) and f"max |d| {max(deltas):.1e}".replace("e-0", "e-") \
        in section
    evals = {name: json.loads(call[f"eval_{name}.json"]) for name in ("untrained", "warmstart", "rl")}
    def row(name: str) -> tuple[str, str, str]:
        by = {int(k): v["sub_em_strict"] for k, v in evals[name]["by_length"].items()}
        return (" / ".join(f"{by[n]:.1f}" for n in (1000, 2000, 4000)), f"{evals[name]['train_strict']:.1f}",
                " / ".join(f"{by[n]:.1f}" for n in (8000, 16000, 32000)))

    (warm_short, warm_train, warm_long), (rl_short, rl_train, rl_long) = row("warmstart"), row("rl")
    assert (f"warm start {warm_short} at 1K / 2K / 4K ({warm_train} at the training lengths), {warm_long} at 8K / 16K "
            f"/ 32K; RL {rl_short} ({rl_train}), {rl_long}.") in section
    assert all(v["sub_em_strict"] == 0 for v in evals["untrained"]["by_length"].values())
    warm, after = evals["warmstart"]["results"], evals["rl"]["results"]
    assert [r["gold"] for r in warm] == [r["gold"] for r in after]  # the same documents
    pairs = [(a["sub_em_strict"], b["sub_em_strict"]) for a, b in zip(warm, after) if a["length"] <= 4000]
    won, lost, kept = (sum(1 for p in pairs if p == q) for q in ((0, 1), (1, 0), (1, 1)))
    assert len(pairs) == 144 and (won, lost, kept) == (18, 9, 9)
    assert "RL answered 18 right that the warm start did not and missed 9 it had (9 right in both)" in section
    sign_p = 2 * sum(math.comb(won + lost, j) for j in range(min(won, lost) + 1)) / 2 ** (won + lost)
    assert f"+{100 * (won - lost) / 144:.1f} points, a two-sided sign test's p {sign_p:.2f}" in section


def test_run_35s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 35" (run 32's plan in two calls, its start stopped above the band): its tables and
    paired figures as for run 14, its calls against run 32's plan, each figure of its reading (the warm start's
    probes, overshoots and stop, the calls, the arms' time and steps, the audits, the training rewards, the starts
    over the band before it, the flipped digits, the controls at KL 0.01) from the published file; its figures in
    the targets table, the example README, README and CHANGELOG; and what the runs from run 5 on say."""
    section, published = _run32s_plan(35, "**Run 36**", when="2026-12-05 21:51-22:10", card="H200", calls="two",
                                      device_seconds=1301)
    train, longer = [1000, 2000, 4000], [8000, 16000, 32000]
    every, earlier = _published_runs(), _evaluated_runs(5, 32)
    rl, control, stage = published["rl_stage"], published["rl_permuted_stage"], published["warmstart_stage"]
    (failure,) = published["failures"]
    assert "(21:33-21:46 UTC: 181, 90 and 15 device-seconds, 286 in all)" in failure and 181 + 90 + 15 == 286
    assert "three machine starts were refused first (286 device-seconds)" in section
    # the calls: run 32's plan's call 1 and its last call (run 31's section shows the plan), nothing changed
    lost, *plan = _plan_commands("**Run 31, lost**", "**Run 32**")
    shown = _plan_commands("**Run 35**", "- Warm start, round 1")
    calls = [dict(re.findall(r"(\w+)=(\S+)", c.split(" bash ")[0])) for c in published["command"].split("; then ")]
    assert shown == calls == [lost, plan[-1]] and plan[-1]["BUDGET"] == "585"
    assert "The next run: run 32's plan again" in _bench_section("**Run 34, control lost**", "**Run 35**")
    log = published["calls_log"]
    budgets, left, spent, gaps = _rl_in_calls(log)
    assert budgets == [555, 585] and f"RL began in call 1 with {left} s left" in section and left == 151
    assert f"went on in the last call (sent {gaps[0]} s after call 1 returned)" in section
    first = int(re.search(r"call ends after (\d+) s of RL", log).group(1))
    more = int(re.search(r"last call: RL (\d+) s more", log).group(1))
    assert spent == [("1.68", "4"), ("1.68", "4"), ("7.08", "21"), ("7.08", "22")]
    assert f"({first} s of RL, 4 steps each)" in section
    assert int(lost["RL_TOTAL_S"]) == 20 * 60
    assert (f"for {more} s more: {first + more} s each, {(first + more) / 60:.1f} of the 20 minutes the plan gave "
            "them") in section
    # the warm start: one round, its probes, two overshoots, a stop over the band's top on the confirmation
    assert "warmstart_earlier_rounds" not in published and log.count("warm start round") == 1
    assert "No second round ran." in section
    args = stage["args"]
    assert (args["demo_workers"], args["demo_split"], args["init"]) == (5, "demo1", "/tmp/repro/model")
    assert "5 demonstration workers" in log and f"`demo1`, {stage['demo_s']:.0f} s with 5 workers" in section
    points = {c["step"]: c for c in stage["curve"] if "probe_strict" in c}
    probes = {step: c["probe_strict"] for step, c in points.items()}
    early = [v for step, v in probes.items() if step <= 650]
    assert (f"probes {min(early):.1f}-{max(early):.1f} % from step 150 to 650 and {probes[700]:.1f} % at 700"
            in section)
    stop = stage["stop"]
    shots = stop["overshoots"]
    assert [(s["step"], s["back_to"], s["probe_every"]) for s in shots] == [(750, 700, 10), (730, 720, 2)]
    assert len(shots) == args["refines"] and "no refinement left" in stop["reason"]
    assert "confirm_strict" not in points[722] and points[724]["confirm_strict"] < args["stop_at"]
    assert (f"the probe at 750 read {shots[0]['probe_strict']:.1f} %, over the band's top, and went back to 700 "
            f"(probes every 10 steps): {probes[710]:.1f} % at 710, {probes[720]:.1f} % at 720, and the one at 730 "
            f"read {shots[1]['probe_strict']:.1f} % and went back to 720 (every 2 steps): {probes[722]:.1f} % at 722, "
            f"{probes[724]:.1f} % at 724 (its confirmation {points[724]['confirm_strict']:.1f} %, under the band), "
            f"{probes[726]:.1f} % at 726, {probes[728]:.1f} % at 728; at 730 the probe read {probes[730]:.1f} % and "
            f"its confirmation on {3 * args['confirm_per_length']} new documents {_confirmed(stop)} %, over the top "
            "too") in section
    assert probes[730] > args["stop_above"] < float(_confirmed(stop)) and probes[728] >= args["stop_at"]
    assert (stop["step"], stop["attempt"], stop["rejected"], round(stop["seconds"])) == (730, 0, [], 360)
    assert (f"it stopped there ({round(stop['seconds'])} s), above the band, in its first attempt, "
            f"{stop['reversed']:.1f} % reversed and {stop['flips']:.1f} % of its copied digits flipped, both under "
            "their limits") in section
    assert stop["reversed"] < args["restart_reversed"] and stop["flips"] < args["restart_flips"] == 10
    warm, after = published["eval_warmstart"]["results"], published["eval_rl"]["results"]
    held_back = published["eval_rl_permuted"]["results"]
    assert _warm_start_line(warm, "codes") in section
    # the arms: their time and steps (not as many: the control's last step ended after RL's), audits, rewards
    assert (len(rl["curve"]), len(control["curve"]), rl["steps"], control["steps"]) == (21, 22, 21, 22)
    n = len(rl["curve"])
    rollouts, updates = (sum(c[key] for c in rl["curve"]) / n for key in ("rollout_s", "train_s"))
    assert (f"RL stepped {n} times in {rl['seconds']:.0f} s (rollouts {rollouts:.1f} s, update {updates:.1f} s a "
            f"step), the control {len(control['curve'])} in {control['seconds']:.0f} s") in section
    _check_audits(section, published, rl, control)
    assert _training_rewards(published, "fell") in section
    assert "(the control's 22nd step left out: it pairs steps)" in section
    # the paired figures beyond what every run's section shows
    assert f"over all 288 documents won 67 / lost 33 (+11.8, z {_paired(warm, after, train + longer)[3]:.2f})" \
        in section and _paired(warm, after, train + longer)[:3] == (67, 33, "+11.8")
    won, lost_, gain, z = _paired(warm, held_back, [32000])
    assert f"at 32K won {won} / lost {lost_} ({gain}, z {z:.2f}). Answers at 1K-4K" in section
    # the targets: three pass
    targets = published["targets"]
    assert [k for k, t in targets.items() if t["passed"]] == ["keeps_80pct_at_8x", "untrained_strict_near_0",
                                                            "every_rollout_checked"]
    assert "**Three targets pass** (32K kept 0.87x of RL's training-length score, untrained 0.00, every rollout" \
        in section and _printed(_kept_at_32k(published, "rl"), 2) == "0.87"
    rl_gain, held = _paired(warm, after, train), _paired(warm, held_back, train)
    assert (f"RL's gain misses ({rl_gain[2]}, z {rl_gain[3]:.2f}) and the control fell beyond its noise "
            f"({held[2]}, z {held[3]:.2f})") in section
    assert (f"32K from {_printed(_kept_at_32k(published), 2)}x to {_printed(_kept_at_32k(published, 'rl'), 2)}x"
            in section)
    # the starts over the band's top from run 5 on, and what RL gained from them
    start = {k: _strict_score(f["eval_warmstart"]["results"], train) for k, f in earlier.items()}
    gains = _rl_gains(earlier)
    over = [k for k in earlier if start[k] > 50]
    assert over == [7, 8, 9, 11, 12, 14, 19] and start[32] == 50 and _strict_score(warm, train) > 50
    assert (f"Of the seven earlier starts from run 5 on over the band's top (runs 7, 8, 9, 11, 12, 14 and 19, "
            f"{_printed(min(start[k] for k in over))}-{_printed(max(start[k] for k in over))} %)") in section
    big = [k for k in over if gains[k] >= 15]
    rest = [gains[k] for k in over if k not in big]
    assert big == [9, 14] and (f"RL gained 15 or more from two (run 9's {_printed(start[9])} %, "
                               f"{_printed(gains[9], plus=True)}; run 14's {_printed(start[14])} %, "
                               f"{_printed(gains[14], plus=True)}) and {_printed(min(rest), plus=True)} to "
                               f"{_printed(max(rest), plus=True)} from the other five") in section
    # half-copied codes, not reversed ones; the digits its memory flipped
    kinds = {arm: P.answer_kinds(r, train) for arm, r in (("warm", warm), ("rl", after), ("control", held_back))}
    k32 = P.answer_kinds(every[32]["eval_warmstart"]["results"], train)
    assert (f"one digit in place {kinds['warm']['one_place']}, another code {kinds['warm']['other_code']}, reversed "
            f"{kinds['warm']['reversed']} (run 32's start: {k32['one_place']}, {k32['other_code']} and "
            f"{k32['reversed']})") in section
    flips = _digit_flips(warm)
    assert all(4 * f < r for r, f in flips.values() if r)  # no digit at 25 % or more: not a confusing start
    confused = _bench_section("**Confused digits**", "**Run 30**")
    assert "the six clean starts' memory updates flipped 0.4-4.5 %" in confused
    assert "the six confusing ones 16.7-23.5 %" in confused

    def flipped(results: list[dict[str, Any]]) -> tuple[int, int, Fraction]:
        counts = _digit_flips([r for r in results if r["length"] in train])
        copies, changed = sum(c for c, _ in counts.values()), sum(f for _, f in counts.values())
        return changed, copies, Fraction(100 * changed, copies)

    start_flips, rl_flips = flipped(warm), flipped(after)
    assert Fraction(45, 10) < start_flips[2] < Fraction(167, 10)
    assert (f"flipped {_printed(start_flips[2])} % of the digits they copied at 1K-4K ({start_flips[0]} of "
            f"{start_flips[1]}), over the six clean starts' 0.4-4.5 % and under the confusing ones' 16.7-23.5 %; its "
            f"stop read {stop['flips']:.1f} %, under `WS_RESTART_FLIPS=10`") in section
    assert (f"RL's model flipped {_printed(rl_flips[2])} % ({rl_flips[0]} of {rl_flips[1]}), and the "
            f"one-digit-in-place misses stayed ({kinds['warm']['one_place']} -> {kinds['rl']['one_place']})") in section
    # RL's time against the plan's and run 32's; where its gain came
    assert f"RL had {rl['seconds'] / 60:.1f} of its 20 planned minutes ({n} steps; run 32's " \
           f"{len(every[32]['rl_stage']['curve'])})" in section
    far, against = _paired(warm, after, longer), _paired(held_back, after, train)
    assert (f"its gain came beyond them (8K-32K {far[2]}, z {far[3]:.2f}; 32K from 0.56x to 0.87x) and against its "
            f"control ({against[2]}, z {against[3]:.2f})") in section
    # the control: as at KL 0.01 in runs 14 and 21; its half-copied codes and codes stored wrong grew
    at_kl = [k for k, f in earlier.items() if f["rl_permuted_stage"]["args"]["kl_coef"] == 0.01]
    fell = [k for k in at_kl if _paired(earlier[k]["eval_warmstart"]["results"],
                                        earlier[k]["eval_rl_permuted"]["results"], train)[3] <= -1.96]
    assert len(at_kl) == 11 and fell == [14, 21]
    assert "as at KL 0.01 in runs 14 and 21, two of the eleven runs at that coefficient before it" in section
    held_far, held_32 = _paired(warm, held_back, longer), _paired(warm, held_back, [32000])
    assert (f"The control fell ({held[2]} at 1K-4K, z {held[3]:.2f}; {held_32[2]} at 32K, z {held_32[3]:.2f}; at "
            f"8K-32K it held, z {held_far[3]:.2f})") in section
    w, c = kinds["warm"], kinds["control"]
    assert (f"(one digit in place {w['one_place']} -> {c['one_place']}, another code {w['other_code']} -> "
            f"{c['other_code']}), and so did the codes stored wrong ({w['stored_wrong']} -> {c['stored_wrong']})"
            ) in section
    assert "The next run: this plan with the full budget (run 32's three calls)." in section
    # bench/README's targets table: run 35 in each of the four memagent rows
    readme = (ROOT / "bench" / "README.md").read_text().splitlines()
    at = next(k for k, line in enumerate(readme) if line.startswith("| `examples/memagent/small_scale`"))
    gain_row, far_row, control_row, untrained_row = readme[at:at + 4]
    assert (f"Run 35 (run 32's plan in two calls, three machine starts refused first; a start above the band, "
            f"{_printed(_strict_score(warm, train))} %, one round of {stop['step']} steps; "
            f"{rl['seconds'] / 60:.1f} min, {n} steps): {_printed(_strict_score(after, train))} % ({rl_gain[2]}, z "
            f"{rl_gain[3]:.2f}; won {rl_gain[0]}, lost {rl_gain[1]}), while 8K-32K gained {far[2]} (z {far[3]:.2f})"
            ) in gain_row
    assert "MISS in runs 4-8, 10-12, 17, 19, 21, 23, 26, 27, 28, 30, 32, 35, 36 and 38 (" in gain_row
    at_32 = _paired(warm, after, [32000])
    assert (f"Run 35: {float(_strict_score(after, [32000])):.1f} % vs {_printed(_strict_score(after, train))} % "
            f"({_printed(_kept_at_32k(published, 'rl'), 2)}x; warm start {_printed(_kept_at_32k(published), 2)}x; "
            f"32K {at_32[2]}, z {at_32[3]:.2f}; won {at_32[0]}, lost {at_32[1]})") in far_row
    assert targets["keeps_80pct_at_8x"]["warm_start"] == 0.56
    assert "PASS in runs 4, 6-9, 11, 12, 14, 17, 32, 35, 37 and 39, MISS" in far_row
    assert (f"Run 35 (run 32's plan in two calls; {control['seconds'] / 60:.1f} min, {len(control['curve'])} steps, "
            f"entropy {_rl_start_entropy(published):.2f}): {_printed(_strict_score(warm, train))} -> "
            f"**{_printed(_strict_score(held_back, train))} %** ({held[2]}, z {held[3]:.2f}; won {held[0]}, lost "
            f"{held[1]}), 8K-32K {held_far[2]} (z {held_far[3]:.2f}), 32K {held_32[2]} (z {held_32[3]:.2f})"
            ) in control_row
    assert "(MISS in runs 4, 6, 7, 9, 10, 14, 21, 35, 36 and 37)" in control_row
    assert f"run 35 held there (z {held_far[3]:.2f})" in control_row and abs(held_far[3]) < 1.96
    assert all(r["sub_em_strict"] == 0 for r in published["eval_untrained"]["results"])
    assert "0.00 at every length in runs 4-23, 25-30, 32 and 35-39 (" in untrained_row
    # the example README's paragraph (what the runs from run 5 on say: run 36's test)
    example = " ".join((HERE / "README.md").read_text().split())
    assert (f"Its warm start stopped in one round at step {stop['step']}, above the band "
            f"({_printed(_strict_score(warm, train))} % at 1K-4K, {_printed(_kept_at_32k(published), 2)}x at 32K; its "
            f"confirmation read {_confirmed(stop)} % with no refinement left), its misses half-copied codes (one "
            f"digit in place {kinds['warm']['one_place']}), none reversed") in example
    assert (f"RL had {rl['seconds'] / 60:.1f} minutes ({n} steps) of the 20 planned: {rl_gain[2]} at 1K-4K (z "
            f"{rl_gain[3]:.2f}; won {rl_gain[0]}, lost {rl_gain[1]}), but {far[2]} at 8K-32K (z {far[3]:.2f}), and "
            f"32K kept {_printed(_kept_at_32k(published, 'rl'), 2)}x ({at_32[2]}, z {at_32[3]:.2f}); the control fell "
            f"({held[2]}, z {held[3]:.2f}); untrained 0.00, every rollout checked: three targets") in example
    # README's summary and the CHANGELOG's line
    summary = " ".join((ROOT / "README.md").read_text().split())
    assert (f"run 35, run 32's plan in two calls on an H200, stopped its start above the band "
            f"({_printed(_strict_score(warm, train))} %), and RL, with {rl['seconds'] / 60:.1f} of its 20 minutes, "
            f"gained {rl_gain[2]} (z {rl_gain[3]:.2f}) at 1K-4K but {far[2]} (z {far[3]:.2f}) at 8K-32K, 32K kept "
            f"{_printed(_kept_at_32k(published, 'rl'), 2)}x, while its control fell ({held[2]}, z {held[3]:.2f}): "
            "three targets") in summary
    changelog = " ".join((ROOT / "CHANGELOG.md").read_text().split())
    assert (f"Run 35 of the small-scale reproduction is in `bench/results/` (issue 22): run 32's plan in two calls "
            f"on an H200; a start above the band ({_printed(_strict_score(warm, train))} %), RL {rl_gain[2]} points "
            f"(z {rl_gain[3]:.2f}) at 1K-4K and {far[2]} (z {far[3]:.2f}) at 8K-32K, 32K kept "
            f"{_printed(_kept_at_32k(published, 'rl'), 2)}x, the control {held[2]} (z {held[3]:.2f}): three targets."
            ) in changelog


def test_run_36s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 36" (run 35's plan with the full budget in three calls, on an H100): its tables and paired
    figures as for run 14, its calls against run 32's plan, each figure of its reading (the warm start's probes,
    overshoot, stop and the restart it had no time for, the calls, the arms' time and steps, the audits, the training
    rewards, the runs short of 15, the starts in the band, the flipped digits, the controls at KL 0.01) from the
    published file; its figures in the targets table, the example README, README and CHANGELOG; and what the runs
    from run 5 on say."""
    section, published = _run32s_plan(36, "**Run 37**", when="2026-12-06 00:31-00:59", card="H100", calls="three",
                                      device_seconds=1677)
    train, longer = [1000, 2000, 4000], [8000, 16000, 32000]
    every, earlier = _published_runs(), _evaluated_runs(5, 35)
    rl, control, stage = published["rl_stage"], published["rl_permuted_stage"], published["warmstart_stage"]
    assert published["failures"] == []
    changes = published["changes_from_run_35"]
    assert "The machine came at the first try, as an H100 (79.6 GiB), not an H200" in changes
    assert "2 demonstration workers (5 on run 35's H200)" in changes
    assert "the machine came at the first try, an H100 (79.6 GiB), not an H200" in section
    assert "the warm start at 2 demonstration workers (5 on run 35's H200)" in section
    assert every[35]["warmstart_stage"]["args"]["demo_workers"] == 5
    # the calls: run 32's plan (run 31's section shows it) with the last call's full budget, nothing changed
    lost, *plan = _plan_commands("**Run 31, lost**", "**Run 32**")
    shown = _plan_commands("**Run 36**", "- Warm start, round 1")
    calls = [dict(re.findall(r"(\w+)=(\S+)", c.split(" bash ")[0])) for c in published["command"].split("; then ")]
    assert shown == [calls[0], calls[2]] == [lost, plan[-1]] and plan[-1]["BUDGET"] == "585"
    assert calls[1] == {**lost, "RESUME": "1", "BUDGET": "560"}
    assert "# at once, call 2 (the same with RESUME=1 BUDGET=560); at once, the last call:" in section
    assert "The next run: this plan with the full budget (run 32's three calls)." in _bench_section("**Run 35**",
                                                                                                     "**Run 36**")
    log = published["calls_log"]
    assert "the GPU (79.6 GiB) holds it or 2 RL arms, not both" in log
    assert '("the GPU (79.6 GiB) holds it or 2 RL arms, not both")' in section
    budgets, left, spent, gaps = _rl_in_calls(log)
    assert budgets == [555, 560, 585] and left == 156
    assert f"RL began in call 1 with {left} s left, after the warm start's evaluation" in section
    first = int(re.search(r"call ends after (\d+) s of RL: call again", log).group(1))
    second = int(re.findall(r"call ends after (\d+) s of RL: call again", log)[1])
    more = int(re.search(r"last call: RL (\d+) s more", log).group(1))
    assert spent == [("0.92", "3"), ("0.92", "3"), ("8.5", "22"), ("8.5", "22"), ("7.08", "39"), ("7.08", "39")]
    assert f"({first} s of RL, {spent[0][1]} steps each)" in section
    assert (f"went on in call 2 (sent {gaps[0]} s after call 1 returned; to {second} s, {spent[2][1]} steps) and in "
            f"the last call (sent {gaps[1]} s after call 2 returned) for {more} s more") in section
    n = len(rl["curve"])
    assert (n, len(control["curve"]), rl["steps"], control["steps"]) == (39, 39, 39, 39)
    assert int(lost["RL_TOTAL_S"]) == 20 * 60 and "after_17.2_min" in published["targets"]["rl_gain_points_ge_15"]
    assert "RL and its control stepped 1,035 s (39 steps each) of the planned 1,200" in changes
    # the warm start: one round, its probes, one overshoot, a stop in the band, the restart it had no time for
    args = _check_arms_and_one_round(section, published, log, workers=2, minutes="8.18")
    points = {c["step"]: c for c in stage["curve"] if "probe_strict" in c}
    probes = {step: c["probe_strict"] for step, c in points.items()}
    early = [v for step, v in probes.items() if step <= 700]
    assert min(probes) == 150 and max(early) < args["stop_at"]
    assert (f"probes {min(early):.1f}-{max(early):.1f} % from step 150 to 700, {probes[750]:.1f} % at 750 and "
            f"{probes[800]:.1f} % at 800") in section
    stop = stage["stop"]
    (shot,) = stop["overshoots"]
    assert (shot["step"], shot["back_to"], shot["probe_every"]) == (850, 800, 10)
    assert (f"the probe at 850 read {shot['probe_strict']:.1f} %, over the band's top, and went back to 800 (probes "
            f"every 10 steps): {probes[810]:.1f} % at 810, {probes[820]:.1f} % at 820, {probes[830]:.1f} % at 830, "
            f"two in a row in the band, and its confirmation on {3 * args['confirm_per_length']} new documents "
            f"{_confirmed(stop)} %, in the band") in section
    assert args["stop_at"] <= probes[820] <= args["stop_above"] and args["stop_at"] <= probes[830] <= args["stop_above"]
    assert args["stop_at"] <= float(_confirmed(stop)) <= args["stop_above"]
    assert (stop["step"], stop["attempt"], stop["rejected"], round(stop["seconds"])) == (830, 0, [], 365)
    assert (f"it stopped there ({round(stop['seconds'])} s), in its first attempt, after 1 overshoot, "
            f"{stop['reversed']:.1f} % reversed but {stop['flips']:.1f} % of its copied digits flipped, over "
            "`WS_RESTART_FLIPS=10`") in section
    assert stop["reversed"] < args["restart_reversed"] and stop["flips"] >= args["restart_flips"] == 10
    spare, took = (int(x) for x in re.search(r"not begun again: (\d+) s of the time budget left, under the (\d+) s "
                                             r"it took to its stop: kept attempt 1", stop["reason"]).groups())
    assert took == round(stop["seconds"] - stage["demo_s"]) and spare < took
    assert (f"but {spare} s of the round were left, under the {took} s the attempt took to its stop: it kept "
            "attempt 1") in section
    warm, after = published["eval_warmstart"]["results"], published["eval_rl"]["results"]
    held_back = published["eval_rl_permuted"]["results"]
    assert _warm_start_line(warm, "code") in section
    # the paired figures beyond what every run's section shows
    everything = train + longer
    won, lost_, gain, z = _paired(warm, after, everything)
    assert f"over all 288 documents won {won} / lost {lost_} ({gain}, z {z:.2f}); RL vs its own control" in section
    won, lost_, gain, z = _paired(warm, held_back, [32000])
    assert f"at 32K won {won} / lost {lost_} ({gain}, z {z:.2f}); over all 288 documents" in section
    held_all = _paired(warm, held_back, everything)
    assert (f"over all 288 documents won {held_all[0]} / lost {held_all[1]} ({held_all[2]}, z {held_all[3]:.2f}). "
            "Answers at 1K-4K") in section
    # the targets: two pass
    targets = published["targets"]
    assert [k for k, t in targets.items() if t["passed"]] == ["untrained_strict_near_0", "every_rollout_checked"]
    rl_gain, held = _paired(warm, after, train), _paired(warm, held_back, train)
    net = rl_gain[0] - rl_gain[1]
    need = math.ceil(Fraction(15 * 144, 100))
    assert (net, need, _printed(Fraction(100 * need, 144))) == (20, 22, "15.3")
    assert (f"**Two targets pass** (untrained 0.00, every rollout checked); RL's gain misses by two documents: "
            f"{rl_gain[2]} points ({net} more documents right of 144; 15 points would need {need}, "
            f"+{_printed(Fraction(100 * need, 144))}), significant (z {rl_gain[3]:.2f}); 32K kept "
            f"{_printed(_kept_at_32k(published, 'rl'), 2)}x of RL's training-length score (the target asks 0.80x); "
            f"and the control fell just past its noise ({held[2]}, z {held[3]:.2f})") in section
    kept_target = targets["keeps_80pct_at_8x"]
    assert (kept_target["after_17.2_min"], kept_target["warm_start"]) == (0.649, 0.39)
    assert -2.5 < held[3] <= -1.96
    # the gain against run 4's at 12 minutes and the runs one or two documents short of 15
    run4 = every[4]
    at_12 = _paired(run4["eval_warmstart"]["results"], run4["eval_rl_after_12_min"]["results"], train)
    assert at_12[2:] == rl_gain[2:] or (at_12[2] == rl_gain[2] and f"{at_12[3]:.2f}" == f"{rl_gain[3]:.2f}")
    assert f"RL's gain is the one run 4 reached at 12 minutes ({at_12[2]}, z {at_12[3]:.2f})" in section
    gains = _rl_gains(earlier)
    short = [k for k, g in gains.items() if 15 - Fraction(200, 144) <= g < 15]
    assert short == [5, 17, 32] and [_printed(gains[k], plus=True) for k in short] == ["+14.6", "+13.9", "+14.6"]
    assert [math.ceil(Fraction(15 * 144, 100)) - round(gains[k] * 144 / 100) for k in short] == [1, 2, 1]
    assert ("the fourth from run 5 on to end one or two documents short of 15 (runs 5 and 32: +14.6, one short; "
            "run 17: +13.9, two short)") in section
    per_length = [(k, _paired(warm, after, [k])) for k in everything]
    assert all(p[0] > p[1] for _, p in per_length)
    shown_lengths = ", ".join(f"{k // 1000}K {p[2]}" + (f" (z {p[3]:.2f})" if p[3] >= 1.96 else "")
                              for k, p in per_length)
    assert f"It gained at every length: {shown_lengths}." in section
    # a start in the band; its length, against the starts in the band before it; its flipped digits
    start = {k: _strict_score(f["eval_warmstart"]["results"], train) for k, f in earlier.items()}
    assert (_printed(start[32]), _printed(start[35])) == ("50.0", "59.0")
    assert ("A start in the band, where runs 32 (50.0 %) and 35 (59.0 %) started at or over its top: its confirmation "
            f"read {_confirmed(stop)} %, its evaluation {_printed(_strict_score(warm, train))} % at 1K-4K") in section
    in_band = [k for k in earlier if 30 <= start[k] <= 50]
    kept_less = [k for k in in_band if _kept_at_32k(earlier[k]) < _kept_at_32k(published)]
    assert len(in_band) == 10 and kept_less == [5, 10, 27]
    assert (f"But it kept {_printed(_kept_at_32k(published), 2)}x at 32K (of the ten starts in the band from run 5 on "
            "before it, runs 5, 10 and 27 kept less)") in section
    confused = _bench_section("**Confused digits**", "**Run 30**")
    assert "the six confusing ones 16.7-23.5 %" in confused

    def flipped(results: list[dict[str, Any]]) -> tuple[int, int, Fraction, dict[str, list[int]]]:
        counts = _digit_flips([r for r in results if r["length"] in train])
        copies, changed = sum(c for c, _ in counts.values()), sum(f for _, f in counts.values())
        return changed, copies, Fraction(100 * changed, copies), counts

    start_flips, rl_flips = flipped(warm), flipped(after)
    assert Fraction(167, 10) <= start_flips[2] <= Fraction(235, 10)
    digits = {d: Fraction(100 * f, r) for d, (r, f) in start_flips[3].items() if r and 4 * f >= r}
    assert sorted(digits) == ["3", "7"]
    assert (f"its memory updates flipped {_printed(start_flips[2])} % of the digits they copied at 1K-4K "
            f"({start_flips[0]} of {start_flips[1]}), within the confusing starts' 16.7-23.5 % in \"Confused "
            f"digits\", the 3 flipped in {_printed(digits['3'])} % of its copies and the 7 in {_printed(digits['7'])} "
            "%") in section
    assert f"`WS_RESTART_FLIPS` caught it ({stop['flips']:.1f} % at its stop)" in section
    kinds = {arm: P.answer_kinds(r, train) for arm, r in (("warm", warm), ("rl", after), ("control", held_back))}
    w, r_, c = kinds["warm"], kinds["rl"], kinds["control"]
    assert (f"RL's model flipped {_printed(rl_flips[2])} % ({rl_flips[0]} of {rl_flips[1]}), and its gain came from "
            f"codes stored wrong ({w['stored_wrong']} -> {r_['stored_wrong']}) and half-copied (another code "
            f"{w['other_code']} -> {r_['other_code']}; one digit in place {w['one_place']} -> {r_['one_place']})"
            ) in section
    at_32 = _paired(warm, after, [32000])
    assert (f"Length was not kept: RL raised 32K from {_printed(_kept_at_32k(published), 2)}x to "
            f"{_printed(_kept_at_32k(published, 'rl'), 2)}x ({at_32[2]}, z {at_32[3]:.2f}), short of 0.80x") in section
    # the control: as at KL 0.01 in runs 14, 21 and 35
    at_kl = [k for k, f in earlier.items() if f["rl_permuted_stage"]["args"]["kl_coef"] == 0.01]
    fell = [k for k in at_kl if _paired(earlier[k]["eval_warmstart"]["results"],
                                        earlier[k]["eval_rl_permuted"]["results"], train)[3] <= -1.96]
    assert len(at_kl) == 12 and fell == [14, 21, 35]
    held_far = _paired(warm, held_back, longer)
    assert (f"The control fell ({held[2]} at 1K-4K, z {held[3]:.2f}; over all 288 documents {held_all[2]}, z "
            f"{held_all[3]:.2f}; at 8K-32K it held, z {held_far[3]:.2f}), as at KL 0.01 in runs 14, 21 and 35, three "
            "of the twelve runs at that coefficient before it") in section and abs(held_far[3]) < 1.96
    assert (f"(one digit in place {w['one_place']} -> {c['one_place']}) and so did the codes stored wrong "
            f"({w['stored_wrong']} -> {c['stored_wrong']})") in section
    assert "The next run: this plan again, unchanged" in section
    # bench/README's targets table: run 36 in each of the five memagent rows
    readme = (ROOT / "bench" / "README.md").read_text().splitlines()
    at = next(k for k, line in enumerate(readme) if line.startswith("| `examples/memagent/small_scale`"))
    gain_row, far_row, control_row, untrained_row, audit_row = readme[at:at + 5]
    far = _paired(warm, after, longer)
    assert (f"Run 36 (run 35's plan in three calls, on an H100; a start in the band, "
            f"{_printed(_strict_score(warm, train))} %, one round of {stop['step']} steps, its flipped digits over "
            f"`WS_RESTART_FLIPS` with no time to begin again; {rl['seconds'] / 60:.1f} min, {n} steps): "
            f"{_printed(_strict_score(after, train))} % ({rl_gain[2]}, z {rl_gain[3]:.2f}; won {rl_gain[0]}, lost "
            f"{rl_gain[1]}): two documents short") in gain_row
    assert "(+14.6 twice, +13.9 three times at best;" in gain_row
    assert (f"Run 36: {float(_strict_score(after, [32000])):.1f} % vs {_printed(_strict_score(after, train))} % "
            f"({_printed(_kept_at_32k(published, 'rl'), 2)}x; warm start {_printed(_kept_at_32k(published), 2)}x; "
            f"32K {at_32[2]}, z {at_32[3]:.2f}; won {at_32[0]}, lost {at_32[1]})") in far_row
    assert "MISS in runs 5, 10, 19, 21, 23, 26, 27, 28, 29, 30, 36 and 38 (" in far_row
    assert f"run 27's 0.32x, run 36's {_printed(_kept_at_32k(published), 2)}x;" in far_row
    assert (f"Run 36 (run 35's plan in three calls; {control['seconds'] / 60:.1f} min, {len(control['curve'])} steps, "
            f"entropy {_rl_start_entropy(published):.2f}): {_printed(_strict_score(warm, train))} -> "
            f"**{_printed(_strict_score(held_back, train))} %** ({held[2]}, z {held[3]:.2f}; won {held[0]}, lost "
            f"{held[1]}), 8K-32K {held_far[2]} (z {held_far[3]:.2f}), all 288 documents {held_all[2]} (z "
            f"{held_all[3]:.2f})") in control_row
    assert (f"run 36 held there (z {held_far[3]:.2f}) but not over all lengths (z {held_all[3]:.2f})" in control_row
            and held_all[3] <= -1.96)
    assert all(r["sub_em_strict"] == 0 for r in published["eval_untrained"]["results"])
    assert targets["untrained_strict_near_0"]["strict"] == 0.0
    assert _audit_row_entry(36, published["audit"]) + ". Run 37:" in audit_row
    # the example README's paragraph (what the runs from run 5 on say: run 37's test)
    example = " ".join((HERE / "README.md").read_text().split())
    assert (f"Its warm start stopped in one round at step {stop['step']}, in the band "
            f"({_printed(_strict_score(warm, train))} % at 1K-4K, {_printed(_kept_at_32k(published), 2)}x at 32K; its "
            f"confirmation read {_confirmed(stop)} %), its copied digits flipped {stop['flips']:.1f} % at its stop, "
            "over `WS_RESTART_FLIPS=10`, with no time left to begin it again") in example
    assert (f"RL had {rl['seconds'] / 60:.1f} minutes ({n} steps) of the 20 planned: {rl_gain[2]} at 1K-4K (z "
            f"{rl_gain[3]:.2f}; won {rl_gain[0]}, lost {rl_gain[1]}), two documents short, {far[2]} at 8K-32K (z "
            f"{far[3]:.2f}), and 32K kept {_printed(_kept_at_32k(published, 'rl'), 2)}x ({at_32[2]}, z "
            f"{at_32[3]:.2f}); the control fell just past its noise ({held[2]}, z {held[3]:.2f}); untrained 0.00, "
            "every rollout checked: two targets") in example
    # README's summary and the CHANGELOG's line
    summary = " ".join((ROOT / "README.md").read_text().split())
    assert (f"run 36, the same plan in three calls on an H100, stopped its start in the band "
            f"({_printed(_strict_score(warm, train))} %), and RL, with {rl['seconds'] / 60:.1f} of its 20 minutes, "
            f"gained {rl_gain[2]} (z {rl_gain[3]:.2f}), two documents short, 32K kept "
            f"{_printed(_kept_at_32k(published, 'rl'), 2)}x, while its control fell ({held[2]}, z {held[3]:.2f}): "
            "two targets") in summary
    changelog = " ".join((ROOT / "CHANGELOG.md").read_text().split())
    assert (f"Run 36 of the small-scale reproduction is in `bench/results/` (issue 22): run 35's plan in three calls "
            f"on an H100; a start in the band ({_printed(_strict_score(warm, train))} %), RL {rl_gain[2]} points (z "
            f"{rl_gain[3]:.2f}) at 1K-4K, two documents short, 32K kept {_printed(_kept_at_32k(published, 'rl'), 2)}x, "
            f"the control {held[2]} (z {held[3]:.2f}): two targets.") in changelog


def test_run_37s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 37" (run 36's plan again with the full budget in three calls, on an H200): its tables and
    paired figures as for run 14, its calls against run 32's plan, each figure of its reading (the warm start's
    probes, two overshoots and stop under both restart rules, the calls, the arms' time and steps, the audits, the
    training rewards, the runs whose RL met 15, the per-length gains, the start's flipped digits and length, the
    controls at KL 0.01 and 0.05) from the published file; its figures in the targets table, the example README,
    README and CHANGELOG; and what the runs from run 5 on say."""
    section, published = _run32s_plan(37, "**Run 38**", when="2026-12-06 03:46-04:14",
                                      card="H200", calls="three", device_seconds=1784)
    train, longer = [1000, 2000, 4000], [8000, 16000, 32000]
    everything = train + longer
    every, earlier = _published_runs(), _evaluated_runs(5, 36)
    rl, control, stage = published["rl_stage"], published["rl_permuted_stage"], published["warmstart_stage"]
    assert published["failures"] == []
    changes = published["changes_from_run_36"]
    assert "The machine came at the first try as an H200 (run 36's was an H100)" in changes
    assert "5 demonstration workers (2 on run 36's H100)" in changes
    assert "The last call's budget was 578 s (585 in run 36): what the session's device time had left" in changes
    assert "the machine came at the first try, an H200 (run 36's was an H100)" in section
    assert "the warm start at 5 demonstration workers (2 on run 36's H100)" in section
    assert ("The last call's budget was 578 s (585 in run 36): what the session's device time had left after two "
            "calls, less 15 s") in section
    assert every[36]["warmstart_stage"]["args"]["demo_workers"] == 2
    # the calls: run 32's plan (run 31's section shows it), the last call's budget what the session had left
    lost, *plan = _plan_commands("**Run 31, lost**", "**Run 32**")
    shown = _plan_commands("**Run 37**", "- Warm start, round 1")
    calls = [dict(re.findall(r"(\w+)=(\S+)", c.split(" bash ")[0])) for c in published["command"].split("; then ")]
    assert shown == [calls[0], calls[2]] == [lost, {**plan[-1], "BUDGET": "578"}]
    assert calls[1] == {**lost, "RESUME": "1", "BUDGET": "560"}
    assert _plan_commands("**Run 36**", "- Warm start, round 1")[1]["BUDGET"] == "585"
    assert "# at once, call 2 (the same with RESUME=1 BUDGET=560); at once, the last call:" in section
    assert "The next run: this plan again, unchanged" in _bench_section("**Run 36**", "**Run 37**")
    log = published["calls_log"]
    budgets, left, spent, gaps = _rl_in_calls(log)
    assert budgets == [555, 560, 578] and left == 214
    assert "warm start done after round 1, 214 s left: RL in this call" in log
    # by the log's clock the warm start's evaluation ran while the arms stepped (run 36's H100 ran it before them)
    began = _clock(re.search(r"\[([\d:]+)\] RL and control from /tmp/repro/warm1", log).group(1))
    evaluated = _clock(re.search(r"\[([\d:]+)\] warm start: 1000:", log).group(1))
    first_end = _clock(re.search(r"\[([\d:]+)\] call ends after", log).group(1))
    assert began < evaluated < first_end
    assert "the GPU (79.6 GiB) holds it or 2 RL arms, not both" in every[36]["calls_log"]
    assert (f"RL began in call 1 with {left} s left, right after the warm start (by the log's clock its evaluation "
            "ran beside the arms, not before them as on run 36's H100)") in section
    first = int(re.search(r"call ends after (\d+) s of RL: call again", log).group(1))
    second = int(re.findall(r"call ends after (\d+) s of RL: call again", log)[1])
    more = int(re.search(r"last call: RL (\d+) s more", log).group(1))
    assert spent == [("2.73", "6"), ("2.73", "6"), ("8.5", "26"), ("8.5", "26"), ("6.97", "43"), ("6.97", "44")]
    assert f"for {first} s of RL, {spent[0][1]} steps each; it went on in call 2" in section
    assert (f"went on in call 2 (sent {gaps[0]} s after call 1 returned; to {second} s, {spent[2][1]} steps) and in "
            f"the last call (sent {gaps[1]} s after call 2 returned) for {more} s more") in section
    n = len(rl["curve"])
    assert (n, len(control["curve"]), rl["steps"], control["steps"]) == (43, 44, 43, 44)
    assert [w["steps"] for w in published["curves"]["windows"]][-1] == [40, n - 1]
    assert f"`curves` (the arms paired over RL's {n} steps):" in section
    assert int(lost["RL_TOTAL_S"]) == 20 * 60 and "after_18.5_min" in published["targets"]["rl_gain_points_ge_15"]
    # the warm start: one round, its probes, two overshoots, a stop in the band under both restart rules
    args = _check_arms_and_one_round(section, published, log, workers=5, minutes="7.98")
    probes = {c["step"]: c["probe_strict"] for c in stage["curve"] if "probe_strict" in c}
    early = [v for step, v in probes.items() if step <= 400]
    assert sorted(probes) == [150, 200, 250, 300, 350, 400, 450, 452] and max(early) < args["stop_at"]
    assert (f"probes {min(early):.1f}-{max(early):.1f} % from step 150 to 400 and {probes[450]:.1f} % at 450"
            in section)
    stop = stage["stop"]
    shots = stop["overshoots"]
    assert [(s["step"], s["back_to"], s["probe_every"]) for s in shots] == [(500, 450, 10), (460, 450, 2)]
    assert all(s["probe_strict"] > args["stop_above"] for s in shots)
    assert (f"the probe at 500 read {shots[0]['probe_strict']:.1f} %, over the band's top, and went back to 450 "
            f"(probes every 10 steps); the probe at 460 read {shots[1]['probe_strict']:.1f} %, over the top again, "
            f"and went back to 450 (probes every 2 steps): {probes[452]:.1f} % at 452, two in a row in the band, and "
            f"its confirmation on {3 * args['confirm_per_length']} new documents {_confirmed(stop)} %, in the band"
            ) in section
    assert all(args["stop_at"] <= probes[k] <= args["stop_above"] for k in (450, 452))
    assert args["stop_at"] <= float(_confirmed(stop)) <= args["stop_above"]
    _check_clean_stop(section, stop, args, step=452, seconds=286)
    warm, after = published["eval_warmstart"]["results"], published["eval_rl"]["results"]
    held_back = published["eval_rl_permuted"]["results"]
    assert _warm_start_line(warm, "codes") in section
    rl_all, held_all, held_32, held_far = _check_more_pairs(section, published)
    # the targets: four pass, the control misses
    targets = published["targets"]
    assert [k for k, t in targets.items() if not t["passed"]] == ["control_within_noise"]
    rl_gain, held = _paired(warm, after, train), _paired(warm, held_back, train)
    net, need = rl_gain[0] - rl_gain[1], math.ceil(Fraction(15 * 144, 100))
    assert (net, need) == (29, 22) and _strict_score(after, train) - _strict_score(warm, train) >= 15
    kept_target = targets["keeps_80pct_at_8x"]
    assert (kept_target["after_18.5_min"], kept_target["warm_start"]) == (0.867, 0.78)
    assert _printed(_kept_at_32k(published, "rl"), 2) == "0.87" and _kept_at_32k(published, "rl") >= Fraction(8, 10)
    files = _evaluated_runs(5, 37)
    count = {k: sum(t["passed"] for t in f["targets"].values()) for k, f in files.items()}
    four = [k for k, c in count.items() if c == 4]
    assert four == [8, 9, 11, 12, 14, 17, 29, 32, 37] and max(count.values()) == 4
    assert ("**Four targets pass** (RL's gain, 32K kept, untrained 0.00, every rollout checked), as in runs 8, 9, 11, "
            f"12, 14, 17, 29 and 32; the control fell past its noise ({held[2]}, z {held[3]:.2f}). All five have "
            f"still passed in no run (issue 22 stays open). RL gained {rl_gain[2]} points ({net} more documents "
            f"right of 144; 15 points need {need}), z {rl_gain[3]:.2f}, and 32K kept "
            f"{_printed(_kept_at_32k(published, 'rl'), 2)}x of RL's training-length score") in section
    # the runs whose RL met 15, and their controls
    gains = _rl_gains(earlier)
    met = [k for k, g in gains.items() if g >= 15]
    assert met == [9, 14, 29] and [_printed(gains[k], plus=True) for k in met] == ["+24.3", "+34.7", "+50.7"]
    assert all(gains[k] < _strict_score(after, train) - _strict_score(warm, train) for k in gains if k > 29)
    assert [earlier[k]["targets"]["control_within_noise"]["passed"] for k in met] == [False, False, True]
    assert not earlier[29]["targets"]["keeps_80pct_at_8x"]["passed"]
    assert ("RL met its target for the fourth time from run 5 on (runs 9: +24.3, 14: +34.7, 29: +50.7), the first "
            "since run 29, and with the largest gain since then. As in runs 9 and 14, its control fell in the same "
            "run; in run 29 the control held and length was not kept") in section
    assert [_printed(gains[k], plus=True) for k in (32, 35, 36)] == ["+14.6", "+5.6", "+13.9"]
    assert "One run: on this plan runs 32, 35 and 36 gained +14.6, +5.6 and +13.9" in section
    # per length: one loss, within its noise
    per_length = {k: _paired(warm, after, [k]) for k in everything}
    assert [k for k, p in per_length.items() if p[0] < p[1]] == [8000] and abs(per_length[8000][3]) < 1.96
    gained = [f"{k // 1000}K {p[2]} (z {p[3]:.2f})" for k, p in per_length.items() if k != 8000]
    dip = per_length[8000]
    assert (f"Per length, RL gained at {', '.join(gained[:-1])} and {gained[-1]}, and lost at 8K {dip[2]} (won "
            f"{dip[0]}, lost {dip[1]}, z {dip[3]:.2f}): 48 documents a length, within that length's noise") in section
    assert per_length[16000][3] >= 1.96
    assert (f"RL's {_printed(_strict_score(after, [8000]))} % at 8K beside its "
            f"{_printed(_strict_score(after, [16000]))} % at 16K: the 16K gain is past its noise, the 8K loss within "
            "it") in section
    # the start: in the band, clean, its length kept; its reversals and where RL's gain came from
    start = {k: _strict_score(f["eval_warmstart"]["results"], train) for k, f in earlier.items()}
    assert (f"A start in the band (confirmation {_confirmed(stop)} %, evaluation "
            f"{_printed(_strict_score(warm, train))} % at 1K-4K, as run 36's)") in section
    assert _printed(start[36]) == _printed(_strict_score(warm, train))
    confused = _bench_section("**Confused digits**", "**Run 30**")
    assert "clean starts' memory updates flipped 0.4-4.5 % of the digits they copied" in confused

    def flipped(results: list[dict[str, Any]]) -> tuple[int, int, Fraction]:
        counts = _digit_flips([r for r in results if r["length"] in train])
        copies, changed = sum(c for c, _ in counts.values()), sum(f for _, f in counts.values())
        return changed, copies, Fraction(100 * changed, copies)

    start_flips, rl_flips, run36_flips = flipped(warm), flipped(after), flipped(every[36]["eval_warmstart"]["results"])
    assert Fraction(4, 10) <= start_flips[2] <= Fraction(45, 10)
    assert (f"its memory updates flipped {_printed(start_flips[2])} % of the digits they copied at 1K-4K "
            f"({start_flips[0]} of {start_flips[1]}), within the clean starts' 0.4-4.5 % in \"Confused digits\" (run "
            f"36's {_printed(run36_flips[2])} %)") in section
    in_band = [k for k in earlier if 30 <= start[k] <= 50]
    kept_more = [k for k in in_band if _kept_at_32k(earlier[k]) > _kept_at_32k(published)]
    assert len(in_band) == 11 and kept_more == [28]
    assert (f"it kept {_printed(_kept_at_32k(published), 2)}x at 32K (run 36's "
            f"{_printed(_kept_at_32k(every[36]), 2)}x; of the eleven starts in the band from run 5 on before it, "
            "only run 28's kept more, "
            f"{_printed(_kept_at_32k(earlier[28]), 2)}x)") in section
    kinds = {arm: P.answer_kinds(r, train) for arm, r in (("warm", warm), ("rl", after), ("control", held_back))}
    w, r_, c = kinds["warm"], kinds["rl"], kinds["control"]
    assert r_["reversed"] > w["reversed"]
    assert (f"It reversed {w['reversed']} codes, and RL's model more ({r_['reversed']}): its gain came from "
            f"half-copied codes (one digit in place {w['one_place']} -> {r_['one_place']}; another code "
            f"{w['other_code']} -> {r_['other_code']}), codes stored wrong ({w['stored_wrong']} -> "
            f"{r_['stored_wrong']}) and lost in memory ({w['lost_in_memory']} -> {r_['lost_in_memory']}); RL's model "
            f"flipped {_printed(rl_flips[2])} % ({rl_flips[0]} of {rl_flips[1]})") in section
    # the control: as at KL 0.01 in runs 14, 21, 35 and 36; at 0.05 (runs 11, 12) both held
    at_kl = [k for k, f in files.items() if f["rl_permuted_stage"]["args"]["kl_coef"] == 0.01]
    fell = [k for k in at_kl if _paired(files[k]["eval_warmstart"]["results"],
                                        files[k]["eval_rl_permuted"]["results"], train)[3] <= -1.96]
    assert len(at_kl) == 14 and fell == [14, 21, 35, 36, 37]
    run32 = _paired(earlier[32]["eval_warmstart"]["results"], earlier[32]["eval_rl_permuted"]["results"], train)
    assert held_far[3] <= -1.96 and abs(held_32[3]) < 1.96
    assert (f"The control fell ({held[2]} at 1K-4K, z {held[3]:.2f}; at 8K-32K {held_far[2]}, z {held_far[3]:.2f}; "
            f"over all 288 documents {held_all[2]}, z {held_all[3]:.2f}; at 32K it held, z {held_32[3]:.2f}), as at "
            "KL 0.01 in runs 14, 21, 35 and 36: five of the fourteen runs at that coefficient with this one, and each "
            f"run since run 35 (run 32, on the same plan, held: {run32[2]}, z {run32[3]:.2f})") in section
    entropy = {arm: [w_["entropy"][arm] for w_ in published["curves"]["windows"]] for arm in ("rl", "control")}
    assert max(entropy["rl"]) < min(entropy["control"])
    assert (f"its entropy stayed over RL's ({min(entropy['control']):.3f}-{max(entropy['control']):.3f} against "
            f"{min(entropy['rl']):.3f}-{max(entropy['rl']):.3f} a 10-step window)") in section
    assert (f"its misses grew as half-copied codes (another code {w['other_code']} -> {c['other_code']}; one digit in "
            f"place {w['one_place']} -> {c['one_place']}) and lost in memory ({w['lost_in_memory']} -> "
            f"{c['lost_in_memory']})") in section
    at_05 = [k for k, f in files.items() if f["rl_permuted_stage"]["args"]["kl_coef"] == 0.05]
    assert at_05 == [11, 12] and all(files[k]["targets"]["control_within_noise"]["passed"] for k in at_05)
    assert not any(files[k]["targets"]["rl_gain_points_ge_15"]["passed"] for k in at_05)
    assert [k for k in at_kl if files[k]["targets"]["rl_gain_points_ge_15"]["passed"]] == [14, 29, 37]
    assert "Every setting tried so far has traded RL's gain for the control's hold." in " ".join(
        (ROOT / "bench" / "README.md").read_text().split())
    assert ("The next run: this plan again, unchanged (the session's device time holds one run). A hypothesis, not a "
            "result: the control's fall follows the anchor. At KL 0.05 both controls held at the training lengths "
            "(runs 11, 12) and neither RL met 15") in section
    assert ("at 0.01 RL met 15 in runs 14, 29 and 37 and the control fell in five runs; the coefficient between, "
            "0.02, was set for runs 15 and 16, which reached no evaluation. This run tests none of that.") in section
    # bench/README's targets table: run 37 in each of the five memagent rows
    readme = (ROOT / "bench" / "README.md").read_text().splitlines()
    at = next(k for k, line in enumerate(readme) if line.startswith("| `examples/memagent/small_scale`"))
    gain_row, far_row, control_row, untrained_row, audit_row = readme[at:at + 5]
    far, at_32 = _paired(warm, after, longer), _paired(warm, after, [32000])
    assert (f"Run 37 (run 36's plan in three calls, on an H200; a start in the band, "
            f"{_printed(_strict_score(warm, train))} %, one round of {stop['step']} steps, its flipped digits and "
            f"reversals under their limits; {rl['seconds'] / 60:.1f} min, {n} steps): "
            f"**{_printed(_strict_score(after, train))} % ({rl_gain[2]}, z {rl_gain[3]:.2f}; won {rl_gain[0]}, lost "
            f"{rl_gain[1]})**") in gain_row
    assert "PASS in runs 9 (+24.3), 14 (+34.7), 29 (+50.7), 37 (+20.1) and 39 (+27.1); MISS in runs 4-8," in gain_row
    assert (f"Run 37: {float(_strict_score(after, [32000])):.1f} % vs {_printed(_strict_score(after, train))} % "
            f"({_printed(_kept_at_32k(published, 'rl'), 2)}x; warm start {_printed(_kept_at_32k(published), 2)}x; "
            f"32K {at_32[2]}, z {at_32[3]:.2f}; won {at_32[0]}, lost {at_32[1]})") in far_row
    assert "PASS in runs 4, 6-9, 11, 12, 14, 17, 32, 35, 37 and 39, MISS in runs 5, 10, 19," in far_row
    assert (f"Run 37 (run 36's plan in three calls; {control['seconds'] / 60:.1f} min, {len(control['curve'])} steps, "
            f"entropy {_rl_start_entropy(published):.2f}): {_printed(_strict_score(warm, train))} -> "
            f"**{_printed(_strict_score(held_back, train))} %** ({held[2]}, z {held[3]:.2f}; won {held[0]}, lost "
            f"{held[1]}), 8K-32K {held_far[2]} (z {held_far[3]:.2f}), all 288 documents {held_all[2]} (z "
            f"{held_all[3]:.2f})") in control_row
    assert "(MISS in runs 4, 6, 7, 9, 10, 14, 21, 35, 36 and 37)" in control_row
    assert f"run 37 lost there too (z {held_far[3]:.2f}), run 38" in control_row
    assert all(r["sub_em_strict"] == 0 for r in published["eval_untrained"]["results"])
    assert targets["untrained_strict_near_0"]["strict"] == 0.0
    assert "0.00 at every length in runs 4-23, 25-30, 32 and 35-39 (" in untrained_row
    assert _audit_row_entry(37, published["audit"]) + ". Run 38:" in audit_row
    # the example README's paragraph (what the runs from run 5 on say: run 38's test)
    example = " ".join((HERE / "README.md").read_text().split())
    assert (f"Its warm start stopped in one round at step {stop['step']}, in the band "
            f"({_printed(_strict_score(warm, train))} % at 1K-4K, {_printed(_kept_at_32k(published), 2)}x at 32K; its "
            f"confirmation read {_confirmed(stop)} %), after {len(shots)} overshoots, its copied digits flipped "
            f"{stop['flips']:.1f} % at its stop and {stop['reversed']:.1f} % reversed, both under their limits"
            ) in example
    assert (f"RL had {rl['seconds'] / 60:.1f} minutes ({n} steps) of the 20 planned: {rl_gain[2]} at 1K-4K (z "
            f"{rl_gain[3]:.2f}; won {rl_gain[0]}, lost {rl_gain[1]}), {far[2]} at 8K-32K (z {far[3]:.2f}), and 32K "
            f"kept {_printed(_kept_at_32k(published, 'rl'), 2)}x ({at_32[2]}, z {at_32[3]:.2f}); the control fell "
            f"({held[2]}, z {held[3]:.2f}); untrained 0.00, every rollout checked: four targets") in example
    assert len(files) == 22
    # README's summary and the CHANGELOG's line
    summary = " ".join((ROOT / "README.md").read_text().split())
    assert (f"run 37, the same plan in three calls on an H200, stopped its start in the band "
            f"({_printed(_strict_score(warm, train))} %), and RL, with {rl['seconds'] / 60:.1f} of its 20 minutes, "
            f"gained {rl_gain[2]} (z {rl_gain[3]:.2f}), 32K kept {_printed(_kept_at_32k(published, 'rl'), 2)}x, while "
            f"its control fell ({held[2]}, z {held[3]:.2f}): four targets") in summary
    changelog = " ".join((ROOT / "CHANGELOG.md").read_text().split())
    assert (f"Run 37 of the small-scale reproduction is in `bench/results/` (issue 22): run 36's plan in three calls "
            f"on an H200; a start in the band ({_printed(_strict_score(warm, train))} %), RL {rl_gain[2]} points (z "
            f"{rl_gain[3]:.2f}) at 1K-4K, 32K kept {_printed(_kept_at_32k(published, 'rl'), 2)}x, the control "
            f"{held[2]} (z {held[3]:.2f}): four targets.") in changelog


def test_run_38s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 38" (run 37's plan with the KL coefficient 0.02 in both arms, on an H100; neither warm-start
    round reached the band): its tables and paired figures as for run 14, its calls against run 37's, each figure of
    its reading (both rounds' probes and time, the round RL started from, the calls, the arms' time and steps, the
    audits, the training rewards, the start under the band and its flipped digits, the 8x target under its floor,
    the arms that moved nowhere, run 36's start on an H100, the controls at KL 0.01) from the published file; its
    figures in the targets table, the example README, README and CHANGELOG; and what the runs from run 5 on say."""
    section, published = _run32s_plan(38, "**Run 39**", when="2026-12-06 06:53-07:21",
                                      card="H100", calls="three", device_seconds=1722, kl=0.02)
    train, longer = [1000, 2000, 4000], [8000, 16000, 32000]
    everything = train + longer
    every, files = _published_runs(), _evaluated_runs(5, 38)
    rl, control, stage = published["rl_stage"], published["rl_permuted_stage"], published["warmstart_stage"]
    assert published["failures"] == []
    changes = published["changes_from_run_37"]
    assert "Run 37's plan with the KL coefficient doubled in both arms (RL_KL=0.02, was 0.01)" in changes
    assert "The machine came as an H100 (run 37's was an H200)" in changes
    assert "2 demonstration workers in round 1 and 4 in round 2" in changes
    assert ("Run 37's plan with the KL coefficient doubled in both arms, `RL_KL=0.02` (was 0.01). Run 37's section "
            "had named its own plan, unchanged, for the next run; this run changed it to test that section's "
            "hypothesis (the control's fall follows the anchor) after five falls of the control at 0.01 (runs 14, 21, "
            "35, 36 and 37), at the coefficient runs 15 and 16 had set and never evaluated") in section
    run37 = _bench_section("**Run 37**", "**Run 38**")
    assert "The next run: this plan again, unchanged" in run37 and "the control's fall follows the anchor" in run37
    assert "0.02, was set for runs 15 and 16, which reached no evaluation" in run37
    assert 15 not in files and 16 not in files and "H200" in every[37]["machine"]
    assert ("the machine came as an H100 (run 37's was an H200), so `run_in_calls.sh` sized round 1 of the warm start "
            "at 2 demonstration workers and round 2 at 4") in section
    # the calls: run 37's with RL_KL=0.02, the last call's budget 585 s
    shown37 = _plan_commands("**Run 37**", "- Warm start, round 1")
    shown = _plan_commands("**Run 38**", "- Warm start, round 1")
    calls = [dict(re.findall(r"(\w+)=(\S+)", c.split(" bash ")[0])) for c in published["command"].split("; then ")]
    assert shown == [calls[0], calls[2]] == [{**shown37[0], "RL_KL": "0.02"},
                                             {**shown37[1], "RL_KL": "0.02", "BUDGET": "585"}]
    assert calls[1] == {**calls[0], "RESUME": "1", "BUDGET": "560"}
    assert "# at once, call 2 (the same with RESUME=1 BUDGET=560); at once, the last call:" in section
    log = published["calls_log"]
    starts = re.findall(r"\[([\d:]+)\] call starts, budget (\d+)s", log)
    ended = re.findall(r"\[([\d:]+)\] call ends", log)
    gaps = [_clock(s) - _clock(e) for (s, _), e in zip(starts[1:], ended, strict=True)]
    assert [int(b) for _, b in starts] == [555, 560, 585] and gaps == [6, 8]
    # round 1: two workers, no stop, its probes under the band
    args = stage["args"]
    assert (args["demo_workers"], args["demo_split"], args["init"], args["max_minutes"]) == (2, "demo1",
                                                                                           "/tmp/repro/model", 8.0)
    assert "warm start round 1 from /tmp/repro/model, 8.00 min, 2 demonstration workers" in log
    assert f"`demo1`, {stage['demo_s']:.0f} s with 2 workers; a round of {args['max_minutes']:.2f} minutes" in section
    stop = stage["stop"]
    assert (stop["reason"], stop["overshoots"], stop["attempt"], stop["rejected"]) == (
        "time budget of 8.0 min spent", [], 0, [])
    probes = {c["step"]: c for c in stage["curve"] if "probe_strict" in c}
    early = [c["probe_strict"] for s, c in probes.items() if s <= 600]
    late = [c["probe_strict"] for s, c in probes.items() if s >= 650]
    assert sorted(probes) == list(range(150, 1051, 50)) and max(early + late) < args["stop_at"] == 30
    last = probes[1050]
    assert (f"{stop['step']:,} steps and no stop: probes {min(early):.1f}-{max(early):.1f} % from step 150 to 600, "
            f"then {min(late):.1f}-{max(late):.1f} % from 650 to 1,050, never the band's 30 % floor; its time budget "
            f"of 8.0 minutes ended it ({round(stop['seconds'])} s), its last probe {last['probe_strict']:.1f} % at "
            f"step 1,050 with {100 * last['probe_flips'][1] / last['probe_flips'][0]:.1f} % of its copied digits "
            "flipped") in section
    assert "step 1050: loss 0.159, probe strict sub_em 22.9%" in log and "digits flipped 25.0% of 184" in log
    # round 2: from the untrained model, four workers, no stop
    (second,) = published["warmstart_later_rounds"]
    args2, stop2 = second["args"], second["stop"]
    assert (args2["demo_workers"], args2["demo_split"], args2["init"]) == (4, "demo2", "/tmp/repro/model")
    assert "warm start round 2 from /tmp/repro/model, 8.58 min, 4 demonstration workers" in log
    assert (stop2["reason"], stop2["overshoots"]) == ("time budget of 8.58 min spent", [])
    probes2 = {c["step"]: c["probe_strict"] for c in second["curve"] if "probe_strict" in c}
    assert max(probes2) == 1400 and max(probes2.values()) == probes2[1400]
    assert (f"Round 2 (call 2, sent {gaps[0]} s after call 1 returned; `demo2`, {second['demo_s']:.0f} s with 4 "
            f"workers; a round of {args2['max_minutes']:.2f} minutes, from the untrained model): {stop2['step']:,} "
            f"steps and no stop: probes {min(probes2.values()):.1f}-{max(probes2.values()):.1f} %, its last "
            f"{probes2[1400]:.1f} % at step 1,400; its time budget ended it ({round(stop2['seconds'])} s)") in section
    # the last call: the warm start's evaluation first, RL from round 1 as it stood
    assert "the GPU (79.6 GiB) holds it or 2 RL arms, not both" in log
    assert "round 1's last probe read highest, 22.9 %; round 2's 8.3 %" in log
    assert "RL starts from a warm start its probe never stopped (time budget of 8.0 min spent" in log
    assert rl["args"]["init"] == control["args"]["init"] == args["out"] == published["eval_warmstart"]["ckpt"]
    more = int(re.search(r"last call: RL (\d+) s more", log).group(1))
    assert (f"The last call (sent {gaps[1]} s after call 2 returned) evaluated the warm start first (\"the GPU (79.6 "
            "GiB) holds it or 2 RL arms, not both\"), then started RL and the control from round 1, the round whose "
            "last probe read highest, as it stood (\"RL starts from a warm start its probe never stopped\"), for "
            f"{more} s of RL") in section
    n = len(rl["curve"])
    assert (n, len(control["curve"]), rl["steps"], control["steps"]) == (14, 14, 14, 14)
    rollouts, updates = (sum(c[key] for c in rl["curve"]) / n for key in ("rollout_s", "train_s"))
    assert (f"RL stepped {n} times in {rl['seconds']:,.0f} s ({rl['seconds'] / 60:.1f} of the 20 minutes the plan "
            f"gave them; rollouts {rollouts:.1f} s, update {updates:.1f} s a step), the control "
            f"{len(control['curve'])} in {control['seconds']:,.0f} s") in section
    _check_audits(section, published, rl, control)
    rewards = published["training_reward_at_t1"]
    assert all(abs(rewards[arm]["last_10"] - rewards[arm]["steps_0_4"]) < 0.03 for arm in ("rl", "control"))
    assert _training_rewards(published, "fell") + ", each by less than three hundredths" in section
    warm, after = published["eval_warmstart"]["results"], published["eval_rl"]["results"]
    held_back = published["eval_rl_permuted"]["results"]
    rl_all, held_all, held_32, held_far = _check_more_pairs(section, published)
    # the targets: three pass; RL's gain misses, and 32K under the band's floor
    targets = published["targets"]
    assert [k for k, t in targets.items() if t["passed"]] == ["control_within_noise", "untrained_strict_near_0",
                                                            "every_rollout_checked"]
    rl_gain, held = _paired(warm, after, train), _paired(warm, held_back, train)
    kept = targets["keeps_80pct_at_8x"]
    assert kept["after_6.0_min"] == 1.0 and kept["under_floor"] == {"training_lengths_strict": 16.67, "floor": 30.0}
    assert _kept_at_32k(published, "rl") == 1 and _strict_score(after, train) < 30
    assert (f"**Three targets pass** (the control within its noise, untrained 0.00, every rollout checked); RL's gain "
            f"misses ({rl_gain[2]}, z {rl_gain[3]:.2f}), and so does 32K: RL read "
            f"{_printed(_strict_score(after, [32000]))} % there and {_printed(_strict_score(after, train))} % at "
            f"1K-4K, {_printed(_kept_at_32k(published, 'rl'), 2)}x, but its training-length score is under the band's "
            "30 % floor, so the ratio does not count (`under_floor`, the rule since \"Run 30\")") in section
    assert "All five have still passed in no run (issue 22 stays open)." in section
    # the start: under the band, no copy formed; no arm moved past its noise
    kinds = P.answer_kinds(warm, train)
    assert _strict_score(warm, train) < args["stop_at"]
    assert ("The warm start failed: neither round's probe reached the band, and RL began from a start under it, "
            + _warm_start_line(warm, "codes")) in section
    counts = _digit_flips([r for r in warm if r["length"] in train])
    copies, changed = sum(c for c, _ in counts.values()), sum(f for _, f in counts.values())
    assert (f"{kinds['stored_wrong']} of its 144 codes at 1K-4K were stored wrong, and its memory updates flipped "
            f"{changed} of the {copies} digits they copied there ({_printed(Fraction(100 * changed, copies))} %)"
            ) in section
    for arm in (after, held_back):
        for lengths in (train, longer, [32000], everything, *([k] for k in everything)):
            assert abs(_paired(warm, arm, lengths)[3]) < 1.96, lengths
    assert "RL had nothing to sharpen in 14 steps: no arm moved past its noise at any span or length." in section
    assert ("The control's PASS tests nothing about KL 0.02: neither arm moved from a start under the band in 14 "
            "steps") in section and "This run leaves the hypothesis untested." in section
    # run 36 on an H100 with two workers reached the band in its first round
    run36 = every[36]
    assert "H100" in run36["machine"] and run36["warmstart_stage"]["args"]["demo_workers"] == 2
    assert "warmstart_earlier_rounds" not in run36 and run36["warmstart_stage"]["stop"]["step"] == 830
    run36_start = _strict_score(run36["eval_warmstart"]["results"], train)
    assert "in the band 30.0-50.0% at step 830" in run36["warmstart_stage"]["stop"]["reason"]
    assert _plan_commands("**Run 36**", "- Warm start, round 1") == [{**c, "RL_KL": "0.01"} for c in shown[:1]] + [
        {**shown[1], "RL_KL": "0.01"}]
    assert ("run 36, on an H100 with the same 2 workers and the same warm-start settings, reached the band in its "
            f"first round (stopped at step 830, {_printed(run36_start)} % at 1K-4K)") in section
    best = max(c["probe_strict"] for c in probes.values())
    assert _first_probe(stage["curve"], best) == 900 and probes[1050]["probe_strict"] == best
    assert f"Round 1 here probed {best:.1f} % at step 900 and no higher by 1,050." in section
    assert "The next run: run 37's plan with `RL_KL=0.02` again, the test this run did not make." in section
    # the controls at KL 0.01 that fell, and this one, the first evaluated at 0.02
    at_kl = [k for k, f in files.items() if f["rl_permuted_stage"]["args"]["kl_coef"] == 0.01]
    fell = [k for k in at_kl if _paired(files[k]["eval_warmstart"]["results"],
                                        files[k]["eval_rl_permuted"]["results"], train)[3] <= -1.96]
    assert fell == [14, 21, 35, 36, 37]
    assert [k for k, f in files.items() if f["rl_permuted_stage"]["args"]["kl_coef"] == 0.02] == [38]
    # bench/README's targets table: run 38 in each of the five memagent rows
    readme = (ROOT / "bench" / "README.md").read_text().splitlines()
    at = next(k for k, line in enumerate(readme) if line.startswith("| `examples/memagent/small_scale`"))
    gain_row, far_row, control_row, untrained_row, audit_row = readme[at:at + 5]
    assert (f"Run 38 (run 37's plan with `RL_KL=0.02` in both arms, on an H100; neither warm-start round reached the "
            f"band, RL from round 1 as it stood, {_printed(_strict_score(warm, train))} %; "
            f"{rl['seconds'] / 60:.1f} min, {n} steps): {_printed(_strict_score(after, train))} % ({rl_gain[2]}, z "
            f"{rl_gain[3]:.2f}; won {rl_gain[0]}, lost {rl_gain[1]})") in gain_row
    assert "MISS in runs 4-8, 10-12, 17, 19, 21, 23, 26, 27, 28, 30, 32, 35, 36 and 38 (" in gain_row
    assert (f"Run 38: {_printed(_strict_score(after, [32000]))} % vs {_printed(_strict_score(after, train))} % "
            f"({_printed(_kept_at_32k(published, 'rl'), 2)}x of a score under the band's 30 % floor; warm start "
            f"{_printed(_kept_at_32k(published), 2)}x)") in far_row
    assert kept["warm_start"] == 1.15
    assert ("PASS in runs 4, 6-9, 11, 12, 14, 17, 32, 35, 37 and 39, MISS in runs 5, 10, 19, 21, 23, 26, 27, 28, 29, "
            "30, 36 and 38 (") in far_row
    assert (f"Run 38 (run 37's plan with KL 0.02 in both arms; {control['seconds'] / 60:.1f} min, "
            f"{len(control['curve'])} steps, entropy {_rl_start_entropy(published):.2f}): "
            f"{_printed(_strict_score(warm, train))} -> {_printed(_strict_score(held_back, train))} % ({held[2]}, z "
            f"{held[3]:.2f}; won {held[0]}, lost {held[1]}), 8K-32K {held_far[2]} (z {held_far[3]:.2f}), from a start "
            "under the band") in control_row
    assert ("PASS at the training lengths in runs 5, 8, 11, 12, 17, 19, 23, 26, 27, 28, 29, 30, 32, 38 and 39 ("
            in control_row)
    assert f", run 38 held there (z {held_far[3]:.2f}), neither arm moved from its start, run 39" in control_row
    assert all(r["sub_em_strict"] == 0 for r in published["eval_untrained"]["results"])
    assert targets["untrained_strict_near_0"]["strict"] == 0.0
    assert "0.00 at every length in runs 4-23, 25-30, 32 and 35-39 (" in untrained_row
    assert _audit_row_entry(38, published["audit"]) + ". Run 39:" in audit_row
    # the example README's paragraph, and what the runs from run 5 on say
    example = " ".join((HERE / "README.md").read_text().split())
    far_kept = _kept_at_32k(published)
    assert ("Run 38 was run 37's plan with the KL coefficient doubled in both arms (`RL_KL=0.02`), on an H100 (2 "
            "demonstration workers in round 1, 4 in round 2). Neither warm-start round reached the band (round 1's "
            f"last probe {last['probe_strict']:.1f} % at step 1,050, round 2's {probes2[1400]:.1f} %); RL started from "
            f"round 1 as it stood ({_printed(_strict_score(warm, train))} % at 1K-4K, {_printed(far_kept, 2)}x at "
            f"32K) and had {rl['seconds'] / 60:.1f} minutes ({n} steps) of the 20 planned: {rl_gain[2]} at 1K-4K (z "
            f"{rl_gain[3]:.2f}; won {rl_gain[0]}, lost {rl_gain[1]}), and 32K's "
            f"{_printed(_kept_at_32k(published, 'rl'), 2)}x does not count, RL's training-length score under the 30 % "
            f"floor; the control held ({held[2]}, z {held[3]:.2f}), which says nothing about KL 0.02 from a start "
            "neither arm moved; untrained 0.00, every rollout checked: three targets (bench/README, \"Run 38\")"
            ) in example
    assert len(files) == 23
    count = {k: sum(t["passed"] for t in f["targets"].values()) for k, f in files.items()}
    assert [k for k, c in count.items() if c == 4] == [8, 9, 11, 12, 14, 17, 29, 32, 37] and max(count.values()) == 4
    assert count[38] == 3
    # README's summary and the CHANGELOG's line
    summary = " ".join((ROOT / "README.md").read_text().split())
    assert ("run 38, run 37's plan with the KL coefficient 0.02 in both arms, on an H100, reached no start in the "
            f"band in two warm-start rounds ({_printed(_strict_score(warm, train))} %), and RL, with "
            f"{rl['seconds'] / 60:.1f} of its 20 minutes, moved {rl_gain[2]} (z {rl_gain[3]:.2f}), 32K under its "
            f"floor, while its control held ({held[2]}, z {held[3]:.2f}) from a start neither arm moved: three "
            "targets, the KL test not made;") in summary
    changelog = " ".join((ROOT / "CHANGELOG.md").read_text().split())
    assert (f"Run 38 of the small-scale reproduction is in `bench/results/` (issue 22): run 37's plan with "
            f"`RL_KL=0.02` in both arms, in three calls on an H100; neither warm-start round reached the band, a start "
            f"of {_printed(_strict_score(warm, train))} %, RL {rl_gain[2]} points (z {rl_gain[3]:.2f}) at 1K-4K in "
            f"{n} steps, 32K under its floor, the control {held[2]} (z {held[3]:.2f}): three targets, and the KL "
            "coefficient left untested.") in changelog


def test_run_39s_section_shows_what_its_files_hold() -> None:
    """bench/README's "Run 39" (run 38's plan again, the KL coefficient 0.02 in both arms, on an H100; a start in the
    band and all five targets): its tables and paired figures as for run 14, its calls against run 38's, each figure
    of its reading (the warm start's probes, two overshoots and stop, the calls, the arms' time and steps, the audits,
    the training rewards, the five targets and their caveats, the runs whose RL met 15, the per-length gains, the
    answers, the start's flipped digits, the control against runs 36 and 37's at KL 0.01) from the published file;
    its figures in the targets table, the example README, README and CHANGELOG; and what the runs from run 5 on say."""
    section, published = _run32s_plan(39, "## Fixes these benchmarks led to", when="2026-12-06 09:30-09:58",
                                      card="H100", calls="three", device_seconds=1677, kl=0.02)
    train, longer = [1000, 2000, 4000], [8000, 16000, 32000]
    everything = train + longer
    every, files = _published_runs(), _evaluated_runs(5, 39)
    rl, control, stage = published["rl_stage"], published["rl_permuted_stage"], published["warmstart_stage"]
    assert published["failures"] == []
    changes = published["changes_from_run_38"]
    assert "Run 38's plan unchanged (run 37's plan with the KL coefficient 0.02 in both arms)" in changes
    assert "The machine came as an H100 again (the call asked for kind nvidia-h200)" in changes
    assert ("Run 38's plan unchanged (run 37's plan with `RL_KL=0.02` in both arms), the one run 38's section named: "
            "run 38's warm start never reached the band, so it tested nothing about that section's hypothesis (the "
            "control's fall at KL 0.01, in runs 14, 21, 35, 36 and 37, follows the KL coefficient)") in section
    assert "The next run: run 37's plan with `RL_KL=0.02` again" in _bench_section("**Run 38**", "**Run 39**")
    assert ("The call asked for an H200 and the machine came as an H100 again, so `run_in_calls.sh` sized round 1 of "
            "the warm start at 2 demonstration workers, as in run 38") in section
    assert "H100" in every[38]["machine"] and every[38]["warmstart_stage"]["args"]["demo_workers"] == 2
    # the calls: run 38's, unchanged
    shown = _plan_commands("**Run 39**", "- Warm start, round 1")
    calls = [dict(re.findall(r"(\w+)=(\S+)", c.split(" bash ")[0])) for c in published["command"].split("; then ")]
    assert shown == [calls[0], calls[2]] == _plan_commands("**Run 38**", "- Warm start, round 1")
    assert calls[1] == {**calls[0], "RESUME": "1", "BUDGET": "560"} and calls[0]["RL_KL"] == "0.02"
    assert "# at once, call 2 (the same with RESUME=1 BUDGET=560); at once, the last call:" in section
    log = published["calls_log"]
    budgets, left, spent, gaps = _rl_in_calls(log)
    assert budgets == [555, 560, 585] and left == 230 and gaps == [6, 6]
    assert "warm start done after round 1, 230 s left: RL in this call" in log
    # the warm start's evaluation ran before the arms, the GPU an H100's (as runs 36 and 38's)
    assert "the GPU (79.6 GiB) holds it or 2 RL arms, not both" in log
    began = _clock(re.search(r"\[([\d:]+)\] RL and control from /tmp/repro/warm1", log).group(1))
    evaluated = _clock(re.search(r"\[([\d:]+)\] warm start: 1000:", log).group(1))
    assert evaluated < began
    assert all("the GPU (79.6 GiB) holds it or 2 RL arms, not both" in every[k]["calls_log"] for k in (36, 38))
    first = int(re.search(r"call ends after (\d+) s of RL: call again", log).group(1))
    second = int(re.findall(r"call ends after (\d+) s of RL: call again", log)[1])
    more = int(re.search(r"last call: RL (\d+) s more", log).group(1))
    assert spent == [("2.1", "5"), ("2.1", "5"), ("8.5", "24"), ("8.5", "24"), ("7.08", "41"), ("7.08", "41")]
    assert (f"The warm start was done with {left} s of call 1 left; its evaluation ran first (\"the GPU (79.6 GiB) "
            "holds it or 2 RL arms, not both\", as on run 36's and run 38's H100), then RL began, for "
            f"{first} s of RL, {spent[0][1]} steps each; it went on in call 2 (sent {gaps[0]} s after call 1 "
            f"returned; to {second} s, {spent[2][1]} steps) and in the last call (sent {gaps[1]} s after call 2 "
            f"returned) for {more} s more") in section
    n = len(rl["curve"])
    assert (n, len(control["curve"]), rl["steps"], control["steps"]) == (41, 41, 41, 41)
    assert [w["steps"] for w in published["curves"]["windows"]][-1] == [40, n - 1]
    assert int(calls[0]["RL_TOTAL_S"]) == 20 * 60 and "after_18.2_min" in published["targets"]["rl_gain_points_ge_15"]
    # the warm start: one round, its probes, two overshoots, a stop in the band under both restart rules
    rewards = published["training_reward_at_t1"]
    assert abs(rewards["control"]["last_10"] - rewards["control"]["steps_0_4"]) < 0.01
    args = _check_arms_and_one_round(section, published, log, workers=2, minutes="8.15", control_reward="stayed flat")
    probes = {c["step"]: c["probe_strict"] for c in stage["curve"] if "probe_strict" in c}
    early = [v for step, v in probes.items() if step <= 400]
    assert sorted(probes) == [150, 200, 250, 300, 350, 400, 450, 452, 454, 456] and max(early) < args["stop_at"]
    assert (f"probes {min(early):.1f}-{max(early):.1f} % from step 150 to 400 and {probes[450]:.1f} % at 450"
            in section)
    stop = stage["stop"]
    shots = stop["overshoots"]
    assert [(s["step"], s["back_to"], s["probe_every"]) for s in shots] == [(500, 450, 10), (460, 450, 2)]
    assert all(s["probe_strict"] > args["stop_above"] for s in shots)
    assert (f"the probe at 500 read {shots[0]['probe_strict']:.1f} %, over the band's top, and went back to 450 "
            f"(probes every 10 steps); the probe at 460 read {shots[1]['probe_strict']:.1f} %, over the top again, "
            f"and went back to 450 (probes every 2 steps): {probes[452]:.1f} % at 452, {probes[454]:.1f} % at 454 and "
            f"{probes[456]:.1f} % at 456, two in a row in the band, and its confirmation on "
            f"{3 * args['confirm_per_length']} new documents {_confirmed(stop)} %, in the band") in section
    assert probes[452] < args["stop_at"] <= probes[454] and probes[456] <= args["stop_above"]
    assert args["stop_at"] <= float(_confirmed(stop)) <= args["stop_above"]
    _check_clean_stop(section, stop, args, step=456, seconds=288)
    warm, after = published["eval_warmstart"]["results"], published["eval_rl"]["results"]
    held_back = published["eval_rl_permuted"]["results"]
    assert _warm_start_line(warm, "codes") in section
    rl_all, held_all, held_32, held_far = _check_more_pairs(section, published)
    # the targets: all five pass, for the first time
    targets = published["targets"]
    assert all(t["passed"] for t in targets.values()) and len(targets) == 5
    rl_gain, held = _paired(warm, after, train), _paired(warm, held_back, train)
    net, need = rl_gain[0] - rl_gain[1], math.ceil(Fraction(15 * 144, 100))
    assert (net, need) == (39, 22) and _strict_score(after, train) - _strict_score(warm, train) >= 15
    kept_target = targets["keeps_80pct_at_8x"]
    assert (kept_target["after_18.2_min"], kept_target["warm_start"]) == (0.824, 0.67)
    assert _kept_at_32k(published, "rl") >= Fraction(8, 10) and _strict_score(after, train) >= args["stop_at"]
    assert abs(held[3]) < 1.96 and targets["control_within_noise"]["after_18.2_min"]["mcnemar_z"] == -1.9
    count = {k: sum(t["passed"] for t in f["targets"].values()) for k, f in files.items()}
    assert [k for k, c in count.items() if c == 5] == [39]
    assert [k for k, c in count.items() if c == 4] == [8, 9, 11, 12, 14, 17, 29, 32, 37]
    assert (f"**All five targets pass**, in one run for the first time (issue 22's bar): RL gained {rl_gain[2]} points "
            f"({net} more documents right of 144; 15 points need {need}), z {rl_gain[3]:.2f}; 32K kept "
            f"{_printed(_kept_at_32k(published, 'rl'), 2)}x of RL's training-length score, "
            f"{_printed(_strict_score(after, train))} %, over the band's 30 % floor (the target asks 0.80x); the "
            f"control stayed within its noise ({held[2]}, z {held[3]:.2f}); untrained 0.00; every rollout checked. "
            "Runs 8, 9, 11, 12, 14, 17, 29, 32 and 37 had met four.") in section
    # the caveats: a narrow pass, a fall over all lengths (as in runs 36 and 37), and RL's 15 met in 5 runs of 24
    assert held_all[3] <= -1.96 and -1.96 < held[3] < -1.8
    at_1k = _paired(warm, held_back, [1000])
    assert at_1k[3] <= -1.96
    passed_but_fell = [k for k, f in files.items() if f["targets"]["control_within_noise"]["passed"] and _paired(
        f["eval_warmstart"]["results"], f["eval_rl_permuted"]["results"], everything)[3] <= -1.96]
    assert passed_but_fell == [8, 11, 28, 39]
    gains = _rl_gains(files)
    met = [k for k, g in gains.items() if g >= 15]
    assert met == [9, 14, 29, 37, 39] and len(files) == 24
    assert (f"The control passed narrowly, by the rule set before the runs (|z| under 1.96), z {held[3]:.2f}, and over "
            f"all 288 documents it fell past its noise ({held_all[2]}, z {held_all[3]:.2f}), as the controls of runs "
            f"8, 11 and 28 did while within their noise at 1K-4K; at 1K alone it lost {at_1k[2]} (z {at_1k[3]:.2f}). "
            "And RL has gained its 15 points in 5 of the 24 runs evaluated from run 5 on (runs 9, 14, 29, 37 and 39): "
            "one run meeting all five is one draw, not a rate."
            ) in section
    # per length: every gain past its noise; RL's answers
    per_length = {k: _paired(warm, after, [k]) for k in everything}
    assert all(p[3] >= 1.96 for p in per_length.values())
    shown_lengths = [f"{k // 1000}K {p[2]} (z {p[3]:.2f})" for k, p in per_length.items()]
    far = _paired(warm, after, longer)
    assert far[2] == "+38.2" and _strict_score(after, longer) - _strict_score(warm, longer) > (
        _strict_score(after, train) - _strict_score(warm, train))
    assert (f"RL gained past its noise at every length: {', '.join(shown_lengths[:-1])} and {shown_lengths[-1]}, "
            f"more at 8K-32K ({far[2]}) than at the training lengths ({rl_gain[2]})") in section
    kinds = {arm: P.answer_kinds(r, train) for arm, r in (("warm", warm), ("rl", after), ("control", held_back))}
    w, r_, c = kinds["warm"], kinds["rl"], kinds["control"]
    assert all(r_[k] < w[k] for k in ("reversed", "one_place", "other_code", "stored_wrong", "lost_in_memory",
                                      "lost_answering"))
    assert (f"Its gain came from each kind of miss the start made: one digit in place {w['one_place']} -> "
            f"{r_['one_place']}, another code {w['other_code']} -> {r_['other_code']}, the code reversed "
            f"{w['reversed']} -> {r_['reversed']}; codes stored wrong {w['stored_wrong']} -> {r_['stored_wrong']}, "
            f"lost in memory {w['lost_in_memory']} -> {r_['lost_in_memory']}, lost answering {w['lost_answering']} "
            f"-> {r_['lost_answering']}.") in section
    windows = published["curves"]["windows"]
    assert rewards["rl"]["last_10"] >= 2 * rewards["rl"]["steps_0_4"]
    assert (f"Its training reward doubled ({rewards['rl']['steps_0_4']:.2f} -> {rewards['rl']['last_10']:.2f}) and "
            f"its entropy fell ({windows[0]['entropy']['rl']:.3f} over steps 0-9, {windows[3]['entropy']['rl']:.3f} "
            "over 30-39)") in section
    # the start: in the band, its flipped digits over the clean starts', under run 36's

    def flipped(results: list[dict[str, Any]]) -> tuple[int, int, Fraction]:
        counts = _digit_flips([r for r in results if r["length"] in train])
        copies, changed = sum(c for c, _ in counts.values()), sum(f for _, f in counts.values())
        return changed, copies, Fraction(100 * changed, copies)

    start_flips, rl_flips, run36_flips = flipped(warm), flipped(after), flipped(every[36]["eval_warmstart"]["results"])
    assert Fraction(45, 10) < start_flips[2] < run36_flips[2]
    assert "clean starts' memory updates flipped 0.4-4.5 % of the digits they copied" in _bench_section(
        "**Confused digits**", "**Run 30**")
    assert (f"A start in the band (confirmation {_confirmed(stop)} %, evaluation "
            f"{_printed(_strict_score(warm, train))} % at 1K-4K), kept {_printed(_kept_at_32k(published), 2)}x at 32K; "
            "its memory updates flipped "
            f"{_printed(start_flips[2])} % of the digits they copied at 1K-4K ({start_flips[0]} of {start_flips[1]}), "
            f"over the clean starts' 0.4-4.5 % in \"Confused digits\" and under run 36's {_printed(run36_flips[2])} %; "
            f"RL's model flipped {_printed(rl_flips[2])} % ({rl_flips[0]} of {rl_flips[1]})") in section
    # KL 0.02 against runs 36 and 37's controls at 0.01: not a tested difference
    run36, run37 = (_paired(files[k]["eval_warmstart"]["results"], files[k]["eval_rl_permuted"]["results"], train)
                    for k in (36, 37))
    assert [f["rl_permuted_stage"]["args"]["kl_coef"] for f in (files[36], files[37])] == [0.01, 0.01]
    assert run36[2] == held[2] and run36[3] <= -1.96 < held[3] and run37[2] < held[2]
    start37 = _strict_score(files[37]["eval_warmstart"]["results"], train)
    assert (f"KL 0.02 did not stop the control's fall: {held[2]} at 1K-4K here, against run 37's {run37[2]} (z "
            f"{run37[3]:.2f}) at 0.01 from a start of {_printed(start37)} %, and the same {run36[2]} as run 36's at "
            f"0.01 (z {run36[3]:.2f}), one side of the 1.96 line rather than the other. A smaller fall than run 37's, "
            "from one run at 0.02 against one at 0.01: not a tested difference.") in section
    reward37 = files[37]["training_reward_at_t1"]["control"]
    entropy = {arm: [w_["entropy"][arm] for w_ in windows] for arm in ("rl", "control")}
    assert all(a < b for a, b in zip(entropy["rl"], entropy["control"], strict=True))
    assert (f"Its training reward stayed flat ({rewards['control']['steps_0_4']:.2f} -> "
            f"{rewards['control']['last_10']:.2f}; run 37's fell, {reward37['steps_0_4']:.2f} -> "
            f"{reward37['last_10']:.2f}), its entropy stayed over RL's in every 10-step window "
            f"({min(entropy['control']):.3f}-{max(entropy['control']):.3f} against "
            f"{min(entropy['rl']):.3f}-{max(entropy['rl']):.3f}), and its misses grew as half-copied codes (one digit "
            f"in place {w['one_place']} -> {c['one_place']}; another code {w['other_code']} -> {c['other_code']}), "
            f"codes stored wrong ({w['stored_wrong']} -> {c['stored_wrong']}) and lost answering "
            f"({w['lost_answering']} -> {c['lost_answering']}).") in section
    assert [k for k, f in files.items() if f["rl_permuted_stage"]["args"]["kl_coef"] == 0.02] == [38, 39]
    assert "The next run: this plan again, unchanged, to see whether all five repeat." in section
    # bench/README's targets table: run 39 in each of the five memagent rows
    readme = (ROOT / "bench" / "README.md").read_text().splitlines()
    at = next(k for k, line in enumerate(readme) if line.startswith("| `examples/memagent/small_scale`"))
    gain_row, far_row, control_row, untrained_row, audit_row = readme[at:at + 5]
    assert "Runs 4-39 (2026-12-01/06" in gain_row
    at_32 = _paired(warm, after, [32000])
    assert (f"Run 39 (run 38's plan, unchanged, on an H100; a start in the band, "
            f"{_printed(_strict_score(warm, train))} %, one round of {stop['step']} steps; {rl['seconds'] / 60:.1f} "
            f"min, {n} steps): "
            f"**{_printed(_strict_score(after, train))} % ({rl_gain[2]}, z {rl_gain[3]:.2f}; won {rl_gain[0]}, lost "
            f"{rl_gain[1]})** |") in gain_row
    assert "PASS in runs 9 (+24.3), 14 (+34.7), 29 (+50.7), 37 (+20.1) and 39 (+27.1); MISS in runs 4-8," in gain_row
    assert (f"Run 39: {_printed(_strict_score(after, [32000]))} % vs {_printed(_strict_score(after, train))} % "
            f"({_printed(_kept_at_32k(published, 'rl'), 2)}x; warm start {_printed(_kept_at_32k(published), 2)}x; "
            f"32K {at_32[2]}, z {at_32[3]:.2f}; won {at_32[0]}, lost {at_32[1]}) |") in far_row
    assert "PASS in runs 4, 6-9, 11, 12, 14, 17, 32, 35, 37 and 39, MISS in runs 5, 10, 19," in far_row
    assert (f"Run 39 (run 38's plan; {control['seconds'] / 60:.1f} min, {len(control['curve'])} steps, entropy "
            f"{_rl_start_entropy(published):.2f}): {_printed(_strict_score(warm, train))} -> "
            f"{_printed(_strict_score(held_back, train))} % ({held[2]}, z {held[3]:.2f}; won {held[0]}, lost "
            f"{held[1]}), 8K-32K {held_far[2]} (z {held_far[3]:.2f}), all 288 documents {held_all[2]} (z "
            f"{held_all[3]:.2f}) |") in control_row
    assert "PASS at the training lengths in runs 5, 8, 11, 12, 17, 19, 23, 26, 27, 28, 29, 30, 32, 38 and 39 (" in (
        control_row)
    assert control_row.endswith(f", run 39 held there (z {held_far[3]:.2f}) but not over all lengths (z "
                                f"{held_all[3]:.2f}) |")
    assert abs(held_far[3]) < 1.96
    assert all(r["sub_em_strict"] == 0 for r in published["eval_untrained"]["results"])
    assert targets["untrained_strict_near_0"]["strict"] == 0.0
    assert "0.00 at every length in runs 4-23, 25-30, 32 and 35-39 (" in untrained_row
    assert _audit_row_entry(39, published["audit"]) + " | PASS |" in audit_row
    # the example README's paragraph, and what the runs from run 5 on say
    example = " ".join((HERE / "README.md").read_text().split())
    assert ("Run 39 was run 38's plan again, unchanged (`RL_KL=0.02` in both arms), on an H100 (2 demonstration "
            f"workers). Its warm start stopped in one round at step {stop['step']}, in the band "
            f"({_printed(_strict_score(warm, train))} % at 1K-4K, {_printed(_kept_at_32k(published), 2)}x at 32K; its "
            f"confirmation read {_confirmed(stop)} %), after {len(shots)} overshoots, its copied digits flipped "
            f"{stop['flips']:.1f} % at its stop and {stop['reversed']:.1f} % reversed, both under their limits. RL had "
            f"{rl['seconds'] / 60:.1f} minutes ({n} steps) of the 20 planned: {rl_gain[2]} at 1K-4K (z "
            f"{rl_gain[3]:.2f}; won {rl_gain[0]}, lost {rl_gain[1]}), {far[2]} at 8K-32K (z {far[3]:.2f}), and 32K "
            f"kept {_printed(_kept_at_32k(published, 'rl'), 2)}x ({at_32[2]}, z {at_32[3]:.2f}); the control stayed "
            f"within its noise, narrowly ({held[2]}, z {held[3]:.2f}), and fell past it over all 288 documents "
            f"({held_all[2]}, z {held_all[3]:.2f}); untrained 0.00, every rollout checked: all five targets "
            "(bench/README, \"Run 39\")") in example
    assert "Over the twenty-four runs from run 5 on" in example
    ahead, _ = _rl_against_control(files)
    assert all(w_ > lo for w_, lo, _, _ in ahead.values())
    rose, sign_p = _sign_test(list(gains.values()))
    assert rose == 20 and (f"gained over its start in twenty "
                           f"({_printed(sum(gains.values()) / len(gains), plus=True)} points on average; sign "
                           f"test p {sign_p:.3f})") in example
    assert ("Every target has passed, four at once in runs 8, 9, 11, 12, 14, 17, 29, 32 and 37, all five in run 39 "
            f"alone: its control passed narrowly (z {held[3]:.2f}, where 1.96 is the line) and fell past its noise "
            f"over all 288 documents (z {held_all[3]:.2f}), and RL's 15 points have come in 5 of the twenty-four runs "
            "(9, 14, 29, 37 and 39), so one run meeting all five is one draw, not a rate: see bench/README, \"Run 8\" "
            "to \"Run 39\".") in example
    # README's summary and the CHANGELOG's line
    summary = " ".join((ROOT / "README.md").read_text().split())
    assert "thirty-nine runs' results (eight lost, three stopped)" in summary
    assert "two documents short: all five came first in run 39;" in summary
    assert (f"run 39, run 38's plan again on an H100, stopped its start in the band "
            f"({_printed(_strict_score(warm, train))} %), and RL, with {rl['seconds'] / 60:.1f} of its 20 minutes, "
            f"gained {rl_gain[2]} (z {rl_gain[3]:.2f}), 32K kept {_printed(_kept_at_32k(published, 'rl'), 2)}x, while "
            f"its control stayed within its noise, narrowly ({held[2]}, z {held[3]:.2f}; over all 288 documents "
            f"{held_all[2]}, z {held_all[3]:.2f}): all five targets, the first run to meet them, though KL 0.02 did "
            "not stop the control's fall and one run meeting all five is one draw, not a rate)") in summary
    changelog = " ".join((ROOT / "CHANGELOG.md").read_text().split())
    assert (f"Run 39 of the small-scale reproduction is in `bench/results/` (issue 22): run 38's plan again "
            f"(`RL_KL=0.02` in both arms), in three calls on an H100; a start in the band "
            f"({_printed(_strict_score(warm, train))} %), RL {rl_gain[2]} points (z {rl_gain[3]:.2f}) at 1K-4K in {n} "
            f"steps, 32K kept {_printed(_kept_at_32k(published, 'rl'), 2)}x, the control {held[2]} (z {held[3]:.2f}), "
            f"within its noise narrowly and past it over all 288 documents ({held_all[2]}, z {held_all[3]:.2f}): all "
            "five targets, in one run for the first time.") in changelog
