"""`loadgen compare` and `loadgen report`: read result directories, compare, publish."""
