"""`agentgraphs view`: the HTML report of a REAL run, checked in a real headless Chromium (CDP).

The run: a user's own AgentSpec (tests/viewer/support.py: solve -> calculator -> answer, concat layout)
on the tiny Qwen through a scripted policy (text chosen here, ids and log-probs from the real model),
so one training sequence holds prompt, trained output, template glue, a tool observation and more output.
The browser tests skip where no chromium binary exists (CI installs the Debian package `chromium`).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentgraphs.batch import run_file
from agentgraphs.cli import app
from agentgraphs.testing.browser import HeadlessChromium, find_chromium
from agentgraphs.testing.runs import synthetic_records
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.viewer.report import write_report, write_report_records
from agentgraphs.viewer.run_data import read_run

from .support import TOOL_RESULT

READY = "document.body && document.body.dataset.ready === '1'"
needs_chromium = pytest.mark.skipif(find_chromium() is None,
                                    reason="no chromium binary on PATH (Debian package `chromium`)")


def _script(call: ScriptCall) -> str:
    if call.prompt_text.count("<|im_start|>assistant") == 1:
        if "long" in call.prompt_text:
            return "I will think about this for a very long time before I use the calculator at all."
        return "Let me use the calculator."
    return "The answer is \\boxed{42}."


@pytest.fixture(scope="module")
def tool_run(tiny_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run: completed, truncated and failed rollouts of the tool agent."""
    out = tmp_path_factory.mktemp("viewer-run")
    data = out / "data.jsonl"
    rows = [{"input": "What is 6*7?", "label": "42"}, {"input": "What is 6 times 7?", "label": "41"},
            {"input": "Take a long look: 6*7?", "label": "42"}]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n", encoding="utf-8")
    run_file("tests.viewer.support:TOOL_AGENT", data, ScriptedPolicy(tiny_engine, _script), out,
             concurrency=1, max_new_tokens=16)
    return out


@pytest.fixture(scope="module")
def report(tool_run: Path) -> Path:
    result = CliRunner().invoke(app, ["view", str(tool_run), "--out", str(tool_run / "view" / "report.html")])
    assert result.exit_code == 0, result.output
    return tool_run / "view" / "report.html"


def _payloads(report: Path) -> list[dict[str, Any]]:
    text = report.read_text(encoding="utf-8")
    body = re.search(r'<script type="application/x-ndjson" id="ag-rollouts">(.*?)</script>', text, re.S)
    assert body is not None
    return [json.loads(line) for line in body.group(1).split("\n")]


def test_report_is_self_contained_and_roles_follow_the_training_sequence(report: Path, tool_run: Path,
                                                                         qwen25: Any) -> None:
    html = report.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "the report must not load anything"
    records = list(read_run(tool_run))
    payloads = _payloads(report)
    assert [p["status"] for p in payloads] == [r.sample["status"] for r in records] == \
        ["completed", "completed", "truncated", "failed"]
    seq, turns = payloads[0]["seqs"][0], records[0].turns
    roles = [r for r, n in seq["r"] for _ in range(n)]
    tokens = records[0].sequences[0]["tokens"]
    # trained positions are exactly the engine's outputs; the observation decodes to the tool's result
    trained = [t for t, r in zip(tokens, roles) if r == 1]
    assert trained == turns[0]["output_ids"] + turns[1]["output_ids"]
    assert qwen25.decode([t for t, r in zip(tokens, roles) if r == 3]) == TOOL_RESULT
    glue = qwen25.decode([t for t, r in zip(tokens, roles) if r == 2])
    assert glue.count("<|im_start|>") == 2 and "<tool_response>" in glue and "</tool_response>" in glue
    assert roles[:len(turns[0]["prompt_ids"])] == [0] * len(turns[0]["prompt_ids"])


