"""A fixed-latency SGLang stand-in in its own process, so a benchmark's client CPU is measured alone.

    python bench/_server.py --latency-s 0.02 --tokenizer-dir DIR --memory-text "..." [--replies JSON]

Prints one JSON line {"url": ..., "script_len": N} once /health answers, serves until its stdin closes
(the parent exits or closes the pipe), then prints the server's counters as a second JSON line.
Answers every /generate with the same script: the ids of `--memory-text` followed by <|im_end|>, unless
a `--replies` rule matches the prompt: a JSON list of {"marker": TEXT or null, "count": N, "below": M or
null, "texts": [REPLY, ...]}, where TEXT must be one token and a rule matches a prompt that holds its id N
to M - 1 times (null: every prompt); a prompt of n ids gets the ids of REPLY number n % len(texts) +
<|im_end|> (`agentgraphs.testing.fake_engines.Reply`).
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


def _replies(spec: str, tok: _Tokenizer) -> tuple[Any, ...]:
    from agentgraphs.testing.fake_engines import Reply

    rules = []
    for rule in json.loads(spec):
        marker = None
        if rule.get("marker") is not None:
            ids = tok.encode(rule["marker"])
            if len(ids) != 1:
                raise SystemExit(f"--replies: marker {rule['marker']!r} is {len(ids)} tokens; give one token")
            marker = ids[0]
        scripts = tuple((*tok.encode(text), tok.eos_token_id) for text in rule["texts"])
        rules.append(Reply(scripts=scripts, marker=marker, count=int(rule.get("count", 1)), below=rule.get("below")))
    return tuple(rules)


def main(argv: list[str] | None = None) -> None:
    from agentgraphs.testing.fake_engines import FixedLatencyEngine
    from agentgraphs.testing.server import SGLangTestServer

    p = argparse.ArgumentParser()
    p.add_argument("--latency-s", type=float, default=0.02)
    p.add_argument("--tokenizer-dir", type=Path, required=True)
    p.add_argument("--memory-text", default="No relevant information yet.")
    p.add_argument("--eos-token", default="<|im_end|>")
    p.add_argument("--replies", default="[]", help="JSON list of reply rules (see the module doc)")
    args = p.parse_args(argv)

    from agentgraphs.http_slots import ensure_open_files

    ensure_open_files(4096)  # one socket per client connection (bench/scale.py opens 1,024 and more)
    tok = _Tokenizer(args.tokenizer_dir / "tokenizer.json", args.eos_token)
    script = tuple(tok.encode(args.memory_text)) + (tok.eos_token_id,)
    engine = FixedLatencyEngine(latency_s=0.0, script=script, tokenizer=tok,  # type: ignore[arg-type]
                                replies=_replies(args.replies, tok))
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
