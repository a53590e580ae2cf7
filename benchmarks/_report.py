"""What the validation scripts' ``main()`` share: the parser with ``--no-write``, lines
printed as they come and kept for the results file, the closing line with the run time,
and the results written as one set.

Imported by validate_large_n.py, validate_llm.py and validate_transfer.py (each puts this
folder first on ``sys.path``, as it does for validate_sharded.py).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import scalemodel as sm


def parser(doc, no_write_help):
    """The script's argument parser: described by the first line of its docstring
    ``doc``, with the flag ``--no-write`` (help text ``no_write_help``)."""
    ap = argparse.ArgumentParser(description=first_paragraph(doc))
    ap.add_argument("--no-write", action="store_true", help=no_write_help)
    return ap


class Report:
    """Printed lines, kept in order; the clock starts when the report is made."""

    def __init__(self):
        self.lines = []
        self._t0 = time.perf_counter()

    def say(self, *text):
        """Print each line at once (flushed) and keep it."""
        for t in text:
            print(t, flush=True)
            self.lines.append(t)

    def elapsed_line(self):
        """The closing line: seconds since the report was made and scalemodel's version."""
        return f"({time.perf_counter() - self._t0:.0f} s; scalemodel {sm.__version__})"

    def write(self, path, others=None):
        """Write the kept lines to ``path`` (one a line, newline-ended) and ``others``
        (``{path: text}``) as one set (:func:`scalemodel.profiles.atomic_write_files`),
        making the folder of ``path`` first."""
        from scalemodel.profiles import atomic_write_files

        Path(path).parent.mkdir(exist_ok=True)
        atomic_write_files({path: "\n".join(self.lines) + "\n", **(others or {})})


def plain_parser(doc, writes=None):
    """The parser of a script with no options of its own: ``--help`` prints what it does
    (the first paragraph of ``doc``) and runs nothing, an unknown option is a usage
    error (exit status 2); with ``writes`` (the results file it rewrites, for the help
    text) the flag ``--no-write``."""
    ap = argparse.ArgumentParser(description=first_paragraph(doc))
    if writes:
        ap.add_argument("--no-write", action="store_true",
                        help=f"print the figures without rewriting {writes}")
    return ap


def positive(kind):
    """An ``argparse`` type: a ``kind`` (int or float) that is finite and > 0; a list of
    them, comma-separated, with ``positive((int,))`` [-]."""
    import math

    one = kind[0] if isinstance(kind, tuple) else kind

    def convert(text):
        try:
            values = [one(v) for v in text.split(",")] if isinstance(kind, tuple) \
                else [one(text)]
        except ValueError:
            what = f"a list of {one.__name__}s" if isinstance(kind, tuple) else \
                f"an {one.__name__}" if one is int else f"a {one.__name__}"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not all(math.isfinite(v) and v > 0 for v in values):
            raise argparse.ArgumentTypeError(
                f"{text!r}: {'every value' if isinstance(kind, tuple) else 'it'} must be > 0")
        return values if isinstance(kind, tuple) else values[0]
    convert.__name__ = one.__name__
    return convert


def first_paragraph(doc):
    """The first paragraph of a docstring, joined into one line (a ``--help``
    description that does not stop mid-sentence)."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def run_script(main, name):
    """``main()``'s exit status; Ctrl-C is one line on stderr and status 130 (the results
    are written as one set at the end, :meth:`Report.write`, so a file is either the old
    one or the new one)."""
    import sys

    try:
        return main()
    except KeyboardInterrupt:
        print(f"{name}: interrupted (a results file is either the old one or complete)",
              file=sys.stderr)
        return 130
