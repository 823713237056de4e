"""Where the workspace's checks (``mesh agent --check CMD``) run: a bubblewrap sandbox.

The model writes the workspace (a ``Makefile``, ``package.json`` scripts, a
``conftest.py``), so a check such as ``make test`` runs the model's code. It gets
what a build needs and nothing an attacker wants (docs/decisions/031-peer-isolation.md):

- the file system read-only, the workspace its only writable folder;
- an empty ``/tmp``, ``/run`` (no Unix sockets of the host's services) and HOME;
- the runtime's HOME, state folders, config file and the CLI's config folder hidden
  (an empty tmpfs over a folder, ``/dev/null`` over a file);
- no network (its own, empty, network namespace), its own PIDs (no
  ``/proc/<runtime>/environ``), no capabilities, a new session (no terminal injection);
- only the variables of :data:`KEEP_ENV` (an allow-list: no ``MESH_*``,
  ``ANTHROPIC_*``, tokens).

Without ``bwrap`` on PATH ``mesh agent --check`` refuses to start unless
``--unsafe-check`` is given; the checks then run with the same scrubbed
environment and an empty HOME, but see everything the runtime's user sees.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from meshd.errors import ConfigError

KEEP_ENV = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TERM", "TZ")
SANDBOX_HOME = "/tmp/check-home"
# Folders whose contents belong to the host, not to a build: emptied inside the sandbox.
FRESH = ("/tmp", "/var/tmp", "/run", "/var/run", "/dev/shm")


def locate(unsafe: bool) -> str | None:
    """The ``bwrap`` to run checks with; None (unsandboxed) only when ``unsafe`` says so."""
    found = shutil.which("bwrap")
    if found or unsafe:
        return found
    raise ConfigError(
        "--check runs commands from the workspace, which the model writes, so it runs them "
        "in a bubblewrap sandbox, and `bwrap` is not on PATH: install it (Debian/Ubuntu: "
        "apt-get install bubblewrap) or pass --unsafe-check to run the checks without a sandbox"
    )


def check_env(home: str, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a check gets: the allow-listed variables and an empty HOME."""
    env = os.environ if env is None else env
    out = {k: env[k] for k in KEEP_ENV if k in env}
    out.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    out.update(HOME=home, TMPDIR="/tmp")
    return out


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass(frozen=True)
class Sandbox:
    bwrap: str | None  # None: --unsafe-check, no sandbox
    workspace: Path
    hidden: tuple[Path, ...] = ()

    @classmethod
    def for_runtime(cls, bwrap: str | None, workspace: Path, hidden: Iterable[Path]) -> Sandbox:
        real = {Path(os.path.realpath(p)) for p in hidden}
        return cls(bwrap, Path(os.path.realpath(workspace)), tuple(sorted(real)))

    def _hide(self, path: Path) -> list[str]:
        if path.is_dir():
            return ["--tmpfs", str(path)]
        if path.exists():
            return ["--ro-bind", "/dev/null", str(path)]
        return []

    def argv(self, command: str) -> list[str]:
        """``bwrap … /bin/sh -c command`` (or the shell alone without a sandbox)."""
        shell = ["/bin/sh", "-c", command]
        if self.bwrap is None:
            return shell
        ws = self.workspace
        args = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for fresh in FRESH:
            if Path(fresh).is_dir() and not Path(fresh).is_symlink():
                args += ["--tmpfs", fresh]
        # A hidden folder holding the workspace is hidden before the workspace is bound
        # into it; one inside the workspace after, so it stays hidden.
        inner = [h for h in self.hidden if _under(h, ws)]
        for h in self.hidden:
            if h not in inner:
                args += self._hide(h)
        args += ["--bind", str(ws), str(ws)]
        for h in inner:
            if h != ws:
                args += self._hide(h)
        args += ["--dir", SANDBOX_HOME, "--chdir", str(ws), "--unshare-all", "--die-with-parent",
                 "--new-session", "--cap-drop", "ALL", "--", *shell]  # fmt: skip
        return args

    def home(self) -> tempfile.TemporaryDirectory[str] | None:
        """An empty HOME for an unsandboxed check (the sandbox makes its own)."""
        return tempfile.TemporaryDirectory(prefix="mesh-check-home-") if self.bwrap is None else None
