"""A launched server that will not stop: for the Ctrl-C tests of --serve-cmd.

    python tests/support/stubborn_server.py PIDFILE [--escape PIDFILE2] [--never-ready] \
        [--escape-on-sigint PIDFILE3] -- SIM_ARGS...

It runs `loadgen sim SIM_ARGS...` as its child (which serves and stops on SIGINT, as the
simulator does), and itself ignores SIGINT and SIGTERM: its process group stays alive
until SIGKILL, as a vLLM API server stuck in its shutdown does. With --never-ready it
starts no simulator: loadgen waits for a server that never answers, as for a model that
takes long to load. A wrapper, not the real
thing, because a real vLLM cannot be made to hang in its shutdown on demand. With
--escape it also starts a process in a session of its own (setsid()), which killpg() on
the server's group does not reach and which ignores the same signals, as a server's
daemonized helper would. Its pid goes to PIDFILE (the group's: loadgen starts it in a
session of its own), the escaped process's to PIDFILE2, before the simulator starts.
With --escape-on-sigint the first SIGINT starts another such process (its pid to
PIDFILE3): one that leaves the group while loadgen stops it.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

ESCAPED = (
    "import signal, time\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "while True: time.sleep(60)\n"
)


def escape(pidfile: str) -> None:
    """A process in a session of its own that ignores SIGINT and SIGTERM (once)."""
    if not os.path.exists(pidfile):
        escaped = subprocess.Popen([sys.executable, "-c", ESCAPED], start_new_session=True)
        with open(pidfile, "w") as out:
            out.write(f"{escaped.pid}\n")


def main() -> None:
    ours, sim = sys.argv[1 : sys.argv.index("--")], sys.argv[sys.argv.index("--") + 1 :]
    parser = argparse.ArgumentParser()
    parser.add_argument("pidfile")
    parser.add_argument("--escape")
    parser.add_argument("--never-ready", action="store_true")
    parser.add_argument("--escape-on-sigint")
    args = parser.parse_args(ours)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # the simulator installs its own handlers
    if args.escape:
        escape(args.escape)
    if args.escape_on_sigint:
        signal.signal(signal.SIGINT, lambda *_: escape(args.escape_on_sigint))
    with open(args.pidfile, "w") as out:
        out.write(f"{os.getpid()}\n")
    if not args.never_ready:
        subprocess.run([sys.executable, "-m", "loadgen", "sim", *sim], check=False)
    while True:  # never serving, or the simulator stopped: this process stays, stuck
        time.sleep(60)


if __name__ == "__main__":
    main()
