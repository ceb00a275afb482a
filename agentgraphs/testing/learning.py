"""Check tasks for the learning check: rewards a freshly initialised tiny model learns within minutes.

Both tasks are one conversation with two trainable turns (a draft, then a revision; layout `concat`, so
one training sequence per rollout). The reward looks only at the generated ids:

- `share` (DRAFT_REVISE): the share of generated ids that lie in a fixed target set. The set is about
  40 % of the vocabulary: the ids whose OUTPUT embeddings point most along one fixed random direction,
  so one shared direction of the final hidden state raises all of them at once (a set of ids below a
  threshold has no such direction, and a tiny model does not learn it within a check's budget).
- `first_token` (FIRST_TOKEN): the share of turns whose FIRST generated id is in the set. Only that
  position carries signal, so a loss mask shifted by one position (which trains the second token
  instead) must not learn it; the `share` reward would learn almost as well under a shifted mask.

The target set is computed once from the initial model (`target_ids`) and bound into the spec
(`learning_spec`); the reward reads the shares from the rollout's trace summary (`summarize`), the
same way slime's reward hook would see them.

MemAgent with a shaped reward (`memagent_learning_spec`, rows from `memagent_rows`): MemAgent's own graph and
layout (per_turn: each memory update and the final answer is its own training sequence), its real reward
(an exact boxed match, always 0 on a random model) replaced by the `share` reward over ALL of a trajectory's
trainable turns and broadcast to each of its sequences. This exercises the multi-sequence path: several
training sequences per trajectory, group normalisation per prompt over trajectories.

>>> build_check_engine(hidden_size=32, num_layers=1).model.config.hidden_size
32
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Literal, Mapping, Sequence

from langgraph.graph import END, START, StateGraph
from pydantic import Field

from .. import memagent
from ..context import AgentContext, shared_tokenizer
from ..errors import InputError
from ..node import TraceState, call_llm
from ..spec import AgentSpec, MethodOptions, RewardInput, RolloutInput

RewardOn = Literal["share", "first_token"]
REVISE_PROMPT = "Revise your draft."
TOPICS = ("rivers", "stars", "bread", "trains", "glass", "owls", "salt", "bells", "maps", "moss",
          "kites", "tides", "clay", "wool", "honey", "ice")


class LearningOptions(MethodOptions):
    """Options of the check tasks."""

    max_new_tokens: int = Field(8, ge=1, description="tokens generated per turn (draft and revision)")


class DraftState(TraceState):
    question: str
    answer: str


async def draft(state: DraftState, runtime: Any, *, opts: LearningOptions) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="draft", conversation="main", max_new_tokens=opts.max_new_tokens,
                         messages=[{"role": "user", "content": state["question"]}])
    return out.update


async def revise(state: DraftState, runtime: Any, *, opts: LearningOptions) -> dict[str, Any]:
    out = await call_llm(state, runtime, node="revise", conversation="main", max_new_tokens=opts.max_new_tokens,
                         messages=[{"role": "user", "content": REVISE_PROMPT}])
    return {"answer": out.text, **out.update}


def build_graph(options: LearningOptions | None = None, *, checkpointer: Any = None) -> Any:
    """draft -> revise, one conversation.

    >>> sorted(build_graph().get_graph().nodes)
    ['__end__', '__start__', 'draft', 'revise']
    """
    opts = options or LearningOptions()
    g = StateGraph(DraftState, context_schema=AgentContext)
    g.add_node("draft", functools.partial(draft, opts=opts))
    g.add_node("revise", functools.partial(revise, opts=opts))
    g.add_edge(START, "draft")
    g.add_edge("draft", "revise")
    g.add_edge("revise", END)
    return g.compile(checkpointer=checkpointer, name="draft_revise")


def make_input(row: RolloutInput, options: Any) -> dict[str, Any]:
    prompt = row["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        raise InputError("prompt", "must be a non-empty string", "give each row a prompt text")
    return {"question": prompt, "answer": "", "turns": []}


def target_shares(turns: Sequence[Mapping[str, Any]], targets: frozenset[int]) -> dict[str, float]:
    """`target_share` (all trainable generated ids) and `first_token_share` (first id of each turn).

    >>> t = [{"trainable": True, "output_ids": [1, 2, 3, 4]}, {"trainable": True, "output_ids": [5, 1]}]
    >>> target_shares(t, frozenset({1, 2}))
    {'target_share': 0.5, 'first_token_share': 0.5}
    """
    trained = [t["output_ids"] for t in turns if t["trainable"] and t["output_ids"]]
    ids = [i for out in trained for i in out]
    return {
        "target_share": sum(i in targets for i in ids) / len(ids) if ids else 0.0,
        "first_token_share": sum(out[0] in targets for out in trained) / len(trained) if trained else 0.0,
    }


def target_ids(model: Any, *, fraction: float = 0.4, seed: int = 0) -> frozenset[int]:
    """The `fraction` of ids whose output embeddings point most along one seeded random direction.

    >>> len(target_ids(build_check_engine(hidden_size=32, num_layers=1).model)) // 1000
    60
    """
    import torch

    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction}")
    weight = model.get_output_embeddings().weight.detach().float().cpu()
    direction = torch.randn(weight.shape[1], generator=torch.Generator().manual_seed(seed))
    projection = weight @ (direction / direction.norm())
    keep = int(round(fraction * weight.shape[0]))
    return frozenset(torch.topk(projection, keep).indices.tolist())


def learning_spec(targets: frozenset[int], reward_on: RewardOn = "share") -> AgentSpec:
    """The check task's AgentSpec with its target set bound in; `reward_on` picks the reward.

    >>> spec = learning_spec(frozenset({1}), "first_token")
    >>> spec.name, spec.layout
    ('first_token', 'concat')
    """
    if reward_on not in ("share", "first_token"):
        raise ValueError(f"reward_on must be 'share' or 'first_token', got {reward_on!r}")
    key = "target_share" if reward_on == "share" else "first_token_share"

    def summarize(final: Mapping[str, Any]) -> dict[str, Any]:
        return target_shares(final.get("turns") or [], targets)

    def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
        return float(rin["trace_summary"][key])

    return AgentSpec(
        name="draft_revise" if reward_on == "share" else "first_token",
        build_graph=build_graph, make_input=make_input, answer=lambda s: str(s.get("answer", "")),
        reward=reward, layout="concat", options=LearningOptions, requires_label=False, summarize=summarize,
        description="learning check: draft then revise; reward on generated ids in a target set",
    )


def memagent_learning_spec(targets: frozenset[int]) -> AgentSpec:
    """MemAgent's spec with the `share` reward: the share of target ids over every trainable turn.

    The share is computed in `summarize` (it sees the Turns) beside MemAgent's own summary, and the
    reward reads it from the trace summary; layout (per_turn) and the split (the options' `reward_split`:
    broadcast with `variant: original`, as `--task memagent` runs it) stay MemAgent's.

    >>> spec = memagent_learning_spec(frozenset({1}))
    >>> spec.name, spec.layout, spec.reward_split, spec.requires_label
    ('memagent_share', 'per_turn', 'broadcast', False)
    """
    base = memagent.SPEC
    base_summarize = base.summarize

    def summarize(final: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(base_summarize(final)) if base_summarize is not None else {}
        out.update(target_shares(final.get("turns") or [], targets))
        return out

    def reward(rin: RewardInput, ctx: AgentContext | None) -> float:
        return float(rin["trace_summary"]["target_share"])

    return dataclasses.replace(
        base, name="memagent_share", reward=reward, summarize=summarize, eval_metrics=None, requires_label=False,
        description="learning check: MemAgent, reward = share of generated ids (memory updates and answer) "
                    "in a target set, given to every sequence (reward_split: broadcast or divide)")


def memagent_rows(n: int, tokenizer: Any, *, chunks: int = 2, chunk_tokens: int = 64) -> list[dict[str, Any]]:
    """`n` synthetic needle questions whose documents fill `chunks` chunks of `chunk_tokens` tokens.

    Rows are the trainer's {prompt, label, metadata{context}} (MemAgent reads the document from metadata).

    >>> class Words:
    ...     def encode(self, text, add_special_tokens=False): return text.split()
    >>> rows = memagent_rows(2, Words(), chunks=3, chunk_tokens=64)
    >>> rows[0]["prompt"].startswith("What is the secret code of "), len(rows[0]["metadata"]["context"].split()) > 128
    (True, True)
    """
    from ..memagent.synthetic import build_filler_pool, make_needle_example

    if n < 1 or chunks < 1 or chunk_tokens < 16:
        raise ValueError(f"memagent_rows needs n >= 1, chunks >= 1, chunk_tokens >= 16; got {n}, {chunks}, {chunk_tokens}")
    n_tokens = chunks * chunk_tokens - chunk_tokens // 4  # the last chunk is not full: exactly `chunks` chunks
    # the filler the check's published figures were measured on (bench/README); a few chunks, so the alignment
    # cycle that made the library's default filler varied cannot arise
    pool = build_filler_pool(tokenizer, sentence_lengths="uniform")
    rows = []
    for i in range(n):
        row = make_needle_example(tokenizer, n_tokens, seed=f"learn-{i}", needle_position=(i % chunks),
                                  chunk_size=chunk_tokens, pool=pool)
        rows.append({"prompt": row["question"], "label": row["answers"], "metadata": {"context": row["document"], "i": i}})
    return rows


def learning_rows(n: int) -> list[dict[str, Any]]:
    """`n` prompts for the check task.

    >>> learning_rows(2)[1]["prompt"]
    'Write a short draft about stars.'
    """
    return [{"prompt": f"Write a short draft about {TOPICS[i % len(TOPICS)]}.", "label": None, "metadata": {"i": i}}
            for i in range(n)]


def build_check_engine(
    *,
    hidden_size: int = 64,
    num_layers: int = 2,
    init_scale: float = 0.02,
    seed: int = 0,
    device: str | None = None,
    dtype: Any = None,
) -> Any:
    """A freshly initialised Qwen2 (real Qwen2.5 tokenizer) of the given size, served by an HFEngine.

    Built in memory (nothing written but the shared tokenizer files); weights seeded by `seed`.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ..engines.hf import HFEngine
    from .tiny_model import _model_config, check_size, ensure_tiny_model, kv_heads_for

    heads = max(1, hidden_size // 32)  # head dim 32
    kv_heads = kv_heads_for(heads)
    check_size(hidden_size, num_layers, heads, kv_heads, 2 * hidden_size, init_scale)
    config = _model_config(hidden_size, num_layers, heads, kv_heads, 2 * hidden_size, init_scale)
    config = {k: v for k, v in config.items() if k not in ("torch_dtype", "dtype", "transformers_version")}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(Qwen2Config(**config))
    tokenizer = shared_tokenizer(str(ensure_tiny_model()))
    return HFEngine(model, tokenizer, device=device, dtype=dtype, seed=seed)


__all__ = [
    "LearningOptions", "build_check_engine", "build_graph", "learning_rows", "learning_spec",
    "memagent_learning_spec", "memagent_rows",
    "target_ids", "target_shares",
]
