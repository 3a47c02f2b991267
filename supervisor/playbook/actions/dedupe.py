"""Finding a block of lines that got pasted twice (pure: text in, plan out).

The block is a run of consecutive lines holding the marker that is immediately followed by an
identical copy (lines compared without their line endings). Later copies are removed, smallest
block first, until the number of lines holding the marker is the expected one. If exact
duplicates cannot get it there, nothing is changed: that is a person's call.
"""

from __future__ import annotations

from dataclasses import dataclass


class DedupeError(ValueError):
    """The count cannot be brought to `expected` by removing repeated blocks."""


@dataclass(frozen=True, kw_only=True)
class DedupePlan:
    text: str  #: the file after the removal
    before: int  #: lines holding the marker, before
    after: int  #: and after
    copies: int  #: repeated copies removed
    ranges: tuple[tuple[int, int], ...]  #: removed lines of the original, 1-based, inclusive

    @property
    def lines_removed(self) -> int:
        return sum(last - first + 1 for first, last in self.ranges)


def _repeat(keys: list[str], marker: str, surplus: int) -> tuple[int, int] | None:
    """(start, length) of the smallest block holding the marker (at most `surplus` times)
    that the next `length` lines repeat exactly."""
    found: list[tuple[int, int]] = []
    marked = [i for i, key in enumerate(keys) if marker in key]
    for m in marked:
        for other in marked:
            length = other - m
            if length <= 0 or keys[other] != keys[m]:
                continue
            # the run of positions i (around m) where line i equals line i + length
            first = m
            while first > 0 and keys[first - 1] == keys[first - 1 + length]:
                first -= 1
            last = m
            while last + 1 + length < len(keys) and keys[last + 1] == keys[last + 1 + length]:
                last += 1
            start = max(first, m - length + 1)
            if start + length - 1 <= last:
                count = sum(marker in key for key in keys[start : start + length])
                if count <= surplus:
                    found.append((length, start))
    if not found:
        return None
    length, start = min(found)
    return start, length


def _ranges(indexes: list[int]) -> tuple[tuple[int, int], ...]:
    ranges: list[tuple[int, int]] = []
    for index in sorted(indexes):
        line = index + 1
        if ranges and ranges[-1][1] == line - 1:
            ranges[-1] = (ranges[-1][0], line)
        else:
            ranges.append((line, line))
    return tuple(ranges)


def lines_with(count: int, marker: str) -> str:
    """`1 line with 'x'`, `3 lines with 'x'`."""
    return f"{count} {'line' if count == 1 else 'lines'} with {marker!r}"


def plan_dedupe(text: str, marker: str, expected: int) -> DedupePlan:
    """Remove repeated copies of the marker's block until `expected` lines hold the marker.
    Raises `DedupeError` (a plain sentence) when that cannot be done by exact duplicates."""
    lines = text.splitlines(keepends=True)
    keys = [line.rstrip("\r\n") for line in lines]
    origin = list(range(len(lines)))
    before = count = sum(marker in key for key in keys)
    if before < expected:
        raise DedupeError(f"has {lines_with(before, marker)}, fewer than the expected {expected}")
    removed: list[int] = []
    copies = 0
    while count > expected:
        found = _repeat(keys, marker, count - expected)
        if found is None:
            raise DedupeError(
                f"has {lines_with(before, marker)}: removing repeated blocks "
                f"cannot bring that to {expected}"
            )
        start, length = found
        gone = slice(start + length, start + 2 * length)
        count -= sum(marker in key for key in keys[gone])
        removed.extend(origin[gone])
        del keys[gone], lines[gone], origin[gone]
        copies += 1
    return DedupePlan(
        text="".join(lines), before=before, after=count, copies=copies, ranges=_ranges(removed)
    )
