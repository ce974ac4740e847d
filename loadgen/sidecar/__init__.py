"""`loadgen serve`: the long-running HTTP service that runs sweeps beside a server."""
