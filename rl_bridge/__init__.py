"""rl_bridge: slime's hooks for agentgraphs.

    --custom-generate-function-path rl_bridge.generate
    --custom-rm-path rl_bridge.reward_func
    --custom-eval-rollout-log-function-path rl_bridge.eval_log
    --custom-convert-samples-to-train-data-path rl_bridge.convert

Importable without slime, SGLang or a GPU.
"""

from .convert import convert, normalize_by_group
from .hooks import eval_log, eval_metrics, generate, reward_func

__all__ = ["convert", "eval_log", "eval_metrics", "generate", "normalize_by_group", "reward_func"]
