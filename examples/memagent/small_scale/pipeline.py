"""The pieces of the small-scale MemAgent reproduction (`reproduce.py` runs them as stages).

Everything goes through the library as a slime run would: MemAgent's graph (`agentgraphs.memagent`) run by
`run_rollout`, samples shaped by `records.sample_fields`, training rows by `train_data.to_train_data`, the
seed's reward (`memagent.SPEC`: the boxed answer, exact after normalisation) and the seed's RULER-HQA scores
(`memagent.reward.ruler_metrics`: sub_em as the seed computes it, and the strict one). Documents are
synthetic needles (`agentgraphs.memagent.synthetic`), the needle in the middle of one chunk.

The oracle (warm start) is a policy like any other: `ScriptedPolicy` decides the text (memory = the needle
sentence once seen, else the previous memory; answer \\boxed{value}) and the model under training gives
its token ids log-probs by teacher forcing, so the demonstrations are ordinary traced rollouts whose
training sequences are exactly what RL would train on.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import random
import re
import tempfile
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentgraphs.batch import JsonlWriter
from agentgraphs.context import AgentContext
from agentgraphs.engines import SamplingParams
from agentgraphs.memagent import INITIAL_MEMORY, SPEC
from agentgraphs.memagent.reward import REWARD_TAIL_CHARS, ruler_answer
from agentgraphs.memagent.synthetic import FillerPool, SentenceLengths, build_filler_pool, make_needle_example
from agentgraphs.records import SEQUENCE_KEYS, Rollout, sample_fields, trace_record
from agentgraphs.rollout import raised_in_graph, rollout_input, run_rollout
from agentgraphs.testing.scripted import ScriptCall, ScriptedPolicy
from agentgraphs.testing.slime_sample import Sample
from agentgraphs.train_data import TrainDataSettings, to_train_data
from agentgraphs.viewer.check import CheckReport, check_run, prefetched_scorer
from agentgraphs.viewer.roles import from_runs, to_runs

CONFIG_FILE = "repro.json"
METRICS = ("sub_em", "sub_em_strict", "em", "answered")


class ReproConfig(BaseModel):
    """What every stage shares; written into each checkpoint directory, read back by the next stage."""

    model_config = ConfigDict(extra="forbid")

    hidden_size: int = 512
    layers: int = 8
    heads: int = 8
    kv_heads: int = 4
    intermediate_size: int = 1536
    init_std: float = 0.02
    chunk_tokens: int = Field(512, description="document tokens per memory update")
    memory_tokens: int = Field(32, description="cap of a memory update (the needle sentence is ~17 tokens)")
    final_tokens: int = Field(24, description="cap of the final answer (\\boxed{7 digits} is ~11 tokens)")
    value_digits: int = Field(7, ge=1, le=18, description="digits of the needle's secret code (the answer)")
    train_min_tokens: int = 1000
    train_max_tokens: int = 4000
    eval_lengths: list[int] = Field(default_factory=lambda: [1000, 2000, 4000, 8000, 16000, 32000])
    eval_per_length: int = 64
    eval_temperature: float = Field(0.7, description="the seed's evaluation sampling (run_eval.sh)")
    eval_top_p: float = 0.95
    seed: int = 0
    sentence_lengths: SentenceLengths = Field(
        "varied", description="the filler's sentences (agentgraphs.memagent.synthetic): varied lengths, or all of "
        "one length (11 tokens: where a chunk boundary falls in a sentence then cycles with the chunk index)")

    def save(self, out_dir: Path) -> None:
        (out_dir / CONFIG_FILE).write_text(self.model_dump_json(indent=1) + "\n")

    @classmethod
    def load(cls, ckpt: Path) -> "ReproConfig":
        """The settings a stage wrote; a file from before `sentence_lengths` was made with "uniform" filler."""
        path = ckpt / CONFIG_FILE
        if not path.is_file():
            raise SystemExit(f"{ckpt}: no {CONFIG_FILE}; pass a directory written by an earlier stage")
        data = json.loads(path.read_text())
        data.setdefault("sentence_lengths", "uniform")
        return cls.model_validate(data)

    def filler_pool(self, tokenizer: Any) -> FillerPool:
        """The pool every document of this model's stages is drawn from."""
        return build_filler_pool(tokenizer, sentence_lengths=self.sentence_lengths)

    @property
    def train_lengths(self) -> list[int]:
        """The lengths the evaluation counts as training lengths (inside [train_min, train_max])."""
        return [n for n in self.eval_lengths if self.train_min_tokens <= n <= self.train_max_tokens]


def options(cfg: ReproConfig) -> dict[str, Any]:
    """MemAgent's options: the seed's variant (what its code trains: every memory update and the answer
    trained, the reward divided among them, chunks as text, memory stripped) at this example's sizes; no
    training document is capped and evaluation reads every document whole."""
    return {"variant": "seed", "chunk_tokens": cfg.chunk_tokens, "memory_max_new_tokens": cfg.memory_tokens,
            "final_max_new_tokens": cfg.final_tokens, "max_chunks": math.ceil(cfg.train_max_tokens / cfg.chunk_tokens),
            "eval_max_chunks": None}


def sampling(cfg: ReproConfig, temperature: float, top_p: float = 1.0) -> SamplingParams:
    return SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max(cfg.memory_tokens, cfg.final_tokens))


