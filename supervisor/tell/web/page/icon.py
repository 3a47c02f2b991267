"""The tab's icon: a filled disc in a tone's colour, drawn as a 32 x 32 PNG (and the same PNG in
an ICO container for `/favicon.ico`), with the standard library only."""

from __future__ import annotations

import struct
import zlib
from functools import cache

SIZE = 32


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


@cache
def png(colour: str) -> bytes:
    """A disc of `colour` (`#rrggbb`) on a transparent square."""
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    centre, radius = (SIZE - 1) / 2, SIZE / 2 - 1
    rows = bytearray()
    for y in range(SIZE):
        rows.append(0)  # no filter
        for x in range(SIZE):
            inside = (x - centre) ** 2 + (y - centre) ** 2 <= radius**2
            rows += bytes((red, green, blue, 255 if inside else 0))
    header = struct.pack(">IIBBBBB", SIZE, SIZE, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(bytes(rows), 9))
        + _chunk(b"IEND", b"")
    )


@cache
def ico(colour: str) -> bytes:
    """The PNG in an ICO file of one image (ICO has held PNGs since Windows Vista)."""
    image = png(colour)
    directory = struct.pack("<HHH", 0, 1, 1)
    entry = struct.pack("<BBBBHHII", SIZE, SIZE, 0, 0, 1, 32, len(image), 6 + 16)
    return directory + entry + image
