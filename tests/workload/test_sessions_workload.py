"""Trace prompts from hash_ids, the trace/conversation readers and their errors (pure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.config.args import spec_from_argv
from loadgen.config.dataset_format import detect_format
from loadgen.config.spec import SpecError
from loadgen.tokenizer import encode, load_tokenizer
from loadgen.workload.blocks import BlockRenderer, BlockText, TheoreticalCache
from loadgen.workload.prompts import user_template, word_pool
from loadgen.workload.sessions import Session, conversation_tree
from loadgen.workload.traces import load_conversations, load_mooncake, load_weka
from tests.support.paths import TRACES


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


def renderer(tokenizer: Tokenizer, effort: str | None = None) -> BlockRenderer:
    template = user_template(
        encoder="dsv4", thinking_mode="thinking", reasoning_effort=effort, tokenizer=tokenizer
    )
    return BlockRenderer(BlockText(word_pool(tokenizer), 64), template)


@pytest.mark.parametrize(
    ("num_tokens", "effort"),
    [
        (20, None),
        (63, None),
        (64, None),
        (65, None),
        (127, None),
        (128, None),
        (129, None),
        (700, "max"),
        (4097, "high"),
    ],
)
def test_each_request_has_exactly_in_tokens(
    tokenizer: Tokenizer, num_tokens: int, effort: str | None
) -> None:
    blocks = renderer(tokenizer, effort)
    marker = blocks.blocks.marker((1, 2, 3))
    prompt = blocks.render(7, list(range(1, 80)), num_tokens, marker)
    assert len(encode(tokenizer, prompt.text)) == num_tokens == prompt.num_tokens
    assert prompt.text.endswith(prompt.content + blocks.template.suffix)


def test_equal_hash_ids_give_identical_token_blocks(tokenizer: Tokenizer) -> None:
    blocks = renderer(tokenizer)
    marker = blocks.blocks.marker((9,))
    a = encode(tokenizer, blocks.render(1, [5, 6, 7, 8], 250, marker).text)
    b = encode(tokenizer, blocks.render(1, [5, 6, 7, 9, 10], 300, marker).text)
    c = encode(tokenizer, blocks.render(1, [5, 6, 7, 8], 250, blocks.blocks.marker((10,))).text)
    assert a[:192] == b[:192] and a[192:256] != b[192:256]  # blocks 0-2 shared, 3 differs
    assert a[:8] != c[:8]  # another play's marker: nothing shared from the first block on
    other_namespace = encode(tokenizer, blocks.render(2, [5, 6, 7, 8], 250, marker).text)
    assert other_namespace[:64] != a[:64]


def test_theoretical_cache_counts_as_vllm() -> None:
    theory = TheoreticalCache(block_size=64, suffix_tokens=2)
    assert theory.observe(1, [1, 2, 3], 150) == 0
    assert theory.observe(1, [1, 2, 4, 5], 250) == 128  # full blocks 0-1 of the first
    assert theory.observe(1, [1, 2, 4, 5], 256) == 192  # block 3 ends a prompt: not shared
    assert theory.observe(1, [1, 2, 4, 5], 256) == 192  # ... but identical prompts share it
    assert theory.observe(2, [1, 2], 150) == 0  # another namespace


def test_weka_loader_builds_spawns_and_gaps() -> None:
    trees = load_weka(TRACES / "agentic_small.jsonl")
    assert [t.tree_id for t in trees] == ["tiny-agent-1", "tiny-agent-2"]
    first = trees[0]
    assert first.request_count() == 3 + 4 and trees[1].request_count() == 3
    root = first.root
    assert [s.name for s in root.turns[0].spawns] == ["sa0", "sa1"]
    assert [s.name for s in root.turns[0].spawns[0].turns[1].spawns] == ["sa0.sa0"]
    assert root.turns[1].gap_s == pytest.approx(1.5 - 0.0 - 0.5)  # t - (t_prev + api_time)
    assert root.turns[0].spawns[0].turns[0].gap_s == pytest.approx(0.01)  # think_time


def test_weka_directory_and_detection(tmp_path: Path) -> None:
    for number, line in enumerate((TRACES / "agentic_small.jsonl").read_bytes().splitlines()):
        (tmp_path / f"trace_{number}.json").write_bytes(line)
    assert detect_format(tmp_path) == "weka"
    assert [t.tree_id for t in load_weka(tmp_path)] == ["tiny-agent-1", "tiny-agent-2"]
    assert detect_format(TRACES / "mooncake_small.jsonl") == "mooncake"
    moon = load_mooncake(TRACES / "mooncake_small.jsonl")
    assert [t.start_at_s for t in moon] == [0.0, 0.03, 0.06, 0.09]


def test_sharegpt_and_messages_conversations(tmp_path: Path) -> None:
    share = tmp_path / "share.json"
    share.write_bytes(
        orjson.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": "hi"},
                        {"from": "gpt", "value": "hello"},
                        {"from": "human", "value": "more"},
                        {"from": "gpt", "value": "sure"},
                    ]
                }
            ]
        )
    )
    assert detect_format(share) == "sharegpt"
    [messages] = load_conversations(share, "sharegpt")
    tree = conversation_tree("c0", messages, [16])
    assert tree is not None
    assert [t.history_end for t in tree.root.turns] == [1, 3]  # each user turn, no reply


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"requests": [{"type": "s", "in": 0, "out": 3}]}', "`in` must be an integer >= 1"),
        (
            b'{"requests": [{"type": "s", "in": 10, "out": 3, "hash_ids": ["x"]}]}',
            "`hash_ids` must be a list of integers",
        ),
        (b'{"requests": []}', "no trace has a request"),
        (b'{"requests": 5}', "a Weka trace is an object with `requests`"),
        (b"not json", "not JSON"),
    ],
)
def test_bad_traces_are_one_line_usage_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(content)
    with pytest.raises(SpecError, match=message):
        load_weka(path)


def test_session_flags_are_validated() -> None:
    base = ["--sim", "--conc", "2", "--isl", "100", "--osl", "10"]
    with pytest.raises(SpecError, match="--turns 'two'"):
        spec_from_argv([*base, "--turns", "two"])
    with pytest.raises(SpecError, match="--start-ratio"):
        spec_from_argv([*base, "--turns", "2", "--start-ratio", "0.8,0.2"])
    spec = spec_from_argv([*base, "--turns", "2..4", "--session-header", "X-SMG-Routing-Key"])
    assert spec.sessions and spec.deadlines.max_error_rate == 0.10
    assert spec.session.session_headers == ("X-SMG-Routing-Key",)
    assert 75.0 in spec.scoring.percentiles and 95.0 in spec.scoring.percentiles
    trace = spec_from_argv(
        ["--sim", "--conc", "1", "--dataset", str(TRACES / "agentic_small.jsonl")]
    )
    assert trace.workload.dataset_format == "weka" and trace.sessions
    with pytest.raises(SpecError, match="--isl is required"):  # restructure's wording
        spec_from_argv(["--sim", "--conc", "1"])


def test_a_turns_seed_depends_on_the_turn_not_on_render_order(tokenizer: Tokenizer) -> None:
    """Turns become due in an order the server's timing decides; the same --seed must
    still give each turn the same sampling seed in every run."""
    from loadgen.workload.bodies import BodyOptions
    from loadgen.workload.session_render import RenderSettings, SessionRenderer

    trees = load_weka(TRACES / "agentic_small.jsonl")
    settings = RenderSettings("dsv4", "thinking", None, ("X-Session-ID",), cache_bust=True)
    options = BodyOptions(endpoint="completions", model="m")

    def sessions(session: Session) -> list[Session]:
        return [session, *(s for t in session.turns for c in t.spawns for s in sessions(c))]

    turns = [
        (lane, session, number)
        for lane, tree in enumerate(trees[:2])
        for session in sessions(tree.root)
        for number in range(len(session.turns))
    ]
    assert len(turns) > 4

    def seeds(order: list[tuple[int, Any, int]]) -> dict[tuple[int, str, int], int]:
        render = SessionRenderer(settings, tokenizer, options, 64, seed=9)
        plays = {
            lane: render.play(tree, (1234, 4, lane, 0), f"r.{lane}.0")
            for lane, tree in enumerate(trees[:2])
        }
        return {
            (lane, session.name, number): orjson.loads(
                render.render(plays[lane], session, number, 0).body
            )["seed"]
            for lane, session, number in order
        }

    forward, backward = seeds(turns), seeds(turns[::-1])
    assert forward == backward
    assert len(set(forward.values())) == len(forward)  # and every turn has its own


def test_a_subagent_names_its_parent_to_dynamo(tokenizer: Tokenizer) -> None:
    """With the default session headers, every turn carries its session's id in both
    names, and a subagent's also its parent's in X-Dynamo-Parent-Session-ID (the header
    Dynamo 1.4.2 reads beside X-Dynamo-Session-ID); without Dynamo's name, no parent."""
    from loadgen.config.session import SessionSpec
    from loadgen.workload.bodies import BodyOptions
    from loadgen.workload.session_render import RenderSettings, SessionRenderer

    tree = next(
        t
        for t in load_weka(TRACES / "agentic_small.jsonl")
        for turn in t.root.turns
        if any(c.turns and any(g.spawns for g in c.turns) for c in turn.spawns)
    )
    options = BodyOptions(endpoint="completions", model="m")

    def headers(names: tuple[str, ...]) -> dict[str, dict[str, str]]:
        settings = RenderSettings("dsv4", "thinking", None, names, cache_bust=True)
        render = SessionRenderer(settings, tokenizer, options, 64, seed=9)
        play = render.play(tree, (1, 0, 0, 0), "r.0.0")
        found = {}

        def walk(session: Session) -> None:
            found[session.name] = dict(render.render(play, session, 0, 0).headers)
            for turn in session.turns:
                for child in turn.spawns:
                    walk(child)

        walk(tree.root)
        return found

    seen = headers(SessionSpec().session_headers)
    nested = next(name for name in seen if "." in name)
    parent = nested.rpartition(".")[0]
    root = f"r.0.0:{tree.tree_id}"  # the play's tree id
    assert seen[""] == {"X-Session-ID": root, "X-Dynamo-Session-ID": root}
    assert seen[parent]["X-Dynamo-Parent-Session-ID"] == root
    assert seen[nested] == {
        "X-Session-ID": f"{root}::{nested}",
        "X-Dynamo-Session-ID": f"{root}::{nested}",
        "X-Dynamo-Parent-Session-ID": f"{root}::{parent}",
    }
    plain = headers(("X-Session-ID",))
    assert all(list(h) == ["X-Session-ID"] for h in plain.values())
