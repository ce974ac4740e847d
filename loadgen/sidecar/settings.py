"""What the sidecar runs with (ServiceConfig) and the one check it starts with: a
listener anyone can reach needs a token."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import UsageError
from loadgen.sidecar.auth import token_problem
from loadgen.sinks.guarded_http import DEFAULT_LIMITS, ServerLimits

TOKEN_ENV = "LOADGEN_API_TOKEN"
MAX_BODY_BYTES = 64 * 1024


class ServiceError(UsageError):
    """The sidecar cannot start as configured; the message says what to change."""


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    target: str
    model: str
    host: str = "127.0.0.1"
    port: int = 9400
    data_dir: Path = Path("loadgen-data")
    token: str | None = None
    canary_conc: int = 0
    canary_interval_s: float = 60.0
    insecure_no_auth: bool = False
    max_body_bytes: int = MAX_BODY_BYTES
    # connections, header and body deadlines (tests shorten them)
    limits: ServerLimits = DEFAULT_LIMITS


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name may resolve anywhere: treat it as public


def check_exposure(config: ServiceConfig) -> None:
    problem = token_problem(config.token) if config.token else None
    if problem:
        raise ServiceError(f"{TOKEN_ENV} {problem}")
    if not config.token and not is_loopback(config.host) and not config.insecure_no_auth:
        raise ServiceError(
            f"refusing to listen on {config.host} without {TOKEN_ENV}: set {TOKEN_ENV} "
            "to a secret (e.g. `openssl rand -hex 16`), listen on 127.0.0.1, or pass "
            "--insecure-no-auth"
        )
