"""Above a run: a sweep with its standard outputs (measure), sweep-file lanes and the
--find-max capacity search. Each starts runs through scale.sweep, which picks the driver
(this process or the worker pool), so this package sits above both the engine and scale."""
