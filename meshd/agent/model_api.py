"""Where the model API is and whether ``mesh agent`` can use it: checked once at start.

The Claude Code CLI reads ``ANTHROPIC_BASE_URL`` and the credentials from the
environment and, when they are wrong, retries for minutes or answers every run
with "Not logged in". One cheap request at start (``POST /v1/messages/count_tokens``,
which costs no tokens) turns those into a refusal that names the URL and what
failed; ``--skip-model-check`` skips it (offline use, a gateway in front of the API
that answers no ``count_tokens``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import httpx

from meshd.errors import ConfigError

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
# Any model name will do for the check: an unknown one is a 4xx that still proves
# the endpoint answers and took the key (only 401/403 speak about the key).
CHECK_MODEL = "claude-sonnet-4-5"
CHECK_TIMEOUT = 10.0
# Providers the CLI reaches with cloud credentials of their own: not checked here.
CLOUD_PROVIDERS = ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY")


def base_url() -> str:
    return (os.environ.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")


@dataclass(frozen=True)
class Credentials:
    source: str  # what the CLI will use, for messages
    headers: dict[str, str]  # empty: a login the check cannot present (reachability only)


def _logged_in() -> bool:
    """A ``claude /login`` left a credentials file where the CLI looks for one."""
    folder = os.environ.get("CLAUDE_CONFIG_DIR")
    return (Path(folder) if folder else Path.home() / ".claude").joinpath(".credentials.json").is_file()


def credentials() -> Credentials | None:
    if key := os.environ.get("ANTHROPIC_API_KEY"):
        return Credentials("ANTHROPIC_API_KEY", {"x-api-key": key})
    if token := os.environ.get("ANTHROPIC_AUTH_TOKEN"):
        return Credentials("ANTHROPIC_AUTH_TOKEN", {"Authorization": f"Bearer {token}"})
    if os.environ.get("CLAUDE_CODE_OAUTH_TOKEN"):
        return Credentials("CLAUDE_CODE_OAUTH_TOKEN", {})
    if _logged_in():
        return Credentials("the CLI's login", {})
    return None


async def check(model: str | None = None, timeout: float = CHECK_TIMEOUT) -> str:
    """Refuse (:class:`ConfigError`) when the model API cannot be used; else say what was checked."""
    if provider := next((p for p in CLOUD_PROVIDERS if os.environ.get(p)), None):
        return f"model API not checked ({provider} is set)"
    url = base_url()
    creds = credentials()
    if creds is None:
        raise ConfigError(
            f"no model API credentials for {url}: set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN, "
            "or log the Claude Code CLI in); --skip-model-check starts anyway"
        )
    body = {"model": model or CHECK_MODEL, "messages": [{"role": "user", "content": "ping"}]}
    headers = {"anthropic-version": API_VERSION, **creds.headers}
    try:
        async with httpx.AsyncClient(timeout=timeout) as http:
            resp = await http.post(f"{url}/v1/messages/count_tokens", json=body, headers=headers)
    except httpx.HTTPError as e:
        raise ConfigError(
            f"the model API at {url} is unreachable ({type(e).__name__}: {e or 'no answer'}); "
            "check ANTHROPIC_BASE_URL, or pass --skip-model-check to start anyway"
        ) from e
    if resp.status_code in (401, 403) and creds.headers:
        raise ConfigError(
            f"the model API at {url} refused {creds.source} (HTTP {resp.status_code}: "
            f"{_error_text(resp)}); check the key"
        )
    return f"model API at {url} answered HTTP {resp.status_code} ({creds.source})"


def _error_text(resp: httpx.Response) -> str:
    try:
        err = resp.json().get("error") or {}
        return str(err.get("message") or err.get("type") or resp.reason_phrase)[:300]
    except (ValueError, AttributeError):
        return resp.text[:300] or resp.reason_phrase
