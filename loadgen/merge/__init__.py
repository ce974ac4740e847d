"""`loadgen merge`: the shards of one run (`--shard I/N`) merged into one result set."""
