"""Upstream code a model needs: clone its repository at the commit the record pins, reuse a matching checkout, put
it on the import path and load its modules (stdlib and git only: runs wherever git does)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from medvision_bm.errors import UserError
from medvision_bm.models.registry import ModelRecord, ThirdParty

_FULL_SHA = re.compile(r"[0-9a-f]{40}")
#: Seconds one git command may take (a clone of the largest upstream repository is well under this).
GIT_TIMEOUT_S = 900


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run git without ever waiting for a credential prompt (an unreachable or private URL fails at once)."""
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GCM_INTERACTIVE="never")
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    try:
        return subprocess.run(["git", "-c", "advice.detachedHead=false", *args], cwd=cwd, capture_output=True,
                              text=True, timeout=GIT_TIMEOUT_S, env=env)
    except FileNotFoundError:
        raise UserError("git is not on PATH; install git to fetch the third-party model code") from None
    except subprocess.TimeoutExpired:
        raise UserError(f"`git {args[0]}` ran over {GIT_TIMEOUT_S}s in {cwd or Path.cwd()}; check the network, "
                        "or clone the repository yourself") from None


def _reason(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln.strip() for ln in (proc.stderr or "").splitlines() if ln.strip()]
    return lines[-1] if lines else f"git exited with {proc.returncode}"


def repo_dir_name(repo_url: str) -> str:
    """The folder a repository is cloned into: the last part of its URL or path, without ``.git``."""
    return re.split(r"[/:\\]", repo_url.rstrip("/\\"))[-1].removesuffix(".git")


def _has_commit(repo: Path, commit: str) -> bool:
    return _git("cat-file", "-e", f"{commit}^{{commit}}", cwd=repo).returncode == 0


def _head(repo: Path) -> str | None:
    proc = _git("rev-parse", "HEAD", cwd=repo)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _pin(repo: Path, commit: str, missing: str) -> None:
    """Check out ``commit`` in ``repo`` (fetching it from origin if needed); ``missing`` is the error when absent."""
    if not _has_commit(repo, commit):
        _git("fetch", "--quiet", "origin", cwd=repo)
    if not _has_commit(repo, commit):
        # a commit no branch reaches any more: GitHub still serves it by hash
        _git("fetch", "--quiet", "origin", commit, cwd=repo)
    if not _has_commit(repo, commit):
        raise UserError(missing)
    done = _git("checkout", "--quiet", "--detach", commit, cwd=repo)
    if done.returncode != 0:
        raise UserError(f"cannot check out commit {commit[:12]} in {repo} ({_reason(done)}); local changes there "
                        "block it: save them elsewhere and remove the folder, so it is cloned afresh")


def checkout(tp: ThirdParty, root: Path) -> Path:
    """Clone ``tp.repo_url`` into ``root/<name>`` at ``tp.commit``; a checkout already there is reused (no network
    when it already sits at the commit). Returns the checkout folder.

    A fresh clone is made in a temporary sibling folder and renamed into place only once it is at the pinned
    commit, so an interrupted clone never leaves a half-made checkout behind, and two processes cloning at once both
    end up with the same complete one."""
    commit = tp.commit.strip().lower()
    if not _FULL_SHA.fullmatch(commit):
        raise UserError(f"the pin {tp.commit!r} for {tp.repo_url} is not a full 40-character commit hash; pin the "
                        "exact commit in the model record")
    root = Path(root)
    dest = root / repo_dir_name(tp.repo_url)
    if dest.exists():
        return _reuse(tp, dest, commit)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create the third-party folder {root} ({exc.strerror}); give --dir_third_party a "
                        "folder you can write to") from None
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=root))
    try:
        cloned = _git("clone", "--quiet", "--no-checkout", tp.repo_url, str(tmp))
        if cloned.returncode != 0:
            raise UserError(f"cannot clone {tp.repo_url} ({_reason(cloned)}); check the URL and the network, or "
                            f"clone it yourself into {dest} and check out commit {commit}")
        _pin(tmp, commit, f"commit {commit} is not in {tp.repo_url}; the record's pin is wrong or the upstream "
                          "history was rewritten")
        try:
            tmp.rename(dest)
        except OSError:
            if not dest.exists():
                raise
            return _reuse(tp, dest, commit)  # another process renamed its clone into place first
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _reuse(tp: ThirdParty, dest: Path, commit: str) -> Path:
    if not (dest / ".git").exists():
        raise UserError(f"{dest} exists but is not a git checkout of {tp.repo_url}; remove it, or give "
                        "--dir_third_party another folder")
    if _head(dest) == commit:
        return dest
    origin = _git("remote", "get-url", "origin", cwd=dest).stdout.strip() or "no origin remote"
    _pin(dest, commit, f"commit {commit} of {tp.repo_url} is not in the checkout {dest} nor in its origin "
                       f"({origin}); remove the folder so it is cloned afresh from {tp.repo_url}")
    return dest


def _put_on_path(path: Path) -> None:
    """First on ``sys.path`` (the upstream package wins over an installed one of the same name) and on PYTHONPATH
    (for subprocesses), each once."""
    entry = str(path)
    while entry in sys.path:
        sys.path.remove(entry)
    sys.path.insert(0, entry)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != entry]
    os.environ["PYTHONPATH"] = os.pathsep.join([entry, *parts])


def prepare_third_party(record: ModelRecord, dir_third_party: str | None) -> list[Path]:
    """Check out every upstream repository of the record and put its import folder on ``sys.path`` (and
    PYTHONPATH). Returns the import folders, in the record's order."""
    if not record.third_party:
        return []
    if not dir_third_party:
        raise UserError(f"{record.display_name} needs its upstream code: pass --dir_third_party DIR (each "
                        "repository is cloned there at its pinned commit, or reused when already there)")
    root = Path(dir_third_party).expanduser().resolve()
    paths = []
    for tp in record.third_party:
        path = checkout(tp, root)
        import_path = path / tp.import_subdir if tp.import_subdir else path
        if not import_path.is_dir():
            raise UserError(f"commit {tp.commit[:12]} of {tp.repo_url} has no folder {tp.import_subdir!r} to import "
                            "from; the record's import_subdir is wrong")
        _put_on_path(import_path)
        paths.append(import_path)
    importlib.invalidate_caches()
    return paths


def _load_module(path: Path, name: str) -> ModuleType:
    """Import one upstream file under a name of our choosing (upstream files named ``cli.py`` or ``utils.py`` would
    otherwise collide with any other top-level module of that name)."""
    if name in sys.modules:
        return sys.modules[name]
    if not path.is_file():
        raise UserError(f"{path} is missing: the upstream checkout is not the code this adapter was written for")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
