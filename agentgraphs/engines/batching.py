"""Continuous batching for HFEngine: the decode steps of all requests in flight run as one forward.

One driver thread (started when work arrives, gone when there is none) repeats a step under the engine
lock:
1. requests cancelled since the last step leave the batch (their rows are dropped);
2. teacher-forced scores waiting (`HFEngine.score_async`) run as one padded forward;
3. new requests join: their prompts are prefilled together (left-padded, up to `max_prefill_tokens`
   padded tokens and `max_batch` rows) and their KV rows are appended to the batch cache;
4. every row samples its next token from the logits of the forward that produced them (`sample_rows`:
   each request's own parameters and seeded generator, the engine's `sampler`), and that token's log-prob
   is recorded then;
5. finished rows (length, stop id, stop string: `HFEngine.finish_of`) leave; the rest run ONE decode
   forward over the batch cache, which gives the logits of the next step.

The batch cache is a transformers DynamicCache whose rows are left-padded to a common width; a 2-D
attention mask hides the padding, and each row's position ids are its own token count, so every request
sees exactly its own prompt and outputs. Rows that leave are cut out and all-padding columns trimmed.

Results reach each caller's event loop through `call_soon_threadsafe`; the loop itself never blocks.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .sampling import GREEDY_BELOW, GenerationRequest, sample_rows

if TYPE_CHECKING:
    import torch


class BatchHost(Protocol):
    """What the driver needs of its engine (HFEngine): the model, its device and step lock, the finish rule."""

    model: Any
    device: Any
    model_lock: threading.Lock
    sampler: str

    def finish_of(self, request: GenerationRequest) -> tuple[Any, int | str | None]: ...


@dataclass
class _Waiter:
    """Where a finished piece of work is delivered: a future on its caller's loop."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        def apply() -> None:
            if self.future.done():  # cancelled meanwhile
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)

        try:
            self.loop.call_soon_threadsafe(apply)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting any more
            pass


@dataclass
class _Score:
    """A teacher-forced scoring job (HFEngine.score_async)."""

    prompt_ids: list[int]
    output_ids: list[int]
    temperature: float
    waiter: _Waiter
    cancelled: bool = False


@dataclass
class BatchStats:
    """Counters of the batch driver (read them between runs: they are not synchronised)."""

    steps: int = 0  # decode forwards
    decode_rows: int = 0  # rows over all decode forwards (their mean is decode_rows / steps)
    max_rows: int = 0
    prefills: int = 0  # prefill forwards
    prefill_rows: int = 0
    scores: int = 0  # scoring jobs


