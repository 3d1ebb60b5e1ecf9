"""The standalone broker: the server that composes the broker and its listeners
(:mod:`.run`), how ``trioqueue serve`` ends (:mod:`.serve_exit`), and the process's
tuning that only a standalone broker applies (:mod:`.process_heap`, :mod:`.gc_passes`).

Kept light: ``cli.py`` imports :mod:`.serve_exit` for every subcommand, and the broker
is imported only by :mod:`.run`."""
