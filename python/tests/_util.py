"""Helpers the test modules share (the fixtures are in conftest.py)."""
import numpy as np

from shmap import P, NamedSharding


def put(c, mesh, a, spec=P()):
    """a (anything numpy takes) on the cluster of client c, laid out by spec
    over mesh."""
    return c.device_put(np.asarray(a), NamedSharding(mesh, spec))
