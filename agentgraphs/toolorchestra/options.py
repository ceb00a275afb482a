"""ToolOrchestra's options (validated; `variant` presets what the seed reproduction and the original do
differently, VARIANTS), its graph state, and the expert engines the options name (`named_engines`, checked
before any rollout).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Optional, Union

from pydantic import Field, model_validator
from typing_extensions import NotRequired, TypedDict

from ..node import TraceState
from ..spec import MethodOptions, judge_option
from ..trace import RewardSplit
from .notes import Note

__all__ = ["SEED_TURN_MAX_NEW_TOKENS", "TOOLS", "VARIANTS", "Experts", "Price", "Step", "ToolOrchestraOptions",
           "ToolOrchestraState", "expert_names", "feature_names", "max_turns", "named_engines",
           "orchestrator_turn_tokens", "row_experts", "unknown_features"]

TOOLS = ("search", "enhance_reasoning", "answer")

Experts = dict[str, list[str]]


Price = Union[float, list[float]]  # USD per million tokens: one price, or [input, output]

# What `variant` presets. "seed": the seed reproduction (Takenzz/AgentFlow 4b5aa84, agentic/ToolOrchestra);
# "original": ToolOrchestra as its paper describes it. README's ToolOrchestra section has the table with the
# seed's file:line for each value.
VARIANTS: dict[str, dict[str, Any]] = {
    "seed": {"max_turns": 12, "eval_max_turns": 12, "invalid_call": "end", "correctness": "contains",
             "cost_counts_orchestrator": True, "train_unanswered": False, "group_std": "population",
             "drop_group_at_min_std": True, "retrieval_topk": 5, "document_max_chars": 500,
             "answer_failure": "error_text", "expert_circuit_breaker": 2, "tool_protocol": "seed",
             "expert_max_new_tokens": 8192, "expert_temperature": 0.7, "expert_sampling_base": "server",
             "orchestrator_max_new_tokens": None, "unanswered_reward": "transcript"},
    "original": {"max_turns": 30, "eval_max_turns": 50, "invalid_call": "continue", "correctness": "exact",
                 "cost_counts_orchestrator": False, "train_unanswered": True, "group_std": "sample",
                 "drop_group_at_min_std": False, "retrieval_topk": 30, "document_max_chars": 4000,
                 "answer_failure": "empty", "expert_circuit_breaker": None, "tool_protocol": "original",
                 "expert_max_new_tokens": 2048, "expert_temperature": None, "expert_sampling_base": "context",
                 "orchestrator_max_new_tokens": 2048, "unanswered_reward": "zero"},
}


class ToolOrchestraOptions(MethodOptions):
    """ToolOrchestra's settings. `variant` presets the options that differ between the seed reproduction
    (default) and the original; an option given explicitly overrides its variant's value.

    >>> ToolOrchestraOptions().max_turns, ToolOrchestraOptions(variant="original").max_turns
    (12, 30)
    >>> ToolOrchestraOptions(variant="original", invalid_call="end").invalid_call
    'end'
    >>> ToolOrchestraOptions().tool_protocol, ToolOrchestraOptions(variant="original").tool_protocol
    ('seed', 'original')
    """

    presets = VARIANTS

    variant: Literal["seed", "original"] = Field(
        "seed", description="preset of the options below: seed (the seed reproduction) or original (the paper)")
    experts: Experts = Field(
        default_factory=lambda: {"search": ["search-expert"], "enhance_reasoning": ["code-expert"],
                                 "answer": ["answer-expert"]},
        description="tool -> the expert engines (names in AgentContext.engines) the orchestrator may pick")
    max_turns: int = Field(12, ge=1, description="orchestrator turns per episode in training (seed 12, "
                           "original 30)")
    eval_max_turns: Optional[int] = Field(12, ge=1, description="orchestrator turns per episode in evaluation "
                                          "(seed 12, original 50; null: no cap)")
    invalid_call: Literal["end", "continue"] = Field(
        "end", description="a format-invalid orchestrator turn ends the episode unanswered (seed) or becomes "
        "an earlier-attempt note and the loop goes on (original)")
    context_max_tokens: int = Field(6000, ge=1, description="budget of the context rebuilt in each prompt "
                                    "(tool_protocol original)")
    orchestrator_max_new_tokens: Optional[int] = Field(
        None, ge=1, description="cap of each orchestrator turn, under the run's cap (original 2048); null (seed): "
        "the run's cap itself, slime's --rollout-max-response-len, as the seed's turn (orchestra_solver.py:362-364), "
        "else SEED_TURN_MAX_NEW_TOKENS (16384, train_orchestra.sh:72) when the run sets none")
    tool_protocol: Literal["seed", "original"] = Field(
        "seed", description="how the QA tools run (seed_tools.py). seed: as orchestra_solver.py:502-640 -- the "
        "orchestrator keeps one conversation (the seed's system prompt, the problem, then each turn and its tool's "
        "result as a tool message); the experts get the seed's system messages and prompts over the context parts "
        "the episode accumulated; search's query is the expert's <query> (else the problem's first 200 "
        "characters); enhance_reasoning is a text reasoning expert; the answer is the expert's <answer> (else its "
        "last \\boxed{}, a Final Answer line, the whole reply). original: a fresh prompt each turn with the "
        "context rebuilt from notes; enhance_reasoning runs the expert's Python; the answer is its last \\boxed{}")
    expert_max_new_tokens: int = Field(8192, ge=1, description="cap of each expert call (seed 8192, original 2048)")
    expert_temperature: Optional[float] = Field(
        0.7, ge=0, description="sampling temperature of each expert call (seed 0.7, tools/expert_caller/tool.py:89; "
        "original: null, the run's sampling)")
    expert_sampling_base: Literal["server", "context"] = Field(
        "server", description="what an expert call's temperature and token cap are applied to: server: the expert "
        "server's own defaults, the request carries only max_tokens and temperature (seed, "
        "tools/expert_caller/tool.py:337-342; an SGLang chat server fills the rest from the model's "
        "generation_config.json); context: the run's sampling (original)")
    answer_failure: Literal["error_text", "empty", "note"] = Field(
        "error_text", description="a failed answer expert ends the episode with its error as the answer (seed) "
        "or with an empty answer (original); note: an earlier-attempt note and the loop goes on")
    expert_circuit_breaker: int | None = Field(
        2, ge=1, description="after this many consecutive enhance_reasoning calls whose expert failed, every "
        "later expert tool is skipped with an 'expert unavailable' note (seed 2; original: null, no breaker)")
    retrieval_url: str = Field("http://127.0.0.1:8000", description="`agentgraphs retrieval serve` (seed: 8000)")
    retrieval_topk: int = Field(5, ge=1, le=100, description="passages per search (seed 5, original 30)")
    document_max_chars: int = Field(500, ge=1, description="characters of each retrieved document's text kept "
                                    "in the context (seed 500, original 4000)")
    retrieval_timeout_s: float = Field(10.0, gt=0, description="per retrieval request")
    retrieval_retries: int = Field(2, ge=0, description="retries of a failed retrieval request")
    code_timeout_s: float = Field(60.0, gt=0, description="wall-clock limit of enhance_reasoning's code "
                                  "(tool_protocol original)")
    correctness: Literal["contains", "exact"] = Field(
        "contains", description="contains (seed): normalised equality, or the gold inside the answer unless "
        "the gold has <= 3 words and the answer over 10x as many; exact (original): SQuAD exact match")
    judge: Optional[str] = judge_option(None)  # asked when the `correctness` rule says wrong
    prices: dict[str, Price] = Field(default_factory=dict, description="expert -> USD per million tokens, "
                                     "one price or [input, output] (missing: 1.0), for the cost feature")
    cost_counts_orchestrator: bool = Field(
        True, description="the cost feature counts the orchestrator's own prompt and output tokens of every "
        "turn (seed) besides the experts' (original: experts only)")
    orchestrator_price: Optional[Price] = Field(
        None, description="USD per million orchestrator tokens (one price or [input, output]); null: the "
        "cheapest expert's price, as the seed does")
    unanswered_reward: Literal["transcript", "zero"] = Field(
        "transcript", description="the correctness of a rollout that ended with an empty answer (out of turns, a "
        "format-invalid call, an empty expert answer): the seed scores its transcript instead (the turns without "
        "their reasoning and the tools' results, seed_tools.seed_transcript) by the `correctness` rule, then the "
        "judge (reward.py:386, orchestra_solver.py:729-758); zero (original): 0. It still never trains "
        "(`train_unanswered`), but its score counts in its group's statistics")
    reward_shaping: Literal["cost_aware", "none"] = Field(
        "cost_aware", description="ToolOrchestra's group reward in the converter; none: plain GRPO")
    preference: dict[str, float] = Field(
        default_factory=lambda: {"accuracy": 1.0, "cost": 0.0, "latency": 0.0},
        description="weights of the cost-aware reward: accuracy, cost, latency, tool:NAME, expert:NAME; a row's "
        "own metadata.pref_vec (the seed's rows) replaces them for that row")
    train_unanswered: bool = Field(
        False, description="train the turns of a rollout that never answered (original, with its group "
        "value) or mask them (seed; the rollout still counts in its group's statistics)")
    group_std: Literal["population", "sample"] = Field(
        "population", description="std of the per-group standardisation: population (seed, / n) or sample "
        "(original, / (n - 1), as torch.std)")
    drop_group_at_min_std: bool = Field(
        True, description="a group whose std is exactly 0.1 is dropped too (seed keeps std > 0.1; original "
        "drops std < 0.1)")
    reward_split: RewardSplit = Field(
        "broadcast", description="every orchestrator turn gets the rollout's value (seed and original)")

    @model_validator(mode="after")
    def _check(self) -> "ToolOrchestraOptions":
        unknown = sorted(set(self.experts) - set(TOOLS))
        if unknown or "answer" not in self.experts:
            raise ValueError(f"experts: tools must be among {list(TOOLS)} and include 'answer', got "
                             f"{sorted(self.experts)}")
        empty = sorted(t for t, models in self.experts.items() if not models or not all(models))
        if empty:
            raise ValueError(f"experts: {empty} need a non-empty list of engine names")
        bad = unknown_features(self.preference, self.experts)
        if bad:
            raise ValueError(f"preference: unknown features {bad}; use {feature_names(self.experts)}")
        for name, price in [*self.prices.items(), ("orchestrator_price", self.orchestrator_price)]:
            if isinstance(price, list) and (len(price) != 2 or min(price) < 0) or \
                    isinstance(price, float) and price < 0:
                raise ValueError(f"prices: {name}: {price!r}; give one price >= 0 or [input, output]")
        return self


def expert_names(experts: Mapping[str, list[str]]) -> list[str]:
    """Every expert engine the options name, once, in order."""
    return list(dict.fromkeys(m for models in experts.values() for m in models))


def named_engines(opts: ToolOrchestraOptions) -> dict[str, str]:
    """{option: engine name} of every expert engine the options name (`AgentSpec.named_engines`): a run without
    one is refused before any rollout (it failed every rollout at its first node).

    >>> named_engines(ToolOrchestraOptions(experts={"answer": ["big", "small"], "search": ["small"]}))
    {'experts.answer[0]': 'big', 'experts.answer[1]': 'small', 'experts.search[0]': 'small'}
    """
    return {f"experts.{tool}[{i}]": model for tool, models in opts.experts.items() for i, model in enumerate(models)}


def unknown_features(weights: Mapping[str, Any], experts: Mapping[str, list[str]]) -> list[str]:
    """The keys of preference `weights` that name no feature of the cost-aware reward, sorted.

    >>> unknown_features({"accuracy": 1.0, "tool:search": 0.1, "answer-1": 0.2}, {"answer": ["big"]})
    ['answer-1']
    """
    names = expert_names(experts)
    return sorted(k for k in weights if k not in ("accuracy", "cost", "latency")
                  and not (k.startswith("tool:") and k[5:] in TOOLS)
                  and not (k.startswith("expert:") and k[7:] in names))


def feature_names(experts: Mapping[str, list[str]]) -> str:
    """The features a preference may weigh, for an error message."""
    return ", ".join(["accuracy", "cost", "latency", *("tool:" + t for t in TOOLS),
                      *("expert:" + m for m in expert_names(experts))])


class Step(TypedDict):
    """One orchestrator turn: what it chose, its own tokens, and what the tool cost."""

    tool: str
    model: str
    ok: bool
    error: NotRequired[str]
    orchestrator_input_tokens: int  # the turn's prompt
    orchestrator_output_tokens: int  # ... and what the orchestrator generated
    expert_input_tokens: int
    expert_output_tokens: int
    expert_tokens: int  # input + output
    latency_s: float


class ToolOrchestraState(TraceState):
    problem: str
    preference: NotRequired[dict[str, float]]  # the row's own weights (a seed row's pref_vec), over the option's
    seed_row: NotRequired[dict[str, Any]]  # a seed-format row's tools, model_mapping, prices (seed_rows.SeedRow)
    eid: NotRequired[str]  # the row's example id: its searches see only that example's documents (search.py)
    notes: NotRequired[list[Note]]  # tool_protocol original: what the context is rebuilt from
    context_parts: NotRequired[list[str]]  # tool_protocol seed: "[Search by X]\n...", "[Reasoning by X]\n..."
    history: NotRequired[list[dict[str, str]]]  # tool_protocol seed: the orchestrator's turns and tool results
    steps: NotRequired[list[Step]]
    pending: NotRequired[str]  # the tool the last orchestrator turn chose, until it has run
    answer: NotRequired[str]
    done: NotRequired[bool]  # the answer tool ran: the episode is over
    stopped: NotRequired[str]  # why the episode ended without an answer (a format-invalid call, seed variant)
    expert_failures: NotRequired[int]  # consecutive enhance_reasoning calls whose expert failed (the breaker)


def max_turns(opts: ToolOrchestraOptions, evaluation: bool) -> int | None:
    """The turn cap of this run (None: no cap)."""
    return opts.eval_max_turns if evaluation else opts.max_turns


SEED_TURN_MAX_NEW_TOKENS = 16384  # the seed's --rollout-max-response-len (train_orchestra.sh:72)


def orchestrator_turn_tokens(opts: ToolOrchestraOptions, run_max_new_tokens: int, capped: bool) -> int:
    """The max_new_tokens of each orchestrator turn. The option under the run's cap (`capped`: the run set
    `run_max_new_tokens`, slime's --rollout-max-response-len); null (the seed): the run's cap itself, as the
    seed sends slime's sampling params unchanged (orchestra_solver.py:362-364), else the seed's 16384.

    >>> seed, original = ToolOrchestraOptions(), ToolOrchestraOptions(variant="original")
    >>> [orchestrator_turn_tokens(seed, 4096, True), orchestrator_turn_tokens(seed, 1024, False)]
    [4096, 16384]
    >>> [orchestrator_turn_tokens(original, 16384, True), orchestrator_turn_tokens(original, 1024, True)]
    [2048, 1024]
    """
    asked = opts.orchestrator_max_new_tokens
    if asked is None:
        return run_max_new_tokens if capped else SEED_TURN_MAX_NEW_TOKENS
    return min(asked, run_max_new_tokens) if capped else asked


def row_experts(row: Mapping[str, Any]) -> Experts:
    """{tool: the expert names the orchestrator may choose} of a seed-format row: every tool this graph runs,
    with the names the row maps (the seed's parser reads any call its solver dispatches, whatever tools the
    row offered, and its expert caller knows only the mapped names).

    >>> row_experts({"tools": [], "model_mapping": {"answer-1": "m", "search-1": "m"}})["answer"]
    ['answer-1', 'search-1']
    """
    return {tool: list(row["model_mapping"]) for tool in TOOLS}
