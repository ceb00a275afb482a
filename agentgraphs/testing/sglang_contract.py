"""SGLang's native /generate contract, as SGLangTestServer keeps it: request checks and answer shape.

Pure functions (no I/O), so the contract reads top to bottom in one place. The source of truth is
reference/sglang-langgraph.md and SGLang 0.5.x itself (io_struct.GenerateReqInput,
sampling/sampling_params.py, the detokenizer's stop trimming).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ..engines import Completion, SamplingParams

_NUM = (int, float)
# SGLang 0.5.x SamplingParams API fields (sglang/srt/sampling/sampling_params.py) and their types
SAMPLING_PARAM_TYPES: dict[str, tuple[type, ...]] = {
    "max_new_tokens": (int,), "stop": (str, list), "stop_token_ids": (list,), "stop_regex": (str, list),
    "temperature": _NUM, "top_p": _NUM, "top_k": (int,), "min_p": _NUM,
    "frequency_penalty": _NUM, "presence_penalty": _NUM, "repetition_penalty": _NUM,
    "min_new_tokens": (int,), "n": (int,), "json_schema": (str,), "regex": (str,), "ebnf": (str,),
    "structural_tag": (str,), "ignore_eos": (bool,), "skip_special_tokens": (bool,),
    "spaces_between_special_tokens": (bool,), "no_stop_trim": (bool,), "custom_params": (dict,),
    "stream_interval": (int,), "logit_bias": (dict,), "sampling_seed": (int,),
}
# documented keys the Engine protocol cannot honour: accepted only at SGLang's default value
_UNIMPLEMENTED_AT_DEFAULT: dict[str, object] = {
    "stop_regex": None, "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
    "min_new_tokens": 0, "n": 1, "json_schema": None, "regex": None, "ebnf": None,
    "structural_tag": None, "custom_params": None, "logit_bias": None,
}
_SGLANG_DEFAULT_MAX_NEW_TOKENS = 128


class BadRequest(Exception):
    """The body breaks the contract: the server answers HTTP 400 with this message."""


@dataclass(frozen=True)
class GenerateRequest:
    """A validated single (non-batch) /generate request."""

    rid: str
    prompt_ids: list[int]
    params: SamplingParams
    return_logprob: bool
    return_text_in_logprobs: bool
    skip_special_tokens: bool
    no_stop_trim: bool


def parse_generate(body: object, tokenizer: Any) -> GenerateRequest:
    """Validate a /generate body the way SGLang 0.5.x does; raise BadRequest with its reason."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if body.get("input_embeds") is not None:
        raise BadRequest("input_embeds is not implemented by SGLangTestServer")
    text, ids = body.get("text"), body.get("input_ids")
    if (text is None) == (ids is None):
        raise BadRequest("Exactly one of text or input_ids should be provided.")
    if text is not None:
        if not isinstance(text, str):
            raise BadRequest("text must be a string (batches are not implemented by SGLangTestServer)")
        if tokenizer is None:
            raise BadRequest(
                "text input needs a tokenizer: start SGLangTestServer with one, or send input_ids"
            )
        ids = list(tokenizer.encode(text))
    if not isinstance(ids, list) or not ids or not _all_ints(ids):
        raise BadRequest("input_ids must be a non-empty list of ints (batches are not implemented)")
    sp = body.get("sampling_params") or {}
    if not isinstance(sp, dict):
        raise BadRequest("sampling_params must be an object (batches are not implemented)")
    params = sampling_params_from(sp)
    _check_top_level(body)
    rid = body.get("rid")
    return GenerateRequest(
        rid=rid if rid is not None else uuid.uuid4().hex,
        prompt_ids=ids,
        params=params,
        return_logprob=bool(body.get("return_logprob")),
        return_text_in_logprobs=bool(body.get("return_text_in_logprobs")),
        skip_special_tokens=sp.get("skip_special_tokens", True) is not False,
        no_stop_trim=sp.get("no_stop_trim") is True,
    )


def _check_top_level(body: dict[str, Any]) -> None:
    if body.get("rid") is not None and not isinstance(body["rid"], str):
        raise BadRequest("rid must be a string (batches are not implemented)")
    for key in ("return_logprob", "return_text_in_logprobs", "stream"):
        if body.get(key) is not None and not isinstance(body[key], bool):
            raise BadRequest(f"{key} must be a boolean")
    if body.get("stream"):
        raise BadRequest("stream=true is not implemented by SGLangTestServer")
    start = body.get("logprob_start_len")
    if start is not None and (not _is_int(start) or (body.get("return_logprob") and start != -1)):
        raise BadRequest("logprob_start_len other than -1 (prompt log-probs) is not implemented")
    if body.get("top_logprobs_num") or body.get("token_ids_logprob"):
        raise BadRequest("top_logprobs_num / token_ids_logprob are not implemented by SGLangTestServer")


