"""Answer extraction and answer metrics shared by every method: \\boxed{}, MATH normalisation, QA scores.

Three layers, each usable alone:

- ``last_boxed``: the last ``\\boxed{...}`` (balanced braces), ``\\boxed x`` or ``\\fbox{...}`` in a text.
- ``normalize_math``: the Hendrycks MATH ``strip_string`` normalisation (written from its public
  definition); ``math_equal`` compares two answers after it.
- ``last_boxed_group`` / ``normalize_final_answer``: the last ``\\boxed{...}`` only, and the Minerva / DAPO
  normalisation slime's ``math_dapo_utils`` applies (the seed's AgentFlow reward uses both).
- ``normalize_answer`` / ``em`` / ``sub_em`` / ``f1`` / ``token_f1``: the SQuAD/HotpotQA answer
  normalisation and scores. MemAgent's RULER-HQA protocol (which answer is scored, and the seed's quirks)
  is ``agentgraphs.memagent.reward.ruler_metrics``, built on these.

Every function accepts arbitrary text and never raises: a response the parsers cannot read scores 0.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

__all__ = [
    "last_boxed",
    "normalize_math",
    "math_equal",
    "boxed_match",
    "last_boxed_group",
    "normalize_final_answer",
    "normalize_answer",
    "em",
    "sub_em",
    "f1",
    "token_f1",
]

Golds = str | Sequence[str]


def _as_list(golds: Golds) -> list[str]:
    if isinstance(golds, str):
        return [golds]
    try:
        return [g if isinstance(g, str) else str(g) for g in golds]
    except TypeError:
        return [str(golds)]


# ---------------------------------------------------------------------------------------------------------
# \boxed{} extraction
# ---------------------------------------------------------------------------------------------------------

_BOX_COMMANDS = ("\\boxed", "\\fbox")


def _box_starts(text: str) -> list[tuple[int, str]]:
    found = []
    for command in _BOX_COMMANDS:
        start = text.find(command)
        while start != -1:
            found.append((start, command))
            start = text.find(command, start + 1)
    found.sort()
    return found


def _braced_content(text: str, open_at: int) -> str | None:
    """The content of the brace group opening at ``text[open_at] == "{"``; None when it never closes."""
    depth = 0
    for i in range(open_at, len(text)):
        char = text[i]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
    return None


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed x`` in ``text``, else None.

    Braces are matched, so nested groups survive. The space form ``\\boxed 5`` yields everything after the
    space up to the next ``$`` (as the MATH reference does). When the last box never closes (a truncated
    response) the answer is None: an earlier box does not stand in for it.

    >>> last_boxed("so \\\\boxed{1} or rather \\\\boxed{\\\\frac{1}{2}}.")
    '\\\\frac{1}{2}'
    >>> last_boxed("$\\\\boxed 42$") , last_boxed("\\\\fbox{x}"), last_boxed("no box")
    ('42', 'x', None)
    >>> last_boxed("\\\\boxed{unclosed") is None
    True
    """
    for start, command in reversed(_box_starts(text)):
        after = start + len(command)
        if after < len(text) and text[after] == "{":
            return _braced_content(text, after)
        if command == "\\boxed" and after < len(text) and text[after] == " ":
            return text[after + 1 :].split("$")[0]
        # "\boxedfoo" or "\fboxes" is some other word: keep looking further left
    return None


# ---------------------------------------------------------------------------------------------------------
# MATH normalisation (Hendrycks et al., strip_string)
# ---------------------------------------------------------------------------------------------------------


def _fix_fracs(s: str) -> str:
    r"""``\frac12`` -> ``\frac{1}{2}``, ``\frac1{72}`` -> ``\frac{1}{72}``."""
    parts = s.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if part.startswith("{"):
            out += part
            continue
        if len(part) < 2:
            return s  # "\frac" with fewer than two following characters: leave the string alone
        numerator, rest = part[0], part[1:]
        if rest[0] == "{":
            out += "{" + numerator + "}" + rest
        else:
            out += "{" + numerator + "}{" + rest[0] + "}" + rest[1:]
    return out


