"""Fenced code blocks of a Markdown file, with the `docs-test` directive written before each.

The convention (every page of README.md and docs/ follows it):
- ```python blocks run; the blocks of one file share one interpreter and namespace, in order,
  like cells of a notebook (`__name__ == "__main__"`).
- ```bash / ```sh / ```shell blocks run in bash (`set -eo pipefail`); exported variables and
  `cd` carry over to the file's later blocks, as in one terminal.
- Every other block (```text, ```yaml, ```json, ...) is shown, not run.
- A directive is an HTML comment on the last non-blank line before a block:
    <!-- docs-test: skip (reason) -->    not run; the test is reported skipped with the reason
    <!-- docs-test: multinode -->        needs a multi-node cluster: runs in a fresh interpreter
                                         (or shell) against a 2-node cluster on this machine
    <!-- docs-test: output -->           (before a ```text block) the output the previous
                                         block printed: checked; `...` stands for any text
    <!-- docs-test: file NAME -->        the block is the file NAME (written into the page's
                                         working directory, not run), e.g. an app to import
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RUNNABLE = {"python": "python", "py": "python", "python3": "python",
            "bash": "bash", "sh": "bash", "shell": "bash"}
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")
_DIRECTIVE = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<body>.*?)\s*-->\s*$")
_KINDS = re.compile(r"^(?P<kind>skip|multinode|output|file)\b\s*(?P<arg>.*)$")


class DirectiveError(ValueError):
    """A `docs-test` comment that does not follow the convention."""


@dataclass(frozen=True)
class Block:
    path: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    lang: str  # the fence's info word, lower case ("" when none)
    code: str
    directive: str = ""  # skip | multinode | output | file | ""
    argument: str = ""  # skip's reason, file's name
    error: str = ""  # a malformed directive: the test fails with this

    @property
    def runner(self) -> str | None:
        """"python" or "bash" for blocks that run, None for the rest."""
        return RUNNABLE.get(self.lang)

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def parse(text: str, path: str) -> list[Block]:
    """Every fenced block of `text`, in order, with its directive."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, start = m.group("fence"), i
        lang = m.group("info").lower()
        body: list[str] = []
        i += 1
        while i < len(lines):
            close = lines[i].strip()
            if close.startswith(fence[0] * len(fence)) and set(close) == {fence[0]}:
                break
            body.append(_dedent(lines[i], len(m.group("indent"))))
            i += 1
        i += 1
        directive, argument, error = _directive_before(lines, start)
        blocks.append(Block(path, start + 1, lang, "\n".join(body) + "\n", directive, argument, error))
    return blocks


def _dedent(line: str, indent: int) -> str:
    return line[min(indent, len(line) - len(line.lstrip(" "))):]


def _directive_before(lines: list[str], fence_index: int) -> tuple[str, str, str]:
    j = fence_index - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j < 0:
        return "", "", ""
    m = _DIRECTIVE.match(lines[j])
    if not m:
        if "docs-test" in lines[j]:
            return "", "", f"line {j + 1}: not a docs-test directive: {lines[j].strip()!r}"
        return "", "", ""
    kind = _KINDS.match(m.group("body"))
    if not kind:
        return "", "", (f"line {j + 1}: unknown docs-test directive {m.group('body')!r} (use skip "
                        "(reason), multinode, output or file NAME)")
    name, arg = kind.group("kind"), kind.group("arg").strip()
    if name == "skip":
        reason = arg[1:-1].strip() if arg.startswith("(") and arg.endswith(")") else arg
        if not reason:
            return "", "", f"line {j + 1}: `docs-test: skip` needs a reason: skip (why it cannot run)"
        return "skip", reason, ""
    if name == "file":
        if not arg or arg.startswith("/") or ".." in arg.split("/"):
            return "", "", f"line {j + 1}: `docs-test: file` needs a file name in the page's directory"
        return "file", arg, ""
    return name, arg, ""


def links(text: str) -> list[str]:
    """Targets of the Markdown links and images of `text` (outside code blocks)."""
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out += re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", line)
    return out
