"""The generation endpoints: validate, tokenize, plan, hand to the engine, answer.

A streamed response's headers go out through aiohttp; its chunks are then written by the
engine loop straight to the transport (TransportSink) and aiohttp ends the body.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import secrets
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from tokenizers import Tokenizer

from loadgen.sim.answers import load_answers, scripted_tokens
from loadgen.sim.config import SimConfig
from loadgen.sim.detok import BOS_ID, TokenTable
from loadgen.sim.dp import Engines
from loadgen.sim.faults import NO_FAULTS, draw_faults
from loadgen.sim.logprobs import MAX_LOGPROBS, LogprobsBuilder
from loadgen.sim.pd import PdEngines
from loadgen.sim.plan import PlanParams, RequestPlan, make_plan, script
from loadgen.sim.prefix_cache import block_hashes
from loadgen.sim.request import EngineRequest, TransportSink
from loadgen.sim.request_metrics import metrics_dict, with_nulls
from loadgen.sim.thinking import reasoning_field, request_effort
from loadgen.sim.validate import (
    ApiError,
    Generation,
    bad_request,
    chat_template_args,
    check_lengths,
    check_model,
    check_rejected,
    check_token_ids,
    parse_generation,
    parse_json,
)
from loadgen.sim.wire import Outcome, StreamFormat, chat_body, completion_body, error_body

# As vLLM 0.32 sends them: no Cache-Control.
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8"}
# Prompts longer than this are tokenized off the event loop (it would delay chunk sends).
INLINE_TOKENIZE_CHARS = 4096
MERGE_SEED_SALT = 0x6D657267  # keeps merge draws apart from the plan's streams


def json_response(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


def error_response(error: ApiError) -> web.Response:
    return json_response(error.body, error.status)


class Tokenization:
    """Prompt text/messages -> token ids with the server's tokenizer."""

    def __init__(self, tokenizer: Tokenizer, add_bos: bool) -> None:
        self.tokenizer = tokenizer
        self.add_bos = add_bos
        self.vocab_size = tokenizer.get_vocab_size()

    async def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        if len(text) > INLINE_TOKENIZE_CHARS:
            # encode_batch releases the GIL; encode would hold it.
            batch = await asyncio.to_thread(
                self.tokenizer.encode_batch, [text], add_special_tokens=False
            )
            ids = list(batch[0].ids)
        else:
            ids = list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        return [BOS_ID, *ids] if add_special_tokens and self.add_bos else ids

    async def chat_prompt(self, body: dict[str, Any], add_special_tokens: bool) -> list[int]:
        from encoders.deepseek_v4 import EncodingError, encode_messages

        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise bad_request("messages must be a non-empty list", "messages", type(messages))
        thinking_mode, effort = chat_template_args(body)
        try:
            text = encode_messages(messages, thinking_mode, reasoning_effort=effort)
        except EncodingError as exc:
            raise bad_request(str(exc)) from None
        return await self.encode(text, add_special_tokens)

    async def prompt_ids(self, gen: Generation, body: dict[str, Any]) -> list[int]:
        if gen.chat:
            return await self.chat_prompt(body, gen.add_special_tokens)
        if gen.prompt_ids is not None:
            check_token_ids(gen.prompt_ids, self.vocab_size)
            return gen.prompt_ids
        assert gen.prompt_text is not None
        return await self.encode(gen.prompt_text, gen.add_special_tokens)