# ---------------------------------------------------------------------------------------------- data

NEEDLE = re.compile(r"The secret code of [A-Z][a-z]+ [A-Z][a-z]+ is (\d+)\.")


def needle_rows(tokenizer: Any, lengths: Sequence[int], split: str, cfg: ReproConfig,
                pool: FillerPool | None = None) -> list[dict[str, Any]]:
    """Rows {prompt, label, metadata} of needle documents; the needle sits in the middle of a random chunk.

    `split` names a disjoint family of documents ("train-..", "probe", "eval"): the seeds differ.
    """
    pool = pool if pool is not None else cfg.filler_pool(tokenizer)
    rows = []
    for i, n in enumerate(lengths):
        rng = random.Random(f"{cfg.seed}-{split}-{i}")
        for attempt in range(20):  # redraw the rare document whose needle a chunk boundary would cut
            at = rng.randrange(math.ceil(n / cfg.chunk_tokens))
            row = make_needle_example(tokenizer, n, seed=f"{cfg.seed}-{split}-{i}-{attempt}", needle_position=at,
                                      chunk_size=cfg.chunk_tokens, pool=pool, value_digits=cfg.value_digits)
            if needle_in_one_chunk(tokenizer, row["document"], cfg.chunk_tokens):
                break
        else:
            raise RuntimeError(f"{split} document {i}: no needle placement inside one chunk of {cfg.chunk_tokens} tokens")
        rows.append({"prompt": row["question"], "label": row["answers"],
                     "metadata": {"context": row["document"], "length": n, "needle_chunk": at}})
    return rows


def needle_in_one_chunk(tokenizer: Any, document: str, chunk_tokens: int) -> bool:
    """Whether the needle sentence's token ids fall inside one chunk (the ids before it are counted by
    encoding the text before it: byte-level BPE does not merge across the space between sentences)."""
    needle = NEEDLE.search(document)
    if needle is None:
        return False
    at = needle.start()
    start = len(tokenizer.encode(document[: max(at - 1, 0)], add_special_tokens=False)) if at else 0
    end = start + len(tokenizer.encode((" " if at else "") + needle.group(), add_special_tokens=False))
    return start // chunk_tokens == (end - 1) // chunk_tokens


def random_lengths(cfg: ReproConfig, n: int, split: str) -> list[int]:
    rng = random.Random(f"{cfg.seed}-{split}-lengths")
    return [rng.randint(cfg.train_min_tokens, cfg.train_max_tokens) for _ in range(n)]


def eval_rows(tokenizer: Any, cfg: ReproConfig, lengths: Sequence[int], per_length: int, split: str,
              pool: FillerPool | None = None) -> list[dict[str, Any]]:
    return needle_rows(tokenizer, [n for n in lengths for _ in range(per_length)], split, cfg, pool)


# ---------------------------------------------------------------------------------------------- oracle

def _between(text: str, start: str, end: str) -> str:
    a = text.rfind(start)
    b = text.find(end, a + len(start)) if a >= 0 else -1
    return text[a + len(start): b] if a >= 0 and b >= 0 else ""


def oracle_reply(call: ScriptCall) -> str:
    """The oracle: memory = the needle sentence once seen, else the previous memory; answer \\boxed{value}.

    >>> memory = "<memory>\\nNo previous memory\\n</memory>\\n\\n"
    >>> oracle_reply(ScriptCall(0, [], memory + "<section>\\nA b. The secret code of Ann Lee is 1234567. C.\\n</section>"))
    'The secret code of Ann Lee is 1234567.'
    >>> oracle_reply(ScriptCall(1, [], memory + "<section>\\nNothing here.\\n</section>"))
    'No previous memory'
    >>> oracle_reply(ScriptCall(2, [], "<memory>\\nThe secret code of Ann Lee is 1234567.\\n</memory>\\n\\nYour answer:\\n"))
    '\\\\boxed{1234567}'
    """
    text = call.prompt_text
    memory = _between(text, "<memory>\n", "\n</memory>")
    if "<section>\n" not in text:  # the final prompt
        value = NEEDLE.search(memory)
        return f"\\boxed{{{value.group(1) if value else 'unknown'}}}"
    if NEEDLE.search(memory):
        return memory
    found = NEEDLE.search(_between(text, "<section>\n", "\n</section>"))
    return found.group() if found else memory


# ---------------------------------------------------------------------------------------------- rollouts

async def run_all(rows: Sequence[dict[str, Any]], ctx: AgentContext, opts: dict[str, Any],
                  concurrency: int) -> list[Rollout]:
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int, row: dict[str, Any]) -> Rollout:
        async with gate:
            return await run_rollout(SPEC, rollout_input(row["prompt"], row["label"], row["metadata"], i), ctx,
                                     options=opts)

    return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(rows))))


def evaluate(engine: Any, rows: Sequence[dict[str, Any]], cfg: ReproConfig, concurrency: int = 1024) -> list[dict[str, Any]]:
    """The seed's RULER-HQA protocol on `rows`: every document read whole (no chunk cap), sampled at the
    seed's evaluation temperature and top-p; per row the seed's metrics, its length and status."""
    ctx = AgentContext(policy=engine, tokenizer=engine.tokenizer, evaluation=True,
                       sampling=sampling(cfg, cfg.eval_temperature, cfg.eval_top_p))
    rollouts = asyncio.run(run_all(rows, ctx, options(cfg), concurrency))
    return [result_of(row, r, engine.tokenizer) for row, r in zip(rows, rollouts)]


