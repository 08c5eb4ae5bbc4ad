"""``python -m ferrokafka``: the same command line as the ``ferrokafka`` script."""

from ferrokafka.cli import main

raise SystemExit(main())
