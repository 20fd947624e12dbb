"""Logging into the host's log stream (``wasmprov:provisioner/logging``).

The host attributes every line to the plugin and the volume being processed,
truncates long messages and caps lines per call. Outside a component (plain
Python, unit tests) lines go to stderr instead::

    log.info("created volume directory", pv=request.pv_name, path=directory)
"""

import sys

from . import _wit


def log(level, message, **fields):
    """One line at ``level`` (``"trace"``, ``"debug"``, ``"info"``,
    ``"warn"`` or ``"error"``) with key/value ``fields``."""
    pairs = [(key, str(value)) for key, value in fields.items()]
    logging = _wit.logging()
    if logging is None:
        print("[%s] %s %s" % (level, message, pairs), file=sys.stderr)
    else:
        logging.log(getattr(logging.Level, level.upper()), message, pairs)


def trace(message, **fields):
    log("trace", message, **fields)


def debug(message, **fields):
    log("debug", message, **fields)


def info(message, **fields):
    log("info", message, **fields)


def warn(message, **fields):
    log("warn", message, **fields)


def error(message, **fields):
    log("error", message, **fields)
