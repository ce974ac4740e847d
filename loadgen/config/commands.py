"""The subcommands: name -> what it does. loadgen.cli dispatches on it and `loadgen --help`
lists it. A module of its own so that dispatching (`loadgen sim`, `compare`, ...) imports
no run option: the simulator child of every `--sim` run starts without them."""

from __future__ import annotations

COMMANDS = {
    "run": "measure a server (the default: `loadgen [run] --base-url URL ...`)",
    "sim": "serve the simulator (vLLM's API, MTP, prefix cache) on a port",
    "serve": "run the sidecar: a REST API that starts sweeps next to the server",
    "compare": "compare result directories on the console and as CSV/JSON",
    "report": "write one HTML report of result directories",
    "merge": "combine the result directories of a run's shards",
    "profile": "AIPerf's `profile --scenario inferencex-agentx-mvp` command line "
    "(InferenceX AgentX)",
}
