"""What an HTML page would fetch from the network when opened: every page the project writes must render offline.

external_references(page) lists each script, style sheet, image, frame or font the page asks of a server: a
src / href / data / srcset attribute of http(s) or protocol-relative (//host) URL on any tag but a link the
reader clicks (<a href>), a CSS url(...) or @import of one, and a JavaScript module import of one. The text of
an embedded library (plotly.js names map-tile servers it asks only for map traces) is not a request.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

REMOTE = r"""(?:https?:)?//[^\s"'()<>]+"""
URL_ATTRIBUTES = {"src", "href", "data", "srcset", "poster", "action", "formaction", "background", "xlink:href"}
CSS_URL = re.compile(rf"""url\(\s*["']?({REMOTE})|@import\s+["']({REMOTE})""", re.IGNORECASE)
# import "url", import("url"), and a static import's `from "url"` (import { render } from "https://...")
JS_IMPORT = re.compile(rf"""(?:\bimport\s*\(?|\bfrom)\s*["']({REMOTE})["']""")
IS_REMOTE = re.compile(rf"^\s*{REMOTE}", re.IGNORECASE)


class _Scan(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self.inside: str | None = None  # "script" or "style" while in one's body

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if not value:
                continue
            if name == "style":
                self.found += [a or b for a, b in CSS_URL.findall(value)]
            elif name in URL_ATTRIBUTES and not (tag == "a" and name == "href"):
                urls = [u.split()[0] for u in value.split(",")] if name == "srcset" else [value]
                self.found += [f"<{tag} {name}={u}>" for u in urls if IS_REMOTE.match(u)]
        if tag in ("script", "style"):
            self.inside = tag

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self.inside = None

    def handle_endtag(self, tag: str) -> None:
        if tag == self.inside:
            self.inside = None

    def handle_data(self, data: str) -> None:
        if self.inside == "style":
            self.found += [a or b for a, b in CSS_URL.findall(data)]
        elif self.inside == "script":
            self.found += JS_IMPORT.findall(data)


def external_references(page: str) -> list[str]:
    """What `page` (HTML, a whole page or a fragment) would fetch from the network; [] when it renders offline."""
    scan = _Scan()
    scan.feed(page)
    scan.close()
    return scan.found
