"""RunSpec -> the session trees of a point (synthetic, dataset conversations or traces).

Trace and dataset files are read once per run; synthetic sessions are drawn per point
from the point's own seeded stream, like single-turn prompts (plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Tokenizer

from loadgen.config.dist import parse_dist
from loadgen.config.spec import RunSpec, SpecError
from loadgen.workload.plan import point_rng, sample_lengths
from loadgen.workload.prompts import user_template, word_pool
from loadgen.workload.session_render import RenderSettings
from loadgen.workload.sessions import (
    SessionTree,
    SyntheticSessions,
    conversation_tree,
    synthetic_trees,
)
from loadgen.workload.traces import (
    WEKA_BLOCK_SIZE,
    load_conversations,
    load_mooncake,
    load_weka,
)

SESSIONS = 4  # rng stream id for synthetic sessions
WEKA_START_RATIO = (0.25, 0.75)


@dataclass(frozen=True, slots=True)
class SessionSource:
    spec: RunSpec
    tokenizer: Tokenizer
    loaded: tuple[SessionTree, ...]  # from the dataset (empty for synthetic sessions)

    @property
    def block_size(self) -> int:
        return self.loaded[0].block_size if self.loaded else WEKA_BLOCK_SIZE

    @property
    def start_ratio(self) -> tuple[float, float] | None:
        if self.spec.session.start_ratio is not None:
            return self.spec.session.start_ratio if self.spec.session.start_ratio[1] > 0 else None
        return WEKA_START_RATIO if self.spec.workload.dataset_format == "weka" else None

    def settings(self) -> RenderSettings:
        spec = self.spec
        return RenderSettings(
            spec.workload.encoder,
            spec.workload.thinking,
            spec.workload.reasoning_effort,
            spec.session.session_headers,
            spec.session.cache_bust,
            spec.session.live_history,
        )

    def trees(self, conc: int) -> list[SessionTree]:
        if self.loaded:
            return list(self.loaded)
        spec = self.spec
        assert spec.session.turns is not None
        assert (
            spec.workload.isl is not None and spec.workload.osl is not None
        )  # RunSpec: no dataset, both given
        template = user_template(
            encoder=spec.workload.encoder,
            thinking_mode=spec.workload.thinking,
            reasoning_effort=spec.workload.reasoning_effort,
            tokenizer=self.tokenizer,
        )
        if spec.workload.isl <= template.tokens:
            raise SpecError(
                f"--isl {spec.workload.isl}: the first turn needs more than the "
                f"{template.tokens} template tokens"
            )
        pool = word_pool(self.tokenizer)
        osl = spec.workload.osl
        shape = SyntheticSessions(
            turns=parse_dist(spec.session.turns, what="--turns"),
            first_tokens=spec.workload.isl - template.tokens,
            turn_tokens=parse_dist(spec.session.turn_tokens, what="--turn-tokens"),
            output_tokens=parse_dist(
                f"{max(1, int(osl * spec.workload.range_ratio))}..{osl}",
                what="--osl",
            ),
            think_time_s=parse_dist(spec.session.think_time, what="--think-time", integer=False),
        )

        def words(count: int, rng: object) -> str:
            draw = rng.integers(0, len(pool.later), count)  # type: ignore[attr-defined]
            return "".join(pool.later[draw].tolist())

        return synthetic_trees(
            shape, conc * spec.session.sessions_per_conc, point_rng(spec, conc, SESSIONS), words
        )


def session_source(spec: RunSpec, tokenizer: Tokenizer) -> SessionSource:
    """Reads the dataset (traces or conversations) once; raises SpecError for bad files."""
    if spec.workload.dataset is None:
        return SessionSource(spec, tokenizer, ())
    fmt = spec.workload.dataset_format
    if fmt == "weka":
        trees = load_weka(spec.workload.dataset)
    elif fmt == "mooncake":
        trees = load_mooncake(spec.workload.dataset)
    else:
        conversations = load_conversations(spec.workload.dataset, fmt)
        rng = point_rng(spec, 0, SESSIONS)
        assert spec.workload.osl is not None  # RunSpec: --multi-turn needs --osl
        trees = []
        for number, messages in enumerate(conversations):
            lengths = sample_lengths(rng, 8, spec.workload.osl, spec.workload.range_ratio)
            tree = conversation_tree(f"c{number:06d}", messages, lengths)
            if tree is not None:
                trees.append(tree)
        if not trees:
            raise SpecError(f"--dataset {spec.workload.dataset}: no conversation has a user turn")
    sizes = {tree.block_size for tree in trees}
    if len(sizes) > 1:
        raise SpecError(
            f"--dataset {spec.workload.dataset}: traces disagree on block_size "
            f"({sorted(sizes)}); replay one block size at a time"
        )
    return SessionSource(spec, tokenizer, tuple(trees))
