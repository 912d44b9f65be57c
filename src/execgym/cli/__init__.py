"""The ``execgym`` command line: a thin layer over the library API, a module per command.

- :mod:`~execgym.cli.group`: the ``execgym`` group (log options, signals) that imports
  a command's module only when it runs.
- :mod:`~execgym.cli.options`: the options several commands share, defined once.
- :mod:`~execgym.cli.score` (with :mod:`~execgym.cli.score_inputs` and
  :mod:`~execgym.cli.score_batch`), :mod:`~execgym.cli.validate`,
  :mod:`~execgym.cli.serve`, :mod:`~execgym.cli.worker`, :mod:`~execgym.cli.status`,
  :mod:`~execgym.cli.storage` (``data``, ``storage``, ``checkpoints``),
  :mod:`~execgym.cli.episodes`: one module per command.

Exit codes: 0 success; 1 execgym could not do the job (missing sandbox, unreadable
file, a failed write: the message says how to fix it); 2 bad usage; 3 ``score`` read a
damaged rollouts file (what was read is scored); 128 + the signal when stopped by
SIGINT (130), SIGHUP (129) or SIGTERM (143).
"""

from execgym.cli.group import main

__all__ = ["main"]
