"""`loadgen sim`: a vLLM 0.32-compatible OpenAI server modelling a batching engine with MTP."""

from loadgen.sim.config import FaultConfig, SimConfig
from loadgen.sim.server import RunningSimulator, running_simulator

__all__ = ["FaultConfig", "RunningSimulator", "SimConfig", "running_simulator"]
