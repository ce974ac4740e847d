"""Separate network stacks for the coordinator's tests: one Linux network namespace per
machine (each shard, the simulator, the relay), each with a veth pair whose other end
sits on a bridge in a namespace of its own, so nothing changes in the machine's own
network. Links get their delay from `tc netem` where the kernel has it, else from
delay_relay.py (a relay in its own namespace that every shard reaches the server and
the coordinator through).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

SUBNET = "10.77.0"
RELAY_SCRIPT = Path(__file__).with_name("delay_relay.py")


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], check=True, capture_output=True, text=True, timeout=30)


def cannot_create() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    probe = f"lgprobe{os.getpid()}"
    try:
        _ip("netns", "add", probe)
    except (OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return (
            "network namespaces cannot be created here (needs root or CAP_SYS_ADMIN and "
            f"iproute2): {detail.strip()}"
        )
    _ip("netns", "del", probe)
    return None


def netem_available() -> bool:
    """Whether this kernel has the netem qdisc (tried on a scratch namespace's loopback)."""
    probe = f"lgnetem{os.getpid()}"
    _ip("netns", "add", probe)
    try:
        result = subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                probe,
                "tc",
                "qdisc",
                "add",
                "dev",
                "lo",
                "root",
                "netem",
                "delay",
                "1ms",
            ],
            capture_output=True,
            timeout=30,
        )
        return result.returncode == 0
    finally:
        _ip("netns", "del", probe)


@dataclass
class Network:
    prefix: str = field(default_factory=lambda: f"lg{os.getpid() % 100000}")
    nodes: dict[str, str] = field(default_factory=dict)  # name -> address
    made: list[str] = field(default_factory=list)

    @property
    def bridge_ns(self) -> str:
        return f"{self.prefix}br"

    def ns(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def create(self) -> None:
        self._netns(self.bridge_ns)
        _ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_ns, "link", "set", "br0", "up")

    def _netns(self, name: str) -> None:
        _ip("netns", "add", name)
        self.made.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def add(self, name: str, host: int) -> str:
        """A machine on the bridge; its address."""
        namespace = self.ns(name)
        self._netns(namespace)
        port = f"v{name}"
        _ip(
            "-n",
            self.bridge_ns,
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            namespace,
        )
        _ip("-n", self.bridge_ns, "link", "set", port, "master", "br0", "up")
        address = f"{SUBNET}.{host}"
        _ip("-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        self.nodes[name] = address
        return address

    def delay(self, name: str, delay_ms: float, jitter_ms: float) -> None:
        """netem on the machine's own link (its egress: one way)."""
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                self.ns(name),
                "tc",
                "qdisc",
                "replace",
                "dev",
                "eth0",
                "root",
                "netem",
                "delay",
                f"{delay_ms}ms",
                f"{jitter_ms}ms",
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )

    def argv(self, name: str, argv: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns(name), *argv]

    def relay_argv(self, delay_ms: float, jitter_ms: float, routes: Sequence[str]) -> list[str]:
        return self.argv(
            "relay",
            [
                sys.executable,
                str(RELAY_SCRIPT),
                "--delay-ms",
                str(delay_ms),
                "--jitter-ms",
                str(jitter_ms),
                *routes,
            ],
        )

    def destroy(self) -> None:
        for name in reversed(self.made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
        self.made.clear()