def result_of(row: dict[str, Any], rollout: Rollout, tokenizer: Any) -> dict[str, Any]:
    """What the evaluation keeps of one document's rollout: its length, status, answer (the window the seed
    scores: its last REWARD_TAIL_CHARS characters, so `ruler_answer` reads it as the metrics did), gold, the
    seed's metrics, `digits`, where the needle sat, the `memory_codes` and `memory_texts` (run-length) and the
    `flush_chunks`."""
    prompts = _prompts(rollout, tokenizer)  # decoded once: the memories and the flush chunks read them both
    memories = _memories_in(prompts)
    return {"length": row["metadata"]["length"], "status": rollout.status,
            "answer": rollout.answer.strip()[-REWARD_TAIL_CHARS:],
            "gold": row["label"][0], **{k: rollout.metrics.get(k, 0.0) for k in METRICS},
            "digits": digits_right(rollout.answer, row["label"][0]), "needle_chunk": row["metadata"]["needle_chunk"],
            "memory_codes": to_runs(_codes_of(memories)), "memory_texts": to_runs(_texts_kept(memories)),
            "flush_chunks": _flush_in(rollout, prompts)}


def _prompts(rollout: Rollout, tokenizer: Any) -> list[str]:
    """Each engine call's prompt, decoded: what the graph gave the model, call by call."""
    return [tokenizer.decode(turn["prompt_ids"]) for turn in rollout.turns]


def ends_sentence(section: str) -> bool:
    """Whether a chunk's text stops at the end of a sentence (every filler and needle sentence ends with ".").

    >>> ends_sentence("the quiet river."), ends_sentence("the quiet river. The old")
    (True, False)
    """
    return section.rstrip().endswith(".")


def _flush_in(rollout: Rollout, prompts: Sequence[str]) -> list[int]:
    """A result's `flush_chunks`: the memory updates, by index, whose chunk (the `<section>` of the prompt they
    were given, `prompts` decoded from the rollout's turns) ends at a sentence's end. With the filler's sentences
    all 11 tokens and 512-token chunks, the first such chunk before a needle is chunk 10 (the place of a chunk
    boundary in a sentence cycles every 11 chunks), which no 1K-4K training document holds; with sentences of
    varied lengths it can be any chunk (bench/README, "Chunk alignment")."""
    updates = (text for turn, text in zip(rollout.turns, prompts) if turn["node"] == "memory_update")
    return [k for k, text in enumerate(updates) if ends_sentence(_between(text, "<section>\n", "\n</section>"))]


