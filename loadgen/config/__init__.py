"""Stage 1: what a run is asked to do. RunSpec, and the one parser of flags and options."""
