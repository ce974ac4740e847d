"""Scale-out: one point's load from several client processes on this machine (--workers).

The worker pool implements the engine's `Driver` (run/driver.py): the engine runs a sweep
point by point and never imports this package; whoever starts a run (orchestrate/measure.py,
orchestrate/capacity.py) picks the driver with `scale.sweep.run_sweep`.
"""