def needle_free_writes(results: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """Codes written into a memory that held none before the needle's chunk was read, split by the chunk read:
    one that ends at a sentence's end (`flush`, from `flush_chunks`) or not (`other`); each [reads, writes].
    A failed or aborted rollout is left out, as `miss_step` leaves it out of the copy's steps.

    >>> r = {"status": "completed", "needle_chunk": 3, "flush_chunks": [2], "memory_codes": [["", 3], ["51", 2]]}
    >>> needle_free_writes([r])  # updates 0 and 1 kept no code; update 2, a flush chunk, wrote one
    {'flush': [1, 1], 'other': [2, 0]}
    """
    out = {"flush": [0, 0], "other": [0, 0]}
    for r in results:
        if not made_every_call(r):
            continue
        codes = codes_by_call(r)
        flush = set(r["flush_chunks"])
        for k in range(min(r["needle_chunk"], len(codes) - 1)):
            if codes[k] == "":
                cell = out["flush" if k in flush else "other"]
                cell[0] += 1
                cell[1] += codes[k + 1] != ""
    return out


def held_code_changes(results: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """How often a memory update changed the gold code the memory held after the needle's chunk, by the chunk
    read: the document's last (`last`: shorter than the others, and it ends at a sentence's end), another that
    ends at a sentence's end (`flush`, from `flush_chunks`) or any other (`other`); each [reads, changes],
    counted up to a document's first change. A failed or aborted rollout is left out.

    >>> r = {"status": "completed", "needle_chunk": 0, "gold": "51", "flush_chunks": [1, 3],
    ...      "memory_codes": [["", 1], ["51", 3], ["15", 1]]}
    >>> held_code_changes([r])  # updates 1 (flush) and 2 kept the code; update 3, the last, changed it
    {'last': [1, 1], 'flush': [1, 0], 'other': [1, 0]}
    """
    out = {"last": [0, 0], "flush": [0, 0], "other": [0, 0]}
    for r in results:
        if not made_every_call(r):
            continue
        codes = codes_by_call(r)
        flush, last = set(r["flush_chunks"]), len(codes) - 2  # update k turns codes[k] into codes[k + 1]
        for k in range(r["needle_chunk"] + 1, len(codes) - 1):
            if codes[k] != r["gold"]:
                break
            cell = out["last" if k == last else "flush" if k in flush else "other"]
            cell[0] += 1
            cell[1] += codes[k + 1] != r["gold"]
    return out


def blank_memory(results: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """Before the needle, from `memory_texts`: `updates` [reads, left]: the updates before the needle's chunk
    that read the initial memory, and how many wrote anything else (counted up to a document's first such
    update); `stored_from_initial` / `stored_from_other` [documents, stored]: the needle's update, by whether
    the memory it read was still the initial one, and how many stored the gold code. A failed or aborted rollout
    is left out.

    >>> r = {"status": "completed", "needle_chunk": 2, "gold": "51", "memory_codes": [["", 3], ["51", 2]],
    ...      "memory_texts": [["No previous memory", 2], [None, 1], ["The secret code of Ann Lee is 51.", 2]]}
    >>> blank_memory([r])  # update 1 left the initial memory; the needle's update read the other and stored
    {'updates': [2, 1], 'stored_from_initial': [0, 0], 'stored_from_other': [1, 1]}
    """
    out = {"updates": [0, 0], "stored_from_initial": [0, 0], "stored_from_other": [0, 0]}
    for r in results:
        if not made_every_call(r):
            continue
        texts, codes, at = texts_by_call(r), codes_by_call(r), r["needle_chunk"]
        for k in range(at):
            if texts[k] != INITIAL_MEMORY:
                break
            out["updates"][0] += 1
            out["updates"][1] += texts[k + 1] != INITIAL_MEMORY
        cell = out["stored_from_initial" if texts[at] == INITIAL_MEMORY else "stored_from_other"]
        cell[0] += 1
        cell[1] += codes[at + 1] == r["gold"]
    return out


def held_code_returns(results: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """After the needle, from `memory_codes`: the documents whose memory stored the gold code and a later update
    changed it (`changed`), how many held it again at a later update (`returned`) and when the answer was asked
    (`at_answer`); when every result keeps `memory_texts`, how many first changed memories still held the gold
    code as a number other than their last (`gold_elsewhere`: a memory with more than one code; evaluations
    from before the texts were kept have no such count). A failed or aborted rollout is left out.

    >>> r = {"status": "completed", "needle_chunk": 0, "gold": "51", "memory_codes": [["", 1], ["51", 1],
    ...      ["15", 1], ["51", 1]], "memory_texts": [["No previous memory", 1], ["Code 51.", 1],
    ...      ["Code 51. Code 15.", 1], ["Code 51.", 1]]}
    >>> held_code_returns([r]), held_code_returns([{k: v for k, v in r.items() if k != "memory_texts"}])
    ({'changed': 1, 'returned': 1, 'at_answer': 1, 'gold_elsewhere': 1}, {'changed': 1, 'returned': 1, 'at_answer': 1})
    """
    texts = all("memory_texts" in r for r in results)
    out = {"changed": 0, "returned": 0, "at_answer": 0, **({"gold_elsewhere": 0} if texts else {})}
    for r in results:
        if not made_every_call(r):
            continue
        codes, gold, at = codes_by_call(r), r["gold"], r["needle_chunk"] + 1
        if at >= len(codes) or codes[at] != gold:  # the needle's update did not store it: nothing held
            continue
        changed = next((k for k in range(at, len(codes)) if codes[k] != gold), None)
        if changed is None:
            continue
        out["changed"] += 1
        out["returned"] += gold in codes[changed:]
        out["at_answer"] += codes[-1] == gold
        if texts:
            text = texts_by_call(r)[changed]
            out["gold_elsewhere"] += text is not None and gold in _numbers(text)[:-1]
    return out


def digit_flips(results: Sequence[Mapping[str, Any]]) -> dict[str, list[int]]:
    """How each digit fared when a memory update copied a held code, from `memory_codes`: per digit, [reads,
    flips]: the digits of every code a memory update read, and how many came out as another digit with the
    rest of the code unchanged (one digit flipped); digits 0-9 only (a memory's run of digits can hold another
    script's, from an untrained model's noise). A model that cannot tell two digits apart flips both, often into
    each other (bench/README, "Confused digits"). A failed or aborted rollout is left out.

    >>> r = {"status": "completed", "memory_codes": [["", 1], ["67", 2], ["66", 1], ["6", 1]]}
    >>> flips = digit_flips([r])  # 67 -> 67 -> 66 (the 7 flipped) -> 6 (not one digit flipped: a read only)
    >>> flips["6"], flips["7"], flips["0"]
    ([4, 0], [2, 1], [0, 0])
    """
    out = {digit: [0, 0] for digit in "0123456789"}
    for r in results:
        if not made_every_call(r):
            continue
        codes = codes_by_call(r)
        for code, then in itertools.pairwise(codes):
            changed = [i for i, (a, b) in enumerate(zip(code, then)) if a != b] if len(then) == len(code) else []
            for i, digit in enumerate(code):
                if digit in out:
                    out[digit][0] += 1
                    out[digit][1] += changed == [i]
    return out


def answers_off_memory(results: Sequence[Mapping[str, Any]], lengths: Sequence[int]) -> dict[str, int]:
    """At `lengths`, the answers with a box (what the metrics scored, `ruler_answer`) given from a final memory
    that holds a code (`answers`), how many are not that memory's last number (`off_last`), and, when every
    result keeps `memory_texts`, how many of those are another number of that memory (`elsewhere`: the answer
    picked one of two codes). A failed or aborted rollout is left out.

    >>> r = {"status": "completed", "length": 1000, "gold": "51", "answer": "\\\\boxed{51}",
    ...      "memory_codes": [["", 1], ["15", 1]], "memory_texts": [["No previous memory", 1], ["It is 51 or 15.", 1]]}
    >>> answers_off_memory([r], [1000])
    {'answers': 1, 'off_last': 1, 'elsewhere': 1}
    """
    texts = all("memory_texts" in r for r in results)
    out = {"answers": 0, "off_last": 0, **({"elsewhere": 0} if texts else {})}
    for r in results:
        if r["length"] not in lengths or not made_every_call(r):
            continue
        got, last = ruler_answer(r["answer"]), codes_by_call(r)[-1]
        if not got or not last:
            continue
        out["answers"] += 1
        if got != last:
            out["off_last"] += 1
            if texts:
                out["elsewhere"] += got in _numbers(texts_by_call(r)[-1] or "")
    return out


def memory_codes(rollout: Rollout, tokenizer: Any) -> list[str]:
    """The code each engine call of a MemAgent rollout found in its memory, call by call: read from the
    `<memory>` block of the prompt the call was given (what the graph held, exactly), its last run of digits
    ("" for none). Call k sees the memory after k updates; the last call, the final answer's, the final memory."""
    return _codes_of(_memories_in(_prompts(rollout, tokenizer)))


def _memories_in(prompts: Sequence[str]) -> list[str]:
    """The `<memory>` block of each prompt: the memory each engine call was given."""
    return [_between(text, "<memory>\n", "\n</memory>") for text in prompts]


def _numbers(text: str) -> list[str]:
    """The runs of digits in a memory's text, in order: its last is the code `memory_codes` reads."""
    return re.findall(r"\d+", text)


def _codes_of(memories: Sequence[str]) -> list[str]:
    found = (_numbers(memory) for memory in memories)
    return [numbers[-1] if numbers else "" for numbers in found]


def _texts_kept(memories: Sequence[str]) -> list[str | None]:
    """The memory texts an evaluation keeps, call by call: a memory that holds a digit (where a code is read
    from) and the initial memory verbatim, any other memory as None (one with no code that is not the initial
    one: kept as a fact, not a text, so an untrained model's noise does not fill the file).

    >>> _texts_kept(["No previous memory", "Lorem.", "The secret code of Ann Lee is 51.", "Ipsum."])
    ['No previous memory', None, 'The secret code of Ann Lee is 51.', None]
    """
    return [m if m == INITIAL_MEMORY or _numbers(m) else None for m in memories]


def texts_by_call(result: Mapping[str, Any]) -> list[str | None]:
    """A result's `memory_texts`, one per engine call (its run-length form expanded).

    >>> texts_by_call({"memory_texts": [["No previous memory", 2], [None, 1]]})
    ['No previous memory', 'No previous memory', None]
    """
    return from_runs(result["memory_texts"])


def codes_by_call(result: Mapping[str, Any]) -> list[str]:
    """A result's `memory_codes`, one per engine call (its run-length form expanded).

    >>> codes_by_call({"memory_codes": [["", 2], ["51", 1]]})
    ['', '', '51']
    """
    return from_runs(result["memory_codes"])


def made_every_call(result: Mapping[str, Any]) -> bool:
    """Whether a rollout made every engine call (a truncated one did: a turn hit its cap); a failed or aborted
    one stopped early, so its memory codes say nothing of the copy's later steps."""
    return result["status"] not in ("failed", "aborted")


MISS_STEPS = ("right", "stored_wrong", "lost_in_memory", "lost_answering", "not_completed")


def miss_step(result: dict[str, Any]) -> str:
    """Which step of MemAgent's copy lost the gold code of a missed answer, from `memory_codes`: the update
    that read the needle's chunk stored another code or none (`stored_wrong`), a later update changed it
    (`lost_in_memory`), or the memory carried it to the end and the answer did not (`lost_answering`). A
    failed or aborted rollout (its calls stopped early) is `not_completed`, not a copy step.

    >>> miss = {"sub_em_strict": 0.0, "gold": "51", "needle_chunk": 1, "status": "completed"}
    >>> codes = [[["", 2], ["15", 2]], [["", 2], ["51", 1], ["15", 1]], [["", 2], ["51", 2]]]
    >>> [miss_step({**miss, "memory_codes": c}) for c in codes]
    ['stored_wrong', 'lost_in_memory', 'lost_answering']
    >>> miss_step({**miss, "status": "failed", "memory_codes": [["", 2]]})
    'not_completed'
    """
    if result["sub_em_strict"]:
        return "right"
    if not made_every_call(result):
        return "not_completed"
    codes = codes_by_call(result)
    after = codes[result["needle_chunk"] + 1:]  # the memories after the update that read the needle
    if not after or after[0] != result["gold"]:
        return "stored_wrong"
    return "lost_in_memory" if any(code != result["gold"] for code in after) else "lost_answering"


def digits_right(answer: str, gold: str) -> float:
    """The share of the gold code's digits that the scored answer (`ruler_answer`: the last box of the last 300
    characters) has at the same place (0 without a box):
    a copy forming shows here long before exact match does.

    >>> digits_right("so \\\\boxed{1284}", "1234"), digits_right("\\\\boxed{12}", "1234"), digits_right("1234", "1234")
    (0.75, 0.5, 0.0)
    """
    got = ruler_answer(answer)  # the answer the metrics score ("" without a box)
    return sum(a == b for a, b in zip(got, gold)) / len(gold)


ANSWER_KINDS = ("right", "reversed", "one_place", "other_code", "unboxed")


def answer_kind(result: dict[str, Any]) -> str:
    """What an evaluated answer got wrong, by the answer the metrics scored (`ruler_answer`) against the gold
    code: `right` (the strict metric's hit), `reversed` (the gold's digits in reverse order), `one_place` (of
    the gold's length, some digit at its place), `other_code` (another boxed answer), `unboxed` (no box). The
    kinds tell a copy that loses a digit from one that loses the order.

    >>> kind = lambda answer: answer_kind({"answer": answer, "gold": "51", "sub_em_strict": 0.0})
    >>> kind("\\\\boxed{15}"), kind("\\\\boxed{41}"), kind("\\\\boxed{7}"), kind("51")
    ('reversed', 'one_place', 'other_code', 'unboxed')
    >>> kind("$\\\\boxed 15$"), kind("\\\\boxed{15")  # read as the seed's scorer reads a box: closed, or the space form
    ('reversed', 'unboxed')
    """
    if result["sub_em_strict"]:
        return "right"
    got, gold = ruler_answer(result["answer"]), result["gold"]  # what the metrics scored
    if not got:
        return "unboxed"
    if got == gold[::-1] and gold != gold[::-1]:
        return "reversed"
    if len(got) == len(gold) and any(a == b for a, b in zip(got, gold)):
        return "one_place"
    return "other_code"


def answer_kinds(results: Sequence[dict[str, Any]], lengths: Sequence[int]) -> dict[str, int]:
    """How many answers at `lengths` are of each `answer_kind` (every kind listed, 0 included) and, for
    evaluations that recorded `memory_codes`, how many misses each step of the copy lost (`miss_step`)."""
    counts, wanted = dict.fromkeys(ANSWER_KINDS, 0), set(lengths)
    picked = [r for r in results if r["length"] in wanted]
    for r in picked:
        counts[answer_kind(r)] += 1
    if picked and all("memory_codes" in r for r in picked):
        counts.update(dict.fromkeys(MISS_STEPS[1:], 0))
        for r in picked:
            step = miss_step(r)
            if step != "right":
                counts[step] += 1
    return counts


def by_length(results: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean of each metric (in percent) per document length, plus n."""
    out: dict[str, dict[str, float]] = {}
    for n in sorted({r["length"] for r in results}):
        group = [r for r in results if r["length"] == n]
        out[str(n)] = {k: round(100 * sum(r[k] for r in group) / len(group), 2) for k in METRICS}
        out[str(n)]["n"] = len(group)
    return out


def pooled(results: Sequence[dict[str, Any]], lengths: Sequence[int], metric: str = "sub_em_strict") -> float:
    wanted = set(lengths)
    group = [r[metric] for r in results if r["length"] in wanted]
    return 100 * sum(group) / len(group) if group else float("nan")


def band_verdict(score: float, stop_at: float, stop_above: float | None) -> str:
    """Where a warm start's probe (strict sub_em, %) sits against its stop band [stop_at, stop_above]:
    "under" (train on), "in" (counts toward the stop), or "over" (an overshoot: go back and probe finer).
    No top (None) means no overshoot: any score from stop_at up is "in".

    >>> [band_verdict(s, 30.0, 50.0) for s in (10.4, 30.0, 50.0, 70.8)]
    ['under', 'in', 'in', 'over']
    >>> band_verdict(97.9, 30.0, None)
    'in'
    """
    if score < stop_at:
        return "under"
    return "over" if stop_above is not None and score > stop_above else "in"


class OracleOutOfMemory(RuntimeError):
    """The engine ran out of device memory scoring the oracle's rollouts: fewer at once is the fix."""


def oracle_data(engine: Any, rows: Sequence[dict[str, Any]], cfg: ReproConfig, concurrency: int = 512) -> dict[str, Any]:
    """Roll the oracle through MemAgent's graph over `rows` and convert its samples with `to_train_data`.

    Every turn is trained (memory updates and the answer); each rollout must score reward 1 (the oracle
    reads the needle from the chunk text: a miss means a needle cut by a chunk boundary, and stops here).
    A rollout failed by the device's memory raises `OracleOutOfMemory`, which says what to lower.
    """
    ctx_opts = options(cfg)
    samples: list[Any] = []
    for start in range(0, len(rows), concurrency):  # a fresh policy per slice: ScriptedPolicy keeps its calls
        policy = ScriptedPolicy(engine, oracle_reply, name="oracle")
        ctx = AgentContext(policy=policy, tokenizer=engine.tokenizer, sampling=sampling(cfg, 1.0))
        part = rows[start:start + concurrency]
        for i, (row, rollout) in enumerate(zip(part, asyncio.run(run_all(part, ctx, ctx_opts, concurrency)))):
            if raised_in_graph(rollout, "OutOfMemoryError"):  # torch's
                raise OracleOutOfMemory(
                    f"oracle rollout {start + i}: the engine ran out of device memory ({rollout.reason}). Up to "
                    f"{concurrency} rollouts are scored at once in each process that rolls demonstrations, and every "
                    "such process holds its own engine on the same device: lower `--demo-workers` (run_in_calls.sh: "
                    "DEMO_WORKERS, unset: what the device's memory holds; on an H200 8 fit beside the untrained "
                    "model's evaluation in most runs and ran out once alone, 6 fit, 14 did not; on an H100 8 and 4 ran "
                    "out beside it, 4 fit alone; a worker peaked at 18.4 GiB) or `concurrency`")
            if rollout.status != "completed" or rollout.reward != 1.0:
                raise RuntimeError(f"oracle rollout {start + i} scored {rollout.reward} ({rollout.status}: "
                                   f"{rollout.reason}); answer {rollout.answer!r}, gold {row['label']}")
            fields = sample_fields(rollout, SPEC)
            fields["status"] = Sample.Status(fields["status"])
            samples.append(Sample(group_index=start + i, index=start + i, prompt=row["prompt"], label=row["label"],
                                  **fields))
    return to_train_data(samples, TrainDataSettings(n_samples_per_prompt=1))


def digit_ids(tokenizer: Any) -> set[int]:
    """The ids of the ten digits, each written alone (Qwen2.5's tokenizer splits a number into its digits)."""
    ids = {d: tokenizer.encode(str(d), add_special_tokens=False) for d in range(10)}
    if any(len(i) != 1 for i in ids.values()):
        raise ValueError(f"a digit is not one token in this tokenizer ({ids}): first_writes reads digits by id")
    return {i[0] for i in ids.values()}


def first_writes(data: Mapping[str, Any], digit_ids: Collection[int]) -> list[int]:
    """The training rows of oracle demonstrations that first write the code into memory: in each rollout (the
    consecutive rows of one `sample_indices` value), the first row whose trained tokens hold a digit. The
    oracle's memory holds none before the needle ("No previous memory"), so that row is the one that read the
    code out of its chunk; the rows after it copy the code from memory, and the last answers with it.

    >>> data = {"sample_indices": [0, 0, 0, 1, 1], "tokens": [[5, 7], [5, 16], [5, 16], [16, 9], [7, 16]],
    ...         "response_lengths": [1, 1, 1, 1, 1], "loss_masks": [[1], [1], [1], [1], [1]]}
    >>> first_writes(data, {16})
    [1, 4]
    """
    rows: list[int] = []
    owner: Any = object()
    written = False
    for row, (index, tokens, n, mask) in enumerate(zip(data["sample_indices"], data["tokens"],
                                                       data["response_lengths"], data["loss_masks"], strict=True)):
        if index != owner:
            owner, written = index, False
        if not written and any(m and t in digit_ids for t, m in zip(tokens[len(tokens) - n:], mask, strict=True)):
            rows.append(row)
            written = True
    return rows


# ---------------------------------------------------------------------------------------------- the audit

class AuditFailed(RuntimeError):
    """A rollout's training data broke an invariant: nothing of that step is trained."""


def audit_step(model: Any, rollouts: Sequence[Rollout], samples: Sequence[Any], temperature: float,
               log: list[dict[str, Any]], drift_limit: float = 1e-3) -> CheckReport:
    """`agentgraphs check` on one step's rollouts before they are trained on: the run directory `agentgraphs
    run` would write (samples.jsonl + traces.jsonl), every invariant, and every trained token re-scored by
    teacher forcing with the model in memory (`prefetched_scorer`: the same forward, batched). Raises
    AuditFailed on any breach or a re-scored log-prob further than `drift_limit` from the recorded one."""
    jobs = []
    with tempfile.TemporaryDirectory() as run_dir:
        with JsonlWriter(run_dir) as write:
            for rollout, sample in zip(rollouts, samples):
                record = {"index": sample.index, "group_index": sample.group_index, "status": sample.status.value,
                          "reward": sample.reward, "train_metadata": sample.train_metadata,
                          **{k: getattr(sample, k) for k in SEQUENCE_KEYS}}  # what slime trains without convert
                write(record, trace_record(rollout, sample.index))
                for seq in sample.train_metadata["turns"]:
                    start = len(seq["tokens"]) - seq["response_length"]
                    positions = [start + j for j, m in enumerate(seq["loss_mask"]) if m]
                    jobs.append((list(seq["tokens"]), positions, [temperature] * len(positions)))
        report = check_run(run_dir, scorer=prefetched_scorer(model, jobs), threshold=drift_limit)
    worst = max((n["max_abs_delta"] for n in report.nodes.values()), default=0.0)
    log.append({"rollouts": report.rollouts, "sequences": report.sequences, "rescored_tokens": report.rescored_tokens,
                "breaches": len(report.breaches), "max_abs_delta": worst, "over_threshold": report.drift_over_threshold})
    if not report.ok or report.drift_over_threshold:
        raise AuditFailed(report.to_text(max_breaches=20))
    return report


def write_json(path: Path, data: Any) -> None:
    """Write `data` to `path` whole or not at all (a temporary file moved over it): a process killed while
    writing leaves the old file or none, never a truncated one that a later call would take as done."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------- the table

def seed_table(evals: Sequence[dict[str, Any]], metric: str) -> str:
    """The seed's RULER-HQA table (one row per model, one column per length) for `metric`, in markdown."""
    lengths = sorted({int(n) for e in evals for n in e["by_length"]})
    head = "| model | " + " | ".join(f"{n // 1000}K" if n % 1000 == 0 else str(n) for n in lengths) + " |"
    lines = [head, "|" + "---|" * (len(lengths) + 1)]
    for e in evals:
        cells = [f"{e['by_length'][str(n)][metric]:.2f}" if str(n) in e["by_length"] else "" for n in lengths]
        lines.append(f"| {e['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def mean3(values: Sequence[float | None]) -> float | None:
    """The mean to 3 places of the finite values (None: none)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]  # a skipped step's entropy is NaN
    return round(sum(finite) / len(finite), 3) if finite else None


def curve_windows(run: dict[str, Any], control: dict[str, Any], window: int = 10) -> list[dict[str, Any]]:
    """RL's training curve beside its permuted-reward control's, `window` steps at a time over the steps both
    took. Both arms roll the same documents at a step, so a window's `difference` (RL - control, step by step,
    averaged) is paired. Per arm: the mean training reward (the rewarded share of a step's rollouts, at the
    rollouts' temperature), the entropy and KL to the start at the trained tokens, and the flat groups (None
    where the curve did not keep that figure: stage files before run 5 have no KL, before run 9 no flat groups).

    >>> arm = lambda permuted, rewards: {"permuted": permuted, "calls": [{"init": "w"}], "curve": [
    ...     {"reward_mean": r, "entropy": 0.1, "kl": 0.0, "flat_groups": 0} for r in rewards]}
    >>> [w["difference"] for w in curve_windows(arm(False, [.5, .7, .9]), arm(True, [.5, .4, .3]), 2)]
    [0.15, 0.6]
    """
    if window < 1:
        raise ValueError(f"curve_windows: window={window}; give a number of steps >= 1")
    if run.get("permuted") or not control.get("permuted"):
        raise ValueError("curve_windows: give RL's stage file first and its control's (rl --permute) second")
    for key in ("init", "prompts", "draw"):  # what decides a step's documents: the start's settings, documents a
        # step and RL's draw (`rl --draw`; stage files written before it: draw 0)
        ours, theirs = ({"draw": 0, **arm["calls"][0]}.get(key) for arm in (run, control))
        if ours != theirs:
            raise ValueError(f"curve_windows: RL's {key} is {ours!r} and the control's {theirs!r}: not one run's "
                             "arms, their steps' documents differ (give the two arms of one run_in_calls run)")
    n = min(len(run["curve"]), len(control["curve"]))  # the steps both took
    a, b = run["curve"][:n], control["curve"][:n]
    out = []
    for start in range(0, n, window):
        ra, rb = a[start:start + window], b[start:start + window]
        arms = {"rl": ra, "control": rb}
        out.append({"steps": [start, start + len(ra) - 1],
                    "reward": {k: mean3([s["reward_mean"] for s in v]) for k, v in arms.items()},
                    "difference": mean3([x["reward_mean"] - y["reward_mean"] for x, y in zip(ra, rb)]),
                    **{key: {k: mean3([s.get(key) for s in v]) for k, v in arms.items()}  # None: not kept then
                       for key in ("entropy", "kl", "flat_groups")}})
    return out


def paired(before: dict[str, Any], after: dict[str, Any], lengths: Sequence[int],
           metric: str = "sub_em_strict") -> dict[str, Any]:
    """Two evaluations of the SAME documents compared document by document at `lengths`: the scores, the
    documents won and lost, and McNemar's z = (won - lost) / sqrt(won + lost) (|z| > 1.96: the change is
    beyond the noise of these documents at 5 %; 0 when nothing changed).

    >>> doc = lambda g, s: {"length": 1000, "gold": g, metric: s}
    >>> metric = "sub_em_strict"
    >>> paired({"results": [doc("1", 0), doc("2", 0), doc("3", 1)]},
    ...        {"results": [doc("1", 1), doc("2", 1), doc("3", 1)]}, [1000])["mcnemar_z"]
    1.41
    """
    pairs = [(b, a) for b, a in zip(before["results"], after["results"]) if b["length"] in set(lengths)]
    if len(before["results"]) != len(after["results"]) or any(
            (b["length"], b["gold"]) != (a["length"], a["gold"]) for b, a in zip(before["results"], after["results"])):
        raise ValueError("paired: the two evaluations are not of the same documents in the same order (evaluate "
                         "both checkpoints of one run with `reproduce.py eval`: its documents come from the run's seed)")
    if not pairs:
        raise ValueError(f"paired: no document at lengths {list(lengths)}")
    won = sum(1 for b, a in pairs if a[metric] > b[metric])
    lost = sum(1 for b, a in pairs if a[metric] < b[metric])
    score = lambda side: round(100 * sum(p[side][metric] for p in pairs) / len(pairs), 2)  # noqa: E731
    return {"documents": len(pairs), "before": score(0), "after": score(1),
            "gain_points": round(score(1) - score(0), 2), "won": won, "lost": lost,
            "mcnemar_z": round((won - lost) / math.sqrt(won + lost), 2) if won + lost else 0.0}
