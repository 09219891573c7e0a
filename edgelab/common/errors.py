"""One exception root for edgelab, so callers can catch everything we raise."""

from __future__ import annotations


class EdgelabError(Exception):
    """Base class of every error edgelab raises on purpose."""


class ConfigError(EdgelabError, ValueError):
    """A parameter has a value that is not allowed; raised before any cluster work."""

    def __init__(self, parameter: str, value: object, allowed: str) -> None:
        self.parameter = parameter
        self.value = value
        self.allowed = allowed
        super().__init__(f"{parameter}={value!r} is not allowed: {allowed}")


class DataError(EdgelabError):
    """No usable dataset could be found, or a cached file failed verification."""


class CorruptDataError(DataError):
    """A cached or offline data file does not match its expected shape, dtype or checksum."""


class ClusterError(EdgelabError):
    """The Dask cluster could not be started, reached or used."""


class DeviceMemoryError(EdgelabError):
    """A configuration needs more memory than the emulated device has."""


class DeviceOutOfMemory(DeviceMemoryError):
    """A device's training step needed more memory than its budget: measured, on the device."""

    def __init__(self, device: str, needed_mb: float, budget_mb: float) -> None:
        # All in args, so the error pickles back from the worker with its numbers.
        super().__init__(device, needed_mb, budget_mb)
        self.device, self.needed_mb, self.budget_mb = device, needed_mb, budget_mb

    def __str__(self) -> str:
        return (
            f"device {self.device} ran out of memory: its training step needed {self.needed_mb:.0f} MB "
            f"above the framework's footprint, its budget is {self.budget_mb:.0f} MB"
        )


class WorkerLostError(ClusterError):
    """A device worker stopped answering during a run."""