@needs_chromium
def test_report_in_chromium(report: Path, tool_run: Path, qwen25: Any, tmp_path: Path) -> None:
    records = list(read_run(tool_run))
    solve = records[0].turns[0]
    with HeadlessChromium() as browser:
        browser.open(report, ready=READY)
        assert browser.evaluate("document.getElementById('row-count').textContent") == "4 of 4 rollouts"
        assert browser.evaluate("document.querySelectorAll('#table-body .row').length") == 4
        # the first rollout is open; its reward, in the table and in the detail
        assert browser.evaluate("document.getElementById('detail-reward').textContent") == "1"
        assert browser.evaluate("document.querySelector('.row .c-2').textContent") == "1.000"
        # the graph path: every node that ran, the tool node (no LLM call) included, LLM nodes with their calls
        chips = browser.evaluate("[...document.querySelectorAll('.graph-path .node-chip')].map(c => [c.textContent,"
                                 " c.classList.contains('no-llm')])")
        assert chips == [["solve \u00d71", False], ["calculator", True], ["answer \u00d71", False]]
        # a trained token: the engine's id and log-prob in its tooltip
        first = browser.evaluate("(() => { const t = document.querySelector('#seq-0 .tok.trained');"
                                 " return [t.textContent, t.title]; })()")
        assert first[0] == qwen25.decode([solve["output_ids"][0]])
        assert f"id {solve['output_ids'][0]} " in first[1]
        assert f"log-prob {solve['output_logprobs'][0]:.6f}" in first[1]
        # masked glue and the observation, with the token texts the tokenizer gives for their ids
        glue = browser.evaluate("[...document.querySelectorAll('#seq-0 .tok.glue')].map(t => [t.textContent, t.title])")
        assert "<|im_start|>" in [g[0] for g in glue]
        for text, title in glue:
            tid = int(re.search(r"id (\d+)", title).group(1))
            assert text.replace("\u21b5", "") == qwen25.decode([tid]) and "glue" in title
        obs = browser.evaluate("[...document.querySelectorAll('#seq-0 .tok.obs')].map(t => t.textContent).join('')")
        assert obs == TOOL_RESULT
        # the status filter
        browser.evaluate("(() => { const s = document.getElementById('status-filter'); s.value = 'failed';"
                         " s.dispatchEvent(new Event('change')); })()")
        assert browser.evaluate("document.getElementById('row-count').textContent") == "1 of 4 rollouts"
        assert browser.evaluate("[...document.querySelectorAll('#table-body .row .status')].map(s => s.textContent)") \
            == ["failed"]
        browser.evaluate("(() => { const s = document.getElementById('status-filter'); s.value = 'truncated';"
                         " s.dispatchEvent(new Event('change')); document.querySelector('#table-body .row').click(); })()")
        assert "truncated" in browser.evaluate("document.querySelector('#detail h2').textContent")
        finish = browser.evaluate("[...document.querySelectorAll('#detail details.turn summary')].map(s => s.textContent)")
        assert "finish length" in finish[0] and "retries 0" in finish[0]
        # sorting by reward, descending after two clicks
        browser.evaluate("(() => { const s = document.getElementById('status-filter'); s.value = '';"
                         " s.dispatchEvent(new Event('change')); })()")
        browser.evaluate("(() => { const h = document.querySelector('[data-key=reward]'); h.click(); h.click(); })()")
        rewards = browser.evaluate("[...document.querySelectorAll('#table-body .row .c-2')].map(c => c.textContent)")
        assert rewards == sorted(rewards, reverse=True) and rewards[0] == "1.000"
        browser.evaluate("document.querySelector('#table-body .row').click()")
        browser.evaluate("document.getElementById('seq-0').scrollIntoView()")
        shot = browser.screenshot(tmp_path / "viewer.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


@needs_chromium
def test_thousand_rollouts_and_a_long_document_open_with_a_bounded_dom(qwen25: Any, tmp_path: Path) -> None:
    words = qwen25.encode(" the quick brown fox jumps over a lazy dog while memory agents read long books")
    target = write_report_records(synthetic_records(1000, 448_000, words, turns_per_rollout=2, prompt_tokens=200, output_tokens=25), qwen25, tmp_path / "big.html",
                                  summary={"agent": "synthetic"}, title="1000 rollouts")
    count = "document.getElementsByTagName('*').length"
    with HeadlessChromium() as browser:
        browser.open(target, ready=READY)
        assert browser.evaluate("document.getElementById('row-count').textContent") == "1000 of 1000 rollouts"
        rows = browser.evaluate("document.querySelectorAll('#table-body .row').length")
        assert 10 <= rows <= 40  # only the visible rows exist
        initial = browser.evaluate(count)
        assert initial < 2_500, initial
        # scrolling to the end renders the last rows, still a bounded number
        browser.evaluate("(() => { const b = document.getElementById('table-body'); b.scrollTop = b.scrollHeight;"
                         " b.dispatchEvent(new Event('scroll')); })()")
        browser.wait_for("[...document.querySelectorAll('#table-body .row')].some(r => r.dataset.pos === '999')")
        assert browser.evaluate("document.querySelectorAll('#table-body .row').length") <= 40
        # the long rollout: 40 turns over 448K document tokens; opening a turn shows a collapsed prompt
        browser.evaluate("document.querySelector('[data-key=index]').click()")  # sort by index: rollout 0 first
        browser.evaluate("document.querySelector('#table-body .row').click()")
        assert browser.evaluate("document.querySelectorAll('#detail details.turn').length") == 40
        browser.evaluate("(() => { const d = document.getElementById('turn-3'); d.open = true; })()")
        browser.wait_for("document.querySelector('#turn-3 .tokens')")
        opened = browser.evaluate(count)
        assert opened < initial + 3_000, opened
        more = browser.evaluate("document.querySelector('#turn-3 button.more').textContent")
        prompt_len = 3 + 448_000 // 40 + 5
        assert more == f"show {prompt_len - 256 - 384} more tokens"
        browser.evaluate("document.querySelector('#turn-3 button.more').click()")
        assert browser.evaluate(count) - opened == 2000  # one chunk of token spans, nothing more


def test_view_errors_name_the_fix(tmp_path: Path, tool_run: Path) -> None:
    missing = CliRunner().invoke(app, ["view", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "not a directory" in " ".join(missing.output.split())
    run = tmp_path / "sglang-run"
    run.mkdir()
    for name in ("samples.jsonl", "traces.jsonl"):
        (run / name).write_text((tool_run / name).read_text(encoding="utf-8"), encoding="utf-8")
    (run / "summary.json").write_text(json.dumps({"engine": "sglang:http://127.0.0.1:30000"}), encoding="utf-8")
    no_tok = CliRunner().invoke(app, ["view", str(run)])
    assert no_tok.exit_code == 2 and "--tokenizer DIR" in " ".join(no_tok.output.split())


def test_a_run_over_sglang_names_its_tokenizer_for_view(tmp_path: Path, tiny_engine: Any,
                                                        tiny_model_dir: Path) -> None:
    """`agentgraphs run --engine sglang:... --tokenizer DIR` writes DIR in summary.json: `view` needs no flag."""
    from agentgraphs.batch import run_file
    from agentgraphs.testing.server import SGLangTestServer

    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"input": "What is 2+2?", "label": "4"}) + "\n", encoding="utf-8")
    with SGLangTestServer(tiny_engine, port=0) as server:
        run_file("agentgraphs.testing.agents:TWO_TURN", rows, f"sglang:{server.url}", tmp_path / "run",
                 tokenizer=str(tiny_model_dir), max_new_tokens=6)
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["tokenizer"] == str(tiny_model_dir.resolve())
    viewed = CliRunner().invoke(app, ["view", str(tmp_path / "run"), "--out", str(tmp_path / "r.html")])
    assert viewed.exit_code == 0, viewed.output


