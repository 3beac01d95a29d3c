"""The desktop as text: the accessibility tree numbered for actions, and a set-of-marks picture.

:func:`render_tree` turns the driver's nodes into lines like::

    [4] push button "Save" disabled @(100,20 80x24)
    [9] text focused editable @(2,48 898x669) = "Meet Dana on Monday."

indented by depth. The number is the element's id for ``click(id)`` in the next action; the box
is in screen pixels (x, y of the top-left corner, width x height).
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any

__all__ = ["Element", "render_tree", "set_of_marks"]

Element = tuple[int, int, int, int]
"""An element's screen box: x, y, width, height."""


def render_tree(nodes: list[dict[str, Any]], max_text: int = 400) -> tuple[str, list[Element]]:
    """The numbered text of ``nodes`` and the box of each id (``boxes[id - 1]``)."""
    lines, boxes = [], []
    for node in nodes:
        boxes.append(tuple(node["box"]))
        ident = len(boxes)
        parts = ["  " * node["depth"] + f"[{ident}] {node['role']}"]
        if node["name"]:
            parts.append(json.dumps(node["name"], ensure_ascii=False))
        parts += node["states"]
        x, y, w, h = node["box"]
        parts.append(f"@({x},{y} {w}x{h})")
        line = " ".join(parts)
        text = node.get("text")
        if text and text != node["name"]:
            shown = text if len(text) <= max_text else text[:max_text] + "..."
            line += " = " + json.dumps(shown, ensure_ascii=False)
        lines.append(line)
    return "\n".join(lines), boxes


def set_of_marks(png: bytes, boxes: list[Element]) -> str:
    """``png`` with each element's box outlined and numbered, as a ``data:image/png`` URI."""
    from PIL import Image, ImageDraw

    image = Image.open(io.BytesIO(png)).convert("RGB")
    draw = ImageDraw.Draw(image)
    for ident, (x, y, w, h) in enumerate(boxes, start=1):
        if w <= 0 or h <= 0:
            continue
        draw.rectangle((x, y, x + w - 1, y + h - 1), outline=(230, 30, 30))
        label = str(ident)
        draw.rectangle((x, y, x + 7 * len(label) + 3, y + 11), fill=(230, 30, 30))
        draw.text((x + 2, y), label, fill=(255, 255, 255))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return data_uri(out.getvalue())


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")
