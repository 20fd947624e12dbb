"""The answers a plugin gives instead of a volume, as exceptions.

Raise one from ``provision`` or ``delete``; the SDK's ``Plugin`` turns it
into the WIT error variant of the same name, which tells the host what to do
next (see ``provision-error`` and ``delete-error`` in the WIT file).
"""


class PluginError(Exception):
    """Base of the answers below; ``str(error)`` is the message the host
    records in the claim's or the volume's events."""


class InvalidArgument(PluginError):
    """The request can never succeed as it is (a missing or invalid class
    parameter, a zero size, a block claim...). Nothing was created; the host
    reports it and retries only slowly. In ``delete`` it becomes ``failed``."""


class Failed(PluginError):
    """Nothing was created (or deleted) and trying again may help: the host
    records an event and retries with backoff."""


class InBackground(PluginError):
    """``provision`` only: the backend may still be creating the volume; the
    host calls ``provision`` again until it gets a final answer."""


class NoChange(PluginError):
    """``provision`` only: nothing changed since the last attempt; the host
    retries later without a new event."""


class Reschedule(PluginError):
    """``provision`` only: the selected node cannot hold this volume; the
    host asks the scheduler to pick another node."""


class Ignored(PluginError):
    """``delete`` only: this plugin does not own the volume (e.g. it lives on
    another node); the host leaves it alone without an error event."""


class ParamError(InvalidArgument):
    """A class parameter that cannot be used; the message names it and the
    fix. In ``delete`` (parameters recorded on the volume) it becomes
    ``failed``, saying the recorded parameters are unusable."""
