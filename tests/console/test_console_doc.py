"""docs/console.md shows the screenshots the browser tests write, at both widths."""

from __future__ import annotations

import re
from pathlib import Path

from tests.console.browser import DOC_SHOTS, WIDTHS

DOC = Path(__file__).resolve().parents[2] / "docs" / "console.md"


def test_every_screenshot_in_the_doc_exists_and_every_page_is_shown_at_both_widths():
    images = re.findall(r"!\[[^\]]*\]\((console/[^)]+\.png)\)", DOC.read_text())
    assert images
    for image in images:
        assert (DOC.parent / image).is_file(), image
    pages = {Path(i).stem.rsplit("-", 1)[0] for i in images}
    for page in pages:
        for width in WIDTHS:
            assert f"console/{page}-{width}.png" in images, (page, width)
    written = {p.name for p in DOC_SHOTS.glob("*.png")}
    assert {Path(i).name for i in images} == written
