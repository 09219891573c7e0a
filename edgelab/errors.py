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


class WorkerLostError(ClusterError):
    """A device worker stopped answering during a run."""
