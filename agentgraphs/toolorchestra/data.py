"""ToolOrchestra's data (QA mode): slime rows from FlashRAG-style QA records, and a synthetic smoke set.

QA records are `{"question": ..., "golden_answers": [...]}` (NQ, HotpotQA, ... as FlashRAG / Search-R1 ship
them; the question may be under `query`, `problem` or `input`, the answers under `answers`, `answer`,
`label` or `ground_truth`), read from a file, a dataset directory or a Hub id by `agentgraphs.dataset_io`.
Output rows are `{"input": question, "label": [answers], "metadata": {"question", "source", "id"?}}`;
`examples/toolorchestra/prepare_data.py` writes them with `agentgraphs.dataset_io.write_jsonl`. The
retrieval corpus (wiki-18: `{"id", "contents"}` per line) needs no conversion.

The seed's own rows (Takenzz/AgentFlow@4b5aa84 agentic/ToolOrchestra, data/data_slime_full.jsonl) carry per-row
fields in their metadata (rollout.py:40-41). `pref_vec` is honoured (the row's weights of the cost-aware reward);
`tools`, `model_mapping`, `tool_pricing` and `trained_model_type` make the row run as the seed runs it
(`seed_rows`: its own tool list, its experts' models, the seed's cost); a non-empty `eid` (a seed-format
row without one: its `id`, as the seed's) goes with the row's searches, which see only that example's documents
(`search`: the service's example-id file, as the seed's); a tau^2 row (`category: func_call`) is refused with an
InputError naming the field and the fix.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..dataset_io import load_located_rows
from ..errors import InputError
from ..retrieval.synthetic import synthetic_corpus
from .options import ToolOrchestraOptions, feature_names, row_experts, unknown_features
from .seed_rows import seed_row

__all__ = ["qa_row", "read_qa", "row_eid", "row_preference", "synthetic_set"]

def row_eid(metadata: Mapping[str, Any], seed_format: bool = False) -> str | None:
    """The row's example id (the seed's `metadata.eid`), None when it has none or an empty one (its searches
    see the whole index, as the seed's). A seed-format row (`seed_rows.seed_row`) without one takes its
    `metadata.id`, as the seed takes it for every row it runs (orchestra_solver.py:90); our own rows' `id` is
    no example id and is never sent. InputError when the id is not a string (the seed's service refuses one).

    >>> row_eid({"eid": "stem____17"}), row_eid({"eid": ""}), row_eid({})
    ('stem____17', None, None)
    >>> row_eid({"eid": "", "id": "stem____3"}, seed_format=True), row_eid({"eid": "", "id": "stem____3"})
    ('stem____3', None)
    """
    field = "eid"
    eid = metadata.get("eid")
    if not eid and seed_format and metadata.get("id") not in (None, ""):
        field, eid = "id", metadata.get("id")
    if eid is not None and not isinstance(eid, str):
        raise InputError(f"metadata.{field}", f"expected a string, got {eid!r:.80}",
                         "give the example id as a string (the seed's example-id file's key), or drop it")
    return eid or None


def row_preference(metadata: Mapping[str, Any], options: ToolOrchestraOptions) -> dict[str, float] | None:
    """A row's own preference weights (the seed's `metadata.pref_vec`), or None when it has none (the
    `preference` option then weighs its rollouts). A seed-format row's fields are checked (`seed_rows.seed_row`)
    and its pref_vec may weigh the calls of an expert name it maps, as the seed's does (`answer-1`, read as the
    feature `expert:answer-1`). A tau^2 row (`category: func_call`), a bad seed field or a pref_vec that is not numbers for features of this graph raise InputError naming the field and the fix.

    >>> row_preference({"category": "qa", "eid": "", "pref_vec": {"accuracy": 1, "cost": -0.3}},
    ...                ToolOrchestraOptions())
    {'accuracy': 1.0, 'cost': -0.3}
    >>> row_preference({"tools": [], "model_mapping": {"answer-1": "Qwen/Qwen3-32B"},
    ...                 "pref_vec": {"accuracy": 1, "answer-1": 0.2}}, ToolOrchestraOptions())
    {'accuracy': 1.0, 'expert:answer-1': 0.2}
    >>> try:
    ...     row_preference({"tools": [], "model_mapping": {"answer-1": "Qwen/Qwen3-32B"}},
    ...                    ToolOrchestraOptions(preference={"accuracy": 1.0, "expert:answer-expert": 0.1}))
    ... except InputError as exc:
    ...     print(exc.field, exc.fix)
    metadata.pref_vec give the row a pref_vec, or weigh accuracy, cost, latency, tool:search, tool:enhance_reasoning, \
