"""Constrained replies: a declared action space that a backend enforces while it decodes.

MMOA-RAG restricts its Selector's output to a handful of words (eq. 5: `Document`, the candidate numbers
0..K-1 and `,`). A `Constraint` declares such an action space in two equivalent forms, so that every backend
can enforce it the way it can:

- `texts`: the allowed texts. Their tokenizations make a **token whitelist**: the in-process backend
  (`ragteam.llm.decoder`) masks every other token's logit at every decoding step (end-of-turn is always
  allowed), records the masked log-probs, and the PPO trainer scores the act under the same mask.
- `regex`: the regular expression the reply should match, e.g. `Document[0-4](,Document[0-4])*`, which
  vLLM (`structured_outputs.regex`, formerly `guided_regex`) and SGLang (`regex`) enforce as a grammar
  (`ragteam.llm.openai_http`, `ModelConfig.structured_output`).

The whitelist is the action space of the paper (a bag of words: `Document,,3` is made of allowed tokens); the
regex is its format. Either way the role's parser still reads the reply and penalises a malformed one.

`whitelist_texts(regex)` maps a regex back to a whitelist (how `ragteam serve llm` honours a vLLM-style
request): the finite strings the regex spells once its repetitions are taken out, those of each repeated
part, and the literal runs (split where letters, digits and other characters meet) and class members it is
made of. For the regexes this module writes (`choice_regex`, the Selector's) that is exactly the declared
`texts`. Only literal text, character classes (`[0-4]`, `\\d`), groups, alternation and repetition are
read; anything else (`.`, negated classes, anchors inside, look-arounds, back-references) is
`UnsupportedRegex`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Constraint",
    "UnsupportedRegex",
    "choice_regex",
    "constraint_record",
    "token_whitelist",
    "whitelist_texts",
]

MAX_STRINGS = 4096
"""The most strings a regex's finite parts may spell before `whitelist_texts` refuses it."""


@dataclass(frozen=True)
class Constraint:
    """What a reply may contain: `texts` whose tokens make a whitelist, and the equivalent `regex`.

    `name` labels it in traces (`selector`). Hashable, so backends cache what they derive from it."""

    texts: tuple[str, ...]
    regex: str
    name: str = ""

    def __post_init__(self) -> None:
        if not self.texts or not all(isinstance(t, str) and t for t in self.texts):
            raise ValueError("a constraint needs at least one allowed text, none of them empty")
        if not isinstance(self.regex, str) or not self.regex:
            raise ValueError("a constraint needs its regular expression")
        re.compile(self.regex)

    def to_dict(self) -> dict[str, Any]:
        return {"texts": list(self.texts), "regex": self.regex, "name": self.name}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Constraint:
        return cls(tuple(d["texts"]), str(d["regex"]), str(d.get("name", "")))

    @classmethod
    def from_regex(cls, regex: str, name: str = "") -> Constraint:
        """The constraint whose whitelist is `whitelist_texts(regex)` (UnsupportedRegex if it has none)."""
        return cls(whitelist_texts(regex), regex, name)


def constraint_record(c: Constraint, by: str, enforced: bool, **more: Any) -> dict[str, Any]:
    """What a `Completion.constraint` says about the constraint of its request: the constraint's name and
    regex, what enforced it (`by`: `logits_mask`, `vllm`, `vllm-guided`, `sglang`, `none`), whether it was
    enforced, and anything the backend adds (`allowed_ids`: the exact token whitelist that masked it)."""
    return {"name": c.name, "regex": c.regex, "by": by, "enforced": enforced, **more}


def token_whitelist(
    constraint: Constraint, encode: Callable[[str], Sequence[int]], always: Iterable[int] = ()
) -> list[int]:
    """The sorted token ids of every allowed text (each tokenized on its own by `encode`) and `always`
    (the end-of-turn / EOS ids a decoder stops on)."""
    ids = {int(i) for text in constraint.texts for i in encode(text)}
    ids.update(int(i) for i in always)
    return sorted(ids)


def choice_regex(items: Sequence[str]) -> str:
    """A regex matching exactly one of `items` (a character class for single digits in one range)."""
    if not items:
        raise ValueError("no items to choose from")
    digits = [int(i) for i in items if len(i) == 1 and i.isdigit()]
    if len(digits) == len(items) and digits == list(range(digits[0], digits[0] + len(digits))):
        return items[0] if len(items) == 1 else f"[{digits[0]}-{digits[-1]}]"
    return "(?:" + "|".join(re.escape(i) for i in items) + ")"


# ---------------------------------------------------------------------------------------------- regex -> texts


class UnsupportedRegex(ValueError):
    """A regex that is not a whitelist of literal texts (see the module docstring)."""


# Nodes: ("lit", str) | ("set", tuple[str, ...]) | ("seq", list) | ("alt", list) | ("rep", node)
_Node = tuple[str, Any]
_SPECIAL = set("()[]{}|*+?.^$\\")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}


