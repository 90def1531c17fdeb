"""gazctl: the command-line tool of a Gazette broker cluster.

``gazctl journals <command>`` lists, applies, edits, reads and appends to
journals, lists and prunes their fragments, suspends them, resets their
heads and checks fragment stores, with the command names and flags of
Gazette's own ``gazctl`` (``cmd/gazctl/gazctlcmd/journals_*.go``). It talks
to brokers only through ``gazette.broker.client``; ``prune`` alone also
deletes fragment files from stores itself, as Gazette's does.

Modules:

- :mod:`cli` — the root of the click command tree (``gazctl`` console
  script, ``python -m gazette.gazctl``).
- :mod:`journals` — the ``journals`` commands, one module per kind of work,
  and :func:`journals.reset_head`.
- :mod:`options` — the flags commands share: ``--broker.*``, ``-l/--selector``.
- :mod:`runner` — runs a command's coroutine; failures as one line on stderr,
  exit status 1.
- :mod:`lazy` — command groups whose commands' modules are imported only when
  the command runs, so a one-shot command starts quickly.
- :mod:`output` — tables, JSON and progress lines.

Usage::

    $ gazctl journals list -l topic=logs
    $ echo hello | gazctl journals append -l name=examples/logs/api
    $ gazctl journals read -l name=examples/logs/api
    hello
"""

__all__: list[str] = []
