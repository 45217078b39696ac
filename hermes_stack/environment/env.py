"""The environment service: an atroposlib BaseEnv that serves gsm8k-shaped math rollouts.

Per item (one question) it samples `group_size` completions from the inference service through atroposlib's
ManagedServer (server_type sglang: token ids and inference logprobs come back from `/generate`), scores each with the
rule reward (reward.py; optionally a judge's second opinion, judge.py) and hands the group to atroposlib, which posts
it to Atropos. Group layout (atroposlib's ScoredDataGroup): tokens = prompt + completion, masks = -100 on the prompt
and the token id on the completion, scores, inference_logprobs aligned with tokens (1.0 on prompt positions).

The prompt asks for the final answer as a last line `#### <number>` (reward.py documents the format). The built-in
offline-arith task shows the bare question (`3+4=`): its tiny model learnt the format in its warm start.

Logs: one line per batch of groups sent (mean score, the environment's own rollout rate: rollout_clock.py,
accuracy, format rate, groups dropped because every score in them was equal, judge failures), the first format failures with their text, and the judge switching off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from atroposlib.envs.base import BaseEnv, ScoredDataGroup

from hermes_stack.environment.pooled_http import PooledAtroposCalls, PooledSGLangServer, StreamFailed
from hermes_stack.environment.rollout_clock import RolloutClock, rollout_rate
from hermes_stack.environment.runtime import CHUNK_ROWS, HermesEnvConfig, build_configs
from hermes_stack.environment.stack_behaviour import StackBehaviour
from hermes_stack.errors import InputError
from hermes_stack.modelcore.weights_layout import POLICY_STEP_KEY
from hermes_stack.service_env import ServiceEnv, load_service_stack
from hermes_stack.tasks.datasets import load_items
from hermes_stack.tasks.prompting import (
    INSTRUCTION,
    fewshot_examples,
    new_token_budget,
    prompt_room,
    rollout_prompt,
    room_line,
)
from hermes_stack.tasks.reward import CORRECT_OVERRIDE, RewardResult, reference_answer, score_remembered

log = logging.getLogger("hermes_stack.environment")

try:  # transformers' fast-tokenizer decode (decode_all takes its shortcut only for exactly this one)
    from transformers.tokenization_utils_tokenizers import TokenizersBackend

    _LIBRARY_DECODE = TokenizersBackend._decode
except (ImportError, AttributeError):  # another transformers layout: row by row
    _LIBRARY_DECODE = None

FORMAT_FAILURES_SHOWN = 3
STREAM_FAILURES_SHOWN = 3
EVAL_ITEMS = 32
DRAWS_PER_WORKER = 8  # GRPO outside the serve loop: prompts tried for a group whose scores differ (collect_trajectories)
# GRPO chunks (chunk_prompts): the newest chunk's weight in the running share of groups kept, and the share's floor (a
# chunk then draws at most 20x what is still needed, within CHUNK_ROWS).
KEEP_RATE_WEIGHT = 0.5
MIN_KEEP_RATE = 0.05


@dataclass
class Totals:
    """Counters over the whole run (and since the last batch line)."""

    groups: int = 0
    sequences: int = 0
    correct: int = 0
    formatted: int = 0
    score_sum: float = 0.0
    dropped_equal_scores: int = 0
    format_failures: int = 0
    judge_overturned: int = 0
    recent: list[float] = field(default_factory=list)  # scores of groups sent since the last batch line
    batches_logged: int = 0
    clock: RolloutClock = field(default_factory=RolloutClock)  # wall time with groups in flight
    logged_sequences: int = 0  # sequences and in-flight seconds at the last batch line
    logged_busy_s: float = 0.0
    # chunks atroposlib cancelled while they sampled (its queue reached the bound meanwhile): their prompts go back to
    # its backlog and their sampling is lost, part of the rollout rate's gap to the server's own (bench/stack_throughput)
    cancelled_chunks: int = 0
    cancelled_prompts: int = 0
    # chunks' wall time awaiting /generate (request, the server's queue and sampling, its answer), summed over chunks
    # (they overlap); the rest of their in-flight time is the environment's own: prompts, decoding, scoring, layout
    generate_s: float = 0.0
    logged_generate_s: float = 0.0
    stream_failures: int = 0  # streamed chunks that failed and were asked again without streaming

    @property
    def accuracy(self) -> float:
        return self.correct / self.sequences if self.sequences else 0.0

    @property
    def format_rate(self) -> float:
        return self.formatted / self.sequences if self.sequences else 0.0

    @property
    def mean_reward(self) -> float:
        return self.score_sum / self.sequences if self.sequences else 0.0

    def as_dict(self) -> dict:
        # Rounded: the summary test-inference writes, where a sum of 1 + 0.1 read 1.0999999999999999.
        return {"groups": self.groups, "sequences": self.sequences, "accuracy": round(self.accuracy, 6),
                "format_rate": round(self.format_rate, 6), "mean_reward": round(self.mean_reward, 6),
                "dropped_equal_score_groups": self.dropped_equal_scores, "format_failures": self.format_failures,
                "judge_overturned": self.judge_overturned, "stream_failures": self.stream_failures}


class HermesMathEnv(StackBehaviour, PooledAtroposCalls, BaseEnv):
    name = "hermes-math"
    env_config_cls = HermesEnvConfig
    server_cls = PooledSGLangServer  # runtime.build_configs always says server_type "sglang"; pooled_http says why

    def __init__(self, config: HermesEnvConfig, server_configs, slurm: bool = False, testing: bool = False,
                 gateway_client=None):
        super().__init__(config, server_configs, slurm=slurm, testing=testing)
        self.config: HermesEnvConfig
        self.totals = Totals()
        self.train_items: list[dict] = []
        self.eval_items: list[dict] = []
        self._next = 0
        self._chunks_in_flight = 0  # rollout chunks: workers sampling now, and their prompts
        self._prompts_in_flight = 0
        self._encoded: dict[str, list[int]] = {}  # prompt text -> token ids (_prompt_ids)
        self._keep_rate = 1.0  # GRPO chunks: running share of groups whose scores differ (chunk_prompts)
        self.gateway_client = gateway_client  # test-inference online: rollouts from the gateway model
        self.judge = None

    @property
    def tags_policy_step(self) -> bool:
        # Inference rollouts are tagged in _collect_many / _collect_from_inference; gateway ones by the mixin.
        return self.config.rollout_source == "inference"

    # ------------------------------------------------------------ atroposlib hooks

    @classmethod
    def config_init(cls):
        """From the container's environment (HERMES_ALGO, HERMES_CONFIG_DIR, HERMES_PROFILE, URLs): `cli()` works."""
        env_config, server_config = build_configs(load_service_stack(ServiceEnv.from_environ()))
        return env_config, [server_config]

    async def setup(self) -> None:
        cfg = self.config
        common = {"seed": cfg.seed, "offline": not cfg.hub_access, "base_dir": Path(cfg.config_dir),
                  "config_file": cfg.config_file}
        self.train_items = load_items(cfg.dataset, cfg.split, cfg.max_samples, **common)
        other = "test" if cfg.split == "train" else "train"
        self.eval_items = load_items(cfg.dataset, other, EVAL_ITEMS, **common)
        self.examples = fewshot_examples(cfg.dataset, cfg.fewshot, offline=not cfg.hub_access, base_dir=Path(cfg.config_dir),
                                         config_file=cfg.config_file)
        self._check_prompt_room()
        if cfg.judge:
            self.judge = make_judge(cfg)
        log.info("dataset %s split %s: %d prompts (eval: %d from %s); group_size %d, %d prompts per batch; "
                 "equal-score groups %s; judge %s; rollouts from %s",
                 cfg.dataset, cfg.split, len(self.train_items), len(self.eval_items), other, cfg.group_size,
                 cfg.prompts_per_batch, "dropped and counted" if cfg.ensure_scores_are_not_same else "kept",
                 "on" if self.judge else "off", cfg.rollout_source)

    def _check_prompt_room(self) -> None:
        """Refuse (exit 2) a rollout.max_token_length that leaves a prompt of the split too little room to answer,
        before any rollout: the dataset and the tokenizer are both here, gsm8k from the hub included. The prompts
        are encoded once and cached for the run (_prompt_ids). Not for gateway rollouts: the gateway model gets
        the bare question (_collect_from_gateway), and its completion is not bounded by this budget."""
        cfg = self.config
        if cfg.rollout_source == "gateway":
            return
        room = prompt_room((len(self._prompt_ids(self.prompt_text(item["question"]))) for item in self.train_items),
                           cfg.max_token_length)
        what = f"{cfg.split} prompts"
        longest = self.train_items[room.longest_at]["question"] if self.train_items else ""
        problem = room.problem(cfg.config_file, what, cfg.dataset, cfg.fewshot, cfg.system_prompt, longest)
        if problem is not None:
            raise InputError(problem)
        log.info("prompts: %s", room_line([(what, room)]))

    async def get_next_item(self) -> dict:
        item = self.train_items[self._next % len(self.train_items)]
        self._next += 1
        return item

    async def collect_trajectories(self, item: dict) -> tuple[ScoredDataGroup | list[ScoredDataGroup] | None, list]:
        """In atroposlib's serve loop, a chunk of groups sampled in one request (_collect_chunk). Otherwise (process
        mode, gateway rollouts) one group for `item`; for GRPO a group whose scores all agree is dropped and counted
        here and the worker draws the next prompt, up to DRAWS_PER_WORKER rounds. A group that still agrees after
        the last draw goes to atroposlib, which drops it."""
        if self._chunked():
            return await self._collect_chunk(item), []
        if not self.config.ensure_scores_are_not_same:
            return await self._collect_group(item), []
        group = None
        for draw in range(DRAWS_PER_WORKER):
            if draw:
                item = await self.get_next_item()
            group = await self._collect_group(item)
            if group is None:
                continue
            if not scores_all_equal(group) or draw == DRAWS_PER_WORKER - 1:
                return group, []
            self._count_dropped(group)
        return group, []

    def _chunked(self) -> bool:
        """In atroposlib's serve loop with the inference service's rollouts, a worker samples a chunk of prompts in
        one batched /generate (group_size rows each) and returns their groups as one list (one post to Atropos).
        Not in process mode, not for gateway rollouts, not when the server cannot take a batch (only
        PooledSGLangServer has generate_many)."""
        servers = getattr(getattr(self, "server", None), "servers", ())
        return (self.config.rollout_source == "inference"
                and bool(getattr(self, "workers", ())) and not getattr(self, "process_mode", False)
                and len(servers) == 1 and hasattr(servers[0], "generate_many"))

    async def _collect_chunk(self, item: dict) -> list[ScoredDataGroup] | None:
        """This worker's share of the groups the queue's bound still allows (chunk_prompts), sampled at once. The
        share leaves out the groups Atropos holds and those other workers are sampling (as many as the share of
        groups kept says will survive), so the workers of a batch together draw about one batch; what overshoots
        waits in Atropos for the next step, as any group does. GRPO: a group whose scores all agree is dropped and
        counted here, and the share of groups kept scales the next draws up (a strong or a weak policy leaves few
        groups worth training on)."""
        cfg = self.config
        drops = cfg.ensure_scores_are_not_same
        keep = self._keep_rate if drops else 1.0
        bound = cfg.max_batches_offpolicy * cfg.prompts_per_batch
        queued = int((getattr(self, "status_dict", None) or {}).get("queue_size", 0) or 0)
        idle = len(self.workers) - self._chunks_in_flight
        needed = bound - queued - round(self._prompts_in_flight * keep)
        count = chunk_prompts(needed, idle, keep, max(1, CHUNK_ROWS // cfg.group_size))
        items = [item] + [await self.get_next_item() for _ in range(count - 1)]
        self._chunks_in_flight += 1
        self._prompts_in_flight += count
        self.totals.clock.enter()
        try:
            groups = await self._collect_many(items)
        except asyncio.CancelledError:
            self.totals.cancelled_chunks += 1
            self.totals.cancelled_prompts += count
            raise
        finally:  # cancelled by atroposlib too (its queue filled): the time counts, the sequences never came
            self.totals.clock.leave()
            self._chunks_in_flight -= 1
            self._prompts_in_flight -= count
        if drops and groups:
            worth = [g for g in groups if not scores_all_equal(g)]
            for g in groups:
                if scores_all_equal(g):
                    self._count_dropped(g)
            self._keep_rate = ((1 - KEEP_RATE_WEIGHT) * self._keep_rate
                               + KEEP_RATE_WEIGHT * max(len(worth) / len(groups), MIN_KEEP_RATE))
            groups = worth
        return groups or None

    async def _collect_many(self, items: list[dict]) -> list[ScoredDataGroup]:
        """`group_size` completions for each item from one batched /generate (one row per completion), each group
        laid out as ManagedServer lays out fresh sequences (tokens = prompt + output, the prompt masked -100,
        logprob 1.0 on prompt positions, the text decoded without special tokens). Where the inference service
        streams (config stream_rollouts: the built-in server), a group is scored and laid out as soon as its rows
        are sampled, while the chunk's longer rows still sample; a stream that fails falls back to the plain
        request, which retries."""
        server = self.server.servers[0]
        cfg = self.config
        size = cfg.group_size
        prompts = [self.prompt_text(item["question"]) for item in items]
        ids = [self._prompt_ids(prompt) for prompt in prompts]
        policy_step = self.policy_step()
        requests = [{"input_ids": prompt_ids, "n": 1, "temperature": cfg.temperature, "top_p": cfg.top_p,
                     "max_tokens": new_token_budget(cfg.max_token_length, len(prompt_ids))}
                    for prompt_ids in ids for _ in range(size)]
        asked = time.monotonic()
        scored = None
        try:
            if cfg.stream_rollouts and self.judge is None and hasattr(server, "stream_many"):
                scored = await self._stream_scored(server, requests, items)
            if scored is None:
                answers = await server.generate_many(requests)
        finally:  # a chunk cancelled while it awaits (atroposlib's queue filled) awaited all the same
            self.totals.generate_s += time.monotonic() - asked
        if scored is None:
            rows_of = [answers[k * size:(k + 1) * size] for k in range(len(items))]
            decoded = decode_all(self.tokenizer, [output for _, output, _, _ in answers])
            texts_of = [decoded[k * size:(k + 1) * size] for k in range(len(items))]
            if self.judge is None:  # the rule alone, in line: a task per item was ~1 ms of a 256-prompt chunk
                results_of = [self._rule_results(item, texts) for item, texts in zip(items, texts_of)]
            else:
                # All items' scoring at once: each item's second opinions are gateway calls, which the items of a
                # chunk would otherwise wait for one after another.
                results_of = await asyncio.gather(*[self._score_all(item, texts)
                                                    for item, texts in zip(items, texts_of)])
            scored = [(rows, texts, results, layout(rows, results))
                      for rows, texts, results in zip(rows_of, texts_of, results_of)]
        groups = []
        for prompt, (_, texts, results, group) in zip(prompts, scored):
            if policy_step is not None:
                group["generation_params"] = {POLICY_STEP_KEY: policy_step}
            groups.append(self._finish(group, prompt, texts, results))
        return groups

    async def _stream_scored(self, server, requests: list[dict], items: list[dict]) -> list[tuple] | None:
        """Per item (rows, texts, rule results, group laid out), each done when the stream brings its group's last
        row; None when the stream fails (logged; the caller asks again without streaming). Nothing is counted
        here: the caller counts once the chunk is whole."""
        size = self.config.group_size
        rows: list = [None] * len(requests)
        missing = [size] * len(items)
        scored: list = [None] * len(items)
        try:
            # aclosing: a stream left midway (a raise below) closes its connection and semaphore slot now, not
            # whenever the generator is collected.
            async with contextlib.aclosing(server.stream_many(requests)) as stream:
                async for answers in stream:
                    complete = set()
                    for index, answer in answers:
                        if not 0 <= index < len(rows) or rows[index] is not None:
                            raise StreamFailed(f"the stream sent row {index} of {len(rows)} twice or out of range")
                        rows[index] = answer
                        missing[index // size] -= 1
                        if not missing[index // size]:
                            complete.add(index // size)
                    # The groups this event completed, decoded in one call: most of a PPO chunk's rows end at one
                    # step (223 of 256 in one event with the tiny model), and a call per group was ~1 ms of that.
                    ready = sorted(complete)
                    decoded = decode_all(self.tokenizer, [rows[i][1] for k in ready
                                                          for i in range(k * size, (k + 1) * size)])
                    for n, k in enumerate(ready):
                        group_rows, texts = rows[k * size:(k + 1) * size], decoded[n * size:(n + 1) * size]
                        results = self._rule_results(items[k], texts)
                        scored[k] = (group_rows, texts, results, layout(group_rows, results))
            if None in scored:
                raise StreamFailed(f"the stream ended with {scored.count(None)} of {len(items)} groups incomplete")
        # A malformed answer (a wrong type, a missing field) is the stream's failure too: asked again plainly.
        except (TimeoutError, aiohttp.ClientError, StreamFailed, ValueError, KeyError, IndexError, TypeError,
                AttributeError) as exc:
            self.totals.stream_failures += 1
            if self.totals.stream_failures <= STREAM_FAILURES_SHOWN:
                log.warning("streamed rollout chunk failed (%s: %s); asking again without streaming (failure #%d)",
                            type(exc).__name__, exc, self.totals.stream_failures)
            return None
        return scored

    async def _collect_group(self, item: dict) -> ScoredDataGroup | None:
        self.totals.clock.enter()
        try:
            if self.config.rollout_source == "gateway":
                return await self._collect_from_gateway(item)
            return await self._collect_from_inference(item)
        finally:  # cancelled by atroposlib too (its queue filled): the time counts, the sequences never came
            self.totals.clock.leave()

    async def evaluate(self, *args, **kwargs) -> dict:
        """Greedy accuracy on up to EVAL_ITEMS held-out prompts (used by `python -m hermes_stack.environment
        evaluate`; serve does not run it, see runtime.py)."""
        results = []
        for item in self.eval_items:
            prompt = self.prompt_text(item["question"])
            budget = self._budget(prompt)
            async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
                out = await managed.completion(prompt=prompt, n=1, max_tokens=budget, temperature=0.0, split="eval")
            results.append(self._score(out.choices[0].text, item["answer"]))
        metrics = {"eval/accuracy": sum(r.correct for r in results) / max(1, len(results)),
                   "eval/format_rate": sum(r.well_formatted for r in results) / max(1, len(results))}
        log.info("evaluation on %d held-out prompts: accuracy %.3f, format rate %.3f", len(results),
                 metrics["eval/accuracy"], metrics["eval/format_rate"])
        return metrics

    async def handle_send_to_api(self, scored_data, item=None, do_send_to_api: bool = True,
                                 abort_on_any_max_length_exceeded: bool = True):
        groups = scored_data if isinstance(scored_data, list) else [scored_data]
        for group in groups:
            if group is None:
                continue
            if self.config.ensure_scores_are_not_same and scores_all_equal(group):
                self._count_dropped(group)  # atroposlib drops it
            else:
                self.totals.recent.append(sum(group["scores"]) / len(group["scores"]))
        await super().handle_send_to_api(scored_data, item, do_send_to_api, abort_on_any_max_length_exceeded)
        if len(self.totals.recent) >= self.config.prompts_per_batch:
            self._log_batch()

    def _count_dropped(self, group: ScoredDataGroup) -> None:
        """A group with equal scores gives every member zero advantage: it is dropped, and counted so that a flat
        reward curve is explainable."""
        self.totals.dropped_equal_scores += 1
        if self.totals.dropped_equal_scores in (1, 10, 100) or self.totals.dropped_equal_scores % 500 == 0:
            log.info("dropped group with equal scores %s (%d such groups so far)",
                     group["scores"][:1], self.totals.dropped_equal_scores)

    # ------------------------------------------------------------ rollouts

    def prompt_text(self, question: str) -> str:
        """What the inference service sees: the bare question for offline-arith, else the prompt of
        hermes_stack.tasks.prompting (instruction, or system prompt and solved examples) through the tokenizer's
        chat template when it has one."""
        return rollout_prompt(self.tokenizer, self.config.dataset, question, self.config.system_prompt,
                              getattr(self, "examples", []), self.config.enable_thinking)

    def _prompt_ids(self, prompt: str) -> list[int]:
        """The prompt's token ids with the special tokens, encoded once per prompt: the train split's prompts come
        round again every epoch, and tokenising a PPO chunk of 256 was ~15 % of the environment's CPU (py-spy, issue
        22). A copy, so a caller that edits its list cannot change the cached one."""
        ids = self._encoded.get(prompt)
        if ids is None:
            ids = self._encoded[prompt] = self.tokenizer.encode(prompt, add_special_tokens=True)
        return list(ids)

    def _budget(self, prompt: str) -> int:
        return new_token_budget(self.config.max_token_length, len(self._prompt_ids(prompt)))

    def policy_step(self) -> int | None:
        """The weights step the inference service serves at least, read before a generation begins (the trainer
        writes it after each push: modelcore.weights_layout), so the trainer can bound the group's staleness
        (trainer/staleness.py). None without a data volume."""
        if not self.config.data_dir:
            return None
        from hermes_stack.modelcore.weights_layout import read_served_step

        return read_served_step(Path(self.config.data_dir) / "weights")

    async def _collect_from_inference(self, item: dict) -> ScoredDataGroup | None:
        prompt = self.prompt_text(item["question"])
        policy_step = self.policy_step()
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            completion = await managed.completion(
                prompt=prompt, n=self.config.group_size, max_tokens=self._budget(prompt),
                temperature=self.config.temperature, top_p=self.config.top_p,
            )
            nodes = managed.get_state()["nodes"]
        texts = [choice.text for choice in completion.choices]
        if len(nodes) != len(texts):
            log.warning("inference returned %d sequences for %d completions; group skipped", len(nodes), len(texts))
            return None
        results = await self._score_all(item, texts)
        group = ScoredDataGroup(
            tokens=[node.tokens for node in nodes],
            masks=[node.masked_tokens for node in nodes],
            scores=[r.score for r in results],
            inference_logprobs=[node.logprobs for node in nodes],
        )
        if policy_step is not None:  # a ScoredData field Atropos passes through to the trainer's batch
            group["generation_params"] = {POLICY_STEP_KEY: policy_step}
        return self._finish(group, prompt, texts, results)

    async def _collect_from_gateway(self, item: dict) -> ScoredDataGroup | None:
        content = f"{item['question']}\n\n{INSTRUCTION}"
        prompt_ids = self.tokenizer.encode(content, add_special_tokens=True)
        budget = max(16, min(1024, self.config.max_token_length - len(prompt_ids) - 1))
        calls = [asyncio.to_thread(self.gateway_client.chat, [{"role": "user", "content": content}],
                                   max_tokens=budget, temperature=self.config.temperature, top_p=self.config.top_p)
                 for _ in range(self.config.group_size)]
        texts = list(await asyncio.gather(*calls))
        results = await self._score_all(item, texts)
        tokens, masks = [], []
        for text in texts:
            completion_ids = self.tokenizer.encode(text, add_special_tokens=False)
            tokens.append(prompt_ids + completion_ids)
            masks.append([-100] * len(prompt_ids) + completion_ids)
        group = ScoredDataGroup(tokens=tokens, masks=masks, scores=[r.score for r in results])
        return self._finish(group, content, texts, results)

    # ------------------------------------------------------------ scoring

    def _score(self, text: str, answer: str) -> RewardResult:
        return score_remembered(text, answer, self.config.correctness_weight, self.config.format_weight)

    def _rule_results(self, item: dict, texts: list[str]) -> list[RewardResult]:
        """The rule reward of each completion; nothing counted (_finish counts)."""
        return [self._score(text, item["answer"]) for text in texts]

    def _note_format_failures(self, texts: list[str], results: list[RewardResult]) -> None:
        """Format failures counted, and the first ones shown."""
        for text, r in zip(texts, results):
            if not r.well_formatted:
                self.totals.format_failures += 1
                if self.totals.format_failures <= FORMAT_FAILURES_SHOWN:
                    log.info("format failure #%d (%s): %r", self.totals.format_failures, r.reason, text[-120:])

    async def _score_all(self, item: dict, texts: list[str]) -> list[RewardResult]:
        """The rule reward, and the judge's second opinion on its negatives when a judge is on; nothing counted."""
        results = self._rule_results(item, texts)
        if self.judge is not None:
            # Second opinion on rule negatives only (judge.py says why); failures keep the rule verdict.
            pending = [i for i, r in enumerate(results) if not r.correct]
            verdicts = await asyncio.gather(*[
                self.judge.agrade(item["question"], reference_answer(item["answer"]), texts[i]) for i in pending])
            for i, verdict in zip(pending, verdicts):
                if verdict:
                    r = results[i]
                    score = self.config.correctness_weight + self.config.format_weight * float(r.well_formatted)
                    results[i] = RewardResult(score, True, r.well_formatted, r.extracted, "ok (judge)")
                    self.totals.judge_overturned += 1
        return results

    def _finish(self, group: ScoredDataGroup, prompt: str, texts: list[str],
                results: list[RewardResult]) -> ScoredDataGroup:
        t = self.totals
        t.groups += 1
        t.sequences += len(results)
        # One pass over the group (it runs per group of a chunk: three sums and a second loop were ~1 ms of a
        # 256-row PPO chunk's path, issue 22).
        correct = formatted = 0
        score = 0.0
        for r in results:
            correct += r.correct
            formatted += r.well_formatted
            score += r.score
        t.correct += correct
        t.formatted += formatted
        t.score_sum += score
        if formatted < len(results):
            self._note_format_failures(texts, results)
        # Each completion's verdict rides with it to the trainer in atroposlib's per-sequence `overrides` (the API
        # passes them through): the trainer's rollout_accuracy, the agent's percent_correct.
        given = group.get("overrides")
        group["overrides"] = ([{**(o or {}), CORRECT_OVERRIDE: bool(r.correct)} for o, r in zip(given, results)]
                              if given else [{CORRECT_OVERRIDE: bool(r.correct)} for r in results])
        if getattr(self, "process_mode", False):
            # test-inference's JSONL: the text and the verdicts next to the tokens.
            group["messages"] = [[{"role": "user", "content": prompt}, {"role": "assistant", "content": text}]
                                 for text in texts]
            group["hermes"] = {"correct": [r.correct for r in results],
                               "well_formatted": [r.well_formatted for r in results],
                               "reason": [r.reason for r in results]}
        return group

    def _log_batch(self) -> None:
        t = self.totals
        t.batches_logged += 1
        scores = t.recent
        t.recent = []
        judge = ""
        if self.judge is not None:
            s = self.judge.stats
            judge = f", judge: {s.calls} calls, {s.failures} failures, {t.judge_overturned} overturned" + (
                " (switched off)" if s.disabled else "")
        busy = t.clock.busy_s()
        generated, in_flight = t.sequences - t.logged_sequences, busy - t.logged_busy_s
        t.logged_sequences, t.logged_busy_s = t.sequences, busy
        awaiting, t.logged_generate_s = t.generate_s - t.logged_generate_s, t.generate_s
        # Only chunks time their /generate: elsewhere (process mode, a BaseEnv's own rollouts) there is no split.
        split = f", chunks awaiting /generate {awaiting:.2f} s" if self._chunked() else ""
        log.info("batch %d: %d groups sent, mean score %.3f, rollout rate %.0f sequences/s (%d generated in %.2f s "
                 "with groups in flight%s) | run: accuracy %.3f, format rate %.3f, "
                 "format failures %d, groups dropped for equal scores %d, chunks cancelled %d (%d prompts)%s",
                 t.batches_logged, len(scores), sum(scores) / len(scores), rollout_rate(generated, in_flight),
                 generated, in_flight, split, t.accuracy, t.format_rate, t.format_failures,
                 t.dropped_equal_scores, t.cancelled_chunks, t.cancelled_prompts, judge)


# ---------------------------------------------------------------- helpers


def chunk_prompts(needed: int, idle_workers: int, keep_rate: float, cap: int) -> int:
    """Prompts one worker samples at once: an even share of the `needed` groups (the queue's bound less what Atropos
    holds and what is being sampled) over the workers not sampling yet, this one included, divided by the share of
    groups kept (1 for PPO; GRPO drops groups whose scores agree; floored at MIN_KEEP_RATE); between 1 (the item
    atroposlib gave it) and `cap`."""
    share = max(0, needed) / max(1, idle_workers)
    return max(1, min(cap, math.ceil(share / max(keep_rate, MIN_KEEP_RATE))))


def decode_all(tokenizer, outputs: list[list[int]]) -> list[str]:
    """Each output's text without special tokens, as `tokenizer.decode(ids, skip_special_tokens=True)` gives it. A
    transformers fast tokenizer whose decode is the library's own and cleans up no spaces decodes the whole chunk in
    one call to its Rust core, which is all that decode does per row: its Python wrapper was ~4 us a row, ~1 ms of a
    256-row chunk (issue 22). Any other tokenizer decodes row by row."""
    core = getattr(tokenizer, "_tokenizer", None)
    if (_LIBRARY_DECODE is not None and getattr(type(tokenizer), "_decode", None) is _LIBRARY_DECODE
            and not getattr(tokenizer, "clean_up_tokenization_spaces", True) and hasattr(core, "decode_batch")):
        return core.decode_batch(outputs, skip_special_tokens=True)
    return [tokenizer.decode(ids, skip_special_tokens=True) for ids in outputs]


def layout(rows: list[tuple], results: list[RewardResult]) -> ScoredDataGroup:
    """One group of (prompt tokens, output ids, output logprobs, finish reason) rows and their rewards, laid out as
    ManagedServer lays out fresh sequences: tokens = prompt + output, the prompt masked -100, logprob 1.0 on prompt
    positions, the output's logprobs padded or cut to its length."""
    return ScoredDataGroup(
        tokens=[prompt_tokens + output for prompt_tokens, output, _, _ in rows],
        masks=[[-100] * len(prompt_tokens) + output for prompt_tokens, output, _, _ in rows],
        scores=[r.score for r in results],
        inference_logprobs=[[1.0] * len(prompt_tokens) + (list(logprobs) + [1.0] * len(output))[:len(output)]
                            for prompt_tokens, output, logprobs, _ in rows])


def scores_all_equal(group: ScoredDataGroup) -> bool:
    """Every member scored the same: zero advantage for all of them under GRPO."""
    return len(set(group["scores"])) == 1


def make_judge(cfg: HermesEnvConfig):
    from hermes_stack.environment.judge import Judge
    from hermes_stack.gateway import GatewayClient, settings_from, style_for

    settings = settings_from(timeout_s=cfg.judge_timeout_s)
    if settings is None:
        raise InputError(f"{cfg.config_file}: [reward] judge: found true, expected false in offline mode. Hint: the "
                         "judge calls the gateway model; add .env.taotoken (TAOTOKEN_*) or set judge = false")
    return Judge(GatewayClient(settings), style=style_for(settings.model, cfg.judge_style))
