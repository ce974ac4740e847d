"""This process's file-descriptor limit against the connections a sweep will open.

Checked once before the sweep, for its largest point: a `--conc 4..512` run refused at
conc 512 after an hour of smaller points would waste the hour. A soft limit below the
need is raised (any process may raise it up to the hard limit); a hard limit below it
is refused with the number needed. The transport still maps a stray EMFILE to a stop
(client/transport.py), never to a server `connect` error.
"""

from __future__ import annotations

import resource

from loadgen.client.transport import OutOfDescriptors

# Beyond one socket per concurrent request: result files, the event loop, the tokenizer,
# the embedded simulator's pipes, the metrics server, a liveness probe, imports made late.
FD_HEADROOM = 64


def descriptors_needed(max_conc: int) -> int:
    return max_conc + FD_HEADROOM


def ensure_fd_limit(max_conc: int) -> int:
    """Make sure `max_conc` connections fit; returns the soft limit now in force."""
    needed = descriptors_needed(max_conc)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise OutOfDescriptors(
            f"--conc {max_conc} needs about {needed} open files (one socket per request in "
            f"flight, plus {FD_HEADROOM}), but this process may open at most {hard} (hard "
            f"limit); raise it (`ulimit -n {needed}` as root, docker --ulimit "
            f"nofile={needed}, systemd LimitNOFILE={needed}) or lower --conc"
        )
    target = needed if hard == resource.RLIM_INFINITY else hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError) as exc:
        raise OutOfDescriptors(
            f"--conc {max_conc} needs about {needed} open files; the limit is {soft} and "
            f"raising it failed ({exc}); raise `ulimit -n` or lower --conc"
        ) from None
    return target
