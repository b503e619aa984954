"""The ``distprof`` command of the wheel: runs the CLI of rust/distprof-cli (compiled into
``distprof._native``, the same code as the cargo-built binary) with this process's arguments
and exits with its status. Its output goes straight to this process's stdout and stderr.
``python -m distprof`` is the same command."""

import signal
import sys


def main():
    # Python turns SIGINT into KeyboardInterrupt, which it checks only between bytecodes:
    # inside the Rust call Ctrl-C would do nothing. The binary dies of SIGINT; so does this.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    from . import _native

    # Commands that spawn themselves (`distprof local` starts its nodes as `distprof run`)
    # restart this interpreter on this package, not the interpreter alone.
    relaunch = [sys.executable, "-m", "distprof"]
    # The program name clap shows in usage lines: the command's, also under `python -m`.
    sys.exit(_native.cli_main(["distprof"] + sys.argv[1:], relaunch))


if __name__ == "__main__":
    main()
