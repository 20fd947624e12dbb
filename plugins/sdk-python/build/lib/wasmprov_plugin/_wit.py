"""The bindings componentize-py generates from the WIT at build time.

Imported on first use, not when the SDK is imported, so that the pure
helpers (parameters, paths, sources) also work, and test, in plain Python.
"""


def types():
    from wit_world.imports import types

    return types


def logging():
    try:
        from wit_world.imports import logging
    except ImportError:  # plain Python: no host to log to
        return None
    return logging


def err(value):
    from componentize_py_types import Err

    return Err(value)
