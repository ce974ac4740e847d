"""Results: the typed point result, run.json, and the one store that owns every file name.

config -> workload -> client -> run -> metrics -> sinks all meet here: the producers build
these types, the sinks and every reader (--resume, merge, compare, report, the sidecar)
get them, and the file spellings exist only in the codecs beside the types.
"""
