"""OpenDocument spreadsheets (``.ods``), as little as the GUI tasks need: write a one-sheet file
that LibreOffice opens, and read back the cells of a file LibreOffice saved (values, text and
formulas), honouring its repeated rows and columns.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass
from xml.etree import ElementTree
from xml.sax.saxutils import escape

__all__ = ["Cell", "cell_name", "read_ods", "sum_range", "write_ods"]

NS = {
    "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
    "table": "urn:oasis:names:tc:opendocument:xmlns:table:1.0",
    "text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
}
MIMETYPE = "application/vnd.oasis.opendocument.spreadsheet"
#: Repeated rows/columns past this are empty padding (LibreOffice writes 1,048,576 rows).
MAX_EXPAND = 1000


@dataclass(frozen=True)
class Cell:
    """A non-empty cell: its displayed ``text``, numeric ``value`` (None for text) and
    ``formula`` (LibreOffice's ``of:=SUM([.B2:.B6])`` form, None when typed in)."""

    text: str
    value: float | None = None
    formula: str | None = None


def cell_name(row: int, col: int) -> str:
    """``cell_name(0, 1) == "B1"`` (zero-based row and column)."""
    letters = ""
    col += 1
    while col:
        col, rest = divmod(col - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return f"{letters}{row + 1}"


def write_ods(rows: list[list[str | float | int | None]], sheet: str = "Sheet1") -> bytes:
    """A one-sheet ``.ods`` with ``rows`` from A1 on (numbers as numbers, None empty)."""
    body = []
    for row in rows:
        cells = []
        for value in row:
            if value is None:
                cells.append("<table:table-cell/>")
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                cells.append(
                    f'<table:table-cell office:value-type="float" office:value="{value}">'
                    f"<text:p>{value}</text:p></table:table-cell>"
                )
            else:
                cells.append(
                    f'<table:table-cell office:value-type="string">'
                    f"<text:p>{escape(str(value))}</text:p></table:table-cell>"
                )
        body.append(f"<table:table-row>{''.join(cells)}</table:table-row>")
    content = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f'<office:document-content xmlns:office="{NS["office"]}" xmlns:table="{NS["table"]}" '
        f'xmlns:text="{NS["text"]}" office:version="1.3"><office:body><office:spreadsheet>'
        f'<table:table table:name="{escape(sheet)}">{"".join(body)}</table:table>'
        "</office:spreadsheet></office:body></office:document-content>"
    )
    manifest = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" '
        'manifest:version="1.3">'
        f'<manifest:file-entry manifest:full-path="/" manifest:media-type="{MIMETYPE}"/>'
        '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
        "</manifest:manifest>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), MIMETYPE)  # first and stored, per ODF
        archive.writestr("META-INF/manifest.xml", manifest, zipfile.ZIP_DEFLATED)
        archive.writestr("content.xml", content, zipfile.ZIP_DEFLATED)
    return buffer.getvalue()


def read_ods(data: bytes, sheet: int = 0) -> dict[str, Cell]:
    """The non-empty cells of sheet number ``sheet``, by name (``"B7"``). Raises ValueError
    when ``data`` is not an ODF spreadsheet."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            root = ElementTree.fromstring(archive.read("content.xml"))
    except (zipfile.BadZipFile, KeyError, ElementTree.ParseError) as exc:
        raise ValueError(f"not an OpenDocument spreadsheet: {exc}") from exc
    tables = root.findall(".//table:table", NS)
    if sheet >= len(tables):
        raise ValueError(f"the spreadsheet has {len(tables)} sheet(s), not {sheet + 1}")
    cells: dict[str, Cell] = {}
    row_index = 0
    for row in tables[sheet].iter(f"{{{NS['table']}}}table-row"):
        row_repeat = min(int(row.get(_q("table", "number-rows-repeated"), "1")), MAX_EXPAND)
        col_index = 0
        for cell in row:
            if cell.tag not in (_q("table", "table-cell"), _q("table", "covered-table-cell")):
                continue
            col_repeat = min(int(cell.get(_q("table", "number-columns-repeated"), "1")), MAX_EXPAND)
            parsed = _cell(cell)
            if parsed is not None:
                for r in range(row_repeat):
                    for c in range(col_repeat):
                        cells[cell_name(row_index + r, col_index + c)] = parsed
            col_index += col_repeat
        row_index += row_repeat
    return cells


def _cell(element: ElementTree.Element) -> Cell | None:
    text = "\n".join("".join(p.itertext()) for p in element.findall("text:p", NS))
    raw = element.get(_q("office", "value"))
    formula = element.get(_q("table", "formula"))
    if not text and raw is None and formula is None:
        return None
    return Cell(text=text, value=float(raw) if raw is not None else None, formula=formula)


def _q(prefix: str, name: str) -> str:
    return f"{{{NS[prefix]}}}{name}"


_REF = r"\[?\.?\$?([A-Z]+)\$?(\d+)\]?"
_SUM = re.compile(rf"(?:of:)?=\s*SUM\(\s*{_REF}\s*:\s*{_REF}\s*\)", re.IGNORECASE)


def sum_range(formula: str | None) -> tuple[str, str] | None:
    """The range of ``formula`` when it is a ``SUM`` of one range and nothing else
    (``of:=SUM([.B2:.$B$6])`` gives ``("B2", "B6")``), or None."""
    match = _SUM.fullmatch((formula or "").strip())
    if match is None:
        return None
    col1, row1, col2, row2 = match.groups()
    return f"{col1.upper()}{row1}", f"{col2.upper()}{row2}"
