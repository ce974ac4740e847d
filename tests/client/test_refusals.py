"""A 400 refuses a field by name only in the words servers use for an unknown field; a
400 about a field's value (vLLM's style) refuses nothing."""

from __future__ import annotations

import pytest

from loadgen.client.refusals import refused_fields
from tests.support.paths import FIXTURES


def test_dynamo_names_each_unsupported_parameter() -> None:
    """The real Dynamo 1.4.2 frontend's answer to loadgen's default completions body."""
    body = (FIXTURES / "dynamo_1.4.2" / "completions_400.txt").read_text()
    assert body.splitlines()[-1] == "HTTP 400"
    assert refused_fields(body) == {"add_special_tokens", "return_token_ids"}


@pytest.mark.parametrize(
    ("detail", "names"),
    [
        # OpenAI's words (and loadgen sim --reject-params'), in a record's error detail
        (
            'http: HTTP 400: {"error":{"message":"Unrecognized request argument supplied: '
            'return_token_ids","type":"invalid_request_error","param":null}}',
            {"return_token_ids"},
        ),
        ('{"message":"Unrecognized request arguments supplied: a, b_c"}', {"a", "b_c"}),
        # pydantic extra="forbid", in vLLM's error shape: loc as a tuple or a dotted string
        (
            '{"error":{"message":"1 validation error:\\n  {\'type\': \'extra_forbidden\', '
            "'loc': ('body', 'add_special_tokens'), 'msg': 'Extra inputs are not permitted', "
            '\'input\': False}","type":"Bad Request","param":"body.add_special_tokens"}}',
            {"add_special_tokens"},
        ),
        (
            "[{'type': 'extra_forbidden', 'loc': 'body.stream_options.continuous_usage_stats'}]",
            {"continuous_usage_stats"},
        ),
    ],
)
def test_other_servers_words_for_an_unknown_field(detail: str, names: set[str]) -> None:
    assert refused_fields(detail) == names


@pytest.mark.parametrize(
    "capture", ["error_bad_max_tokens.txt", "error_too_long.txt", "error_bad_json.txt"]
)
def test_vllm_value_errors_refuse_no_field(capture: str) -> None:
    """vLLM 0.32's real 400s name a parameter (param, "parameter=max_tokens") for its
    value: that is no refusal of the field, and nothing may be dropped for it."""
    body = (FIXTURES / "vllm_0.32_cpu" / capture).read_text()
    assert "HTTP 400" in body
    assert refused_fields(body) == frozenset()
