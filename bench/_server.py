"""A fixed-latency SGLang stand-in in its own process, so a benchmark's client CPU is measured alone.

    python bench/_server.py --latency-s 0.02 --tokenizer-dir DIR --memory-text "..."

Prints one JSON line {"url": ..., "script_len": N} once /health answers, serves until its stdin closes
(the parent exits or closes the pipe), then prints the server's counters as a second JSON line.
Answers every /generate with the same script: the ids of `--memory-text` followed by <|im_end|>.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any


class _Tokenizer:
    """The two things the test server and FixedLatencyEngine use, from tokenizer.json alone (fast to load)."""

    def __init__(self, path: Path, eos_token: str) -> None:
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path))
        self.eos_token_id = self._tok.token_to_id(eos_token)
        if self.eos_token_id is None:
            raise SystemExit(f"{eos_token!r} is not a token of {path}")

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)


def main(argv: list[str] | None = None) -> None:
    from agentgraphs.testing.fake_engines import FixedLatencyEngine
    from agentgraphs.testing.server import SGLangTestServer

    p = argparse.ArgumentParser()
    p.add_argument("--latency-s", type=float, default=0.02)
    p.add_argument("--tokenizer-dir", type=Path, required=True)
    p.add_argument("--memory-text", default="No relevant information yet.")
    p.add_argument("--eos-token", default="<|im_end|>")
    args = p.parse_args(argv)

    tok = _Tokenizer(args.tokenizer_dir / "tokenizer.json", args.eos_token)
    script = tuple(tok.encode(args.memory_text)) + (tok.eos_token_id,)
    engine = FixedLatencyEngine(latency_s=0.0, script=script, tokenizer=tok)  # type: ignore[arg-type]
    server = SGLangTestServer(engine, tokenizer=tok, port=0)
    server.faults.latency_s = args.latency_s  # the server sleeps this long in every /generate
    server.start()
    print(json.dumps({"url": server.url, "script_len": len(script)}), flush=True)
    done = threading.Event()

    def wait_stdin() -> None:
        sys.stdin.read()  # EOF when the parent closes the pipe or dies
        done.set()

    threading.Thread(target=wait_stdin, daemon=True).start()
    done.wait()
    stats: dict[str, Any] = {"generate_requests": server.stats.generate_requests,
                             "max_in_flight": server.stats.max_in_flight}
    server.stop()
    print(json.dumps(stats), flush=True)


if __name__ == "__main__":
    main()
