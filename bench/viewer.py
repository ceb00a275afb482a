"""The HTML viewer on a large run: 1,000 rollouts plus one rollout over a 448K-token document.

    python bench/viewer.py [--quick]

Builds the report with `write_report_records` (the path `agentgraphs view` takes) from synthetic
MemAgent-shaped records (`agentgraphs.testing.runs`: 10 per_turn turns of 512 + 128 tokens per rollout;
one rollout reads a 448K-token document in 40 chunks; it is written last, so opening it is measured cold:
its JSON line parsed and its DOM built), then opens it in headless Chromium (CDP) and measures,
in the page (`performance.now()`): time to the first rendered table, the DOM size, one scroll frame of the
virtualised table (mean over 50 random positions), and opening the 448K-token rollout and one of its turns.
Targets: ready <= 3 s; a scroll frame <= 16 ms (60 frames/s); opening the long rollout <= 1 s; DOM <= 2,500
elements at load and <= 5,000 with a turn open. The browser part is skipped without a chromium binary.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

from agentgraphs.testing.browser import HeadlessChromium, find_chromium  # noqa: E402
from agentgraphs.testing.runs import synthetic_records  # noqa: E402
from agentgraphs.viewer.report import write_report_records  # noqa: E402

NAME = "viewer"
READY_MS, FRAME_MS, OPEN_MS, DOM_LOAD, DOM_OPEN = 3000, 16, 1000, 2500, 5000


def main() -> None:
    args = _common.parser(__doc__.splitlines()[0]).parse_args()
    rollouts, doc = (100, 56_000) if args.quick else (1000, 448_000)
    tok = _common.tiny_tokenizer()
    words = tok.encode(" the memory agent reads a long book chunk by chunk and keeps notes on what matters")
    # the long rollout last: the page opens the first one at load, so opening the last one is measured cold
    records = synthetic_records(rollouts, doc, words)[::-1]
    tokens = sum(len(s["tokens"]) for r in records for s in r.sequences)
    out = Path(args.results_dir) / "viewer-report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    write_report_records(records, tok, out, summary={"agent": "synthetic"}, title="bench")
    build_s = time.perf_counter() - t0
    size = out.stat().st_size
    out_tokens = sum(len(t["output_ids"]) for r in records for t in r.turns)
    print(f"report: {rollouts} rollouts, {tokens:,} sequence tokens ({doc:,}-token document in rollout 0): "
          f"built in {build_s:.1f} s, {size / 1e6:.1f} MB ({size / tokens:.1f} bytes per token)")
    result = {"rollouts": rollouts, "doc_tokens": doc, "tokens": tokens, "output_tokens": out_tokens,
              "build_s": round(build_s, 2), "bytes": size}
    passed = True
    summary = f"build {build_s:.1f} s, {size / 1e6:.1f} MB"
    if find_chromium() is None:
        print("no chromium binary: browser figures skipped (apt-get install chromium)")
    else:
        with HeadlessChromium(timeout_s=120) as b:
            b.open(out, ready="document.body && document.body.dataset.ready === '1'")
            ready = int(b.evaluate("document.body.dataset.readyMs"))
            dom_load = b.evaluate("document.getElementsByTagName('*').length")
            frame = b.evaluate("""(() => { const body = document.getElementById('table-body'); let t = 0;
                for (let i = 0; i < 50; i++) { body.scrollTop = Math.floor(Math.random() * body.scrollHeight);
                  const a = performance.now(); window.agentgraphsViewer.renderRows(); document.body.offsetHeight;
                  t += performance.now() - a; } return t / 50; })()""")
            opened = b.evaluate("""(() => { const a = performance.now(); window.agentgraphsViewer.select(%d);
                const d = document.getElementById('turn-3'); d.open = true; d.dispatchEvent(new Event('toggle'));
                document.body.offsetHeight; return performance.now() - a; })()""" % (rollouts - 1))
            dom_open = b.evaluate("document.getElementsByTagName('*').length")
        print(f"chromium: ready {ready} ms (target <= {READY_MS}); scroll frame {frame:.2f} ms (<= {FRAME_MS}); "
              f"open the {doc:,}-token rollout + a turn {opened:.0f} ms (<= {OPEN_MS}); "
              f"DOM {dom_load} elements at load (<= {DOM_LOAD}), {dom_open} with a turn open (<= {DOM_OPEN})")
        result.update(ready_ms=ready, scroll_frame_ms=round(frame, 2), open_ms=round(opened), dom_load=dom_load,
                      dom_open=dom_open)
        passed = ready <= READY_MS and frame <= FRAME_MS and opened <= OPEN_MS and dom_load <= DOM_LOAD \
            and dom_open <= DOM_OPEN
        summary += f"; ready {ready} ms, frame {frame:.1f} ms, open {opened:.0f} ms, DOM {dom_load}/{dom_open}"
    out.unlink()
    _common.finish(args.results_dir, NAME, result, passed, summary)


if __name__ == "__main__":
    main()
