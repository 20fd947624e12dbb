"""The checks most plugins make on a provision request, with messages that
name the claim field and the fix. Every refusal raises ``InvalidArgument``.
"""

from . import _wit, path
from .errors import InvalidArgument

HOSTNAME_LABEL = "kubernetes.io/hostname"
"""The node label node affinity is usually expressed with."""


def check_filesystem_claim(plugin, request):
    """Checks a claim for a plugin that makes empty filesystem volumes: a
    size above 0, at least one access mode, ``volumeMode: Filesystem``, no
    data source, no selector, and a PV name that is a safe directory name.
    Returns the requested size in bytes."""
    claim = request.claim
    if claim.requested_bytes == 0:
        raise InvalidArgument(
            "the claim requests 0 bytes: set spec.resources.requests.storage to a positive size")
    if not claim.access_modes:
        raise InvalidArgument(
            "the claim has no access modes: set spec.accessModes, e.g. [ReadWriteOnce]")
    if claim.volume_mode == _wit.types().VolumeMode.BLOCK:
        raise InvalidArgument(
            "the claim asks for a block volume (volumeMode: Block); the %s plugin only provides "
            "filesystem volumes" % plugin)
    if claim.data_source is not None:
        raise InvalidArgument(
            "the claim wants its data copied from %s %r; the %s plugin cannot pre-populate "
            "volumes (no snapshots or cloning)"
            % (claim.data_source.kind, claim.data_source.name, plugin))
    if claim.selector is not None:
        raise InvalidArgument(
            "the claim has a spec.selector; the %s plugin cannot select among existing volumes: "
            "remove the selector" % plugin)
    try:
        path.check_pv_name(request.pv_name)
    except ValueError as e:
        raise InvalidArgument(str(e))
    return claim.requested_bytes


def selected_node(request, needed_by):
    """The selected node, for a class that needs one (``needed_by`` names the
    parameter or feature in the message)."""
    if request.selected_node is not None:
        return request.selected_node
    if request.storage_class.volume_binding_mode == _wit.types().VolumeBindingMode.IMMEDIATE:
        fix = ("the StorageClass has volumeBindingMode: Immediate; set it to "
               "WaitForFirstConsumer")
    else:
        fix = ("the class waits for the first consumer but no node was selected yet (with "
               "`wasmprov plugin invoke`, pass --node)")
    raise InvalidArgument(
        "%s pins the volume to the selected node, but the request has none: %s" % (needed_by, fix))


def annotation(request, key):
    """The value of a claim annotation, or ``None``."""
    return dict(request.claim.annotations).get(key)
