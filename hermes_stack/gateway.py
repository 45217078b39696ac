"""THE choke point for HTTP to the TaoToken gateway: the layer-1 check, test-inference rollouts and the LLM judge.

One root URL (TAOTOKEN_BASE_URL, no /v1) serves both SDK styles:
- OpenAI chat-completions shape: `<root>/v1/chat/completions`, `Authorization: Bearer <key>`;
- Anthropic messages shape: `<root>/v1/messages`, `x-api-key: <key>` (the Anthropic base URL is the root itself).

Every request has a timeout and a bounded retry (connection errors, timeouts, 429 and 5xx only: a 401 or 404 will not
get better by asking again). Errors are `GatewayError` with a message that names the likely cause; the key is never
printed.

`python -m hermes_stack.gateway check`: list the models (or, with TAOTOKEN_MODEL set, a 1-token completion with it).
Without a key file and without the variables (offline mode) it prints "offline mode: gateway checks skipped", exit 0.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Self

import httpx

from hermes_stack import keyfile as keys  # the key file and its base-URL rule
from hermes_stack import redaction
from hermes_stack.errors import InputError, StackError

KEY_ENV = "TAOTOKEN_API_KEY"
BASE_URL_ENV = "TAOTOKEN_BASE_URL"
MODEL_ENV = "TAOTOKEN_MODEL"
ANTHROPIC_VERSION = "2023-06-01"

Style = Literal["openai", "anthropic"]


class GatewayError(StackError):
    """A gateway call failed; the message names the cause (key, /v1 in the base URL, reachability)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(_redact(message))
        self.status = status


@dataclass(frozen=True)
class GatewaySettings:
    root: str  # TAOTOKEN_BASE_URL: the gateway root, no /v1
    api_key: str
    model: str | None = None
    timeout_s: float = 20.0
    retries: int = 2  # extra attempts after the first
    # The key file the values came from, named in hints (--keyfile may name another than .env.taotoken; inside the
    # containers the values arrive as variables, from the key file `up` read).
    source: str = ".env.taotoken"

    @property
    def openai_base_url(self) -> str:
        return keys.openai_base_url(self.root)

    @property
    def anthropic_base_url(self) -> str:
        return keys.anthropic_base_url(self.root)

    @property
    def host(self) -> str:
        return httpx.URL(self.root).host


def style_for(model: str | None, setting: str = "auto") -> Style:
    """judge_style auto: Anthropic's shape for claude* models, OpenAI's otherwise."""
    if setting in ("openai", "anthropic"):
        return setting  # type: ignore[return-value]
    return "anthropic" if (model or "").lower().startswith("claude") else "openai"


def settings_from(
    environ: Mapping[str, str] | None = None,
    keyfile_path: str | Path | None = None,
    base_url_env: str = BASE_URL_ENV,
    timeout_s: float = 20.0,
) -> GatewaySettings | None:
    """The gateway settings, or None in offline mode.

    Inside containers the key file arrives as environment variables (compose env_file); on the host it is read from
    .env.taotoken (hermes_stack.keyfile, which also checks it). Variables win over the file, and get the key file's
    URL check (keyfile.check_base_url): a bad base URL is InputError (exit 2) before any call, whichever the road.
    """
    environ = os.environ if environ is None else environ
    if environ.get(KEY_ENV) and environ.get(base_url_env):
        redaction.register_secrets({KEY_ENV: environ[KEY_ENV]})
        root, problem, _notice, _warning = keys.check_base_url("(environment)", environ[base_url_env], base_url_env)
        if problem is not None:
            raise InputError(problem)
        return GatewaySettings(
            root=root,
            api_key=environ[KEY_ENV],
            model=environ.get(MODEL_ENV) or None,
            timeout_s=timeout_s,
        )
    keyfile = keys.load_keyfile(keyfile_path)
    if keyfile.offline:
        return None
    return GatewaySettings(
        root=keyfile.get(base_url_env) or "",  # load_keyfile checked and normalised it
        api_key=keyfile.get(KEY_ENV) or "",
        model=keyfile.get(MODEL_ENV) or environ.get(MODEL_ENV) or None,
        timeout_s=timeout_s,
        source=str(keyfile.path),
    )


def _redact(text: str) -> str:
    return redaction.redact_known_secrets(text)


def explain_status(status: int, url: str, settings: GatewaySettings, body: str = "") -> str:
    """One line naming the likely cause of an HTTP error from the gateway."""
    path = httpx.URL(url).path
    if status in (401, 403):
        return (f"gateway answered {status} for {path}: the key was refused; check {KEY_ENV} in {settings.source} "
                "(wrong or incomplete key)")
    if status == 404:
        if "/v1/v1" in path:
            return (
                f"gateway answered 404 for {path}: doubled /v1; {BASE_URL_ENV}={settings.root} must be the gateway "
                "root without /v1 (hermes-stack adds /v1 itself)"
            )
        model_hint = f", or {MODEL_ENV}={settings.model} is unknown to the gateway" if settings.model else ""
        return (
            f"gateway answered 404 for {path}: wrong path; {BASE_URL_ENV}={settings.root} should be the gateway root "
            f"such that <root>/v1/chat/completions exists (missing /v1 or a wrong prefix){model_hint}"
        )
    if status == 429:
        return f"gateway answered 429 for {path}: rate limited or out of credit"
    detail = body.strip().replace("\n", " ")[:200]
    return f"gateway answered {status} for {path}" + (f": {detail}" if detail else "")