def _kv_of(cache: Any) -> list[tuple["torch.Tensor", "torch.Tensor"]]:
    """Per-layer (keys, values) tensors [rows, kv_heads, width, head_dim] of a DynamicCache."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def _cache_of(kv: list[tuple["torch.Tensor", "torch.Tensor"]]) -> Any:
    from transformers import DynamicCache

    return DynamicCache(kv)


class DecodeBatcher:
    """The continuous-batching driver behind `HFEngine(batching=True)`; see the module docstring.

    >>> from agentgraphs.engines import SamplingParams
    >>> from agentgraphs.engines.hf import HFEngine
    >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
    >>> engine = HFEngine.from_dir(ensure_tiny_model(), device="cpu", batching=True, seed=0)
    >>> async def two():
    ...     params = SamplingParams(max_new_tokens=4, ignore_eos=True)
    ...     return await asyncio.gather(engine.generate([151644, 872], params), engine.generate([151644], params))
    >>> [len(c.token_ids) for c in asyncio.run(two())]
    [4, 4]
    >>> engine.batcher.stats.max_rows
    2
    """

    def __init__(self, engine: BatchHost, *, max_batch: int = 256, max_prefill_tokens: int = 16384) -> None:
        if max_batch < 1 or max_prefill_tokens < 1:
            raise ValueError(f"max_batch ({max_batch}) and max_prefill_tokens ({max_prefill_tokens}) must be >= 1")
        self.engine = engine
        self.max_batch = max_batch
        self.max_prefill_tokens = max_prefill_tokens
        self.stats = BatchStats()
        self._guard = threading.Lock()  # the queues and the driver's existence
        self._queue: list[tuple[GenerationRequest, _Waiter]] = []
        self._scores: list[_Score] = []
        self._thread: threading.Thread | None = None
        # the batch (driver thread only): rows in cache order, their waiters, cache, mask, next-step logits
        self._rows: list[GenerationRequest] = []
        self._waiters: list[_Waiter] = []
        self._cache: Any = None
        self._mask: Any = None
        self._logits: Any = None

    # ------------------------------------------------------------------------------ the callers' side

    async def run(self, request: GenerationRequest) -> None:
        """Generate until `request` finishes (its fields are filled in place); cancellable."""
        waiter = self._waiter()
        self._submit(lambda: self._queue.append((request, waiter)))
        try:
            await waiter.future
        except asyncio.CancelledError:
            request.cancelled = True  # the driver drops its row before the next step
            raise

    async def score(self, prompt_ids: list[int], output_ids: list[int], temperature: float) -> list[float]:
        """Teacher-forced log-probs of `output_ids`, computed together with the other waiting scores."""
        job = _Score(prompt_ids, output_ids, temperature, self._waiter())
        self._submit(lambda: self._scores.append(job))
        try:
            return await job.waiter.future
        except asyncio.CancelledError:
            job.cancelled = True
            raise

    @property
    def in_flight(self) -> int:
        """Requests in the batch or waiting to join it."""
        return len(self._rows) + len(self._queue)

    def _waiter(self) -> _Waiter:
        loop = asyncio.get_running_loop()
        return _Waiter(loop, loop.create_future())

    def _submit(self, enqueue: Any) -> None:
        with self._guard:
            enqueue()
            if self._thread is None:
                self._thread = threading.Thread(target=self._drive, name="hf-decode-batcher", daemon=True)
                self._thread.start()

    # ------------------------------------------------------------------------------ the driver thread

    def _drive(self) -> None:
        import torch

        while True:
            with self._guard:
                if not (self._queue or self._scores or self._rows):
                    self._thread = None
                    return
                scores, self._scores = self._scores, []
            try:
                with self.engine.model_lock, torch.inference_mode():
                    self._run_scores(scores)
                    self._step()
            except BaseException as exc:  # noqa: BLE001 - every waiter must hear of it, then the batch resets
                self._fail_all(exc, scores)

    def _fail_all(self, exc: BaseException, scores: list[_Score]) -> None:
        with self._guard:
            queued, self._queue = self._queue, []
        for job in scores:
            job.waiter.settle(error=exc)
        for waiter in self._waiters + [w for _, w in queued]:
            waiter.settle(error=exc)
        self._rows, self._waiters = [], []
        self._cache = self._mask = self._logits = None

    def _step(self) -> None:
        self._drop([i for i, r in enumerate(self._rows) if r.cancelled])
        self._admit()
        if not self._rows:
            return
        params = [r.params for r in self._rows]
        tokens, ids, logprobs = sample_rows(self._logits, params, [r.generator for r in self._rows],
                                            sampler=self.engine.sampler)
        done: list[int] = []
        for i, request in enumerate(self._rows):
            request.output_ids.append(ids[i])
            request.logprobs.append(logprobs[i])
            request.finish, request.matched = self.engine.finish_of(request)
            if request.finish is not None:
                done.append(i)
        for i in done:
            self._waiters[i].settle()
        if done:
            finished = set(done)
            keep = [i for i in range(len(self._rows)) if i not in finished]
            tokens = tokens[keep] if keep else tokens[:0]
            self._drop(done)
        if self._rows:
            self._decode(tokens)

    # ------------------------------------------------------------------------------ batch surgery

    def _drop(self, rows: list[int]) -> None:
        """Cut `rows` out of the batch and trim the columns that are padding in every remaining row."""
        if not rows:
            return
        import torch

        gone = set(rows)
        keep = [i for i in range(len(self._rows)) if i not in gone]
        self._rows = [self._rows[i] for i in keep]
        self._waiters = [self._waiters[i] for i in keep]
        if not keep:
            self._cache = self._mask = self._logits = None
            return
        index = torch.tensor(keep, device=self._mask.device)
        mask = self._mask.index_select(0, index)
        first = int(mask.any(dim=0).int().argmax())  # leading columns that are padding for every row
        self._mask = mask[:, first:]
        self._logits = self._logits.index_select(0, index) if self._logits is not None else None
        self._cache = _cache_of([(k.index_select(0, index)[:, :, first:], v.index_select(0, index)[:, :, first:])
                                 for k, v in _kv_of(self._cache)])

    def _admit(self) -> None:
        """Prefill queued requests (within the row and token budgets) and append them to the batch."""
        with self._guard:
            room = self.max_batch - len(self._rows)
            taken: list[tuple[GenerationRequest, _Waiter]] = []
            width = 0
            while self._queue and len(taken) < room:
                request, waiter = self._queue[0]
                if request.cancelled:
                    self._queue.pop(0)
                    continue
                wider = max(width, len(request.prompt_ids))
                if taken and wider * (len(taken) + 1) > self.max_prefill_tokens:
                    break
                taken.append(self._queue.pop(0))
                width = wider
        if not taken:
            return
        try:
            kv, mask, logits = self._prefill([r.prompt_ids for r, _ in taken])
            self._merge(kv, mask, logits)
        except BaseException as exc:  # noqa: BLE001 - these requests are in no queue any more: tell them
            for _, waiter in taken:
                waiter.settle(error=exc)
            raise
        self._rows.extend(r for r, _ in taken)
        self._waiters.extend(w for _, w in taken)

    def _merge(self, kv: list[tuple[Any, Any]], mask: Any, logits: Any) -> None:
        import torch
        import torch.nn.functional as F

        if not self._rows:
            self._cache, self._mask, self._logits = _cache_of(kv), mask, logits
            return
        width = max(self._mask.shape[1], mask.shape[1])

        def left(t: Any, w: int) -> Any:  # pad the token axis (dim -2 of K/V, dim 1 of the mask) on the left
            return t if t.shape[-2] == w else F.pad(t, (0, 0, w - t.shape[-2], 0))

        merged = [(torch.cat([left(k0, width), left(k1, width)]), torch.cat([left(v0, width), left(v1, width)]))
                  for (k0, v0), (k1, v1) in zip(_kv_of(self._cache), kv)]
        self._cache = _cache_of(merged)
        self._mask = torch.cat([F.pad(self._mask, (width - self._mask.shape[1], 0)),
                                F.pad(mask, (width - mask.shape[1], 0))])
        self._logits = torch.cat([self._logits, logits])

    # ------------------------------------------------------------------------------ forwards

    def _prefill(self, prompts: list[list[int]]) -> tuple[list[tuple[Any, Any]], Any, Any]:
        """One left-padded forward over `prompts`: their KV rows (padding zeroed), mask, last logits."""
        import torch

        engine = self.engine
        width = max(len(p) for p in prompts)
        ids = torch.zeros((len(prompts), width), dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        ids, mask = ids.to(engine.device), mask.to(engine.device)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        out = engine.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                           logits_to_keep=1)
        keep = mask[:, None, :, None].to(out.logits.dtype)
        kv = [(k * keep.to(k.dtype), v * keep.to(v.dtype)) for k, v in _kv_of(out.get(engine._cache_arg))]
        self.stats.prefills += 1
        self.stats.prefill_rows += len(prompts)
        return kv, mask, out.logits[:, -1].float()

    def _decode(self, tokens: Any) -> None:
        """Feed each row its newest token: one forward over the batch cache; logits for the next step."""
        import torch

        engine = self.engine
        positions = self._mask.sum(dim=1, keepdim=True)  # each row's own token count so far
        self._mask = torch.cat([self._mask, torch.ones_like(self._mask[:, :1])], dim=1)
        out = engine.model(input_ids=tokens.unsqueeze(1), attention_mask=self._mask, position_ids=positions,
                           use_cache=True, logits_to_keep=1, **{engine._cache_arg: self._cache})
        self._cache = out.get(engine._cache_arg)
        self._logits = out.logits[:, -1].float()
        rows = len(self._rows)
        self.stats.steps += 1
        self.stats.decode_rows += rows
        self.stats.max_rows = max(self.stats.max_rows, rows)

    def _run_scores(self, jobs: list[_Score]) -> None:
        """Teacher-force waiting score jobs in padded forwards of at most `max_prefill_tokens` tokens."""
        jobs = [j for j in jobs if not j.cancelled]
        start = 0
        while start < len(jobs):
            end, width = start, 0
            while end < len(jobs):
                wider = max(width, len(jobs[end].prompt_ids) + len(jobs[end].output_ids))
                if end > start and wider * (end - start + 1) > self.max_prefill_tokens:
                    break
                width, end = wider, end + 1
            batch = jobs[start:end]
            for job, result in zip(batch, self._score_batch(batch)):
                job.waiter.settle(result)
            start = end

    def _score_batch(self, jobs: list[_Score]) -> list[list[float]]:
        import torch

        model, device = self.engine.model, self.engine.device
        seqs = [j.prompt_ids + j.output_ids for j in jobs]
        width = max(len(s) for s in seqs)
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        rows, positions, targets, scales = [], [], [], []
        for i, (job, seq) in enumerate(zip(jobs, seqs)):
            ids[i, : len(seq)] = torch.tensor(seq)
            mask[i, : len(seq)] = 1
            for j, token in enumerate(job.output_ids):
                rows.append(i)
                positions.append(len(job.prompt_ids) + j - 1)  # the logits at p - 1 predict token p
                targets.append(token)
                scales.append(job.temperature if job.temperature >= GREEDY_BELOW else 1.0)
        base = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
        hidden = base(input_ids=ids.to(device), attention_mask=mask.to(device)).last_hidden_state
        picked = hidden[torch.tensor(rows, device=device), torch.tensor(positions, device=device)]
        logits = model.get_output_embeddings()(picked).float()
        logprobs = torch.log_softmax(logits / torch.tensor(scales, device=device).unsqueeze(1), dim=-1)
        values = logprobs.gather(1, torch.tensor(targets, device=device).unsqueeze(1)).squeeze(1).tolist()
        self.stats.scores += len(jobs)
        out, at = [], 0
        for job in jobs:
            out.append(values[at: at + len(job.output_ids)])
            at += len(job.output_ids)
        return out


__all__ = ["BatchStats", "DecodeBatcher"]
