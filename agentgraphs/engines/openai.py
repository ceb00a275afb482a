"""OpenAIChatEngine: helper models (judges, executors, experts) behind an OpenAI-compatible chat endpoint.

Hosted helpers speak text, not token ids, so this engine has `chat(messages, params)` instead of
`generate(prompt_ids, params)`: `call_llm(..., engine="judge", messages=[...])` sends the messages and
records a Turn with the text and no ids, never trainable. The policy must be a token engine.

Spec string: `openai:BASE_URL#MODEL`, e.g. `openai:http://127.0.0.1:8001/v1#Qwen2.5-72B-Instruct`; the
key is read from $OPENAI_API_KEY (or `api_key=`). Plain httpx with explicit timeouts and bounded retries.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any, Collection, Mapping, Sequence

import httpx

from ..errors import ConfigError, EngineProtocolError, EngineRequestError, EngineUnavailableError
from ..http_retry import DEFAULT_BACKOFF_CAP_S, ENGINE_TIMEOUT, backoff_delay, retryable_status
from .base import Completion, FinishReason, SamplingParams

# "abort": SGLang's chat endpoint (a weight update, a shutdown) answers the partial text so; it is no answer
_FINISH: dict[str, FinishReason] = {"stop": "stop", "length": "length", "tool_calls": "stop",
                                     "content_filter": "stop", "function_call": "stop", "abort": "abort"}


# SamplingParams fields outside OpenAI's own chat schema that SGLang's and vLLM's chat endpoints take
_EXTRA_KEYS = ("top_k", "min_p", "stop_token_ids", "ignore_eos")
# SamplingParams fields whose chat-completions key is another name
_CHAT_NAMES = {"max_new_tokens": "max_tokens", "sampling_seed": "seed"}


class OpenAIChatEngine:
    """POST {base_url}/chat/completions; answers a Completion with `text` and no token ids (the endpoint's
    `usage`: `prompt_tokens`, and `meta["completion_tokens"]` when it reports one).

    >>> engine = OpenAIChatEngine("http://127.0.0.1:8001/v1", model="judge-model")
    >>> engine.name
    'openai:http://127.0.0.1:8001/v1#judge-model'
    """

    def __init__(self, base_url: str, *, model: str, api_key: str | None = None,
                 timeout: float | httpx.Timeout | None = None, max_retries: int = 3,
                 backoff_s: float = 0.5, backoff_cap_s: float = DEFAULT_BACKOFF_CAP_S) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"openai engine: base URL {base_url!r} must start with http:// or https://")
        if not model:
            raise ConfigError("openai engine: no model name; write the spec as 'openai:BASE_URL#MODEL'")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.name = f"openai:{self.base_url}#{model}"
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.backoff_cap_s = backoff_cap_s
        self._rng = random.Random()  # per engine: jitter decorrelates workers, no global state
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        if isinstance(timeout, (int, float)):
            timeout = httpx.Timeout(float(timeout), connect=min(5.0, float(timeout)))
        self._client = httpx.AsyncClient(timeout=timeout or ENGINE_TIMEOUT, headers=headers)

    @classmethod
    def from_spec(cls, target: str, **kwargs: Any) -> "OpenAIChatEngine":
        """`BASE_URL#MODEL` (the part after `openai:`)."""
        base, sep, model = target.partition("#")
        if not sep or not model:
            raise ConfigError(f"engine 'openai:{target}': name the model after '#', e.g. "
                              "'openai:http://127.0.0.1:8001/v1#Qwen2.5-7B-Instruct'")
        return cls(base, model=model, **kwargs)

    async def chat(self, messages: Sequence[Mapping[str, Any]], params: SamplingParams, *,
                   fields: Collection[str] | None = None) -> Completion:
        """Ask the endpoint. `fields`: the SamplingParams fields the request carries, the rest left to the
        server's own defaults (SGLang's chat route: the model's generation_config.json); None: the whole
        sampling (`_body`)."""
        body = self._body(messages, params, fields)
        url = f"{self.base_url}/chat/completions"
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(backoff_delay(attempt, self.backoff_s, self.backoff_cap_s, self._rng))
            started = time.perf_counter()
            try:
                resp = await self._client.post(url, json=body)
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if retryable_status(resp.status_code):
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                continue
            if resp.status_code >= 400:
                raise EngineRequestError(resp.status_code, resp.text[:500], url)
            return _completion(resp, latency_s=time.perf_counter() - started, retries=attempt)
        raise EngineUnavailableError(url, self.max_retries + 1, last)

    def _body(self, messages: Sequence[Mapping[str, Any]], params: SamplingParams,
              fields: Collection[str] | None = None) -> dict[str, Any]:
        """The request body. With `fields`, exactly those sampling fields besides model and messages:

        >>> engine = OpenAIChatEngine("http://127.0.0.1:8001/v1", model="m")
        >>> sorted(engine._body([], SamplingParams(top_p=0.9, stop="x"), fields={"max_new_tokens", "temperature"}))
        ['max_tokens', 'messages', 'model', 'temperature']
        """
        body: dict[str, Any] = {"model": self.model, "messages": [dict(m) for m in messages]}
        if fields is None:  # the whole sampling: OpenAI's keys, and the rest where they are set
            defaults = SamplingParams()
            fields = ["max_new_tokens", "temperature", "top_p",
                      # not in OpenAI's schema, but in SGLang's and vLLM's chat endpoints: sent when set, never
                      # dropped, so a server without them refuses the request (HTTP 400, EngineRequestError)
                      # instead of sampling otherwise
                      *(key for key in _EXTRA_KEYS if getattr(params, key) != getattr(defaults, key))]
            if params.stop:
                fields.append("stop")
            if params.sampling_seed is not None:
                fields.append("sampling_seed")
        for field in fields:
            value = getattr(params, field)
            body[_CHAT_NAMES.get(field, field)] = list(value) if isinstance(value, tuple) else value
        return body

    async def aclose(self) -> None:
        await self._client.aclose()

    def __repr__(self) -> str:
        return f"OpenAIChatEngine({self.name!r})"


def _completion(resp: httpx.Response, *, latency_s: float, retries: int) -> Completion:
    try:
        obj = resp.json()
        choice = obj["choices"][0]
        text = choice["message"].get("content") or ""
        reason = str(choice.get("finish_reason") or "stop")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise EngineProtocolError(f"chat completion body is not OpenAI-shaped ({type(exc).__name__}: {exc}): "
                                  f"{resp.text[:200]!r}") from None
    if reason not in _FINISH:  # not read as a finished answer: an unknown reason may be a cut-off reply
        raise EngineProtocolError(f"chat completion finish_reason {reason!r} is none this engine knows "
                                  f"({', '.join(_FINISH)}); check that the endpoint speaks OpenAI's chat API")
    finish = _FINISH[reason]
    if not isinstance(text, str):
        raise EngineProtocolError(f"chat completion content is {type(text).__name__}, not text")
    usage = obj.get("usage") or {}
    meta: dict[str, object] = {"model": obj.get("model")}
    if isinstance(usage.get("completion_tokens"), int):  # what the reply cost (a text engine has no ids to count)
        meta["completion_tokens"] = usage["completion_tokens"]
    return Completion(token_ids=[], logprobs=[], finish_reason=finish, text=text,
                      prompt_tokens=int(usage.get("prompt_tokens") or 0), rid=str(obj.get("id") or ""),
                      latency_s=latency_s, retries=retries, meta=meta)
