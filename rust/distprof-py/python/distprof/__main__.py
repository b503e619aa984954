"""``python -m distprof``: the ``distprof`` command (see ``distprof._cli``)."""

from ._cli import main

main()
