"""Request bodies: the extensions a server refused by name are left out, and nothing
else changes (a vLLM server, which refuses none, gets the bodies it always got)."""

from __future__ import annotations

import orjson

from loadgen.workload.bodies import EXTENSIONS, BodyOptions

MESSAGES = [{"role": "user", "content": "hi"}]


def body(options: BodyOptions) -> dict[str, object]:
    data: dict[str, object] = orjson.loads(
        options.builder.body(options, text="<bos>hi", messages=MESSAGES, max_tokens=4, seed=3)
    )
    return data


def test_the_bodies_vllm_gets_are_unchanged() -> None:
    """The wire order and fields of loadgen's bodies before refusals were negotiated."""
    completions = body(BodyOptions(endpoint="completions", model="m"))
    assert list(completions) == [
        "model",
        "prompt",
        "stream",
        "stream_options",
        "max_tokens",
        "temperature",
        "seed",
        "ignore_eos",
        "add_special_tokens",
        "return_token_ids",
    ]
    assert completions["add_special_tokens"] is False and completions["ignore_eos"] is True
    chat = body(BodyOptions(endpoint="chat", model="m"))
    assert list(chat) == [
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "temperature",
        "seed",
        "ignore_eos",
        "chat_template_kwargs",
        "return_token_ids",
    ]


def test_refused_extensions_are_left_out() -> None:
    base = BodyOptions(endpoint="completions", model="m", extra_body={"sglang_field": True})
    options = base.without({"add_special_tokens", "return_token_ids", "sglang_field"})
    sent = body(options)
    assert "add_special_tokens" not in sent and "return_token_ids" not in sent
    assert "sglang_field" not in sent and sent["ignore_eos"] is True
    assert sent["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert options.omit == ("add_special_tokens", "sglang_field")
    assert not options.sends("return_token_ids") and options.sends("continuous_usage_stats")
    chat = body(
        BodyOptions(endpoint="chat", model="m").without({"chat_template_kwargs", "ignore_eos"})
    )
    assert "chat_template_kwargs" not in chat and "ignore_eos" not in chat
    no_usage = body(base.without({"continuous_usage_stats"}))
    assert no_usage["stream_options"] == {"include_usage": True}


def test_every_extension_says_what_a_run_loses_without_it() -> None:
    assert all(len(lost) > 20 for lost in EXTENSIONS.values())
