"""Which request fields an HTTP 400 refuses by name (pure).

A server that does not know a field loadgen sends beyond the OpenAI schema says so in
its own words; only these forms count as a refusal by name (a 400 about a field's value,
such as vLLM's "max_tokens must be at least 1 ... (parameter=max_tokens, value=-3)",
refuses nothing):

- Dynamo 1.4.2's frontend: `Validation: Unsupported parameter(s): `a`, `b`` (captured
  from the real frontend: tests/fixtures/dynamo_1.4.2/);
- OpenAI's API (and `loadgen sim --reject-params`): `Unrecognized request argument(s)
  supplied: a, b`;
- pydantic with extra="forbid", as a vLLM or SGLang request model so configured answers
  (vLLM's error shape, tests/fixtures/vllm_0.32_cpu/error_bad_json.txt):
  `{'type': 'extra_forbidden', 'loc': ('body', 'a'), 'msg': 'Extra inputs are not
  permitted', ...}`, one entry per field, `loc` also as 'body.a'.

A name is a field's last dotted part (`stream_options.continuous_usage_stats`).
"""

from __future__ import annotations

import re

_LISTED = (
    re.compile(r"Unsupported parameters?(?:\(s\))?\s*:\s*(?P<names>[^\"}\n]+)", re.IGNORECASE),
    re.compile(
        r"Unrecognized request arguments?(?:\(s\))? supplied\s*:\s*(?P<names>[^\"}\n]+)",
        re.IGNORECASE,
    ),
)
# One pydantic error entry: its type first, then its loc (a tuple, or a dotted string).
_PYDANTIC = re.compile(
    r"'type':\s*'extra_forbidden',\s*'loc':\s*(?P<loc>\([^)]*\)|'[^']*')", re.IGNORECASE
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def refused_fields(detail: str) -> frozenset[str]:
    """The field names a 400's body (or a record's error detail holding it) refuses as
    unknown; empty when it refuses none by name."""
    names: set[str] = set()
    for pattern in _LISTED:
        for match in pattern.finditer(detail):
            names.update(_NAME.findall(match["names"]))
    for match in _PYDANTIC.finditer(detail):
        parts = _NAME.findall(match["loc"])
        if parts and parts[-1] != "body":
            names.add(parts[-1])
    return frozenset(name.rsplit(".", 1)[-1] for name in names)
