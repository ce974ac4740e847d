"""Documents built to exhaust a parser: shared by the sweep-file and the sidecar tests."""

from __future__ import annotations


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
