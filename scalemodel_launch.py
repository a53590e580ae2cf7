"""The ``scalemodel`` command's entry point, outside the package: importing ``scalemodel``
(numpy, scipy, the models) takes about half a second, and a Ctrl-C in it would print the
import's traceback, since :func:`scalemodel.cli.main`, which ends an interrupt in one line,
is not yet running. Here the import itself ends an interrupt in one line too (also when
an extension module turns the interrupt into an ``ImportError``, as numpy's does)."""

import signal
import sys


def main():
    """Run :func:`scalemodel.cli.main` [-]; exit status 130 on Ctrl-C during the import."""
    caught = []

    def interrupted(signum, frame):
        caught.append(signum)
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, interrupted)
    except ValueError:  # not the main thread: import as it comes
        previous = None
    try:
        from scalemodel.cli import main as cli_main
    except (KeyboardInterrupt, ImportError):
        if not caught:
            raise
        print("scalemodel: interrupted", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
