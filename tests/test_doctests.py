"""Every docstring example in agentgraphs and rl_bridge runs, and prints what it says it prints.

Examples that need the tiny model call ensure_tiny_model(), which builds into AGENTGRAPHS_CACHE (a
per-session temp dir: tests/conftest.py). A module whose examples need CUDA is listed in NEEDS_CUDA
and skipped where there is none; an example that cannot run anywhere (run_demo starts servers and
takes minutes) is marked `# doctest: +SKIP` in its docstring.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from typing import Any

import pytest

PACKAGES = ("agentgraphs", "rl_bridge")
NEEDS_CUDA: frozenset[str] = frozenset()  # modules whose examples only run on a GPU
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        pkg = importlib.import_module(package)
        names.append(package)
        names += [m.name for m in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}.")]
    return sorted(names)


MODULES = _modules()


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def test_every_module_is_collected() -> None:
    assert {"agentgraphs.chat", "agentgraphs.testing.scripted", "rl_bridge.convert"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str, agentgraphs_cache: Any) -> None:
    if name in NEEDS_CUDA and not _has_cuda():
        pytest.skip("its examples need CUDA")
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    for test in finder.find(module, name):
        if test.examples:
            runner.run(test, out=report.append)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, "".join(report)
