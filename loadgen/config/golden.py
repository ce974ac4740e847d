"""--golden-al: InferenceX's golden acceptance-length files, and the point's check against them.

The shape is InferenceX's `golden_al_distribution/*.yaml` (e.g. dsv4_mtp.yaml):

    deepseek-v4-pro:
      thinking_on:  {1: 1.79, 2: 2.27, 3: 2.49}
      thinking_off: {...}

model -> thinking mode -> draft length K -> the acceptance length a conforming server
shows on SPEED-Bench's coding prompts. The model key is --golden-al-model (else --model),
the mode follows --thinking (thinking -> thinking_on, chat -> thinking_off), and K is the
point's (--spec-tokens, else the server's counters): a K the file has no entry for is a
failed check at that point, said in the result.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from loadgen.config.parsers import SpecError

DEFAULT_TOLERANCE = 0.03  # relative: |measured - golden| / golden
MAX_FILE_BYTES = 1 << 16  # InferenceX's files are a few hundred bytes
MAX_DEPTH = 8  # nested mappings/lists: model -> mode -> K needs three
MODES = {"thinking": "thinking_on", "chat": "thinking_off"}


@dataclass(frozen=True, slots=True)
class GoldenAL:
    """One model's and mode's golden curve: K -> AL, and the tolerance it is held to."""

    path: Path
    model: str
    mode: str
    curve: tuple[tuple[int, float], ...] = ()  # (K, AL) ascending: JSON-safe in run.json
    tolerance: float = DEFAULT_TOLERANCE

    def al_for(self, k: int | None) -> float | None:
        return dict(self.curve).get(k) if k else None

    @property
    def ks(self) -> str:
        return ", ".join(str(k) for k, _ in self.curve)

    @classmethod
    def from_settings(cls, value: Any) -> GoldenAL | None:
        """From run.json's settings (`loadgen merge`), None when the run had none."""
        if not isinstance(value, dict):
            return None
        return cls(
            Path(value["path"]),
            value["model"],
            value["mode"],
            tuple((int(k), float(al)) for k, al in value["curve"]),
            float(value["tolerance"]),
        )


def read_golden(path: Path, model: str, mode: str, tolerance: float) -> GoldenAL:
    where = f"--golden-al {path}"
    document = _load(path, where)
    # The file's own keys are not echoed: through the sidecar that would show a client
    # what any file it names holds.
    if not isinstance(document, dict) or model not in document:
        raise SpecError(
            f"{where}: no model {model!r} in it; set --golden-al-model to one "
            "of the file's top-level keys"
        )
    modes = document[model]
    if not isinstance(modes, dict) or mode not in modes:
        raise SpecError(
            f"{where}: {model} has no {mode!r} curve (thinking_on is --thinking "
            "thinking, thinking_off is --thinking chat)"
        )
    curve = _curve(modes[mode], f"{where}: {model}.{mode}")
    return GoldenAL(path, model, mode, tuple(sorted(curve.items())), tolerance)


def _load(path: Path, where: str) -> Any:
    """The YAML document, bounded: a regular file of at most 64 KiB, no aliases (nothing
    can expand while it is built). Its K keys are integers, unlike a sweep file's."""
    try:
        if not path.is_file():
            raise SpecError(f"{where}: no such file (or not a regular file)")
        with path.open("rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
        if len(raw) > MAX_FILE_BYTES:
            raise SpecError(f"{where}: over 64 KiB: not a golden AL file")
        text = raw.decode("utf-8")
        _check_events(yaml.parse(text), where)
        return yaml.safe_load(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(
            f"{where}: cannot read it: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{where}: not valid YAML: {str(exc).splitlines()[0]}") from None


def _check_events(events: Iterable[yaml.Event], where: str) -> None:
    """No aliases, and nesting no deeper than the file's three levels need: PyYAML's
    parser walks the events without recursion, its composer then recurses once per level
    (a 20,000-deep document would end in RecursionError)."""
    depth = 0
    for event in events:
        if isinstance(event, yaml.AliasEvent):
            raise SpecError(f"{where}: YAML aliases are not accepted here; write the values")
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise SpecError(
                    f"{where}: nested more than {MAX_DEPTH} levels deep; a golden AL "
                    "file has three (model, mode, K)"
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _curve(value: Any, where: str) -> dict[int, float]:
    if not isinstance(value, dict) or not value:
        raise SpecError(f"{where}: expected a mapping of K to acceptance length")
    curve: dict[int, float] = {}
    for k, al in value.items():
        k_int = int(k) if isinstance(k, int | str) and str(k).isdigit() else None
        if k_int is None or k_int < 1 or isinstance(al, bool) or not isinstance(al, int | float):
            raise SpecError(f"{where}: entry {k!r}: {al!r} is not K (an integer >= 1) -> AL")
        if not 1.0 <= al <= k_int + 1:
            raise SpecError(f"{where}: K={k_int} -> {al}: an AL lies in [1, K+1]")
        curve[k_int] = float(al)
    return curve
