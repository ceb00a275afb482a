"""The small-scale MemAgent reproduction (examples/memagent/small_scale) on CPU with a tiny model: the oracle
through MemAgent's graph, its training rows, the per-step `check` audit, the evaluation and the table."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
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


def test_evaluation_scores_as_the_seed_and_prints_its_table(engine: Any) -> None:
    rows = P.eval_rows(engine.tokenizer, CFG, [200], 2, "eval")
    results = P.evaluate(engine, rows, CFG)
    assert [r["length"] for r in results] == [200, 200]
    for r in results:  # an untrained model: no box, so the seed's sub_em counts a hit and the strict one does not
        assert r["sub_em_strict"] == 0.0 and (r["sub_em"] == 1.0) == (r["answered"] == 0.0)
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
        "--max-steps", "2", "--eval-every", "2", "--eval-from", "1", "--probe-per-length", "1", "--device", "cpu",
        "--demo-workers", "2", "--schedule", "cosine", "--stop-at", "0", "--confirm-per-length", "1")
    stage = json.loads((w / "warm" / "stage.json").read_text())
    # a mark of 0 % is reached by the first probe (step 2); the stop waits for the confirmation on new documents
    assert stage["stop"]["step"] == 2 and "confirmed on new documents: 0.0%" in stage["stop"]["reason"]
    assert {"probe_strict", "probe_digits", "confirm_strict"} <= set(stage["curve"][-1])
    cfg = P.ReproConfig.load(w / "model")
    tok = engine.tokenizer  # the same Qwen2.5 vocabulary
    docs = [r["metadata"]["context"] for k, n in ((0, 3), (1, 2))
            for r in P.needle_rows(tok, P.random_lengths(cfg, n, f"demo-{k}"), f"demo-{k}", cfg)]
    # one sequence per memory update and one for the answer, over the five documents of both workers
    assert stage["sequences"] == sum(-(-len(tok.encode(d, add_special_tokens=False)) // cfg.chunk_tokens) + 1
                                     for d in docs)
    run("rl", "--init", str(w / "warm"), "--out", str(w / "rl"), "--steps", "1", "--prompts", "2", "--samples", "2",
        "--device", "cpu", "--skip-flat")
    curve = json.loads((w / "rl" / "stage.json").read_text())["curve"]
    assert curve[0]["audit"]["breaches"] == 0 and curve[0]["sequences"] > 0
    # an untrained model never answers right: every group flat, so --skip-flat took no optimizer step
    assert curve[0]["reward_std"] == 0.0 and curve[0]["skipped"] == 1.0
    # a second run of two optimizer steps per rollout batch, resumed in another process: the curve and AdamW go on
    arm = ("--prompts", "2", "--samples", "2", "--device", "cpu", "--steps-per-rollout", "2", "--lr-warmup", "3")
    run("rl", "--init", str(w / "warm"), "--out", str(w / "rl2"), "--steps", "1", *arm)
    run("rl", "--init", str(w / "rl2"), "--out", str(w / "rl2"), "--steps", "2", "--resume", *arm)
    stage = json.loads((w / "rl2" / "stage.json").read_text())
    assert [c["step"] for c in stage["curve"]] == [0, 1] and len(stage["calls"]) == 2
    assert [c["optimizer_steps"] for c in stage["curve"]] == [2, 2]
    assert stage["calls"][0]["seed"] != stage["calls"][1]["seed"]  # the resumed part samples with other seeds
    # the seed's KL loss to where RL started, in both parts; the warm-up goes on where the first call left it
    assert stage["reference"] == str(w / "warm") and stage["args"]["kl_coef"] == 0.001
    # computed (nan without the KL loss) and 0: every group is flat here, so no gradient ever moved the weights
    assert [c["kl"] for c in stage["curve"]] == [0.0, 0.0]
    assert [c["lr"] for c in stage["curve"]] == [5e-5 / 3, 5e-5]  # optimizer steps 0-1, then 2-3 of a 3-step ramp
    import torch
    adam = torch.load(w / "rl2" / "optimizer.pt")
    assert {float(s["step"]) for s in adam["state"].values()} == {4.0}  # 2 + 2: the first call's moments went on
    refused = subprocess.run(script + ["rl", "--init", str(w / "rl2"), "--out", str(w / "rl2"), "--steps", "3",
                                       "--resume", "--lr", "1e-3", *arm], capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode != 0 and "lr was 5e-05, now 0.001" in refused.stderr
    run("eval", "--ckpt", str(w / "rl"), "--name", "RL", "--out", str(w / "eval.json"), "--device", "cpu")
    printed = run("table", str(w / "eval.json"))
    assert "| RL |" in printed and "strict sub_em" in printed


def _eval_file(path: Path, name: str, scores: dict[int, list[int]]) -> str:
    results = [{"length": n, "gold": f"{n}-{i}", "sub_em_strict": s, "em": s, "sub_em": 1, "answered": 1}
               for n, ss in scores.items() for i, s in enumerate(ss)]
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
    other = _eval_file(tmp_path / "o.json", "other", {1000: [1, 1, 1, 1, 1], 2000: [1, 1, 1, 1]})
    refused = subprocess.run([sys.executable, str(HERE / "reproduce.py"), "compare", base, other],
                             capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode != 0 and "not of the same documents" in refused.stderr
