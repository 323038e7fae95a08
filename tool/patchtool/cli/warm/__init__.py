"""A warm process for the commands that go on from a rebase stop (``rebase --continue``, ``--skip``,
``--abort``), so that each of them starts in milliseconds instead of re-importing everything.

Why: most of a ``--continue`` that goes to the next stop is starting Python and importing typer,
GitPython and patchtool (about 0.17 s of 0.3 s on a 2-core machine). A rebase that stops at a
conflict therefore leaves one process behind with those imports done; each later ``rebase
--continue/--skip/--abort`` is run by a fork of it, with the caller's command line, working
directory, umask, environment and standard streams (passed as file descriptors), and the
caller exits with its exit status. The command runs the same code it would run cold: only the
imports were done earlier.

What keeps it honest:

- **Nothing on disk.** The process listens on a Linux abstract socket: no file a repository could
  ship, replace or aim elsewhere.
- **Only its own world.** Both ends read the other's credentials (``SO_PEERCRED``) and, from
  /proc, its namespaces and root, groups and capabilities, no_new_privs and seccomp, resource
  limits, priority, cgroup and CPU affinity, and go on only when all of them are their own. A
  same-user process in a sandbox or container that shares the network namespace (and so could
  reach the name), or one under ``nice``, ``ulimit``, ``sg`` or ``taskset``, is neither served nor
  sent to: its command runs cold, in its world. The process runs nothing but ``rebase
  --continue/--skip/--abort``.
- **Only for what it was made for.** The socket's name is a digest of what decides what a
  command would run: the interpreter and its flags, every file of patchtool (name, size, mtime),
  every import path (and its mtime, which an install changes), the user, and the whole
  environment but ``_``, ``PWD``, ``OLDPWD`` and ``SHLVL``. A change to any of them finds no process,
  and the command runs cold, as before.
- **Run once.** The request is sent only after the process said it is ready; the fork reports its
  pid and runs the command only when the caller answers "go". Until the pid comes the caller may
  still run the command itself (nothing ran); a caller stopped before its "go" runs nothing, and
  neither does the fork. A request must arrive whole within two seconds, so a client that stalls
  blocks nobody for long, and the descriptors it sent are closed with it.
- **Signals as a terminal sends them.** The fork and the git it runs are a process group of their
  own, and Ctrl-C, SIGTERM, a hang-up, Ctrl-\\, Ctrl-Z (and the ``fg`` after it) and a resized
  window reach all of it; the fork has the caller's ignored signals (``nohup``) and mask. A
  caller killed outright takes the fork with it (SIGKILL, as a ``kill -9`` of a cold command
  would: the journal and the rebase state are made for that).
- **What still differs from a cold run:** the fork has no controlling terminal (it writes to
  yours through the descriptors, and patchtool never reads from it), its parent is the warm
  process, and it ends with ``os._exit`` after flushing its output and running its ``atexit``
  functions, so a finaliser that only the interpreter's own shutdown would run does not run.
- **Cheap to ask.** The caller imports only C modules (``_socket``, ``_signal``, ``_sha256``): the
  Python ``socket``, ``signal`` and ``json`` modules cost 20 ms of enum and regex set-up, a tenth
  of the command. Messages are length-prefixed byte fields, read without ``eval`` or pickle.
- **Short-lived.** The process exits once the rebase that started it is over (no state file), or
  after ten idle minutes with no command. ``PATCHTOOL_WARM=0`` turns all of it off; off Linux it
  is off.
"""


from __future__ import annotations

from patchtool.cli.warm.caller import run
from patchtool.cli.warm.identity import SWITCH
from patchtool.cli.warm.server import start

__all__ = ["SWITCH", "run", "start"]
