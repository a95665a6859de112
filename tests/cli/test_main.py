"""The group: --help everywhere, one-line errors with exit code 2, the installed entry points."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tensorsmith.cli.main import cli

SUBCOMMANDS = ["build", "run", "bench", "inspect", "compare", "passes"]


def test_help_lists_every_subcommand(tsm):
    r = tsm("--help")
    assert r.exit_code == 0
    for name in SUBCOMMANDS:
        assert name in r.stdout


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_subcommand_has_help(tsm, name):
    r = tsm(name, "--help")
    assert r.exit_code == 0
    assert "Usage: " in r.stdout and name in r.stdout


def test_unknown_subcommand_is_a_one_line_usage_error(tsm):
    r = tsm("frobnicate")
    assert r.exit_code == 2
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert "frobnicate" in r.stderr


def test_unknown_option_is_a_one_line_usage_error(tsm, mlp_path):
    r = tsm("build", mlp_path, "--no-such-flag")
    assert r.exit_code == 2
    assert r.stderr.startswith("error: ") and "--no-such-flag" in r.stderr and "Traceback" not in r.stderr


def test_unexpected_exceptions_print_one_line_and_a_hint(tsm, mlp_path, monkeypatch):
    import tensorsmith.builder

    def broken(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(tensorsmith.builder, "build", broken)
    r = tsm("run", mlp_path, "--target", "cpu")
    assert r.exit_code == 1
    assert r.stderr.strip() == "error: RuntimeError: boom (use --verbose for the traceback)"
    r = tsm("run", mlp_path, "--target", "cpu", "--verbose")
    assert "Traceback" in r.stderr and "error: RuntimeError: boom" in r.stderr


def test_passes_lists_the_pass_names(tsm):
    r = tsm("passes")
    assert r.exit_code == 0 and "layer_fusion" in r.stdout


def _env():
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.abspath(src) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_module_entry_point_runs_as_a_subprocess():
    done = subprocess.run([sys.executable, "-m", "tensorsmith.cli.main", "--help"], capture_output=True,
                          text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "compare" in done.stdout


def test_subprocess_errors_are_one_line_with_exit_code_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tensorsmith.cli.main", "inspect", str(tmp_path / "nope.onnx")],
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: cannot open model '{tmp_path / 'nope.onnx'}': no such file"


def test_main_is_the_declared_script():
    import tomllib

    root = os.path.join(os.path.dirname(__file__), "..", "..")
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts["tensorsmith"] == "tensorsmith.cli.main:main"
    assert cli.name


def test_logging_state_is_restored_after_a_command(tsm, mlp_path):
    import logging

    logger = logging.getLogger("tensorsmith")
    before = (list(logger.handlers), logger.level, logger.propagate)
    assert tsm("build", mlp_path, "--target", "cpu", "--verbose").exit_code == 0
    assert (list(logger.handlers), logger.level, logger.propagate) == before


def test_installed_tensorsmith_script():
    import shutil

    exe = shutil.which("tensorsmith")
    if exe is None:
        pytest.skip("the package is not installed (pip install -e .)")
    done = subprocess.run([exe, "--help"], capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0 and "inspect" in done.stdout
