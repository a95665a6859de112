"""`tensorsmith`: the command line (build, run, bench, inspect, compare), as trtexec and Polygraphy.

Exit codes: 0 success, 1 failure (compare FAIL, an error while running), 2 bad usage or
bad input (arguments, missing or unreadable files, models or engines tensorsmith rejects).
Errors are one line on stderr, `error: ...`; `--verbose` adds the traceback.
"""

from __future__ import annotations

import traceback

import click

from ..errors import ExecutionError, TensorsmithError
from .common import EXIT_FAILURE, EXIT_USAGE, CliError, is_verbose, setup_logging


class UsageLine(click.UsageError):
    """A usage error as one line, with the --help to read."""

    def show(self, file=None) -> None:
        hint = f" (see '{self.ctx.command_path} --help')" if self.ctx is not None else ""
        click.echo(f"error: {self.format_message()}{hint}", err=True)


def _one_line(e: click.UsageError) -> UsageLine:
    out = UsageLine(e.format_message(), e.ctx)
    out.exit_code = EXIT_USAGE
    return out


class TensorsmithGroup(click.Group):
    """Turns every error into `error: ...` on stderr with the right exit code, never a traceback."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except UsageLine:
            raise
        except click.UsageError as e:
            raise _one_line(e) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.Abort, UsageLine, CliError):
            raise
        except click.UsageError as e:
            raise _one_line(e) from None
        except click.ClickException as e:
            raise CliError(e.format_message(), e.exit_code) from None
        except TensorsmithError as e:
            _traceback_if_verbose(ctx)
            raise CliError(str(e), EXIT_FAILURE if isinstance(e, ExecutionError) else EXIT_USAGE) from None
        except Exception as e:  # a bug or an environment problem: one line, the traceback on request
            _traceback_if_verbose(ctx)
            hint = "" if is_verbose(ctx) else " (use --verbose for the traceback)"
            raise CliError(f"{type(e).__name__}: {e}{hint}", EXIT_FAILURE) from None


def _traceback_if_verbose(ctx) -> None:
    if is_verbose(ctx):
        click.echo(traceback.format_exc().rstrip(), err=True)


CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(cls=TensorsmithGroup, context_settings=CONTEXT)
@click.version_option(package_name="tensorsmith", prog_name="tensorsmith")
def cli():
    """tensorsmith: build, run, benchmark, inspect and check inference engines.

    \b
    A first session, from an ONNX file to a benchmark table:
      tensorsmith build model.onnx -o model.tsmith --fp16
      tensorsmith inspect model.tsmith
      tensorsmith compare model.onnx --fp16
      tensorsmith bench model.tsmith --profile
    """
    setup_logging(verbose=False)


def _register() -> None:
    from .bench import bench
    from .build import build, passes
    from .compare import compare
    from .inspect import inspect
    from .run import run

    for command in (build, run, bench, inspect, compare, passes):
        cli.add_command(command)


_register()


def main(argv: list[str] | None = None) -> None:
    """The `tensorsmith` script."""
    cli.main(args=argv, prog_name="tensorsmith")


if __name__ == "__main__":
    main()