class _Parser:
    def __init__(self, regex: str) -> None:
        self.s = regex
        self.i = 0

    def fail(self, why: str) -> UnsupportedRegex:
        shown = self.s if len(self.s) <= 200 else self.s[:200] + "..."
        return UnsupportedRegex(f"regex {shown!r}: {why} (at character {self.i})")

    def peek(self) -> str | None:
        return self.s[self.i] if self.i < len(self.s) else None

    def parse(self) -> _Node:
        if self.s.startswith("^"):
            self.i = 1
        node = self.alt()
        if self.peek() == "$" and self.i == len(self.s) - 1:
            self.i += 1
        if self.i != len(self.s):
            raise self.fail(f"unexpected {self.s[self.i]!r}")
        return node

    def alt(self) -> _Node:
        branches = [self.seq()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.seq())
        return branches[0] if len(branches) == 1 else ("alt", branches)

    def seq(self) -> _Node:
        items: list[_Node] = []
        while (c := self.peek()) is not None and c not in "|)":
            if c == "$" and self.i == len(self.s) - 1:
                break
            atom = self.atom()
            items.append(self.quantified(atom))
        return ("seq", items)

    def quantified(self, atom: _Node) -> _Node:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.i += 1
            low = 1 if c == "+" else 0
            high = None if c in "*+" else 1
        elif c == "{":
            m = re.compile(r"\{(\d+)(?:(,)(\d*))?\}").match(self.s, self.i)
            if m is None:
                raise self.fail("a bad {m,n} quantifier")
            self.i = m.end()
            low = int(m.group(1))
            high = low if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
        else:
            return atom
        if self.peek() in ("?", "+"):  # lazy / possessive: the same strings
            self.i += 1
        return ("rep", (atom, low, high))

    def atom(self) -> _Node:
        c = self.peek()
        assert c is not None
        if c == "(":
            self.i += 1
            if self.s.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                raise self.fail("look-arounds, named groups and flags are not supported")
            node = self.alt()
            if self.peek() != ")":
                raise self.fail("an unclosed group")
            self.i += 1
            return node
        if c == "[":
            return self.char_class()
        if c == "\\":
            return self.escape(in_class=False)
        if c in _SPECIAL:
            raise self.fail(f"{c!r} is not supported (only literal text, classes, groups, | and repetition)")
        self.i += 1
        return ("lit", c)

    def escape(self, in_class: bool) -> _Node:
        self.i += 1
        c = self.peek()
        if c is None:
            raise self.fail("a trailing backslash")
        self.i += 1
        if c == "d":
            return ("set", tuple("0123456789"))
        if c in _ESCAPES:
            return ("lit", _ESCAPES[c])
        if c.isalnum():
            raise self.fail(f"the escape \\{c} is not supported")
        return ("lit", c)

    def char_class(self) -> _Node:
        self.i += 1
        if self.peek() == "^":
            raise self.fail("negated classes are not supported")
        members: list[str] = []
        first = True
        while True:
            c = self.peek()
            if c is None:
                raise self.fail("an unclosed class")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            if c == "\\":
                got = self.escape(in_class=True)
                if got[0] == "set":
                    members.extend(got[1])
                    continue
                low = got[1]
            else:
                self.i += 1
                low = c
            if self.peek() == "-" and self.i + 1 < len(self.s) and self.s[self.i + 1] != "]":
                self.i += 1
                high = self.peek()
                if high == "\\":
                    got = self.escape(in_class=True)
                    if got[0] != "lit":
                        raise self.fail("a range ending in a class")
                    high = got[1]
                else:
                    self.i += 1
                assert high is not None
                if ord(high) < ord(low) or ord(high) - ord(low) > 255:
                    raise self.fail(f"the range {low}-{high}")
                members.extend(chr(o) for o in range(ord(low), ord(high) + 1))
            else:
                members.append(low)
        return ("set", tuple(dict.fromkeys(members)))


def _language(node: _Node) -> set[str]:
    """The strings `node` spells with every repetition taken out (it spells the empty string there)."""
    kind, value = node
    if kind == "lit":
        return {value}
    if kind == "set":
        return set(value)
    if kind == "rep":
        return {""}
    if kind == "alt":
        return set().union(*(_language(b) for b in value))
    out = {""}
    for item in value:
        part = _language(item)
        if len(out) * len(part) > MAX_STRINGS:
            raise UnsupportedRegex(f"its finite parts spell more than {MAX_STRINGS} strings")
        out = {a + b for a, b in itertools.product(out, part)}
    return out


def _category(c: str) -> int:
    return 0 if c.isalpha() else 1 if c.isdigit() else 2 if not c.isspace() else 3


def _walk(node: _Node, texts: set[str]) -> None:
    """Add the texts of every repeated part, literal run and class member under `node`."""
    kind, value = node
    if kind == "set":
        texts.update(value)
    elif kind == "lit":
        texts.add(value)
    elif kind == "rep":
        body = value[0]
        texts.update(_language(body))
        _walk(body, texts)
    elif kind == "alt":
        for b in value:
            texts.update(_language(b))
            _walk(b, texts)
    else:
        run = ""
        for item in [*value, ("end", None)]:
            if item[0] == "lit":
                run += item[1]
                continue
            for _, piece in itertools.groupby(run, key=_category):
                texts.add("".join(piece))
            run = ""
            if item[0] != "end":
                _walk(item, texts)


def whitelist_texts(regex: str) -> tuple[str, ...]:
    """The allowed texts of a regex (module docstring), sorted; UnsupportedRegex when it is not a whitelist
    of literal texts."""
    if not isinstance(regex, str) or not regex:
        raise UnsupportedRegex("an empty regex")
    shown = regex if len(regex) <= 200 else regex[:200] + "..."
    try:
        re.compile(regex)
        tree = _Parser(regex).parse()
        texts = set(_language(tree))
        _walk(tree, texts)
    except re.error as e:
        raise UnsupportedRegex(f"regex {shown!r} does not compile: {e}") from None
    except RecursionError:
        raise UnsupportedRegex(f"regex {shown!r} is nested too deeply") from None
    texts.discard("")
    if not texts:
        raise UnsupportedRegex(f"regex {shown!r} allows no text")
    if len(texts) > MAX_STRINGS:
        raise UnsupportedRegex(f"regex {shown!r} allows more than {MAX_STRINGS} texts")
    return tuple(sorted(texts))
