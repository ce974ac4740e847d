"""Documents built to exhaust a parser or a reader: shared by the sweep-file, client and
sidecar tests."""

from __future__ import annotations

import struct
import zlib


def laughs(levels: int) -> str:
    """A "billion laughs" sweep document: 9**levels strings from a few hundred bytes
    (levels=9: 503 bytes; before the loader's bounds, levels=7 took 4.9 s and 608 MiB)."""
    lines = [
        "conc: 1",
        "isl: 8",
        "osl: 8",
        "extra-body:",
        '  a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    ]
    lines += [f"  a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join([*lines, "lanes: [{name: x, sim: true}]"]) + "\n"


def gzip_bomb(inflated: int) -> bytes:
    """A valid gzip member that inflates to `inflated` bytes of zeros (a multiple of
    1 MiB, at least 2), built in milliseconds: after a full flush the deflate state is
    reset, so each further MiB compresses to the same ~1 KB block, written again.
    (64 MiB: 66 KB; 512 MiB: 0.5 MB; the issue's 10 MB answer: about 10 GB.)"""
    block = b"\0" * (1 << 20)
    count = max(2, inflated >> 20)
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    again = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    end = deflate.flush()
    crc = 0
    for _ in range(count):
        crc = zlib.crc32(block, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    size = (count << 20) & 0xFFFFFFFF
    return header + first + again * (count - 1) + end + struct.pack("<II", crc, size)
