"""The build's progress line: `Layer i/n  12.3s  name: tactic`, redrawn in place on a terminal.

The builder logs one INFO record per tuned Layer on `tensorsmith.build` with the format
"[%d/%d %5.1fs] %s: %s%s" (index, count, seconds so far, Layer, tactic, cached); this
handler reads those records' arguments and ignores every other record.
"""

from __future__ import annotations

import logging
import shutil
from typing import TextIO

LAYER_RECORD_PREFIX = "[%d/%d"


class BuildProgress(logging.Handler):
    def __init__(self, stream: TextIO, width: int | None = None):
        super().__init__(logging.INFO)
        self.stream = stream
        self.width = width or shutil.get_terminal_size((100, 20)).columns
        self.active = False

    def emit(self, record: logging.LogRecord) -> None:
        if not isinstance(record.msg, str) or not record.msg.startswith(LAYER_RECORD_PREFIX):
            return
        try:
            i, n, seconds, layer, tactic = record.args[:5]
            cached = record.args[5] if len(record.args) > 5 else ""
        except (TypeError, ValueError):
            return
        text = f"Layer {i}/{n}  {float(seconds):6.1f}s  {layer}: {tactic}{cached}"
        text = text[: self.width - 1]
        self.stream.write("\r" + text.ljust(self.width - 1))
        self.stream.flush()
        self.active = True

    def finish(self) -> None:
        if self.active:
            self.stream.write("\n")
            self.stream.flush()
            self.active = False


class show_progress:
    """Context manager: the progress line on `stream` while the builder runs (when `enabled`)."""

    def __init__(self, stream: TextIO, enabled: bool):
        self.handler = BuildProgress(stream) if enabled else None
        self.logger = logging.getLogger("tensorsmith.build")

    def __enter__(self):
        if self.handler is not None:
            self.saved = self.logger.level
            if self.logger.getEffectiveLevel() > logging.INFO:
                self.logger.setLevel(logging.INFO)
            self.logger.addHandler(self.handler)
        return self

    def __exit__(self, *exc):
        if self.handler is not None:
            self.logger.removeHandler(self.handler)
            self.logger.setLevel(self.saved)
            self.handler.finish()
