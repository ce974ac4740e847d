"""Results: the run's files in one package. The typed point result, run.json (written
by run_file, read back by run_record), the results directory made fresh, replaced or
resumed (results_dir), the AIPerf artifacts directory, and the one store that owns every
file name.

config -> workload -> client -> run -> metrics -> sinks all meet here: the producers build
these types, the sinks and every reader (--resume, merge, compare, report, the sidecar)
get them, and the file spellings exist only in the codecs beside the types.
"""
