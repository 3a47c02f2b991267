"""One endpoint's worker: its queue, its probe discipline, its record in the store.

`EndpointWorker` holds its parts (`queue`, `probing`, `record`); everything outside reaches the
endpoint's state through the worker's commands (`apply`, `append`, `probe_now`, ...)."""

from supervisor.worker._commands import WorkerStopped
from supervisor.worker._heard import Heard, progress_heard, unit_heard
from supervisor.worker._probing import HostCheck, ProbeDiscipline, Prober, ProgressReader
from supervisor.worker._record import EndpointRecord
from supervisor.worker._state import Restored, restored_from
from supervisor.worker._worker import EndpointWorker

__all__ = [
    "EndpointRecord",
    "EndpointWorker",
    "Heard",
    "HostCheck",
    "ProbeDiscipline",
    "Prober",
    "ProgressReader",
    "Restored",
    "WorkerStopped",
    "progress_heard",
    "restored_from",
    "unit_heard",
]