def sampling_params_from(sp: dict[str, Any]) -> SamplingParams:
    """Check `sampling_params` key by key as SGLang's schema does, then map it to SamplingParams.

    >>> sampling_params_from({"max_new_tokens": 4, "stop": "\\n"}).stop
    ('\\n',)
    >>> try:
    ...     sampling_params_from({"max_tokens": 4})
    ... except BadRequest as err:
    ...     print(err)
    Object contains unknown field `max_tokens` - at `$.sampling_params`
    """
    for key, value in sp.items():
        types = SAMPLING_PARAM_TYPES.get(key)
        if types is None:  # the 0.5.x schema check: this is what makes `max_tokens` a 400
            raise BadRequest(f"Object contains unknown field `{key}` - at `$.sampling_params`")
        if value is None:
            continue
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            raise BadRequest(f"Expected `{'|'.join(t.__name__ for t in types)}`, got "
                             f"`{type(value).__name__}` - at `$.sampling_params.{key}`")
        if key in _UNIMPLEMENTED_AT_DEFAULT and value != _UNIMPLEMENTED_AT_DEFAULT[key]:
            raise BadRequest(f"sampling_params.{key}={value!r} is not implemented by SGLangTestServer")
    stop = sp.get("stop")
    stop_ids = sp.get("stop_token_ids") or []
    if not all(isinstance(s, str) for s in ([stop] if isinstance(stop, str) else stop or [])):
        raise BadRequest("sampling_params.stop must be a string or a list of strings")
    if not all(_is_int(t) for t in stop_ids):
        raise BadRequest("sampling_params.stop_token_ids must be a list of ints")
    kw: dict[str, Any] = {
        k: sp[k] for k in ("max_new_tokens", "temperature", "top_p", "top_k", "min_p",
                           "ignore_eos", "sampling_seed") if sp.get(k) is not None
    }
    kw.setdefault("max_new_tokens", _SGLANG_DEFAULT_MAX_NEW_TOKENS)
    top_k, min_p = kw.get("top_k", -1), kw.get("min_p", 0.0)
    if top_k == 0 or top_k < -1 or not 0 <= min_p <= 1:
        raise BadRequest(f"top_k must be -1 or >= 1 and min_p in [0, 1], got {top_k}, {min_p}")
    try:
        return SamplingParams(
            **kw, stop=(stop,) if isinstance(stop, str) else tuple(stop or ()),
            stop_token_ids=tuple(stop_ids),
        )
    except ValueError as err:
        raise BadRequest(str(err)) from err


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _all_ints(values: list[Any]) -> bool:
    """Every item an int, not a bool: one C-level pass over the types (a 32K-token prompt takes ~0.3 ms)."""
    return set(map(type, values)) <= {int} or all(_is_int(v) for v in values)


def finish_json(completion: Completion, req: GenerateRequest, tokenizer: Any) -> dict[str, Any]:
    """meta_info.finish_reason: stop {matched}, length {length = max_new_tokens}, abort {message}."""
    if completion.finish_reason == "length":
        return {"type": "length", "length": req.params.max_new_tokens}
    if completion.finish_reason == "abort":
        message = completion.meta.get("abort_message", "aborted by the engine")
        return {"type": "abort", "message": message, "status_code": None}
    return {"type": "stop", "matched": matched_stop(completion, req.params, tokenizer)}


def matched_stop(completion: Completion, params: SamplingParams, tokenizer: Any) -> int | str | None:
    """The stop token id or stop string that ended generation; engines may say so in meta."""
    said = completion.meta.get("matched")
    if isinstance(said, (int, str)) and not isinstance(said, bool):
        return said
    ids = completion.token_ids
    if ids and (ids[-1] in params.stop_token_ids or not params.stop):
        return ids[-1]
    text = completion.text or (tokenizer.decode(ids) if tokenizer is not None else "")
    return next((s for s in params.stop if s in text), ids[-1] if ids else None)


