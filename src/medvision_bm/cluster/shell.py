"""The one rule for every value written into a generated job script: one line, quoted, and never a secret.

- A value holding a control character (a newline above all) is refused with a one-line error naming where it came
  from: a newline in a job script is a new command, and in a ``#SBATCH`` line the end of the directive.
- Shell words are quoted with :func:`shlex.quote`, so ``$(...)``, backquotes, ``;`` and spaces stay text.
- ``#SBATCH`` values are quoted for sbatch's own directive parser (double quotes, ``\\`` and ``"`` escaped), so a
  path with a space or a ``#`` stays one value; plain values are written as they are.
- A value that holds a secret (what :func:`medvision_bm.secrets.redact_argv` hides: a key flag's value, a URL's
  password or token) is not written: the script reads it from an environment variable that ``submit`` sets for
  the jobs it starts (sbatch passes the submitting environment on, as by default), and says so in its header.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from medvision_bm.errors import UserError
from medvision_bm.paths import has_control_char, show
from medvision_bm.secrets import redact, redact_argv

#: Prefix of the variables that carry secret values into the jobs.
SECRET_VAR = "MEDVISION_JOB_SECRET_"
_PLAIN_DIRECTIVE = re.compile(r"[A-Za-z0-9_@%+=:,./\-]+")
_SBATCH_OPTION = re.compile(r"(--[A-Za-z][A-Za-z0-9-]*)(?:=(.*))?|(-[A-Za-z])(.*)", re.S)


def one_line(value: object, what: str) -> str:
    """``str(value)``, or a UserError when it holds a control character."""
    text = str(value)
    if has_control_char(text):
        raise UserError(f"{what} {show(text)} contains a control character (a newline, tab, ...); a value written "
                        "into a job script must be one line of text")
    return text


def sh(value: object, what: str = "a value of the job script") -> str:
    """One shell word."""
    return shlex.quote(one_line(value, what))


def directive_value(value: object, what: str) -> str:
    """A value of an ``#SBATCH --flag=VALUE`` line as sbatch reads it back."""
    text = one_line(value, what)
    if _PLAIN_DIRECTIVE.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sbatch_option(arg: str, what: str = "--sbatch_arg") -> str:
    """One extra sbatch option (``--constraint=a100``, ``--exclusive``, ``-N2``) as an ``#SBATCH`` line's text."""
    text = one_line(arg, what)
    m = _SBATCH_OPTION.fullmatch(text)
    if m is None:
        raise UserError(f"{what} {show(text)} is not one sbatch option; write --name=value or --name "
                        "(e.g. --sbatch_arg=--constraint=a100), one per --sbatch_arg")
    if m[1]:
        return m[1] if m[2] is None else f"{m[1]}={directive_value(m[2], what)}"
    return m[3] + (directive_value(m[4], what) if m[4] else "")


@dataclass
class JobSecrets:
    """Secret values of a plan, each carried into the jobs by one environment variable."""

    names: dict[str, str] = field(default_factory=dict)  # value -> variable name

    def ref(self, value: str) -> str:
        """The shell text that expands to ``value`` in a job (the value itself is never written)."""
        name = self.names.setdefault(value, f"{SECRET_VAR}{len(self.names) + 1}")
        return f'"${{{name}:?is not set; export it as submit did (the header of this script says so)}}"'

    def words(self, argv: list[str], what: str) -> str:
        """``argv`` as shell words, each one that holds a secret read from the job's environment."""
        shown = redact_argv(list(argv))
        return " ".join(self.ref(one_line(a, what)) if s != a else sh(a, what) for a, s in zip(argv, shown))

    def value(self, value: str, what: str) -> str:
        """One shell word for a setting's value (a URL with credentials, say)."""
        text = one_line(value, what)
        return self.ref(text) if redact(text) != text else sh(text, what)

    def environment(self) -> dict[str, str]:
        """What the jobs' environment must hold: variable -> value."""
        return {name: value for value, name in self.names.items()}
