"""The run's own files: the results directory made fresh, replaced or resumed, run.json,
and each point's GPU power CSV. Below the engine (which writes through it) and the
engine's types (PointOutcome, Stop) that reach the disk are defined here."""