class GatewayClient:
    """Synchronous httpx client for the gateway. `transport` is for tests (httpx.MockTransport)."""

    def __init__(self, settings: GatewaySettings, transport: httpx.BaseTransport | None = None):
        self.settings = settings
        self._http = httpx.Client(timeout=settings.timeout_s, transport=transport, follow_redirects=False)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ transport with bounded retry

    def _request(self, method: str, url: str, style: Style, json: dict | None = None) -> dict:
        headers = {"content-type": "application/json"}
        if style == "anthropic":
            headers["x-api-key"] = self.settings.api_key
            headers["anthropic-version"] = ANTHROPIC_VERSION
        else:
            headers["authorization"] = f"Bearer {self.settings.api_key}"
        attempts = 1 + max(0, self.settings.retries)
        last: GatewayError | None = None
        for attempt in range(attempts):
            try:
                response = self._http.request(method, url, headers=headers, json=json)
            except httpx.TimeoutException:
                last = GatewayError(
                    f"gateway at {self.settings.root} did not answer within {self.settings.timeout_s:g} s "
                    f"({method} {httpx.URL(url).path}); check {BASE_URL_ENV} and the network"
                )
            except httpx.TransportError as exc:
                last = GatewayError(
                    f"cannot reach the gateway at {self.settings.root} ({type(exc).__name__}: "
                    f"{exc or 'connection failed'}); check {BASE_URL_ENV} in {self.settings.source}"
                )
            else:
                if response.status_code < 400:
                    try:
                        return response.json()
                    except ValueError:
                        raise GatewayError(
                            f"gateway answered {response.status_code} for {httpx.URL(url).path} with a body that is "
                            f"not JSON; {BASE_URL_ENV}={self.settings.root} may not be the gateway root"
                        ) from None
                last = GatewayError(
                    explain_status(response.status_code, url, self.settings, response.text), response.status_code
                )
                if response.status_code != 429 and response.status_code < 500:
                    raise last
            if attempt + 1 < attempts:
                time.sleep(min(2.0, 0.25 * 2**attempt))
        assert last is not None
        raise last

    # ------------------------------------------------------------ calls

    def list_models(self) -> list[str]:
        data = self._request("GET", f"{self.settings.openai_base_url}/models", "openai")
        return [str(m.get("id")) for m in data.get("data", []) if isinstance(m, dict)]

    def chat(
        self,
        messages: list[dict],
        *,
        model: str | None = None,
        style: Style | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float | None = None,
    ) -> str:
        """One chat turn; returns the text of the reply. Messages are OpenAI-style role/content dicts."""
        model = model or self.settings.model
        if not model:
            raise InputError(
                f"no gateway model: set {MODEL_ENV}=<model name> in {self.settings.source} (test-inference and the judge "
                "need it)"
            )
        style = style or style_for(model)
        if style == "anthropic":
            system = "\n".join(m["content"] for m in messages if m.get("role") == "system")
            body: dict = {
                "model": model,
                "max_tokens": max_tokens,
                "temperature": temperature,
                "messages": [m for m in messages if m.get("role") != "system"],
            }
            if system:
                body["system"] = system
            if top_p is not None and top_p < 1.0:
                body["top_p"] = top_p
            data = self._request("POST", f"{self.settings.anthropic_base_url}/v1/messages", "anthropic", body)
            parts = data.get("content") or []
            text = "".join(p.get("text", "") for p in parts if isinstance(p, dict) and p.get("type", "text") == "text")
        else:
            body = {"model": model, "max_tokens": max_tokens, "temperature": temperature, "messages": messages}
            if top_p is not None and top_p < 1.0:
                body["top_p"] = top_p
            data = self._request("POST", f"{self.settings.openai_base_url}/chat/completions", "openai", body)
            choices = data.get("choices") or []
            if not choices:
                raise GatewayError(f"gateway returned no choices for model {model}")
            text = (choices[0].get("message") or {}).get("content") or ""
        return text

    def check(self) -> str:
        """The layer-1 check. Returns one line describing what answered."""
        started = time.monotonic()
        if self.settings.model:
            style = style_for(self.settings.model)
            self.chat([{"role": "user", "content": "Reply with OK."}], max_tokens=1, style=style)
            what = f"a 1-token completion with {self.settings.model} ({style} shape)"
        else:
            models = self.list_models()
            what = f"the model list ({len(models)} models; set {MODEL_ENV} to check a completion)"
        return f"gateway OK: {self.settings.root} answered {what} in {time.monotonic() - started:.1f} s"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["check"] or len(argv) > 1:
        print("usage: python -m hermes_stack.gateway check", file=sys.stderr)
        return 2
    try:
        from hermes_stack.secret_files import load_secrets

        load_secrets()  # in the gateway-check container the key is the Compose secret taotoken_api_key
        settings = settings_from()
        if settings is None:
            print("offline mode: gateway checks skipped (no .env.taotoken and no TAOTOKEN_* variables)")
            return 0
        with GatewayClient(settings) as client:
            print(_redact(client.check()))
        return 0
    except (InputError, StackError) as exc:
        for line in exc.lines():
            print(_redact(f"error: {line}"), file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