@pytest.mark.parametrize("which", ["qwen25", "qwen3"])
def test_glue_and_observation_split_follows_each_template(which: str, request: pytest.FixtureRequest) -> None:
    from agentgraphs.chat import ChatTemplate
    from agentgraphs.viewer.roles import GLUE, OBS, GlueScaffold

    tok = request.getfixturevalue(which)
    ids = ChatTemplate(tok).glue([{"role": "tool", "content": "result: 42"}, {"role": "user", "content": "Go on."}])
    texts = [tok.decode([i]) for i in ids]
    roles = GlueScaffold.for_tokenizer(tok).split(texts)
    assert "".join(t for t, r in zip(texts, roles) if r == OBS) == "result: 42Go on."
    assert "".join(t for t, r in zip(texts, roles) if r == GLUE).count("<|im_start|>") == 3


# ------------------------------------------------------------------------------------------------------------
# graphs that showed viewer bugs: a repeated node, an untrained turn after a trained one, a corrupted turn
def _open_all(browser: HeadlessChromium) -> None:
    """Open every turn and sequence of the selected rollout (their tokens render when opened)."""
    browser.evaluate("[...document.querySelectorAll('#detail details')].forEach(d => { d.open = true; })")
    browser.wait_for("[...document.querySelectorAll('#detail details')].every(d => d.querySelector('.body'))")


