"""Shared by the Python tests: where the repository and the CLI are, and fresh random seeds
each run (the seed is in the header of pytest's output: TANDEM_TEST_SEED=N repeats a run)."""
import os
import time
import zlib

import numpy
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("TANDEM_CLI", os.path.join(ROOT, "build", "tandem"))
SEED = int(os.environ.get("TANDEM_TEST_SEED", int(time.time() * 1000) % 2**31))


def pytest_report_header(config):
    return "tandem: repository %s, CLI %s, seed %d (TANDEM_TEST_SEED=%d repeats it)" % (ROOT, CLI, SEED, SEED)


@pytest.fixture
def seed(request):
    """This test's seed: the run's, mixed with the test's name."""
    s = (SEED + zlib.crc32(request.node.nodeid.encode())) % 2**31
    torch.manual_seed(s)
    return s


@pytest.fixture
def rng(seed):
    return numpy.random.default_rng(seed)


def config(name):
    return os.path.join(ROOT, "configs", name)


def assert_close(got, want, tolerance, what=""):
    """|got - want| <= tolerance * max(1, max |want|), elementwise over the tensor."""
    got, want = numpy.asarray(got, dtype=numpy.float64), numpy.asarray(want, dtype=numpy.float64)
    assert got.shape == want.shape, "%s: shape %s, expected %s" % (what, got.shape, want.shape)
    if not want.size:
        return
    scale = max(1.0, float(numpy.abs(want).max()))
    error = float(numpy.abs(got - want).max())
    assert error <= tolerance * scale, "%s: differs by %.3g (tolerance %.1g x %.3g)" % (what, error, tolerance, scale)
