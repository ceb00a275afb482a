"""MemAgent's two prompts, verbatim from the original (BytedTsinghua-SIA/MemAgent quickstart).

The templates are ``str.format`` strings with the fields ``{prompt}``, ``{memory}`` and (memory update
only) ``{chunk}``. Rendered, they are byte-for-byte the original text, including the space after
``<problem>`` and the ``\\boxed{}`` in the final prompt.

Token-level chunks (``chunk_as: ids``, the original's): the graph cuts the document into chunks of TOKEN
IDS and never decodes and re-encodes them. It renders the memory-update prompt with a placeholder as the
chunk and lets the chat template splice the chunk's ids in its place (``call_llm(..., splice={placeholder: chunk_ids})``,
`agentgraphs.chat.ChatTemplate.render`): the text around the chunk is encoded, the chunk is exactly the
document's ids. The seams may differ from encoding the whole text at once (a BPE merge across ``"\\n"`` and
the chunk's first token); that is intended, and deterministic. With ``chunk_as: text`` (the seed's) the
chunk is decoded without special tokens and the whole prompt is tokenized at once, as the seed does.
"""

from __future__ import annotations

from ..toolcalls import split_reasoning

__all__ = [
    "MEMORY_UPDATE_TEMPLATE",
    "FINAL_TEMPLATE",
    "INITIAL_MEMORY",
    "memory_update_prompt",
    "final_prompt",
    "memory_from_response",
    "strip_response",
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


def memory_from_response(text: str) -> str:
    """The new memory taken from a memory-update response.

    The whole response, or, when it contains ``</think>``, the text after the LAST ``</think>`` with leading
    whitespace removed (a reasoning model's thoughts do not become memory). Never raises.

    >>> memory_from_response("Alice is 30.")
    'Alice is 30.'
    >>> memory_from_response("<think>hmm</think>\\n  Alice is 30.")
    'Alice is 30.'
    """
    reasoning, answer = split_reasoning(text)
    return answer.lstrip() if reasoning is not None and answer is not None else text


def strip_response(text: str, stop_texts: tuple[str, ...] | list[str]) -> str:
    """A response as the seed keeps it: every occurrence of the stop-token texts removed, then stripped of
    surrounding whitespace (the caller keeps the previous memory when this is empty).

    >>> strip_response("  Alice is 30.<|im_end|>", ("<|im_end|>", "<|endoftext|>"))
    'Alice is 30.'
    >>> strip_response("<|endoftext|>\\n", ("<|im_end|>", "<|endoftext|>"))
    ''
    """
    for stop in stop_texts:
        text = text.replace(stop, "")
    return text.strip()
