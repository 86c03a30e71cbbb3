"""Every relative link in README.md and docs/*.md points at a file that exists, and at a heading it has.

The Sphinx build (``scripts/docs``) checks the links between docs pages too, but not those of the README,
which GitHub renders from the repository: this test covers both, without building anything.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *$", re.MULTILINE)


def _links(page: Path) -> list[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "``", text)  # inline code is not a link
    return [m.group(1) for m in _LINK.finditer(text)]


def _slug(heading: str) -> str:
    """The anchor GitHub (and myst-parser's ``myst_heading_anchors``) gives a heading."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(h) for h in _HEADING.findall(text)}


def _local(target: str) -> bool:
    return not re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE)  # http:, https:, mailto: ...


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in filter(_local, _links(page)):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(
                f"{target}: no such file {file.relative_to(REPO) if file.is_relative_to(REPO) else file}"
            )
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(f"{target}: no heading with anchor #{anchor} in {file.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: broken links:\n" + "\n".join(broken)


def test_the_check_finds_links_and_catches_a_broken_one(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# A title\n\nSee [there](other.md#a-heading), [here](#a-title), `[not](code.md)`,\n"
        "[web](https://example.com), ![pic](img.png).\n\n```\n[fenced](nope.md)\n```\n"
    )
    assert _links(page) == ["other.md#a-heading", "#a-title", "https://example.com", "img.png"]
    assert _anchors(page) == {"a-title"}
    assert _slug("What each mode costs, and how late a record is") == (
        "what-each-mode-costs-and-how-late-a-record-is"
    )
    assert _slug("The embedded broker's limits") == "the-embedded-brokers-limits"
    assert _slug("`handler_timeout`: what it costs") == "handler_timeout-what-it-costs"