class GenerationHandlers:
    def __init__(
        self,
        config: SimConfig,
        tokenization: Tokenization,
        table: TokenTable,
        engine: Engines | PdEngines,
        fingerprint: str,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.config = config
        self.tokenization = tokenization
        self.table = table
        self.engine = engine
        self.fingerprint = fingerprint
        self.clock = clock
        self._indices = itertools.count()
        # Alternative tokens for top_logprobs: a fixed slice of the generated vocabulary.
        self._alternatives = tuple(unit.texts[0] for unit in table.clean[: 4 * MAX_LOGPROBS])
        self.answers = (
            None
            if config.answers is None
            else load_answers(config.answers, config.answer_rate, config.seed)
        )

    def _logprobs(self, gen: Generation) -> LogprobsBuilder | None:
        if gen.logprobs is None:
            return None
        return LogprobsBuilder(chat=gen.chat, top=gen.logprobs, alternatives=self._alternatives)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    def _plan(
        self, gen: Generation, index: int, max_tokens: int, effort: str | None = None
    ) -> RequestPlan:
        c = self.config
        params = PlanParams(
            reasoning_mean=None if effort is None else dict(c.reasoning_lengths).get(effort),
            reasoning_acceptance=c.reasoning_acceptance,
            max_tokens=max_tokens,
            min_tokens=gen.min_tokens,
            ignore_eos=gen.ignore_eos,
            eos_prob=c.eos_prob,
            spec_tokens=c.spec_tokens,
            acceptance=c.acceptance,
            fragment_fraction=c.byte_fragment_fraction,
            lossy_spec=c.faults.lossy_spec,
        )
        return make_plan(self.table, self._seed(gen, index), params)

    def _seed(self, gen: Generation, index: int) -> int:
        seed = gen.seed if gen.seed is not None else self.config.seed + index
        # numpy seeds must be non-negative; a negative request seed is still a valid seed.
        return seed % 2**64

    def _merge_draw(self, gen: Generation, index: int) -> Callable[[], float] | None:
        """--merge-steps-prob: a per-request stream, so merging ignores batching and timing."""
        if self.config.merge_steps_prob <= 0 or not gen.stream:
            return None
        return random.Random(self._seed(gen, index) ^ MERGE_SEED_SALT).random

    def _block_hashes(self, prompt_ids: list[int]) -> list[int] | None:
        if not self.config.enable_prefix_caching:
            return None
        return block_hashes(prompt_ids, self.config.block_size)

    def _answer(self, plan: RequestPlan, body: dict[str, Any], chat: bool, max_tokens: int) -> None:
        """--answers: a GSM8K question of the oracle's file gets its scripted reply."""
        assert self.answers is not None
        reply = self.answers.reply(body, chat)
        if reply is None:
            return
        tokenizer = self.tokenization.tokenizer

        def encode(text: str) -> tuple[list[int], list[tuple[int, int]]]:
            encoding = tokenizer.encode(text, add_special_tokens=False)
            return list(encoding.ids), list(encoding.offsets)

        script(plan, *scripted_tokens(reply, encode), self.table.eos_id, max_tokens)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        arrival = self.clock()
        try:
            body = parse_json(await request.read())
            check_model(body, self.config.model)
            check_rejected(body, self.config.reject_params)
            gen = parse_generation(body, chat=chat)
            prompt_ids = await self.tokenization.prompt_ids(gen, body)
            max_tokens = check_lengths(gen, len(prompt_ids), self.config.max_model_len)
        except ApiError as exc:
            return error_response(exc)
        faults_config = self.config.faults
        if (
            faults_config.max_waiting is not None
            and len(self.engine.waiting) >= faults_config.max_waiting
        ):
            return json_response(
                error_body(
                    f"The server is overloaded: {len(self.engine.waiting)} requests are waiting "
                    f"(limit {faults_config.max_waiting}). Retry later.",
                    "ServiceUnavailableError",
                    None,
                    503,
                ),
                503,
            )
        index = next(self._indices)
        plan = self._plan(gen, index, max_tokens, request_effort(body, chat, gen.prompt_text))
        if self.answers is not None:
            self._answer(plan, body, chat, max_tokens)
        faults = draw_faults(faults_config, self.config.seed, index, plan.num_tokens, gen.stream)
        if faults.error_500:
            return json_response(
                error_body(
                    "Simulated internal server error (fault injection)",
                    "InternalServerError",
                    None,
                    500,
                ),
                500,
            )
        engine_request = EngineRequest(
            index=index,
            x_request_id=request.headers.get("X-Request-Id"),
            prompt_len=len(prompt_ids),
            max_tokens=max_tokens,
            plan=plan,
            arrival_ns=arrival,
            done=asyncio.get_running_loop().create_future(),
            faults=faults,
            has_faults=faults != NO_FAULTS,
            merge_draw=self._merge_draw(gen, index),
            block_hashes=self._block_hashes(prompt_ids),
            spec_details=self.config.engine == "sglang"
            and body.get("return_spec_tokens_details") is True,
        )
        request_id = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(8)
        created = int(time.time())
        if gen.stream:
            return await self._stream(request, engine_request, gen, prompt_ids, request_id, created)
        return await self._complete(engine_request, gen, prompt_ids, request_id, created)

    async def _complete(
        self,
        engine_request: EngineRequest,
        gen: Generation,
        prompt_ids: list[int],
        request_id: str,
        created: int,
    ) -> web.Response:
        """A non-streamed request: run it, then answer with the whole body."""
        reason = await self._run(engine_request)
        if reason == "abort":
            return json_response(
                error_body(
                    "The request was aborted by the server.", "InternalServerError", None, 500
                ),
                500,
            )
        plan = engine_request.plan
        emitted = engine_request.emitted
        plan.ensure_tokens(emitted)
        token_ids, texts = plan.token_ids[:emitted], plan.texts[:emitted]
        builder = self._logprobs(gen)
        outcome = Outcome(
            request_id=request_id,
            created=created,
            model=self.config.model,
            fingerprint=self.fingerprint,
            prompt_ids=prompt_ids,
            token_ids=token_ids,
            text="".join(texts),
            finish_reason=reason,
            return_token_ids=gen.options.return_token_ids,
            logprobs=builder.chunk_object(token_ids, texts) if builder else None,
            cached_tokens=(
                engine_request.cached_tokens if self.config.enable_prompt_tokens_details else None
            ),
            metrics=with_nulls(
                metrics_dict(
                    engine_request,
                    emitted,
                    timings=self.config.enable_per_request_metrics,
                    spec_tokens=self.config.spec_tokens,
                )
            ),
        )
        return json_response(chat_body(outcome) if gen.chat else completion_body(outcome))

    async def _run(self, engine_request: EngineRequest) -> str:
        self.engine.accounting.admitted(engine_request.max_tokens)
        self.engine.submit(engine_request)
        try:
            return await engine_request.done
        except asyncio.CancelledError:
            self.engine.cancel(engine_request)
            raise

    async def _stream(
        self,
        request: web.Request,
        engine_request: EngineRequest,
        gen: Generation,
        prompt_ids: list[int],
        request_id: str,
        created: int,
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers=SSE_HEADERS)
        response.enable_chunked_encoding()
        try:
            await response.prepare(request)
        except ConnectionError:  # the client left before the headers went out
            return response
        transport = request.transport
        if transport is None or transport.is_closing():
            return response
        engine_request.fmt = StreamFormat(
            chat=gen.chat,
            request_id=request_id,
            created=created,
            model=self.config.model,
            prompt_ids=prompt_ids,
            opts=gen.options,
            fingerprint=self.fingerprint,
            logprobs=self._logprobs(gen),
            reasoning_field=reasoning_field(self.config.engine)
            if gen.chat and self.config.reasoning_parser and engine_request.plan.thinking
            else None,
        )
        engine_request.sink = TransportSink(transport)
        reason = await self._run(engine_request)
        if reason != "abort" and not transport.is_closing():
            await response.write_eof()
        return response