tool:answer, expert:answer-1 in `preference`
    """
    if metadata.get("category") == "func_call":  # any other category runs as QA (orchestra_solver.py:104-109)
        raise InputError("metadata.category", "'func_call' is a tau^2 task (the seed runs it in tau^2, "
                         "orchestra_solver.py:106-107), which this QA graph cannot run",
                         "run tau^2 tasks with the toolorchestra-tau2 spec (rows {\"input\": task id, \"metadata\": "
                         "{\"domain\": ...}}: examples/toolorchestra/evaluate_tau2.py --write-rows), or drop the row")
    row = seed_row(metadata)
    weights = metadata.get("pref_vec")
    if weights is None:
        unread = [k for k in unknown_features(options.preference, row_experts(row)) if options.preference[k]] \
            if row is not None else []
        if unread:  # the option weighs an expert engine's calls; a seed row counts its mapped names' instead
            raise InputError("metadata.pref_vec", f"missing, and the `preference` option weighs {unread}, no "
                             "feature of a seed-format row (its experts are the names its model_mapping has)",
                             f"give the row a pref_vec, or weigh {feature_names(row_experts(row))} in `preference`")
        return None
    if not isinstance(weights, Mapping) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in weights.values()):
        raise InputError("metadata.pref_vec", f"expected a mapping of feature -> a number, got {weights!r:.80}",
                         "give each weight as a number, or drop 'pref_vec' to use the `preference` option")
    experts = options.experts
    if row is not None:  # the seed's features count the calls of each mapped expert name under that name
        experts = row_experts(row)
        weights = {(f"expert:{k}" if k in row["model_mapping"] else k): v for k, v in weights.items()}
    unknown = unknown_features(weights, experts)
    if unknown:
        raise InputError("metadata.pref_vec", f"weighs {unknown}, no feature of this graph (a seed-format row's "
                         "expert names count the calls of a model_mapping entry)",
                         f"weigh an expert's calls as 'expert:NAME', a tool's as 'tool:NAME'; the features "
                         f"are {feature_names(experts)}")
    return {str(k): float(v) for k, v in weights.items()}

_QUESTION_KEYS = ("question", "query", "problem", "input")
_ANSWER_KEYS = ("golden_answers", "answers", "answer", "label", "ground_truth")


def qa_row(obj: Any, where: str, source: str) -> dict[str, Any]:
    """One slime row from a QA record; InputError names the line and the field.

    >>> qa_row({"id": "1", "question": "Capital of France?", "golden_answers": ["Paris"]}, "x:1", "nq")
    {'input': 'Capital of France?', 'label': ['Paris'], 'metadata': {'question': 'Capital of France?', 'source': 'nq', 'id': '1'}}
    """
    if not isinstance(obj, dict):
        raise InputError(where, "not a JSON object", 'write {"question": ..., "golden_answers": [...]} per line')
    question = next((obj[k] for k in _QUESTION_KEYS if isinstance(obj.get(k), str) and obj[k].strip()), None)
    if question is None:
        raise InputError(f"{where}.question", "missing", f"give the question under one of {list(_QUESTION_KEYS)}")
    answers = next((obj[k] for k in _ANSWER_KEYS if obj.get(k) not in (None, "", [])), None)
    if isinstance(answers, (str, int, float)):
        answers = [answers]
    if not isinstance(answers, list) or not all(isinstance(a, (str, int, float)) for a in answers):
        raise InputError(f"{where}.golden_answers", f"missing or not a list of answers: {answers!r:.60}",
                         f"give the gold answers under one of {list(_ANSWER_KEYS)}")
    meta: dict[str, Any] = {"question": question.strip(), "source": source}
    if "id" in obj:
        meta["id"] = str(obj["id"])
    return {"input": question.strip(), "label": [str(a) for a in answers], "metadata": meta}


def read_qa(source: str, split: str = "train") -> Iterator[dict[str, Any]]:
    """Rows of a QA source (file, dataset directory or Hugging Face id) through `agentgraphs.dataset_io`.

    >>> import json, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "nq.jsonl")
    >>> _ = open(path, "w").write(json.dumps({"question": "Capital of France?", "golden_answers": ["Paris"]}) + "\\n")
    >>> [(row["label"], row["metadata"]["source"]) for row in read_qa(path)]
    [(['Paris'], 'nq')]
    """
    name = Path(source).stem if Path(source).suffix else source.rstrip("/").rsplit("/", 1)[-1]
    for obj, where in load_located_rows(source, split=split):
        yield qa_row(obj, where, name)


def synthetic_set(n: int, seed: int = 0, filler: int = 2000) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(passages, rows): `n` facts "The access code of vault K is NNNN." among filler, one question each.

    >>> passages, rows = synthetic_set(2, filler=10)
    >>> len(passages), rows[0]["input"], rows[0]["metadata"]["source"]
    (12, 'What is the access code of vault V0000?', 'synthetic')
    """
    rng = random.Random(seed)
    passages: list[dict[str, Any]] = list(synthetic_corpus(filler, seed=seed, words_per_passage=40))
    rows = []
    for k in range(n):
        code = str(rng.randrange(1000, 9999))
        name = f"vault V{k:04d}"  # a name BM25 keeps as one token (it drops 1-character words)
        passages.append({"id": f"fact-{k}", "title": name.title(),
                         "contents": f"The access code of {name} is {code}. It was set in {rng.randrange(1950, 2025)}."})
        question = f"What is the access code of {name}?"
        rows.append({"input": question, "label": [code], "metadata": {"question": question, "source": "synthetic"}})
    rng.shuffle(passages)
    return passages, rows
