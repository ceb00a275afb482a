"""The role of every token in training: prompt, trained, masked glue, masked observation, untrained output.

Derived from what the trainer sees (the training sequences) and what the engines did (the Turns, placed
in each sequence by `agentgraphs.viewer.audit`, the same audit `agentgraphs check` runs):
- a sequence's prompt part (`tokens[:len(tokens) - response_length]`) is PROMPT;
- a response position with loss mask 1 is TRAINED;
- a masked response position inside an engine call's output is UNTRAINED (generated, not trained: an
  evaluation run, a helper engine, a failed rollout);
- any other masked position was appended between two outputs: template GLUE (role headers, end-of-turn
  tokens) or an OBSERVATION (the content of a tool result or user message). The two are told apart by the
  chat template's own scaffolding (`GlueScaffold`), so this works for any template, not one method's.

A Turn that is in no training sequence gets the same roles from its own conversation chain (the turn it
extends: `agentgraphs.trace.extended_turn`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

PROMPT, TRAINED, GLUE, OBS, UNTRAINED = 0, 1, 2, 3, 4
ROLE_NAMES = ("prompt", "trained", "glue", "obs", "untrained")
_SENTINEL = "\u2063ag-viewer-content\u2063"
_MESSAGE_ROLES = ("user", "tool", "system")


class GlueScaffold:
    """Which characters of an appended (masked) span are template scaffolding rather than content.

    The scaffolding is what the chat template adds around a message's content: found by rendering the
    append-only glue of one message with a sentinel content per role (user, tool, system) and keeping the
    text before and after the sentinel, plus every special token. Content is everything else.

    >>> s = GlueScaffold(["\\n<|im_start|>user\\n", "<|im_end|>\\n<|im_start|>assistant\\n"])
    >>> s.glue_chars("\\n<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n").count(False)
    2
    """

    def __init__(self, pieces: Sequence[str]) -> None:
        self.pieces = sorted({p for p in pieces if p and p.strip()}, key=len, reverse=True)
        self._first = {p[0] for p in self.pieces}

    @classmethod
    def for_tokenizer(cls, tokenizer: Any) -> "GlueScaffold":
        pieces: list[str] = [str(t) for t in getattr(tokenizer, "all_special_tokens", []) or []]
        try:
            from ..chat import ChatTemplate

            template = ChatTemplate(tokenizer)
        except Exception:  # no chat template: special tokens are the only scaffolding we can know
            return cls(pieces)
        pieces.append(template.end_of_turn)
        # one message, and two in a row (the scaffold between two contents differs by the roles around it)
        groups = [[r] for r in _MESSAGE_ROLES] + [[a, b] for a in _MESSAGE_ROLES for b in _MESSAGE_ROLES]
        for roles in groups:
            try:
                text = template.glue_text([{"role": r, "content": _SENTINEL} for r in roles])
            except Exception:  # a template that refuses this order of roles (e.g. no system after the start)
                continue
            pieces.extend(text.split(_SENTINEL))
        return cls(pieces)

    def glue_chars(self, text: str) -> list[bool]:
        """Per character: True where a scaffolding piece matches (greedy, longest piece first)."""
        out = [False] * len(text)
        i = 0
        while i < len(text):
            if text[i] in self._first:
                for piece in self.pieces:
                    if text.startswith(piece, i):
                        out[i:i + len(piece)] = [True] * len(piece)
                        i += len(piece)
                        break
                else:
                    i += 1
            else:
                i += 1
        return out

    def split(self, token_texts: Sequence[str]) -> list[int]:
        """GLUE or OBS per token of one appended span: a token is glue when all its characters are."""
        glue = self.glue_chars("".join(token_texts))
        roles: list[int] = []
        at = 0
        for text in token_texts:
            n = len(text)
            roles.append(GLUE if n == 0 or all(glue[at:at + n]) else OBS)
            at += n
        return roles


def _fill_masked(roles: list[int], tokens: Sequence[int], decode: Callable[[int], str],
                 scaffold: GlueScaffold) -> None:
    """Replace each run of -1 (masked, not an engine output) by GLUE / OBS."""
    i = 0
    while i < len(roles):
        if roles[i] != -1:
            i += 1
            continue
        j = i
        while j < len(roles) and roles[j] == -1:
            j += 1
        roles[i:j] = scaffold.split([decode(t) for t in tokens[i:j]])
        i = j


def sequence_roles(seq: Mapping[str, Any], produced: Iterable[int], decode: Callable[[int], str],
                   scaffold: GlueScaffold) -> list[int]:
    """The role of every position of one training sequence (prompt part included); `produced` are the
    positions an engine call produced (`agentgraphs.trace.SequenceAudit.produced`)."""
    tokens = seq.get("tokens") or []
    n = int(seq.get("response_length") or 0)
    start = max(len(tokens) - n, 0)
    mask = list(seq.get("loss_mask") or [])
    roles = [PROMPT] * start + [-1] * (len(tokens) - start)
    for k in produced:
        if start <= k < len(tokens):
            roles[k] = UNTRAINED
    for k in range(start, len(tokens)):
        if k - start < len(mask) and mask[k - start]:
            roles[k] = TRAINED
    _fill_masked(roles, tokens, decode, scaffold)
    return roles


def appended_roles(ids: Sequence[int], decode: Callable[[int], str], scaffold: GlueScaffold) -> list[int]:
    """Roles of ids appended to a conversation after an output (glue and observations)."""
    roles = [-1] * len(ids)
    _fill_masked(roles, ids, decode, scaffold)
    return roles


def to_runs(roles: Sequence[Any]) -> list[list[Any]]:
    """Run-length encoding: [[role, count], ...] (of any items that compare with ==).

    >>> to_runs([0, 0, 1, 2, 2, 2]), to_runs(["", "51", "51"])
    ([[0, 2], [1, 1], [2, 3]], [['', 1], ['51', 2]])
    """
    runs: list[list[Any]] = []
    for r in roles:
        if runs and runs[-1][0] == r:
            runs[-1][1] += 1
        else:
            runs.append([r, 1])
    return runs


def from_runs(runs: Sequence[Sequence[Any]]) -> list[Any]:
    """The items `to_runs` encoded, in order.

    >>> from_runs([["", 2], ["51", 1]]), from_runs(to_runs([0, 0, 1])) == [0, 0, 1]
    (['', '', '51'], True)
    """
    return [item for item, times in runs for _ in range(times)]