def render_text(ids: list[int], finish: dict[str, Any], req: GenerateRequest,
                tokenizer: Any, fallback: str) -> str:
    """SGLang's detokenizer: drop a matched stop token / cut at a matched stop string, then decode."""
    trim = finish["type"] == "stop" and not req.no_stop_trim
    matched = finish.get("matched")
    if tokenizer is not None:
        if trim and _is_int(matched) and ids and ids[-1] == matched:
            ids = ids[:-1]
        text = tokenizer.decode(ids, skip_special_tokens=req.skip_special_tokens)
    else:
        text = fallback
    if trim and isinstance(matched, str) and (pos := text.find(matched)) >= 0:
        text = text[:pos]
    return text


def response_body(req: GenerateRequest, completion: Completion, *, started: float,
                  weight_version: str, tokenizer: Any) -> dict[str, Any]:
    """The /generate answer: {text, output_ids, meta_info} exactly as SGLang 0.5.x shapes it."""
    ids = list(completion.token_ids)
    finish = finish_json(completion, req, tokenizer)
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": finish,
        "prompt_tokens": len(req.prompt_ids),
        "weight_version": weight_version,
        "completion_tokens": len(ids),
        "cached_tokens": 0,
        "e2e_latency": time.perf_counter() - started,
    }
    if req.return_logprob:
        texts: list[str | None] = [None] * len(ids)
        if req.return_text_in_logprobs and tokenizer is not None:
            texts = [tokenizer.decode([t]) for t in ids]
        # SGLang's JSON encoder writes a non-finite float as null
        meta["output_token_logprobs"] = [
            [lp if math.isfinite(lp) else None, tok, txt]
            for lp, tok, txt in zip(completion.logprobs, ids, texts, strict=True)
        ]
    text = render_text(ids, finish, req, tokenizer, completion.text)
    return {"text": text, "output_ids": ids, "meta_info": meta}


def loads_json(body: bytes) -> object:
    """Parse a request body; malformed JSON is the client's fault (400), as in SGLang."""
    try:
        return json.loads(body)
    except ValueError as err:
        raise BadRequest(f"the request body is not valid JSON: {err}") from err


# --------------------------------------------------------------------------- OpenAI chat completions


@dataclass(frozen=True)
class ChatRequest:
    """A parsed /v1/chat/completions body (the subset helper engines send)."""

    model: str
    prompt_ids: list[int]
    params: SamplingParams


# OpenAI's keys, plus the sampling extras SGLang's ChatCompletionRequest takes (top_k, min_p, stop_token_ids,
# ignore_eos)
_CHAT_KEYS = frozenset({"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p",
                        "stop", "seed", "n", "stream", "user", "frequency_penalty", "presence_penalty",
                        "top_k", "min_p", "stop_token_ids", "ignore_eos"})


def parse_chat(body: object, tokenizer: Any) -> ChatRequest:
    """Validate an OpenAI chat body and render its messages with the tokenizer's chat template."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    unknown = sorted(set(body) - _CHAT_KEYS)
    if unknown:
        raise BadRequest(f"unsupported fields {unknown}")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages):
        raise BadRequest("'messages' must be a non-empty list of {role, content} objects with string content")
    if not isinstance(body.get("model"), str):
        raise BadRequest("'model' is required")
    if body.get("stream"):
        raise BadRequest("stream is not supported by this test server")
    if body.get("n", 1) != 1:
        raise BadRequest("n must be 1")
    if tokenizer is None:
        raise BadRequest("this server has no tokenizer to apply a chat template with")
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tokenizer.encode(text, add_special_tokens=False)
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else tuple(stop)
    try:
        params = SamplingParams(
            max_new_tokens=int(body.get("max_completion_tokens") or body.get("max_tokens") or 256),
            temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)),
            stop=stop,
            sampling_seed=body.get("seed"),
            top_k=body.get("top_k", -1),
            min_p=body.get("min_p", 0.0),
            stop_token_ids=tuple(body.get("stop_token_ids") or ()),
            ignore_eos=body.get("ignore_eos", False),
        )
    except (TypeError, ValueError) as exc:
        raise BadRequest(f"bad sampling value: {exc}") from None
    return ChatRequest(model=body["model"], prompt_ids=ids, params=params)


def chat_response(req: ChatRequest, completion: Completion, tokenizer: Any, served_model: str) -> dict[str, Any]:
    """The OpenAI-shaped answer: the text without the end-of-turn token, finish_reason, usage."""
    text = tokenizer.decode(completion.token_ids, skip_special_tokens=True)
    return {
        "id": f"chatcmpl-{completion.rid or uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model or served_model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "finish_reason": "length" if completion.finish_reason == "length" else "stop"}],
        "usage": {"prompt_tokens": len(req.prompt_ids), "completion_tokens": len(completion.token_ids),
                  "total_tokens": len(req.prompt_ids) + len(completion.token_ids)},
    }
