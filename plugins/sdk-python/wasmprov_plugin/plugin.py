"""The plugin base class and the values a plugin returns."""

import functools

from . import _wit
from .claim import HOSTNAME_LABEL
from .errors import (Failed, Ignored, InBackground, InvalidArgument, NoChange, ParamError,
                     Reschedule)

# How each exception answers each hook: the name of the WIT variant.
_PROVISION = {InvalidArgument: "InvalidArgument", Failed: "Failed",
              InBackground: "InBackground", NoChange: "NoChange", Reschedule: "Reschedule"}
_DELETE = {Failed: "Failed", Ignored: "Ignored"}


def _answer(error, variants, type_prefix):
    for cls in type(error).__mro__:
        if cls in variants:
            variant = getattr(_wit.types(), type_prefix + "_" + variants[cls])
            return _wit.err(variant(str(error)))
    # An answer this hook cannot give (e.g. InvalidArgument from delete):
    # a failure, saying what was wrong.
    message = str(error)
    if isinstance(error, ParamError):
        message = "the volume's recorded class parameters are unusable: " + message
    return _wit.err(getattr(_wit.types(), type_prefix + "_Failed")(message))


def _answering(hook, variants, type_prefix):
    @functools.wraps(hook)
    def answered(self, request):
        try:
            return hook(self, request)
        except (InvalidArgument, Failed, InBackground, NoChange, Reschedule, Ignored) as error:
            raise _answer(error, variants, type_prefix) from None

    return answered


class Plugin:
    """The base of a plugin's ``Plugin`` class (componentize-py exports the
    class named ``Plugin`` of the app module)::

        class Plugin(wasmprov_plugin.Plugin):
            def provision(self, request):
                ...
                return wasmprov_plugin.volume(size, source.host_path(directory))

            def delete(self, request):
                ...

    ``provision`` returns a volume (``volume()``) or raises one of the
    answers of ``wasmprov_plugin.errors``; ``delete`` returns nothing or
    raises ``Failed`` or ``Ignored``. The base turns each answer into its
    WIT error variant. Set ``block_volumes = True`` if the plugin provisions
    ``volumeMode: Block`` claims.
    """

    block_volumes = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Wrap the subclass's own hooks so that they can raise the SDK's
        # exceptions; componentize-py calls these methods directly.
        if "provision" in cls.__dict__:
            cls.provision = _answering(cls.__dict__["provision"], _PROVISION, "ProvisionError")
        if "delete" in cls.__dict__:
            cls.delete = _answering(cls.__dict__["delete"], _DELETE, "DeleteError")

    def capabilities(self):
        return _wit.types().PluginCapabilities(block_volumes=self.block_volumes)

    def provision(self, request):
        raise Failed("this plugin does not implement provision")

    def delete(self, request):
        raise Failed("this plugin does not implement delete")


def volume(capacity_bytes, source, node_affinity=None, mount_options=(), labels=(),
           annotations=()):
    """A volume of ``capacity_bytes`` reached through ``source`` (see the
    ``source`` module); labels and annotations are dicts or pairs."""
    return _wit.types().Volume(
        capacity_bytes=capacity_bytes, source=source, node_affinity=node_affinity,
        mount_options=list(mount_options), labels=_pairs(labels),
        annotations=_pairs(annotations))


def pin_to_node(node):
    """A node affinity that pins a volume to one node by its
    ``kubernetes.io/hostname`` label (its name when it has none)."""
    types = _wit.types()
    hostname = dict(node.labels).get(HOSTNAME_LABEL, node.name)
    return types.NodeAffinity(terms=[types.NodeSelectorTerm(match_expressions=[
        types.NodeSelectorRequirement(key=HOSTNAME_LABEL, operator=types.NodeSelectorOperator.IN,
                                      values=[hostname])])])


def _pairs(mapping):
    items = mapping.items() if isinstance(mapping, dict) else mapping
    return [(str(k), str(v)) for k, v in items]
