"""Every code block of README.md and docs/*.md runs here, so the documentation cannot drift.

One test per block that runs (```python, ```bash/```sh), per `<!-- docs-test: output -->`
block (the output the page shows is checked) and per `<!-- docs-test: file NAME -->` block;
`<!-- docs-test: skip (reason) -->` blocks are reported skipped with their reason. The
convention is in tests/docs/blocks.py, how a page runs in tests/docs/session.py. A page added
under docs/ is collected with no change here, and must be linked from README.md.
"""

from __future__ import annotations

import os
import re

import pytest

from tests.docs.blocks import RUNNABLE, Block, links, parse
from tests.docs.session import REPO, PageSession

pytestmark = pytest.mark.timeout(1800)  # a block's turn may run the page's earlier blocks first


def pages() -> list[str]:
    docs = os.path.join(REPO, "docs")
    found = sorted(os.path.relpath(os.path.join(d, f), REPO) for d, _, files in os.walk(docs)
                   for f in files if f.endswith(".md"))
    return ["README.md", *found]


def _blocks() -> dict[str, list[Block]]:
    out = {}
    for page in pages():
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            out[page] = parse(f.read(), page)
    return out


BLOCKS = _blocks()


def _page_class(page: str, blocks: list[Block]) -> type:
    """One test class per page: pytest-randomly shuffles classes and the tests inside a class,
    but never mixes two classes, so one page's kernel runs at a time (closed with its class)."""
    cases = [i for i, b in enumerate(blocks) if b.runner or b.directive or b.error]

    @pytest.fixture(scope="class")
    def session(self):
        s = PageSession(page, blocks)
        yield s
        s.close()

    @pytest.mark.parametrize("index", cases, ids=[blocks[i].id for i in cases])
    def test_block(self, session: PageSession, index: int) -> None:
        outcome = session.outcome(index)
        if outcome.status == "skipped":
            pytest.skip(outcome.message)
        if outcome.status == "failed":
            pytest.fail(outcome.message, pytrace=False)

    name = "TestPage_" + re.sub(r"\W", "_", page)
    return type(name, (), {"session": session, "test_block": test_block, "__doc__": page})


for _page, _page_blocks in BLOCKS.items():
    if any(b.runner or b.directive or b.error for b in _page_blocks):
        _cls = _page_class(_page, _page_blocks)
        globals()[_cls.__name__] = _cls


def test_readme_links_every_docs_page_and_every_local_link_resolves() -> None:
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme_links = {_local(t) for t in links(f.read())}
    missing = [p for p in pages()[1:] if p not in readme_links]
    assert not missing, f"README.md does not link these docs pages: {missing}"
    broken = []
    for page in pages():
        with open(os.path.join(REPO, page), encoding="utf-8") as f:
            text = f.read()
        for target in links(text):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(page), target.split("#")[0]))
            if not os.path.exists(os.path.join(REPO, path)):
                broken.append(f"{page}: {target}")
    assert not broken, f"links to files that do not exist: {broken}"


def test_every_page_with_code_runs_some_of_it() -> None:
    """A page whose every block is skipped is a page nothing checks."""
    for page, blocks in BLOCKS.items():
        code = [b for b in blocks if b.runner and b.directive != "file"]
        assert not code or any(b.directive != "skip" for b in code), (
            f"{page}: every one of its code blocks is skipped; make one of them run")


def _local(target: str) -> str:
    return os.path.normpath(target.split("#")[0])


# ---- the convention itself (no processes) ------------------------------------------------

def test_parse_blocks_directives_and_languages() -> None:
    text = "\n".join([
        "# Title", "", "```python", "x = 1", "```", "",
        "<!-- docs-test: skip (needs a GPU) -->", "```bash", "nvidia-smi", "```",
        "<!-- docs-test: output -->", "", "```text", "1", "```",
        "<!-- docs-test: file app/hello.py -->", "```python", "A = 1", "```",
        "<!-- docs-test: multinode -->", "```sh", "raylite status", "```",
        "```yaml", "a: 1", "```",
        "<!-- docs-test: skip -->", "```python", "pass", "```",
        "<!-- docs-test: sometimes -->", "```python", "pass", "```",
        "- a list item:", "", "  ```python", "  y = 2", "  ```",
    ])
    blocks = parse(text, "p.md")
    assert [(b.lang, b.directive, b.argument) for b in blocks[:6]] == [
        ("python", "", ""), ("bash", "skip", "needs a GPU"), ("text", "output", ""),
        ("python", "file", "app/hello.py"), ("sh", "multinode", ""), ("yaml", "", "")]
    assert blocks[0].code == "x = 1\n" and blocks[0].line == 3 and blocks[0].id == "p.md:3"
    assert [b.runner for b in blocks[:6]] == ["python", "bash", None, "python", "bash", None]
    assert "needs a reason" in blocks[6].error
    assert "unknown docs-test directive" in blocks[7].error
    assert blocks[8].code == "y = 2\n"  # indented under a list item
    assert set(RUNNABLE.values()) == {"python", "bash"}


def test_output_matching() -> None:
    from tests.docs.session import output_matches

    assert output_matches("[0, 1, 4, 9]\n5\n", "[0, 1, 4, 9]  \n5\n\n")
    assert output_matches("took ... ms\ndone", "took 12.5 ms\ndone")
    assert output_matches("first\n...\nlast", "first\na\nb\nlast")
    assert not output_matches("[0, 1, 4, 9]", "[0, 1, 4]")


def test_only_code_blocks_run_and_a_failure_skips_the_rest_of_its_page() -> None:
    text = "\n".join(["```text", "exit 1", "```", "```python", "print('ran')", "```",
                      "<!-- docs-test: output -->", "```text", "ran", "```",
                      "```bash", "false", "```", "```python", "print('after')", "```"])
    session = PageSession("t.md", parse(text, "t.md"))
    try:
        assert session.outcome(0).status == "skipped"        # ```text: shown, not run
        assert session.outcome(1).status == "passed" and session.outcome(2).status == "passed"
        assert session.outcome(3).status == "failed" and "exit status 1" in session.outcome(3).message
        assert session.outcome(4).message == "not run: the block at t.md:11 failed"
    finally:
        session.close()
