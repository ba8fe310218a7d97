"""One module per `trident` subcommand: add_arguments(parser) and run(args) -> exit code."""
