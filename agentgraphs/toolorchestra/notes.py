"""The orchestrator's context, rebuilt every turn from what the episode gathered, under a token budget.

Three kinds of notes, as in ToolOrchestra: retrieved documents, Python code with its output, and earlier
attempts (failed tools, format-invalid turns). The newest notes are kept first; a note that does not fit
whole is cut to the room left (this is prompt text, never trained), and older notes are left out. The
kept notes are shown oldest first, grouped by kind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from typing_extensions import TypedDict

from .prompts import NO_CONTEXT

__all__ = ["Note", "render_context"]

NoteKind = Literal["document", "code", "attempt"]
_HEADINGS: dict[str, str] = {"document": "Documents:", "code": "Python code and outputs:",
                             "attempt": "Earlier attempts:"}


class Note(TypedDict):
    kind: NoteKind
    text: str


def render_context(notes: Sequence[Note], count_tokens: Callable[[str], int], budget: int,
                   cut: Callable[[str, int], str]) -> str:
    """The context text: the newest notes that fit in `budget` tokens, oldest first, by kind.

    `count_tokens(text)` counts tokens; `cut(text, n)` keeps the first n tokens of a text.

    >>> words = lambda s: len(s.split())
    >>> first = lambda s, n: " ".join(s.split()[:n])
    >>> notes = [Note(kind="document", text="old doc a b c"), Note(kind="code", text="print(1) -> 1"),
    ...          Note(kind="document", text="new doc")]
    >>> print(render_context(notes, words, 6, first))
    Documents:
    old
    new doc
    <BLANKLINE>
    Python code and outputs:
    print(1) -> 1
    """
    kept: list[tuple[int, Note]] = []
    room = budget
    for i in range(len(notes) - 1, -1, -1):
        if room <= 0:
            break
        note = notes[i]
        n = count_tokens(note["text"])
        text = note["text"] if n <= room else cut(note["text"], room)
        room -= min(n, room)
        kept.append((i, Note(kind=note["kind"], text=text)))
    if not kept:
        return NO_CONTEXT
    kept.sort(key=lambda pair: pair[0])
    sections = []
    for kind, heading in _HEADINGS.items():
        texts = [note["text"] for _, note in kept if note["kind"] == kind]
        if texts:
            sections.append(heading + "\n" + "\n".join(texts))
    return "\n\n".join(sections)
