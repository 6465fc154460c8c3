"""Every relative link in README.md and docs/*.md leads to a file that exists, and every anchor to
a heading of that file (GitHub's anchors); every docs page is linked from README.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The text without code blocks and code spans, where ``](`` is not a link."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation other than '-' and '_' dropped, spaces
    to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of ``path``'s headings; a repeated heading gets '-1', '-2', ... as on GitHub."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text())):
        base = anchor(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[str]:
    return [t for t in _LINK.findall(_prose(path.read_text())) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_anchor_follows_githubs_rules() -> None:
    assert anchor("Kafka 4 clients: API versions, KIP-848 groups, share groups") == \
        "kafka-4-clients-api-versions-kip-848-groups-share-groups"
    assert anchor("Try it: one command") == "try-it-one-command"
    assert anchor("More cores: `proxy_workers`") == "more-cores-proxy_workers"


def test_relative_links_resolve() -> None:
    broken = []
    for page in PAGES:
        for target in links(page):
            path, _, fragment = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.is_file():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and file.suffix == ".md" and fragment not in anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no heading #{fragment})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_readme_links_every_docs_page() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md")}
    unlinked = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not unlinked, f"README.md's Documentation list does not link: {unlinked}"
