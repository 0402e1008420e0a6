"""Tables that stay readable at 80 columns (a terminal's default, and what piped output gets):
numbers never wrap, headers are short with units in the caption, text columns fold; and sizes
printed with a unit that fits."""
from __future__ import annotations

from rich import box
from rich.table import Table


def table(title: str | None = None, caption: str | None = None, **kw) -> Table:
    """A table with light borders (two columns of padding between cells, no rules)."""
    return Table(title=title, caption=caption, box=box.SIMPLE_HEAD, **kw)


def num(t: Table, header: str, **kw) -> None:
    """A numeric column: right-aligned, never wrapped (a number split across lines reads as
    two numbers)."""
    t.add_column(header, justify="right", no_wrap=True, **kw)


def text(t: Table, header: str, **kw) -> None:
    """A text column that folds long values (names, paths) rather than truncating them."""
    t.add_column(header, overflow="fold", **kw)


def size(n: int | None) -> str:
    """Bytes with the largest binary unit that keeps the number >= 1: 4 KiB, 1.5 GiB, 0 B."""
    if n is None:
        return "-"
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if abs(n) >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B"
