"""The calibration commands' argument parser: one-line errors, as the ``scalemodel``
command's."""

from __future__ import annotations

import argparse


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block of twenty lines), exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")
