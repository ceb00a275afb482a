"""MemAgent's two prompts, verbatim from the original (BytedTsinghua-SIA/MemAgent quickstart).

The templates are ``str.format`` strings with the fields ``{prompt}``, ``{memory}`` and (memory update
only) ``{chunk}``. Rendered, they are byte-for-byte the original text, including the space after
``<problem>`` and the ``\\boxed{}`` in the final prompt.

Token-level chunks: the graph cuts the document into chunks of TOKEN IDS and must not decode and
re-encode them. A caller therefore renders the text around the chunk, encodes the two pieces, and splices
the chunk ids between them::

    before, after = memory_update_prompt_parts(problem, memory)
    ids = encode(before) + chunk_ids + encode(after)

``encode(before) + chunk_ids + encode(after)`` may differ from ``encode(full_text)`` at the two seams (a BPE
merge across ``"\\n"`` and the chunk's first token); that is intended: the chunk is exactly the document's
ids, and the seams are deterministic.
"""

from __future__ import annotations

__all__ = [
    "MEMORY_UPDATE_TEMPLATE",
    "FINAL_TEMPLATE",
    "INITIAL_MEMORY",
    "CHUNK_FIELD",
    "THINK_END",
    "memory_update_prompt",
    "memory_update_prompt_parts",
    "final_prompt",
    "split_template",
    "memory_from_response",
]

MEMORY_UPDATE_TEMPLATE = (
    "You are presented with a problem, a section of an article that may contain the answer to the problem, "
    "and a previous memory. Please read the provided section carefully and update the memory with the new "
    "information that helps to answer the problem. Be sure to retain all relevant details from the previous "
    "memory while adding any new, useful information.\n\n"
    "<problem> \n{prompt}\n</problem>\n\n"
    "<memory>\n{memory}\n</memory>\n\n"
    "<section>\n{chunk}\n</section>\n\n"
    "Updated memory:\n"
)

FINAL_TEMPLATE = (
    "You are presented with a problem and a previous memory. Please answer the problem based on the previous "
    "memory and put the answer in \\boxed{{}}.\n\n"
    "<problem> \n{prompt}\n</problem>\n\n"
    "<memory>\n{memory}\n</memory>\n\n"
    "Your answer:\n"
)

INITIAL_MEMORY = "No previous memory"

CHUNK_FIELD = "{chunk}"
THINK_END = "</think>"


def memory_update_prompt(problem: str, memory: str, chunk_text: str) -> str:
    """Render the memory-update prompt (the user message, before any chat template).

    >>> p = memory_update_prompt("Who?", INITIAL_MEMORY, "Some text.")
    >>> p.endswith("<section>\\nSome text.\\n</section>\\n\\nUpdated memory:\\n")
    True
    >>> "<problem> \\nWho?\\n</problem>" in p
    True
    """
    return MEMORY_UPDATE_TEMPLATE.format(prompt=problem, memory=memory, chunk=chunk_text)


def final_prompt(problem: str, memory: str) -> str:
    """Render the final-answer prompt.

    >>> p = final_prompt("Who?", "Alice did it.")
    >>> "put the answer in \\\\boxed{}." in p and p.endswith("</memory>\\n\\nYour answer:\\n")
    True
    """
    return FINAL_TEMPLATE.format(prompt=problem, memory=memory)


def split_template(template: str, field: str = CHUNK_FIELD) -> tuple[str, str]:
    """Split a format template at ``field`` into the format templates before and after it.

    Both halves are still ``str.format`` templates (brace escapes kept), so a caller formats each half with
    the remaining fields. Raises ValueError unless ``field`` occurs exactly once.

    >>> before, after = split_template(MEMORY_UPDATE_TEMPLATE)
    >>> after.format()
    '\\n</section>\\n\\nUpdated memory:\\n'
    >>> before.endswith("<section>\\n")
    True
    """
    count = template.count(field)
    if count != 1:
        raise ValueError(f"template must contain {field!r} exactly once, found {count}")
    before, after = template.split(field)
    return before, after


_UPDATE_BEFORE, _UPDATE_AFTER = split_template(MEMORY_UPDATE_TEMPLATE)


def memory_update_prompt_parts(problem: str, memory: str) -> tuple[str, str]:
    """The memory-update prompt's text before and after the chunk, for splicing chunk token ids.

    ``before + chunk_text + after == memory_update_prompt(problem, memory, chunk_text)`` for every chunk.

    >>> before, after = memory_update_prompt_parts("Who?", "m")
    >>> before + "X" + after == memory_update_prompt("Who?", "m", "X")
    True
    """
    return _UPDATE_BEFORE.format(prompt=problem, memory=memory), _UPDATE_AFTER.format()


def memory_from_response(text: str) -> str:
    """The new memory taken from a memory-update response.

    The whole response, or, when it contains ``</think>``, the text after the LAST ``</think>`` with leading
    whitespace removed (a reasoning model's thoughts do not become memory). Never raises.

    >>> memory_from_response("Alice is 30.")
    'Alice is 30.'
    >>> memory_from_response("<think>hmm</think>\\n  Alice is 30.")
    'Alice is 30.'
    """
    if THINK_END not in text:
        return text
    return text.rsplit(THINK_END, 1)[1].lstrip()
