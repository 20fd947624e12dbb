"""Helpers for writing wasmprov plugins in Python, built with componentize-py.

A plugin is a module ``app`` with a class ``Plugin``::

    import wasmprov_plugin as sdk
    from wasmprov_plugin import claim, source

    class Plugin(sdk.Plugin):
        def provision(self, request):
            params = sdk.Params("mine", request.storage_class.parameters)
            params.reject_unknown(["server"])
            server = params.required("server", "the backend's address, e.g. 10.0.0.5")
            size = claim.check_filesystem_claim("mine", request)
            return sdk.volume(size, source.nfs(server, "/exports/" + request.pv_name))

        def delete(self, request):
            pass

built with ``componentize-py -d <wasmprov_plugin.WIT> -w provisioner
componentize app -o mine.wasm`` (``wasmprov plugin new NAME --lang python``
writes a project that does it).

- ``Params``: class parameters; errors name the parameter and the fix.
- ``claim``: the usual checks on a claim (size, access modes, volume mode...).
- ``path``: one safe component under a root, never an escape.
- ``source``: ``PersistentVolumeSource`` JSON builders and readers.
- ``log``: one-line logging into the host's log.
- ``errors``: the answers other than a volume (``InvalidArgument``,
  ``Failed``, ``Reschedule``, ``Ignored``...), raised as exceptions.

Files: Python's ``os`` and ``open`` work in the directories the operator's
sandbox policy preopens for the plugin, and nowhere else.
"""

import os

from . import claim, log, path, source
from .errors import (Failed, Ignored, InBackground, InvalidArgument, NoChange, ParamError,
                     PluginError, Reschedule)
from .params import Params, quote_list
from .plugin import Plugin, pin_to_node, volume

__version__ = "0.1.0"

WIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wit")
"""The directory of the WIT contract this SDK targets (``componentize-py -d``)."""

WORLD = "provisioner"
"""The world a plugin exports (``componentize-py -w``)."""

__all__ = [
    "Failed", "Ignored", "InBackground", "InvalidArgument", "NoChange", "ParamError", "Params",
    "Plugin", "PluginError", "Reschedule", "WIT", "WORLD", "claim", "log", "path",
    "pin_to_node", "quote_list", "source", "volume",
]
