"""Every relative link of README.md and docs/*.md names a file of the repository, and every `#anchor`
a heading of its page, the way GitHub renders them (no I/O beyond reading the files).

GitHub's anchor of a heading: its text as rendered (inline code and link text kept, the markup
dropped), lowercase, every character but letters, digits, spaces, `-` and `_` removed, each space a
`-`; the second heading with the same anchor gets `-1`, the third `-2`, and so on.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import REPO

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(
    r"""
    !?\[ (?:[^\[\]] | \[[^\[\]]*\])* \]      # [text] (or ![alt]), one level of brackets inside
    \( \s* <?
    ( [^()\s>]* (?:\([^()\s]*\)[^()\s>]*)* )  # the target; balanced parentheses allowed
    >? (?:\s+"[^"]*")? \s* \)                 # an optional title
    """,
    re.VERBOSE,
)
REFERENCE_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # https:, mailto:, ...


@dataclass(frozen=True)
class Link:
    page: Path
    line: int
    target: str


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of a page outside its fenced code blocks."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        opened = FENCE.match(line)
        if fence is None:
            if opened:
                fence = opened.group(1)
                continue
            yield number, line
        elif opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
            fence = None


def rendered_heading(markdown: str) -> str:
    """A heading's text as GitHub shows it: inline code's text, a link's or an image's text."""
    text = INLINE_CODE.sub(lambda m: m.group(2).strip(), markdown)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"<[^>]+>", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's rendered text (before duplicates are numbered)."""
    kept = "".join(ch for ch in heading.strip().lower() if ch.isalnum() or ch in " -_")
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor of a page: its headings' (duplicates numbered) and explicit `<a name|id=...>`."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(text):
        found.update(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if heading is None:
            continue
        base = slug(rendered_heading(heading.group(2)))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> Iterator[Link]:
    """Every link target of a page outside code (fenced blocks and inline code spans); a link's text
    may wrap onto the next line."""
    text = page.read_text(encoding="utf-8")
    lines = [""] * (len(text.splitlines()) + 1)
    for number, line in prose_lines(text):
        lines[number] = INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line)
    prose = "\n".join(lines)  # fenced blocks blanked: a match's line is its count of newlines before it
    for match in LINK.finditer(prose):
        yield Link(page, prose.count("\n", 0, match.start()), match.group(1))
    for number, line in enumerate(lines):
        definition = REFERENCE_DEFINITION.match(line)
        if definition:
            yield Link(page, number, definition.group(1))


def problems(pages: list[Path], root: Path) -> list[str]:
    """What does not resolve: a relative target that is not a file or folder of `root`, an anchor
    that is no heading of its page."""
    found = []
    anchors_of: dict[Path, set[str]] = {}
    for page in pages:
        for link in links(page):
            where = f"{page.relative_to(root)}:{link.line}: {link.target}"
            if not link.target or EXTERNAL.match(link.target):
                continue
            path, _, anchor = link.target.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.is_relative_to(root.resolve()) or not target.exists():
                found.append(f"{where}: no such file in the repository")
                continue
            if not anchor:
                continue
            if target.suffix != ".md" or not target.is_file():
                found.append(f"{where}: an anchor into something that is not a Markdown page")
                continue
            if target not in anchors_of:
                anchors_of[target] = anchors(target.read_text(encoding="utf-8"))
            if anchor not in anchors_of[target]:
                found.append(f"{where}: no heading with the anchor #{anchor}")
    return found


def documentation() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_every_relative_link_and_anchor_of_the_docs_resolves() -> None:
    pages = documentation()
    assert len(pages) > 10
    assert sum(1 for page in pages for _ in links(page)) > 100  # the pages' links are seen
    assert problems(pages, REPO) == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("## Replaying the lineage topic: `olstream replay`", "replaying-the-lineage-topic-olstream-replay"),
        (
            "### `olstream_stream_input_lag` and `--metrics-port`",
            "olstream_stream_input_lag-and---metrics-port",
        ),
        ("## Refused connections: exit 77", "refused-connections-exit-77"),
        ("## Events topic (worker → sink)", "events-topic-worker--sink"),
        ("# Kubernetes: the [Helm](https://helm.sh) chart", "kubernetes-the-helm-chart"),
        ("## What's new? #", "whats-new"),
    ],
)
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert anchors(heading + "\n") == {anchor}


def test_duplicate_headings_are_numbered_and_code_blocks_are_not_headings() -> None:
    page = "# Setup\n\n## Setup\n\n```sh\n# Setup\n```\n\n### Setup\n"
    assert anchors(page) == {"setup", "setup-1", "setup-2"}


def test_the_check_finds_broken_links_and_anchors(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "deploy").mkdir()
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Title\n\n## Usage\n\n## Usage\n\n"
        "[ok](docs/a.md) [ok](#usage-1) [ok](docs/a.md#a-page) [ok](deploy/) [ok](https://x.org/#y)\n"
        "[gone](docs/missing.md) [bad anchor](#usage-2) `[in code](docs/none.md)` [a link that\n"
        "wraps](#nowhere)\n"
        "```\n[in a block](docs/none.md)\n```\n"
        "[out of the repository](../elsewhere.md)\n",
        encoding="utf-8",
    )
    page = tmp_path / "docs" / "a.md"
    page.write_text("# A page\n\nSee [the readme](../README.md#title) and [this](a.md#no-such).\n")
    (tmp_path / "elsewhere.md").write_text("# outside\n")
    found = problems([readme, page], tmp_path)
    assert [p.split(": ", 1)[1] for p in found] == [
        "docs/missing.md: no such file in the repository",
        "#usage-2: no heading with the anchor #usage-2",
        "#nowhere: no heading with the anchor #nowhere",
        "../elsewhere.md: no such file in the repository",
        "a.md#no-such: no heading with the anchor #no-such",
    ]
