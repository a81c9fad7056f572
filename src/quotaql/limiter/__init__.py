"""The limiter layer: several quotas per key, shared quotas, fail modes and the circuit
breaker, deferred refunds and the deny cache, for rates (:mod:`.rate`) over any storage.

Nothing here imports graphql-core: the layer stands on ``storage`` and ``policy`` only.
"""

from quotaql.limiter.breaker import CircuitBreaker
from quotaql.limiter.flows import BackendErrorMode
from quotaql.limiter.rate import AsyncLimiter, Limiter
from quotaql.limiter.recorder import MultiRecorder, NullRecorder, Recorder

__all__ = [
    "AsyncLimiter",
    "BackendErrorMode",
    "CircuitBreaker",
    "Limiter",
    "MultiRecorder",
    "NullRecorder",
    "Recorder",
]
