"""Dataset rows of tau^2 mode: one row per tau^2 task, in the shape `spec.make_input` reads."""

from __future__ import annotations

from typing import Any

from . import bench

__all__ = ["task_rows"]


def task_rows(domain: str, task_ids: list[str] | None = None, *, split: str | None = None) -> list[dict[str, Any]]:
    """Dataset rows for a domain's tasks, in the shape `make_input` reads (one JSON line each for slime).

    `task_ids`, else tau^2's task `split` (`train` for RL, `test` for evaluation), else every task.

    >>> task_rows("airline", ["3"])  # doctest: +SKIP
    [{'input': '3', 'metadata': {'domain': 'airline', 'task_id': '3'}}]
    >>> len(task_rows("airline", split="test"))  # doctest: +SKIP
    20
    """
    d = bench.load_domain(domain)
    ids = d.split(split) if task_ids is None else [str(t) for t in task_ids]
    return [{"input": t, "metadata": {"domain": domain, "task_id": t}} for t in ids]
