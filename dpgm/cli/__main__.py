"""``python -m dpgm.cli``: the ``dpgm`` command."""

from dpgm.cli.entry import main

main()
