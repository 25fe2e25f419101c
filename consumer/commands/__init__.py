"""One module per ``turnflow`` subcommand, each with ``add_arguments(parser)`` and ``run(args)``."""
