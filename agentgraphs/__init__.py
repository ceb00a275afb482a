"""agentgraphs: agentic-RL methods as LangGraph graphs with token-exact traces.

Importing the package is cheap: torch/transformers load only when an engine or tokenizer is built.
"""

from .engines import Completion, Engine, SamplingParams
from .errors import (
    AgentGraphsError,
    ConfigError,
    EngineError,
    EngineProtocolError,
    EngineRequestError,
    EngineUnavailableError,
    InputError,
    TemplateError,
    TraceError,
)
from .trace import TrainSequence, Turn, build_sequences, check_sequence, check_trace

__version__ = "0.1.0"

__all__ = [
    "AgentGraphsError",
    "Completion",
    "ConfigError",
    "Engine",
    "EngineError",
    "EngineProtocolError",
    "EngineRequestError",
    "EngineUnavailableError",
    "InputError",
    "SamplingParams",
    "TemplateError",
    "TraceError",
    "TrainSequence",
    "Turn",
    "build_sequences",
    "check_sequence",
    "check_trace",
]
