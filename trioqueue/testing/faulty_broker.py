"""``python -m trioqueue.testing.faulty_broker``: the real broker on a failing store.

The same as ``trioqueue serve`` (same flags, same ready line, same exit statuses), with
the store wrapped in :class:`~trioqueue.testing.faults.FaultyStorage`::

    python -m trioqueue.testing.faulty_broker --fail-commit-at 50 --data-dir /tmp/d

For fault tests, yours included: the broker must stop acknowledging at the failure and
exit with status 3, and a restart (plain ``trioqueue serve``) must find everything it
acknowledged.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from ..actors.broker import open_storage
from ..cli import build_parser, config_from, run_serve
from ..server.run import new_broker
from .faults import FaultyStorage


def main(argv: Sequence[str] | None = None) -> int:
    faults = argparse.ArgumentParser(add_help=False)
    faults.add_argument("--fail-commit-at", type=int, default=None,
                        help="the Nth commit (1-based) raises")
    faults.add_argument("--fail-sync-at", type=int, default=None,
                        help="the Nth fsync raises")
    faults.add_argument("--commit-delay-s", type=float, default=0.0,
                        help="every commit blocks this long first")
    injected, rest = faults.parse_known_args(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(["serve", *rest])
    config = config_from(args, os.environ)
    config.validate()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    storage = FaultyStorage(open_storage(config), fail_commit_at=injected.fail_commit_at,
                            fail_sync_at=injected.fail_sync_at,
                            commit_delay_s=injected.commit_delay_s)
    return run_serve(config, new_broker(config, storage))


if __name__ == "__main__":
    sys.exit(main())
