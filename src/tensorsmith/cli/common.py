"""What every subcommand shares: exit codes, the one-line error, --verbose and logging."""

from __future__ import annotations

import logging
import os

import click

EXIT_OK = 0
EXIT_FAILURE = 1  # the check failed (compare), or running failed
EXIT_USAGE = 2  # bad arguments, missing or unreadable files, a model or input tensorsmith rejects


class CliError(click.ClickException):
    """An error shown as one line on stderr, `error: ...`, with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE):
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def verbose_option(fn):
    """--verbose: DEBUG logs of tensorsmith (build passes, tactic trials) and tracebacks of errors."""

    def remember(ctx: click.Context, param, value: bool) -> bool:
        if value:
            ctx.find_root().meta["tensorsmith.verbose"] = True
            setup_logging(verbose=True)
        return value

    return click.option("--verbose", "-v", is_flag=True, expose_value=False, is_eager=True, callback=remember,
                        help="Log what tensorsmith does (passes, tactic trials) and show tracebacks.")(fn)


def is_verbose(ctx: click.Context | None = None) -> bool:
    ctx = ctx or click.get_current_context(silent=True)
    return bool(ctx and ctx.find_root().meta.get("tensorsmith.verbose"))


_HANDLER_NAME = "tensorsmith.cli"


def setup_logging(verbose: bool) -> None:
    """Send tensorsmith's logs to stderr: everything from DEBUG with --verbose, warnings otherwise.

    The logger's previous state comes back when the command ends (tests run many in one process)."""
    logger = logging.getLogger("tensorsmith")
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root() if ctx is not None else None
    if root is not None and "tensorsmith.logging" not in root.meta:
        saved = (list(logger.handlers), logger.level, logger.propagate)
        root.meta["tensorsmith.logging"] = saved
        root.call_on_close(lambda: _restore(logger, saved))
    for h in list(logger.handlers):
        if h.get_name() == _HANDLER_NAME:
            logger.removeHandler(h)
    handler = logging.StreamHandler(click.get_text_stream("stderr"))
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    handler.setLevel(logging.DEBUG if verbose else logging.WARNING)  # the progress line raises build's level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logger.propagate = False


def _restore(logger: logging.Logger, saved) -> None:
    handlers, level, propagate = saved
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logger.propagate = propagate


def check_readable(path: str, what: str = "model") -> str:
    """The path, if it names a readable file; else a one-line error naming it (exit 2)."""
    if not os.path.exists(path):
        raise CliError(f"cannot open {what} '{path}': no such file")
    if os.path.isdir(path):
        raise CliError(f"cannot open {what} '{path}': it is a directory")
    if not os.access(path, os.R_OK):
        raise CliError(f"cannot open {what} '{path}': permission denied")
    return path
