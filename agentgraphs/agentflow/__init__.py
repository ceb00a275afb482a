"""AgentFlow (planner -> executor -> verifier), in progress.

Only the parsers of the method's model outputs exist so far (they are exact and tested on hostile
text); the graph, prompts and spec follow. See reference/methods.md for the rules they implement.
"""

from .parsing import NO_MATCHED_TOOL, NextStep, parse_answer_tags, parse_next_step, parse_verifier_conclusion

__all__ = ["NO_MATCHED_TOOL", "NextStep", "parse_answer_tags", "parse_next_step", "parse_verifier_conclusion"]
