"""The {{name}} plugin for wasmprov: each volume is a directory
``<hostRoot>/<pv-name>`` on the node, served to pods as a ``hostPath`` volume.

The plugin sees the node only through the directory the operator's sandbox
policy preopens for it: ``hostRoot`` at the guest path ``root``.

StorageClass parameters:
- ``hostRoot`` (required): the directory on the node that holds the volumes;
- ``root`` (default ``/volumes``): where the policy preopens ``hostRoot``.

Unknown parameters are refused, so that an operator's typo is reported
instead of ignored. Change what you need: ``wasmprov plugin test`` says what
the host expects of every answer.
"""

import os
import shutil

import wasmprov_plugin as sdk
from wasmprov_plugin import claim, log, path, source

PLUGIN = "{{name}}"
HOST_ROOT = "hostRoot"
ROOT = "root"
DEFAULT_ROOT = "/volumes"


def readme(request):
    return "Volume %s of the claim %s/%s, made by the %s plugin of wasmprov.\n" % (
        request.pv_name, request.claim.namespace, request.claim.name, PLUGIN)


class Plugin(sdk.Plugin):
    def provision(self, request):
        params = sdk.Params(PLUGIN, request.storage_class.parameters)
        params.reject_unknown([HOST_ROOT, ROOT])
        host_root = params.abs_path(
            HOST_ROOT, None,
            "the directory on the node that holds the volumes, e.g. /var/lib/{{name}}")
        root = params.abs_path(ROOT, DEFAULT_ROOT, "where the policy preopens hostRoot")
        # A size above 0, a filesystem volume, a safe pv-name.
        size = claim.check_filesystem_claim(PLUGIN, request)
        directory = path.join(root, request.pv_name)
        host_directory = path.join(host_root, request.pv_name)
        # Asked again after a restart: the same directory is the same volume.
        try:
            os.mkdir(directory)
            log.info("created volume directory", path=host_directory)
        except FileExistsError:
            if not os.path.isdir(directory):
                raise sdk.Failed("%s exists and is not a directory" % directory)
        except OSError as e:
            raise sdk.Failed("create %s: %s; the policy must preopen %s read-write at %s"
                             % (directory, e.strerror, host_root, root))
        # Who the volume belongs to, for whoever finds it on the node.
        try:
            with open(path.join(directory, "README.txt"), "w", encoding="utf-8") as f:
                f.write(readme(request))
        except OSError as e:
            raise sdk.Failed("write %s/README.txt: %s" % (directory, e.strerror))
        return sdk.volume(size, source.host_path(host_directory, "Directory"))

    def delete(self, request):
        params = sdk.Params(PLUGIN, request.parameters)
        root = params.abs_path(ROOT, DEFAULT_ROOT, "where the policy preopens hostRoot")
        try:
            directory = path.join(root, request.pv_name)
        except ValueError as e:
            raise sdk.Failed(str(e))
        try:
            shutil.rmtree(directory)
            log.info("removed volume directory", path=directory)
        except FileNotFoundError:
            # Already gone is success (the host retries deletes), as long as
            # the root is there: a missing preopen is not a deleted volume.
            if not os.path.isdir(root):
                raise sdk.Failed("%s is missing; the policy must preopen hostRoot at %s"
                                 % (root, root))
        except OSError as e:
            raise sdk.Failed("remove %s: %s" % (directory, e.strerror))
