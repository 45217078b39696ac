"""Optional LLM judge (`[reward] judge = true`): a second opinion on completions the rule reward marks wrong.

Why only those: math-verify's positives are reliable; its false negatives (an answer in words, an odd layout) are
what a judge can fix, and judging only negatives halves the paid calls on a learning policy.

Every call goes through hermes_stack.gateway (TAOTOKEN_BASE_URL, TAOTOKEN_API_KEY, TAOTOKEN_MODEL), in the Anthropic
messages or OpenAI chat shape (`judge_style`; auto = by model name). A judge failure never stalls a rollout: each
call is bounded (timeout x bounded retry, and an asyncio deadline on top), a failure falls back to the rule verdict
and is counted and logged, and after `max_consecutive_failures` failures in a row the judge is switched off for the
rest of the run (logged once), so a dead gateway costs a few seconds, not a timeout per completion.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field

from hermes_stack.errors import HermesError
from hermes_stack.gateway import GatewayClient, Style

log = logging.getLogger("hermes_stack.environment.judge")

PROMPT = """You grade answers to math word problems.

Problem:
{question}

Reference final answer: {reference}

Student's response:
{completion}

Is the student's final answer numerically equal to the reference final answer? Reply with exactly one word: YES or NO."""


@dataclass
class JudgeStats:
    calls: int = 0
    overturned: int = 0  # rule said wrong, judge said right
    failures: int = 0
    consecutive_failures: int = 0
    disabled: bool = False
    last_error: str = ""


def parse_verdict(text: str) -> bool | None:
    word = text.strip().split(maxsplit=1)[0].strip(".,!:;*\"'").upper() if text.strip() else ""
    return {"YES": True, "NO": False}.get(word)


@dataclass
class Judge:
    client: GatewayClient
    style: Style
    max_tokens: int = 4
    max_consecutive_failures: int = 5
    stats: JudgeStats = field(default_factory=JudgeStats)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def deadline_s(self) -> float:
        """The longest one verdict may take, retries included (plus a margin for backoff sleeps)."""
        settings = self.client.settings
        return settings.timeout_s * (1 + settings.retries) + 3.0

    def grade(self, question: str, reference: str, completion: str,
              abandoned: threading.Event | None = None) -> bool | None:
        """True/False from the judge, None when it failed or is switched off (the caller keeps the rule verdict).
        `abandoned` is set by `agrade` when its deadline passed: a late answer then changes no statistics."""
        if self.stats.disabled:
            return None
        prompt = PROMPT.format(question=question, reference=reference, completion=completion[-4000:])
        try:
            text = self.client.chat([{"role": "user", "content": prompt}], style=self.style,
                                    max_tokens=self.max_tokens, temperature=0.0)
            verdict = parse_verdict(text)
            if verdict is None:
                raise ValueError(f"judge reply is not YES or NO: {text[:40]!r}")
        except (HermesError, ValueError) as exc:
            if not (abandoned and abandoned.is_set()):
                self._failed(str(exc))
            return None
        if abandoned and abandoned.is_set():
            return None
        with self._lock:
            self.stats.calls += 1
            self.stats.consecutive_failures = 0
            self.stats.overturned += int(verdict)
        return verdict

    async def agrade(self, question: str, reference: str, completion: str) -> bool | None:
        """`grade` off the event loop, with a hard deadline so a rollout never waits longer than that."""
        if self.stats.disabled:
            return None
        abandoned = threading.Event()
        try:
            return await asyncio.wait_for(asyncio.to_thread(self.grade, question, reference, completion, abandoned),
                                          timeout=self.deadline_s)
        except TimeoutError:
            abandoned.set()
            self._failed(f"no verdict within {self.deadline_s:g} s")
            return None

    def _failed(self, reason: str) -> None:
        with self._lock:
            self.stats.calls += 1
            self.stats.failures += 1
            self.stats.consecutive_failures += 1
            self.stats.last_error = reason
            log.warning("judge failed (%d so far), using the rule reward: %s", self.stats.failures, reason)
            if not self.stats.disabled and self.stats.consecutive_failures >= self.max_consecutive_failures:
                self.stats.disabled = True
                log.error("judge switched off after %d failures in a row; rule reward only from now on. Last: %s",
                          self.stats.consecutive_failures, reason)
