"""CLI test helpers: the click group run in-process, and small models written to a temp dir."""

from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner

from tensorsmith.cli.main import cli
from tests.conftest import make_mlp_model


class Result:
    def __init__(self, r):
        self.exit_code, self.stdout, self.stderr = r.exit_code, r.stdout, r.stderr
        self.exception = r.exception


@pytest.fixture
def tsm():
    """tsm("build", "m.onnx", ...) -> Result with exit_code, stdout, stderr (separately)."""
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 keeps them apart always
        runner = CliRunner()

    def invoke(*args):
        return Result(runner.invoke(cli, [str(a) for a in args], catch_exceptions=False))

    return invoke


@pytest.fixture
def mlp_path(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(make_mlp_model(), str(path))
    return path


@pytest.fixture
def engine_path(tsm, mlp_path, tmp_path):
    out = tmp_path / "mlp.tsmith"
    r = tsm("build", mlp_path, "-o", out, "--target", "cpu")
    assert r.exit_code == 0, r.stderr
    return out