def _fix_a_slash_b(s: str) -> str:
    r"""``3/4`` -> ``\frac{3}{4}`` when both sides are integers written canonically (``-3/4`` too)."""
    parts = s.split("/")
    if len(parts) != 2:
        return s
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError:  # not integers (or too many digits for int())
        return s
    if s != f"{a}/{b}":  # "03/4", "+3/4", " 3/4" are left alone, as in the reference
        return s
    return "\\frac{" + parts[0] + "}{" + parts[1] + "}"


def _remove_right_units(s: str) -> str:
    r"""Drop a trailing unit written as ``\text{ unit}`` (note the space)."""
    marker = "\\text{ "
    return s.split(marker)[0] if marker in s else s


def _fix_sqrt(s: str) -> str:
    r"""``\sqrt3`` -> ``\sqrt{3}``."""
    parts = s.split("\\sqrt")
    out = parts[0]
    for part in parts[1:]:
        if part and part[0] != "{":
            out += "\\sqrt{" + part[0] + "}" + part[1:]
        else:
            out += "\\sqrt" + part
    return out


def normalize_math(s: str) -> str:
    r"""Hendrycks MATH ``strip_string``: a canonical form for exact-match comparison.

    In order: drop newlines, ``\!``, turn ``\\`` into ``\``, ``tfrac``/``dfrac`` into ``frac``, drop
    ``\left``/``\right``, degrees (``^{\circ}``, ``^\circ``), ``\$``, a trailing ``\text{ unit}``, ``\%``;
    ``" ."`` -> ``" 0."``, ``"{."`` -> ``"{0."``, a leading ``.`` gets a ``0``; ``x = 5`` (a left side of at most
    two characters) -> ``5``; ``\sqrt3`` -> ``\sqrt{3}``; remove spaces; ``\frac12`` -> ``\frac{1}{2}``;
    exactly ``0.5`` -> ``\frac{1}{2}``; ``a/b`` of integers -> ``\frac{a}{b}``. Trailing periods are NOT
    removed (the reference does not). Never raises.

    >>> normalize_math("\\dfrac12"), normalize_math(".5"), normalize_math("3/4")
    ('\\frac{1}{2}', '\\frac{1}{2}', '\\frac{3}{4}')
    >>> normalize_math("x = \\left( 2, 3 \\right)"), normalize_math("90^\\circ"), normalize_math("\\$5")
    ('(2,3)', '90', '5')
    """
    s = s.replace("\n", "")
    s = s.replace("\\!", "")
    s = s.replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "")
    s = _remove_right_units(s)
    s = s.replace("\\%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    sides = s.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:
        s = sides[1]
    s = _fix_sqrt(s)
    s = s.replace(" ", "")
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    return _fix_a_slash_b(s)


def math_equal(answer: str, gold: str) -> bool:
    """Exact match after ``normalize_math`` on both sides (MATH's ``is_equiv``).

    >>> math_equal("\\\\frac{1}{2}", "0.5"), math_equal("2", "3")
    (True, False)
    """
    return normalize_math(answer) == normalize_math(gold)


def boxed_match(response: str, label: object) -> float:
    """1.0 when the last \\boxed{} of `response` equals `label` (or any of a list) after ``normalize_math``.

    >>> boxed_match("so \\\\boxed{4}.", "4"), boxed_match("\\\\boxed{5}", ["4", "four"]), boxed_match("4", None)
    (1.0, 0.0, 0.0)
    """
    boxed = last_boxed(response)
    if boxed is None or label is None:
        return 0.0
    golds = label if isinstance(label, (list, tuple)) else [label]
    return 1.0 if any(math_equal(boxed, str(g)) for g in golds) else 0.0


# ---------------------------------------------------------------------------------------------------------
# Minerva / DAPO normalisation (slime's rm_hub/math_dapo_utils), in linear time
# ---------------------------------------------------------------------------------------------------------


def last_boxed_group(text: str) -> str | None:
    """The content of the LAST ``\\boxed{`` group (braces matched), else None: no ``\\fbox``, no
    ``\\boxed x`` space form, and a last box that never closes gives None (no earlier box stands in).

    >>> last_boxed_group("\\\\boxed{5} then \\\\boxed{6}"), last_boxed_group("\\\\boxed{\\\\frac{1}{2}}")
    ('6', '\\\\frac{1}{2}')
    >>> last_boxed_group("\\\\boxed{5} and \\\\boxed{6"), last_boxed_group("\\\\fbox{5}")
    (None, None)
    """
    start = text.rfind("\\boxed{")
    return None if start < 0 else _braced_content(text, start + len("\\boxed"))


# Minerva's answer normalisation (Lewkowycz et al. 2022, appendix D), as slime's math_dapo_utils applies it:
# plain substitutions, then these strings removed, in this order.
_DAPO_SUBSTITUTIONS = (
    ("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), ("\\ ", ""), (" ", ""), ("mbox", "text"),
    (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}"),
)
_DAPO_REMOVED = (
    "square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
    "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
    "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
    "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", "\\mathrm{th}", "^\\circ", "^{\\circ}", "\\;",
    ",\\!", "{,}", '"', "\\dots", "<|im_end|>", "<|endoftext|>",
)
_SHORT_FRAC = re.compile(r"frac([^{])(.)")  # \fracab -> \frac{a}{b}; the second character is not a newline
_SHORT_SQRT = re.compile(r"sqrt([^{])")  # \sqrta -> \sqrt{a}


def _keep_first_math_span(line: str) -> str:
    """A line with two or more ``$`` becomes ``$`` + the text between its first two ``$`` + ``$``."""
    first = line.find("$")
    second = line.find("$", first + 1) if first >= 0 else -1
    return line if second < 0 else "$" + line[first + 1:second] + "$"


def _unwrap(text: str, opener: str, *, widest: bool) -> str:
    """Replace ``opener + X + "}"`` by ``X``, left to right, X never crossing a newline: the shortest X
    (up to the first ``}``), or with `widest` the longest (up to the line's last ``}``). Linear time."""
    out: list[str] = []
    pos = 0
    while True:
        start = text.find(opener, pos)
        if start < 0:
            break
        inner = start + len(opener)
        newline = text.find("\n", inner)
        line_end = len(text) if newline < 0 else newline
        close = text.rfind("}", inner, line_end) if widest else text.find("}", inner, line_end)
        if close < 0:  # no match anywhere else on this line either
            if newline < 0:
                break
            out.append(text[pos:newline])
            pos = newline
            continue
        out.append(text[pos:start])
        out.append(text[inner:close])
        pos = close + 1
    out.append(text[pos:])
    return "".join(out)


def normalize_final_answer(answer: str) -> str:
    r"""Minerva / DAPO answer normalisation, exactly as slime's ``math_dapo_utils.normalize_final_answer``.

    In order: keep what follows the last ``=``; the substitutions (articles, ``\$``, spaces, ``mbox``,
    ``\text{and}``...) and removals (units such as ``degrees`` or ``cm``, ``\text{}``, ``^\circ``...);
    a line with two ``$`` keeps its first ``$...$``; unwrap ``\text{}``, ``\textbf{}``, ``\overline{}``
    (to the first ``}``) and ``\boxed{}`` (to the line's last ``}``); ``\fracab`` -> ``\frac{a}{b}``,
    ``\sqrta`` -> ``\sqrt{a}``; drop ``$``; digits with commas lose the commas; strip. Its regular
    expressions are replaced by linear scans with the same result (a line of 50,000 characters without
    ``$`` takes seconds in the original).

    >>> normalize_final_answer("x = 1,000"), normalize_final_answer("\\text{(A) } 5"), normalize_final_answer("\\frac12")
    ('1000', '(A)5', '\\frac{1}{2}')
    >>> normalize_final_answer("1,16"), normalize_final_answer("90^\\circ"), normalize_final_answer("so $5$ and $6$")
    ('116', '90', '5')
    """
    text = str(answer).split("=")[-1]
    for before, after in _DAPO_SUBSTITUTIONS:
        text = text.replace(before, after)
    for removed in _DAPO_REMOVED:
        text = text.replace(removed, "")
    text = "\n".join(_keep_first_math_span(line) for line in text.split("\n"))
    for opener in ("\\text{", "\\textbf{", "\\overline{"):
        text = _unwrap(text, opener, widest=False)
    text = _unwrap(text, "\\boxed{", widest=True)
    text = _SHORT_FRAC.sub(r"frac{\1}{\2}", text)
    text = _SHORT_SQRT.sub(r"sqrt{\1}", text)
    text = text.replace("$", "")
    if text.replace(",", "").isdigit():
        text = text.replace(",", "")
    return text.strip()


# ---------------------------------------------------------------------------------------------------------
# SQuAD / HotpotQA / RULER evaluation
# ---------------------------------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
_POLAR = ("yes", "no", "noanswer")


def normalize_answer(s: str) -> str:
    """SQuAD answer normalisation: lower-case, drop punctuation, articles (a/an/the), squeeze whitespace.

    >>> normalize_answer("The  Eiffel-Tower, in Paris!")
    'eiffeltower in paris'
    """
    s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def em(prediction: str, golds: Golds) -> float:
    """Exact match after ``normalize_answer``, against any gold.

    >>> em("the Cat", ["cat", "dog"]), em("cat!", "dog")
    (1.0, 0.0)
    """
    pred = normalize_answer(prediction)
    return 1.0 if any(pred == normalize_answer(g) for g in _as_list(golds)) else 0.0


def sub_em(prediction: str, golds: Golds) -> float:
    """Substring match after ``normalize_answer``: gold in prediction OR prediction in gold, any gold.

    An empty normalised side never matches (otherwise an empty answer would be "in" every gold).

    >>> sub_em("it was Paris, France", ["paris"]), sub_em("Paris", ["Paris, France"]), sub_em("", "x")
    (1.0, 1.0, 0.0)
    """
    pred = normalize_answer(prediction)
    if not pred:
        return 0.0
    for gold in _as_list(golds):
        g = normalize_answer(gold)
        if g and (g in pred or pred in g):
            return 1.0
    return 0.0


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 of one prediction against one gold after ``normalize_answer``; 0 when either is empty.

    Tokens count with multiplicity; no yes/no rule (that is HotpotQA's ``f1``).

    >>> round(token_f1("the cat sat", "cat sat on mat"), 4), token_f1("yes", "yes it is"), token_f1("", "")
    (0.6667, 0.5, 0.0)
    """
    return _token_f1(normalize_answer(prediction), normalize_answer(gold))


def _token_f1(pred: str, gold: str) -> float:
    pred_tokens, gold_tokens = pred.split(), gold.split()
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _f1_one(pred: str, gold: str) -> float:
    if (pred in _POLAR or gold in _POLAR) and pred != gold:
        return 0.0
    return _token_f1(pred, gold)


def f1(prediction: str, golds: Golds) -> float:
    """HotpotQA token F1 after ``normalize_answer``, the maximum over golds.

    When either side is yes/no/noanswer and the two differ, the score is 0.

    >>> round(f1("the cat sat", ["cat sat on mat"]), 4)  # p = 2/2, r = 2/4
    0.6667
    >>> f1("yes", ["yes it is"])
    0.0
    """
    pred = normalize_answer(prediction)
    return max((_f1_one(pred, normalize_answer(g)) for g in _as_list(golds)), default=0.0)
