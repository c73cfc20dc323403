"""One module per `rfclassify` subcommand: parse, call the library, print. Keep heavy imports inside run()."""