def _memagent_script(call: ScriptCall) -> str:
    # the memory updates note something; the final answer never boxes one: the seed's sub_em counts that
    return "I do not know." if "\\boxed" in call.prompt_text else "Noted."  # only the final prompt asks for a box


@pytest.fixture(scope="module")
def memagent_run(tiny_engine: Any, qwen25: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """MemAgent's own graph reading a document in 4 chunks: prepare -> memory_update x4 -> final_answer."""
    out = tmp_path_factory.mktemp("memagent-run")
    document = "The capital of France is Paris. " * 8
    size = len(qwen25.encode(document, add_special_tokens=False))
    data = out / "data.jsonl"
    data.write_text(json.dumps({"input": "What is the capital of France?", "label": ["Paris"],
                                "metadata": {"context": document}}) + "\n", encoding="utf-8")
    run_file("memagent", data, ScriptedPolicy(tiny_engine, _memagent_script), out, max_new_tokens=16,
             options={"chunk_tokens": -(-size // 4), "memory_max_new_tokens": 16, "final_max_new_tokens": 16})
    return out


@needs_chromium
def test_a_repeated_node_shows_each_step_with_its_own_call(memagent_run: Path) -> None:
    rec = next(iter(read_run(memagent_run)))
    assert rec.trace["path"] == ["prepare"] + ["memory_update"] * 4 + ["final_answer"]
    assert [t["node"] for t in rec.turns] == ["memory_update"] * 4 + ["final_answer"]
    assert rec.trace["path_turns"] == [[], [0], [1], [2], [3], [4]]  # which calls each step made
    report = write_report(memagent_run, memagent_run / "report.html")
    with HeadlessChromium() as browser:
        browser.open(report, ready=READY)
        chips = browser.evaluate("[...document.querySelectorAll('.graph-path .node-chip')].map(c => [c.textContent,"
                                 " c.classList.contains('no-llm'), c.title])")
        assert [c[:2] for c in chips] == [["prepare", True]] + [["memory_update \u00d71", False]] * 4 + \
            [["final_answer \u00d71", False]]
        assert [c[2] for c in chips[1:]] == [f"LLM calls: turns {k}" for k in range(5)]
        path = browser.evaluate("document.querySelector('#table-body .row .c-7').textContent")
        assert path == "prepare \u2192 memory_update \u00d74 \u2192 final_answer"


@needs_chromium
def test_the_headline_metric_is_strict_and_the_seed_metric_is_labelled(memagent_run: Path) -> None:
    """A model that never answers scores the seed's sub_em 1.0 (an empty answer counts): it must not lead."""
    rec = next(iter(read_run(memagent_run)))
    assert rec.trace["answer"] == "I do not know."  # no boxed answer: the scored answer is empty
    assert rec.trace["metrics"]["sub_em"] == 1.0 and rec.trace["metrics"]["sub_em_strict"] == 0.0
    report = write_report(memagent_run, memagent_run / "report.html")
    with HeadlessChromium() as browser:
        browser.open(report, ready=READY)
        summary = browser.evaluate("document.getElementById('run-summary').textContent")
        metrics = summary.split("metrics: ", 1)[1]
        assert metrics.startswith("sub_em_strict=0, "), summary
        assert "sub_em (lenient: can score without an answer)=1" in metrics
        assert summary.index("metrics:") < summary.index("mean reward:")
        cell = browser.evaluate("document.querySelector('#table-body .row .c-3').textContent")
        assert cell.startswith("sub_em_strict=0, ") and "sub_em (lenient" in cell


def _critique_script(call: ScriptCall) -> str:
    return "It is 42." if call.prompt_text.count("<|im_start|>assistant") == 1 else "Looks right to me."


@pytest.fixture(scope="module")
def critique_run(tiny_engine: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("critique-run")
    data = out / "data.jsonl"
    data.write_text(json.dumps({"input": "What is 6*7?", "label": "42"}) + "\n", encoding="utf-8")
    run_file("tests.viewer.support:CRITIQUE_AGENT", data, ScriptedPolicy(tiny_engine, _critique_script), out,
             max_new_tokens=16)
    return out


@needs_chromium
def test_an_untrained_turn_after_a_trained_one_outlines_nothing(critique_run: Path, tiny_model_dir: Path) -> None:
    from agentgraphs.viewer import check_run

    assert check_run(critique_run, tiny_model_dir).ok  # a clean run: nothing may be outlined
    rec = next(iter(read_run(critique_run)))
    solve, crit = rec.turns
    assert solve["trainable"] and not crit["trainable"] and len(rec.sequences) == 1
    report = write_report(critique_run, critique_run / "report.html")
    with HeadlessChromium() as browser:
        browser.open(report, ready=READY)
        _open_all(browser)
        assert browser.evaluate("document.querySelectorAll('#detail .tok.mismatch').length") == 0
        # the critique's prompt holds the trained solve output: shown trained, with its trainer log-prob
        trained = browser.evaluate("[...document.querySelectorAll('#turn-1 .tok.trained')].map(t => t.title)")
        assert len(trained) == len(solve["output_ids"])
        for title, lp in zip(trained, solve["output_logprobs"]):
            assert f"log-prob {lp:.6f}" in title and f"trainer log-prob {lp:.6f}" in title
        assert browser.evaluate("document.querySelectorAll('#turn-1 .tok.untrained').length") == len(crit["output_ids"])


@needs_chromium
def test_a_corrupted_trained_turn_is_shown_as_a_breach(tool_run: Path, tmp_path: Path, tiny_model_dir: Path) -> None:
    """A trained span re-encoded on the way to the trainer: one id of the answer turn differs in samples.jsonl."""
    from agentgraphs.viewer import check_run

    out = tmp_path / "corrupted"
    shutil.copytree(tool_run, out, ignore=shutil.ignore_patterns("view"))
    samples = [json.loads(raw) for raw in (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    rec = next(iter(read_run(tool_run)))
    answer = rec.turns[1]
    k = len(answer["prompt_ids"]) + 1
    seq = samples[0]["train_metadata"]["turns"][0]
    new = seq["tokens"][k] + 1
    seq["tokens"][k] = samples[0]["tokens"][k] = new
    (out / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    breaches = check_run(out).breaches
    assert [(b["kind"], b["node"], b["position"]) for b in breaches] == [("token_mismatch", "answer", k)]
    report = write_report(out, out / "report.html")
    with HeadlessChromium() as browser:
        browser.open(report, ready=READY)
        assert browser.evaluate("document.querySelector('#table-body .row .breach-badge').textContent") == "\u26a01"
        assert browser.evaluate("document.getElementById('detail-breaches').textContent").startswith("1 ")
        _open_all(browser)
        # the answer turn is still the trained turn it was (not "generated, not trained") ...
        assert browser.evaluate("document.querySelectorAll('#turn-1 .tok.untrained').length") == 0
        n = len(answer["output_ids"])
        roles = browser.evaluate(f"[...document.querySelectorAll('#turn-1 .tok')].slice(-{n}).map(t => t.className)")
        assert all("trained" in c.split() for c in roles)
        # ... and the corrupted token is outlined, in the turn and in the sequence, saying what check says
        for box in ("#turn-1", "#seq-0"):
            bad = browser.evaluate(f"[...document.querySelectorAll('{box} .tok.mismatch')].map(t => t.title)")
            assert len(bad) == 1, (box, bad)
            assert f"position {k}" in bad[0] and "BREACH token_mismatch" in bad[0]
            assert f"the engine returned id {answer['output_ids'][1]}" in bad[0]


# ------------------------------------------------------------------------------------------------------------
# edited traces: a turn removed from traces.jsonl, a prompt that is not what the engine saw
def _without_turn(run: Path, out: Path, turn: int) -> Path:
    """A copy of `run` whose first trace lost one turn (samples.jsonl unchanged: the trainer still trains it)."""
    shutil.copytree(run, out, ignore=shutil.ignore_patterns("report.html", "view"))
    traces = [json.loads(raw) for raw in (out / "traces.jsonl").read_text(encoding="utf-8").splitlines()]
    del traces[0]["turns"][turn]
    (out / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in traces), encoding="utf-8")
    return out


@needs_chromium
def test_a_turn_removed_from_the_trace_leaves_only_its_own_tokens_unaccounted(memagent_run: Path, tmp_path: Path,
                                                                             tiny_model_dir: Path) -> None:
    """MemAgent (per_turn) trains memory_update x4 + final_answer; traces.jsonl loses turn 1. Only turn 1's
    tokens lack an engine call: the later turns (shifted down by one) still own and train their sequences,
    and the report opens, the graph path showing the call it cannot find."""
    from agentgraphs.viewer import check_run

    rec = next(iter(read_run(memagent_run)))
    lost = rec.turns[1]
    out = _without_turn(memagent_run, tmp_path / "lost-turn", 1)
    report = check_run(out, tiny_model_dir)
    by_seq = {(b["kind"], b["sequence"]) for b in report.breaches}
    assert ("trace_turns", -1) in by_seq and ("sequence_count", -1) in by_seq, report.to_text()
    assert {s for _, s in by_seq} == {-1, 1}, report.to_text()  # sequences 0 and 2-4 are clean
    [untraced] = [b for b in report.breaches if b["kind"] == "untraced_token"]
    assert untraced["detail"].startswith(f"{len(lost['output_ids'])} trained tokens")
    assert report.unscored_tokens == len(lost["output_ids"])
    html = write_report(out, out / "report.html")
    [payload] = _payloads(html)
    assert [t.get("seq") for t in payload["turns"]] == [0, 2, 3, 4]  # each shown with the sequence training it
    assert payload["steps"][2]["calls"] == [1] and payload["steps"][-1]["missing"] == [4]
    with HeadlessChromium() as browser:
        browser.open(html, ready=READY)
        chips = browser.evaluate("[...document.querySelectorAll('.graph-path .node-chip')].map(c => [c.textContent,"
                                 " c.classList.contains('missing')])")
        assert chips[-1] == ["final_answer +1 missing", True], chips
        _open_all(browser)
        for k in (1, 2, 3):  # the trainer trains them: shown trained, nothing outlined
            assert browser.evaluate(f"document.querySelectorAll('#turn-{k} .tok.untrained').length") == 0
            assert browser.evaluate(f"document.querySelectorAll('#turn-{k} .tok.mismatch').length") == 0
        n = len(lost["output_ids"])
        assert browser.evaluate("document.querySelectorAll('#seq-1 .tok.mismatch').length") == n
        assert "agentgraphs check" in browser.evaluate("document.getElementById('detail-breaches').textContent")


@needs_chromium
def test_a_prompt_breach_shows_what_the_engine_saw_and_outlines_every_difference(tool_run: Path,
                                                                                  tmp_path: Path) -> None:
    """Two prompt tokens of the trained sequence edited in samples.jsonl: the turn's view shows the engine's ids,
    and both positions are outlined there and in the sequence (check reports the first, and counts the rest)."""
    from agentgraphs.viewer import check_run

    out = tmp_path / "prompt-edited"
    shutil.copytree(tool_run, out, ignore=shutil.ignore_patterns("view"))
    samples = [json.loads(raw) for raw in (out / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    seq = samples[0]["train_metadata"]["turns"][0]
    engine_saw = list(seq["tokens"])
    for k in (5, 9):
        seq["tokens"][k] = samples[0]["tokens"][k] = seq["tokens"][k] + 1
    (out / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    prompts = [b for b in check_run(out).breaches if b["kind"] == "prompt"]
    assert [(b["node"], b["position"]) for b in prompts] == [("solve", 5), ("answer", 5)]
    assert all("1 more of its positions differ" in b["detail"] for b in prompts)
    report = write_report(out, out / "report.html")
    with HeadlessChromium() as browser:
        browser.open(report, ready=READY)
        _open_all(browser)
        for box in ("#turn-0", "#turn-1", "#seq-0"):
            bad = browser.evaluate(f"[...document.querySelectorAll('{box} .tok.mismatch')].map(t => t.title)")
            assert [int(re.search(r"position (\d+)", t).group(1)) for t in bad] == [5, 9], (box, bad)
        shown = browser.evaluate("[...document.querySelectorAll('#turn-0 .tok.mismatch')].map(t => t.title)")
        for k, title in zip((5, 9), shown):  # the turn shows what its engine saw, and what the trainer has
            assert title.startswith(f"id {engine_saw[k]} ") and f"sequence has id {engine_saw[k] + 1}" in title


def test_view_refuses_an_empty_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A run that wrote no rollout (interrupted before its first result) got a report with nothing in it and
    exit 0, as if all were well; `check` already refused such a run (exit 2)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "samples.jsonl").write_text("", encoding="utf-8")
    (run / "traces.jsonl").write_text("", encoding="utf-8")
    (run / "summary.json").write_text(json.dumps({"engine": f"hf:{tiny_model_dir}"}), encoding="utf-8")
    from agentgraphs.errors import ConfigError

    with pytest.raises(ConfigError, match="hold no rollout: nothing to show"):
        write_report(run)
    result = CliRunner().invoke(app, ["view", str(run)])
    assert result.exit_code == 2 and "hold no rollout" in result.output, result.output
    assert not (run / "report.html").exists()


@pytest.mark.parametrize("damage, words", [
    (lambda t: t.pop("turns"), "line 1 has no 'turns'"),
    (lambda t: t.update(turns={"node": "solve"}), "line 1: 'turns' is a dict, not a list"),
    (lambda t: t["turns"][0].pop("output_logprobs"), "line 1: turn 0 has no 'output_logprobs'"),
    (lambda t: t["turns"][0].update(output_ids="12 13"), "line 1: turn 0's 'output_ids' is a str, not a list"),
])
def test_a_trace_from_another_version_is_refused_naming_the_field(tmp_path: Path, damage: Any, words: str) -> None:
    """A traces.jsonl line without its turns (another version's format) gave a report with no tokens and exit 0;
    a turn without output_logprobs ended `view` and `check` in a KeyError traceback."""
    from agentgraphs.errors import InputError
    from agentgraphs.testing.runs import write_run_dir
    from agentgraphs.testing.tiny_model import ensure_tiny_model
    from agentgraphs.viewer.check import check_run

    run = write_run_dir(synthetic_records(2, 60, [10, 20]), tmp_path / "run")
    lines = [json.loads(line) for line in (run / "traces.jsonl").read_text().splitlines()]
    damage(lines[0])
    (run / "traces.jsonl").write_text("".join(json.dumps(t) + "\n" for t in lines))
    for call in (lambda: write_report(run, tokenizer=ensure_tiny_model()), lambda: check_run(run)):
        with pytest.raises(InputError, match=re.escape(words)) as err:
            call()
        assert "traces.jsonl" in str(err.value) and "another agentgraphs version" in str(err.value)
    assert not (run / "report.html").exists()


def test_a_view_that_fails_leaves_no_half_report_and_a_directory_out_is_named(tmp_path: Path) -> None:
    """Before: a run damaged after its first rollout, or --out naming a directory, failed but left REPORT.part
    behind (the rollouts read so far); the directory's error was `[Errno 21] Is a directory: 'DIR.part' -> 'DIR'`."""
    from agentgraphs.testing.runs import write_run_dir
    from agentgraphs.testing.tiny_model import ensure_tiny_model

    run = write_run_dir(synthetic_records(3, 60, [10, 20]), tmp_path / "run")
    lines = (run / "samples.jsonl").read_text().splitlines()
    (run / "samples.jsonl").write_text("\n".join([lines[0], "garbage", lines[2]]) + "\n")
    target = tmp_path / "r.html"
    target.write_text("the last good report")
    tok = str(ensure_tiny_model())
    r = CliRunner().invoke(app, ["view", str(run), "--out", str(target), "--tokenizer", tok])
    assert r.exit_code == 2 and "line 2 is not valid JSON" in " ".join(r.output.split()), r.output
    assert target.read_text() == "the last good report" and sorted(p.name for p in tmp_path.iterdir()) == [
        "r.html", "run"]  # no r.html.part
    folder = tmp_path / "reports"
    folder.mkdir()
    r = CliRunner().invoke(app, ["view", str(write_run_dir(synthetic_records(1, 60, [10]), tmp_path / "ok")),
                                 "--out", str(folder), "--tokenizer", tok])
    said = "".join(r.output.split())  # rich wraps long paths mid-word
    assert r.exit_code == 2 and f"--out{folder}:isadirectory" in said and "reports/report.html" in said, r.output
    assert not (tmp_path / "reports.part").exists() and not any(folder.iterdir())
