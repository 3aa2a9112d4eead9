"""The exit statuses of the package's commands, which the start-up checks (``preflight``), the
commands and ``runworker --processes``' parent share: a leaf, so any of them may name one.

Process managers read them: systemd's ``RestartPreventExitStatus=78`` and the parent of
``runworker --processes`` do not restart a configuration error; the parent restarts a child that
recycled itself (``EX_TEMPFAIL``) at once, without backoff.

Internal: not part of the public API."""

EX_USAGE = 2  # argparse's exit status for a bad command line
EX_UNAVAILABLE = 69  # sysexits.h EX_UNAVAILABLE: the database did not answer within the wait
EX_TEMPFAIL = 75  # sysexits.h EX_TEMPFAIL: a worker process recycled itself (its limits); start a new one
EX_CONFIG = 78  # sysexits.h EX_CONFIG: what runworker exits with on a configuration error
