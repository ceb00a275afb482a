"""Loading a tokenizer from a model directory, with errors that say what is wrong with the path.

Hugging Face's ``AutoTokenizer.from_pretrained`` treats any string that is not an existing directory as a
Hub repository id, so a mistyped local path comes back as "Repo id must use alphanumeric chars..." or as
a network failure. ``load_tokenizer`` checks local paths first and says what is missing.

>>> load_tokenizer("/no/such/dir")
Traceback (most recent call last):
...
agentgraphs.errors.ConfigError: tokenizer directory '/no/such/dir' does not exist: give the model's Hugging Face directory (the one holding tokenizer.json or tokenizer_config.json). A Hub id such as 'Qwen/Qwen2.5-7B-Instruct' works only with network access or a local Hugging Face cache
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import ConfigError

__all__ = ["TOKENIZER_FILES", "load_tokenizer", "looks_like_local_path"]

# any one of these makes a directory loadable by AutoTokenizer (fast, sentencepiece, BPE vocab files)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_HUB_HINT = ("A Hub id such as 'Qwen/Qwen2.5-7B-Instruct' works only with network access or a local "
             "Hugging Face cache")


def looks_like_local_path(name: str) -> bool:
    """True when ``name`` can only mean a local path: it starts with ``/ . ~``, has a backslash or more
    than one ``/``, or is empty. ``owner/name`` and ``name`` may be Hub ids.

    >>> looks_like_local_path("/models/qwen"), looks_like_local_path("./qwen"), looks_like_local_path("Qwen/Qwen3-8B")
    (True, True, False)
    """
    return not name.strip() or name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1


def load_tokenizer(path: str, *, trust_remote_code: bool = False) -> Any:
    """``AutoTokenizer.from_pretrained(path)`` after checking that a local path is a tokenizer directory.

    A local path that does not exist, is a file, or holds no tokenizer files raises ``ConfigError`` naming
    the path; so does a Hub id that cannot be loaded (no network, no cache, no such repository).

    >>> from agentgraphs.testing.tiny_model import ensure_tiny_model
    >>> load_tokenizer(str(ensure_tiny_model())).encode(" Hello")
    [21927]
    """
    local = Path(path).expanduser()
    is_local = local.exists() or looks_like_local_path(path)
    if is_local:
        _check_directory(path, local)
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(local) if is_local else path, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        what = f"directory {path!r}" if is_local else f"Hub id {path!r} (there is no local directory of that name)"
        raise ConfigError(f"cannot load a tokenizer from the {what}: {exc}. Give the model's Hugging Face "
                          f"directory. {_HUB_HINT}") from exc


def _check_directory(path: str, local: Path) -> None:
    if not local.exists():
        raise ConfigError(f"tokenizer directory {path!r} does not exist: give the model's Hugging Face "
                          f"directory (the one holding tokenizer.json or tokenizer_config.json). {_HUB_HINT}")
    if not local.is_dir():
        raise ConfigError(f"tokenizer path {path!r} is a file, not a directory: give the directory that "
                          "holds it (the model's Hugging Face directory)")
    if not any((local / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(f"tokenizer directory {path!r} holds none of {', '.join(TOKENIZER_FILES)}: "
                          "give the model's Hugging Face directory (config.json sits beside the tokenizer "
                          "files)")
