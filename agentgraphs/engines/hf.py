"""HFEngine: the Engine protocol over an in-process transformers model.

The embedded default for debugging without a server, and the backend of the test server that speaks
SGLang's /generate contract. It follows SGLang's conventions where they shape a trace:
- a sampled token's log-prob is log_softmax(logits / temperature) at that token, in float32, before
  top-k/top-p/min-p filtering (at temperature 0: greedy, unscaled log_softmax);
- stop tokens stay in the output ids; `text` is the decode of exactly those ids (nothing trimmed);
- finish checks run in SGLang's order: max_new_tokens ("length") first, then stop/eos token ids
  (skipped entirely when ignore_eos, stop_token_ids included), then stop strings.

Two ways to run concurrent requests, both with a seeded generator per request:
- one at a time (the default on CPU, `batching=False`): each request keeps its own KV cache and every
  model step runs in a worker thread behind one lock. Requests interleave token by token (a long one never
  starves a short one), the event loop never blocks, and a request's result is bit-identical whatever runs
  beside it: the mode for exact CPU tests.
- continuous batching (the default on CUDA, `batching=True`; `agentgraphs.engines.batching`): one driver
  thread runs the decode steps of every request in flight as ONE forward over a left-padded batch KV cache;
  requests join (prefilled together) and leave (finished, cancelled) between steps. Each token's log-prob
  still comes from the very forward that sampled it; results agree with the one-at-a-time mode up to float
  rounding (a batched kernel sums in another order), not bit for bit.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import random
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import Completion, FinishReason, SamplingParams
from ..calls import note_engine_call
from .sampling import DEFAULT_SAMPLER, GREEDY_BELOW, GenerationRequest, check_sampler, sample_token
from ..errors import InputError

if TYPE_CHECKING:
    import torch


class HFEngine:
    """Generate with a transformers causal LM in this process.

    >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
    >>> engine = HFEngine.from_dir(ensure_tiny_model())
    >>> out = asyncio.run(engine.generate([151644, 77091, 198], SamplingParams(max_new_tokens=3)))
    >>> len(out.token_ids), out.finish_reason
    (3, 'length')

    `batching` picks how concurrent requests run (default: batched on CUDA, one at a time elsewhere; see
    the module docstring); `max_batch` caps the rows of one batched decode step and `max_prefill_tokens`
    the padded prompt tokens prefilled together in one step (more requests wait for the next step).

    `sampler` picks how a sampled token is drawn from its request's seeded generator, the same in both
    ways (`agentgraphs.engines.sampling`): "multinomial" (the default; `torch.multinomial`, one exponential
    draw per vocabulary entry) or "inverse_cdf" (one float64 uniform per row, searched in the row's
    cumulative probabilities: the same distribution, filtered-out tokens never drawn, other draws than
    "multinomial" for the same seed). bench/engine_batching.py: on CPU (64 requests) it cut the batched
    engine's sampling time ~4x and raised its tokens/s ~2.7x; on an H200 (256 requests) sampling 23.2 -> 4.8 ms
    a decode step and batched tokens/s 1.69x. Anything else: ConfigError.

    >>> HFEngine.from_dir(ensure_tiny_model(), sampler="inverse_cdf").sampler
    'inverse_cdf'
    """

    def __init__(
        self,
        model_or_path: Any,
        tokenizer: Any = None,
        *,
        device: str | None = None,
        dtype: "str | torch.dtype | None" = None,
        seed: int | None = None,
        batching: bool | None = None,
        max_batch: int = 256,
        max_prefill_tokens: int = 16384,
        sampler: str = DEFAULT_SAMPLER,
    ) -> None:
        import torch

        self.sampler = check_sampler(sampler)
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if isinstance(model_or_path, (str, os.PathLike)):
            from transformers import AutoModelForCausalLM, AutoTokenizer

            path = str(model_or_path)
            # float32 on CPU (bf16 is slow there and noisy); the checkpoint's own dtype on GPU.
            load_dtype = dtype if dtype is not None else ("auto" if self.device.type == "cuda" else torch.float32)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=load_dtype)
            tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(path)
            self.name = f"hf:{path}"
        else:
            model = model_or_path
            if dtype is not None:
                model = model.to(dtype=getattr(torch, dtype) if isinstance(dtype, str) else dtype)
            self.name = f"hf:{getattr(model, 'name_or_path', '') or type(model).__name__}"
        self.model = model.to(self.device).eval()
        # transformers >= 5.24 renamed the KV-cache argument and output `past_key_values` -> `cache`
        params = inspect.signature(self.model.forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        self.tokenizer = tokenizer
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        self.eos_token_ids = self._eos_ids()
        self.model_lock = threading.Lock()  # one model step at a time (the batch driver takes it too)
        self._seeds = random.Random(seed)
        # continuous batching by default on CUDA; one request at a time (bit-exact) elsewhere
        self.batching = self.device.type == "cuda" if batching is None else bool(batching)
        self.batcher: Any = None  # the DecodeBatcher when batching (its `stats` count rows per forward)
        if self.batching:
            from .batching import DecodeBatcher

            self.batcher = DecodeBatcher(self, max_batch=max_batch, max_prefill_tokens=max_prefill_tokens)

    @classmethod
    def from_dir(cls, path: str | os.PathLike[str], **kwargs: Any) -> "HFEngine":
        """Load model and tokenizer from one HF directory.

        >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
        >>> HFEngine.from_dir(ensure_tiny_model(), device="cpu").name.startswith("hf:")
        True
        """
        return cls(Path(path), **kwargs)

    def _eos_ids(self) -> frozenset[int]:
        # Like SGLang: the tokenizer's eos plus generation_config's eos ids (Qwen2.5: im_end, endoftext).
        ids: set[int] = set()
        if self.tokenizer is not None and self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            ids.update(int(i) for i in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]))
        return frozenset(ids)

    # ----------------------------------------------------------------------------------- generation

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        """Sample up to `params.max_new_tokens` ids after `prompt_ids`, with the log-prob of each."""
        self._check_ids(prompt_ids, "prompt_ids", allow_empty=False)
        if params.stop and self.tokenizer is None:
            raise InputError("sampling_params.stop", "stop strings need text, and this engine has no tokenizer",
                             "pass tokenizer= to HFEngine or use stop_token_ids")
        started = time.perf_counter()
        request = self.new_request(prompt_ids, params)
        if params.max_new_tokens == 0:
            request.finish = "length"
        elif self.batcher is not None:
            await self.batcher.run(request)
        else:
            await asyncio.to_thread(self._locked, self._prefill, request)
        while request.finish is None:
            # One token per hop: awaiting between tokens lets other requests (and cancellation) in.
            await asyncio.to_thread(self._locked, self._step, request)
        meta: dict[str, object] = {"matched": request.matched} if request.matched is not None else {}
        note_engine_call(self.name, len(request.output_ids))  # a node's own call is named untrained
        return Completion(
            token_ids=request.output_ids,
            logprobs=request.logprobs,
            finish_reason=request.finish,
            text=self.decode(request.output_ids),
            prompt_tokens=len(prompt_ids),
            rid=uuid.uuid4().hex,
            latency_s=time.perf_counter() - started,
            meta=meta,
        )

    def new_request(self, prompt_ids: list[int], params: SamplingParams) -> GenerationRequest:
        import torch

        seed = params.sampling_seed if params.sampling_seed is not None else self._seeds.getrandbits(63)
        generator = torch.Generator(device=self.device).manual_seed(seed)
        stop_ids = frozenset() if params.ignore_eos else frozenset(params.stop_token_ids) | self.eos_token_ids
        return GenerationRequest(list(prompt_ids), params, generator, stop_ids)

    def _locked(self, fn: Any, *args: Any) -> Any:
        import torch

        # inference_mode is thread-local, so it is entered here, in the worker thread.
        with self.model_lock, torch.inference_mode():
            return fn(*args)

    def _forward(self, ids: list[int], cache: Any, keep: int, use_cache: bool = True) -> tuple[Any, Any]:
        import torch

        input_ids = torch.tensor([ids], dtype=torch.long, device=self.device)
        # logits_to_keep: only the rows we sample from, not a vocab-wide row per prompt token.
        out = self.model(input_ids=input_ids, use_cache=use_cache, logits_to_keep=keep,
                         **{self._cache_arg: cache})
        return out.logits[0].float(), out.get(self._cache_arg)

    def _prefill(self, request: GenerationRequest) -> None:
        logits, request.cache = self._forward(request.prompt_ids, None, 1)
        request.logits = logits[-1]

    def _step(self, request: GenerationRequest) -> None:
        token, logprob = sample_token(request.logits, request.params, request.generator, self.sampler)
        request.output_ids.append(token)
        request.logprobs.append(logprob)
        request.finish, request.matched = self.finish_of(request)
        if request.finish is None:
            logits, request.cache = self._forward([token], request.cache, 1)
            request.logits = logits[-1]
        else:
            request.cache = request.logits = None  # free the KV cache as soon as we are done

    def finish_of(self, request: GenerationRequest) -> tuple[FinishReason | None, int | str | None]:
        """Whether `request` is done after its newest token: (finish reason or None, matched stop)."""
        params, last = request.params, request.output_ids[-1]
        if len(request.output_ids) >= params.max_new_tokens:
            return "length", None  # SGLang checks length first, even if the last token is a stop id
        if last in request.stop_ids:
            return "stop", last
        if params.stop and self.tokenizer is not None:
            # Only a match that ends in the new token is new; a stop string of B bytes spans at most
            # B tokens, so decoding that tail (plus one for a split leading character) suffices.
            window = max(len(s.encode("utf-8")) for s in params.stop) + 1
            tail = self.decode(request.output_ids[-window:])
            for stop in params.stop:
                if stop and stop in tail:
                    return "stop", stop
        return None, None

    # -------------------------------------------------------------------------------------- scoring

    def score(self, prompt_ids: list[int], output_ids: list[int], temperature: float = 1.0) -> list[float]:
        """Teacher-forced log-probs of `output_ids` after `prompt_ids`, in one forward pass (blocking).

        Same convention as `generate`: log_softmax(logits / temperature), unscaled at temperature 0.

        >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
        >>> len(HFEngine.from_dir(ensure_tiny_model()).score([151644], [77091, 198]))
        2
        """
        import torch

        self._check_ids(prompt_ids, "prompt_ids", allow_empty=False)
        self._check_ids(output_ids, "output_ids", allow_empty=True)
        if not output_ids:
            return []
        scale = temperature if temperature >= GREEDY_BELOW else 1.0
        with self.model_lock, torch.inference_mode():
            # The last len(output)+1 positions predict output[0..]; the very last predicts nothing.
            logits, _ = self._forward(
                list(prompt_ids) + list(output_ids), None, len(output_ids) + 1, use_cache=False
            )
        logprobs = torch.log_softmax(logits[:-1] / scale, dim=-1)
        targets = torch.tensor(output_ids, device=logprobs.device).unsqueeze(1)
        return logprobs.gather(1, targets).squeeze(1).tolist()

    async def score_async(
        self, prompt_ids: list[int], output_ids: list[int], temperature: float = 1.0
    ) -> list[float]:
        """`score` for callers on the event loop (scripted policies): in a worker thread, or, when batching,
        teacher-forced together with the other scores waiting for the same step."""
        if self.batcher is not None and output_ids:
            self._check_ids(prompt_ids, "prompt_ids", allow_empty=False)
            self._check_ids(output_ids, "output_ids", allow_empty=True)
            return await self.batcher.score(list(prompt_ids), list(output_ids), temperature)
        return await asyncio.to_thread(self.score, prompt_ids, output_ids, temperature)

    # -------------------------------------------------------------------------------------- helpers

    def decode(self, ids: list[int]) -> str:
        """Text of `ids` with special tokens kept, as SGLang decodes with skip_special_tokens=False."""
        if self.tokenizer is None or not ids:
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _check_ids(self, ids: list[int], name: str, *, allow_empty: bool) -> None:
        if not ids and not allow_empty:
            raise InputError(name, "is empty", "pass at least one token id (render the chat template first)")
        bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < self.vocab_size]
        if bad:
            raise InputError(
                name, f"has ids outside [0, {self.vocab_size}): {bad[:5]}",
                "encode with this model's tokenizer",
            )
