"""AgentFlow's options (validated; `variant` picks the seed's or the original's settings, agentflow/variants.py),
its graph state, and the role engines the options name (`named_engines`, checked before any rollout;
`role_engine`, the engine a role's calls go to).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, field_validator, model_validator
from typing_extensions import NotRequired

from ..context import AgentContext
from ..errors import ConfigError
from ..node import TraceState
from ..spec import MethodOptions, judge_option
from ..trace import RewardSplit
from .parsing import NextStep
from .variants import TEMPLATE_PRESETS, VARIANTS

__all__ = ["ROLE_OPTIONS", "AgentFlowOptions", "AgentFlowState", "named_engines", "role_engine"]


class AgentFlowOptions(MethodOptions):
    """AgentFlow's settings. `variant` fills the options it governs (agentflow/variants.py): "seed" (the
    default) reproduces the seed's training, "original" the AgentFlow paper's; an option set explicitly
    wins over the variant. The defaults written below are the seed's.

    >>> AgentFlowOptions().max_steps, AgentFlowOptions(variant="original").max_steps
    (5, 3)
    >>> AgentFlowOptions(variant="original", max_steps=4).max_steps  # explicit beats the preset
    4
    """

    presets = VARIANTS
    template_presets = TEMPLATE_PRESETS
    variant: Literal["seed", "original"] = Field(
        "seed", description="preset of the options below: the seed's training (seed) or the paper's (original)")
    tools: tuple[str, ...] = Field(("base_generator", "python_coder"),
                                   description="registry keys of the tools the planner may pick")
    max_steps: int = Field(5, ge=1, le=50, description="planner turns per rollout (seed 5; original: training 3)")
    eval_max_steps: Union[Annotated[int, Field(ge=1, le=50)], Literal["max_steps"], None] = Field(
        "max_steps", description="planner turns in evaluation: a number, max_steps (the training cap, as the "
        "seed evaluates) or null (no cap: STOP, max_time_s or the token budget ends the loop); the original's "
        "inference: 10")
    max_time_s: Optional[float] = Field(
        None, ge=0, description="no new step after this many seconds of the run's own work (seed null: its loop "
        "has no clock; original 300)")
    planner_token_budget: Optional[int] = Field(
        131072, ge=1, description="no new step once the planner's calls (prompt + output tokens) reach this "
        "(seed 131072; null: no budget)")
    train_analysis: bool = Field(True, description="the query analysis is a planner call on the policy, trained "
                                 "as turn 0 (seed); false: an untrained helper call (original)")
    planner_max_new_tokens: int = Field(4096, ge=1, description="cap of each planner call (seed 4096; original "
                                        "2048)")
    helper_max_new_tokens: int = Field(4096, ge=1, description="cap of command/verify/final/tool calls (and the "
                                       "analysis without train_analysis)")
    helper_temperature: Optional[float] = Field(
        None, ge=0, description="sampling temperature of every helper call (null: the rollout's, as the seed; "
        "original 0.0)")
    verifier_rule: Literal["seed", "original"] = Field(
        "seed", description="how the verifier's reply is read: the last 'Conclusion: STOP|CONTINUE', else the "
        "word stop/continue in its last 3 lines (seed); JSON, the last 'Conclusion: <word>', else 'stop' "
        "anywhere in the text (original)")
    prompts: Literal["seed", "original"] = Field(
        "seed", description="the prompts and the reading of the planner's reply: the seed's (its texts, its tools "
        "listed by name and description, its memory of one result string per step, its parser; python_coder asks "
        "with the seed's prompt and returns the seed's string; the final output asks for \\boxed{}; every reply read "
        "as SGLang's text of it, a stop's end-of-turn token kept) or the original AgentFlow's")
    unknown_tool: Literal["base_generator", "placeholders"] = Field(
        "base_generator", description="a next step naming no available tool (or none: a reply without the block): "
        "the base generator runs it, its command written for the name as given, and the memory keeps that name "
        "(seed, core/executor.py:178-200; only when base_generator is among the tools) or it is skipped with the "
        "original's 'tool was not found' placeholders")
    answer_suffix: bool = Field(False, description="append the <answer>-tags instruction to the query (the "
                                "original's training; the seed's query is the row's prompt as given)")
    analyzer_engine: str = Field("policy", description="engine of analyze_query ('policy' with train_analysis)")
    executor_engine: str = Field("helper", description="engine of generate_command")
    verifier_engine: str = Field("helper", description="engine of verify")
    final_engine: str = Field("helper", description="engine of final_output")
    tool_engine: str = Field("helper", description="engine of the tools' own LLM calls")
    tool_engines: dict[str, str] = Field(
        default_factory=dict, description="tool key (in `tools`) -> engine of that tool's own LLM calls, over "
        "tool_engine (the seed's python_coder asks its own coder model: {python_coder: coder})")
    judge: Optional[str] = judge_option("judge")
    judge_prompt: Literal["seed", "original"] = Field(
        "seed", description="the judge's prompt and the reading of its reply: the seed's (the whole final output, "
        "ends in 'VERDICT: True|False'; read by the first VERDICT, else <true_false>, else a last line that is only "
        "true/false) or the original AgentFlow's (a JSON object with true_false)")
    judge_max_new_tokens: int = Field(2048, ge=1, description="cap of each judge call (seed 2048; original 1024)")
    judge_no_verdict: Literal["zero", "fail"] = Field(
        "zero", description="a judge reply that states no verdict by its prompt's rule: zero (seed) scores it 0.0 as "
        "the seed does, with a WARNING naming the judge and its reply; fail (original) fails the sample (RewardError)")
    judge_sampling: Literal["sglang_defaults", "greedy"] = Field(
        "sglang_defaults", description="how the judge samples: SGLang's /generate defaults (temperature 1.0, top-p "
        "1.0, no top-k or min-p: the seed sends no sampling parameters, so its judge samples and a verdict can "
        "change between asks) or greedy (temperature 0, the original's)")
    answer_check: Literal["boxed_exact", "math_verify"] = Field(
        "boxed_exact", description="boxed_exact (seed): the answer's last \\boxed{} (else a line rule), "
        "normalised, equal to a gold scores 1 before any judge; math_verify (original): the judge alone, "
        "math-verify without one")
    helper_failure: Literal["seed", "fail"] = Field(
        "seed", description="an engine error in a helper call of the executor's command, the verifier or the final "
        "output: seed goes on as the seed does (the command is 'Error generating command: <error>', the verifier's "
        "conclusion STOP, the final output ''), with a WARNING and an entry in the sample's "
        "trace_summary.helper_failures; fail (original) fails the rollout. The planner's own calls and aborted "
        "generations always end the rollout")
    reward_timeout_s: float = Field(10.0, gt=0, description="math-verify's deadline per answer (a worker process, "
                                    "killed past it: reward 0 with the reason)")
    reward_split: RewardSplit = Field(
        "divide", description="every planner sequence gets the trajectory's advantage (original) or it divided "
        "by the number of trained sequences (seed)")
    tool_timeout_s: Optional[float] = Field(
        None, gt=0, description="per tool.execute call (seed null: its executor waits for the tool, whose own limits "
        "are python_coder's 120 s for its code and sandbox_wall_s for running it; original 120)")
    action_step_start: Literal[0, 1] = Field(
        0, description="number of the first 'Action Step' in the memory the prompts show (seed 0; original 1)")
    result_max_chars: int = Field(
        4096, ge=100, description="a longer step result keeps its first and last result_max_chars / 2 characters "
        "in the memory, as the seed's (4096); the original keeps up to 100,000 characters of each string")
    sandbox_wall_s: float = Field(30.0, gt=0, description="python_coder: wall-clock (and CPU) limit of one "
                                  "execution (seed 30; original 10)")
    sandbox_memory_mb: int = Field(512, ge=32, description="python_coder: memory limit of one execution")

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_from_list(cls, value: Any) -> Any:
        """YAML and JSON give a list; the option is a tuple (frozen options are hashable)."""
        return tuple(value) if isinstance(value, list) else value

    @model_validator(mode="after")
    def _tool_engines_of_selected_tools(self) -> "AgentFlowOptions":
        unknown = sorted(set(self.tool_engines) - set(self.tools))
        if unknown:
            raise ValueError(f"tool_engines names {unknown}, which are not among the option tools {list(self.tools)}."
                             " Fix: key tool_engines by a selected tool's key (e.g. {python_coder: coder})")
        return self

    @model_validator(mode="after")
    def _trained_analysis_on_the_policy(self) -> "AgentFlowOptions":
        if self.train_analysis and self.analyzer_engine != "policy":
            raise ValueError(f"train_analysis: true trains the query analysis, so it must run on the policy, but "
                             f"analyzer_engine is {self.analyzer_engine!r}. Fix: set analyzer_engine: policy, or "
                             "train_analysis: false (an untrained helper call, as the original)")
        return self


class AgentFlowState(TraceState):
    question: str
    query: NotRequired[str]
    analysis: NotRequired[str]
    elapsed_s: NotRequired[float]  # the run's own time in its nodes (max_time_s): see _clocked
    step: NotRequired[int]
    next_step: NotRequired[NextStep]
    command: NotRequired[str]
    result: NotRequired[str]
    memory: NotRequired[list[dict[str, Any]]]
    conclusion: NotRequired[str]
    stop_reason: NotRequired[str]
    final_output: NotRequired[str]
    answer: NotRequired[str]
    helper_failures: NotRequired[list[dict[str, Any]]]  # helper_failure: seed's failures gone past: node, step, error


ROLE_OPTIONS = ("analyzer_engine", "executor_engine", "verifier_engine", "final_engine", "tool_engine")


def named_engines(opts: AgentFlowOptions) -> dict[str, str]:
    """{option: engine name} of every role engine the options name that the run must have: all but "policy"
    and "helper" (the helper if given, else the policy); `AgentSpec.check_engines` refuses a missing one
    before any rollout.

    >>> named_engines(AgentFlowOptions(verifier_engine="generator", tool_engines={"python_coder": "coder"}))
    {'verifier_engine': 'generator', 'tool_engines.python_coder': 'coder'}
    """
    named = {option: getattr(opts, option) for option in ROLE_OPTIONS}
    named.update({f"tool_engines.{key}": name for key, name in opts.tool_engines.items()})
    return {option: name for option, name in named.items() if name not in ("policy", "helper")}


def role_engine(ctx: AgentContext, name: str) -> str | None:
    """The `engine=` argument of call_llm for a role: None is the policy.

    >>> from agentgraphs.context import AgentContext
    >>> ctx = AgentContext(policy="sglang:http://127.0.0.1:30000", tokenizer=object())
    >>> role_engine(ctx, "helper") is None  # no helper engine given: the policy helps itself
    True
    """
    if name == "policy":
        return None
    if name in ctx.engines:
        return name
    if name == "helper":
        return None
    raise ConfigError(f"AgentFlow: no engine named {name!r} in the context (known: {sorted(ctx.engines)}). Fix: add "
                      f"it to AgentContext.engines / agentgraph_engines, or set the role's option to 'policy'")
