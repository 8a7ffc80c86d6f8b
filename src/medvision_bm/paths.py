"""The one rule for user-supplied names that become a path component (model names, shard labels, task names, tags).

A name is used as ONE folder or file-name part under a folder the suite owns, so it must not be able to leave that
folder or hide: no path separators, not ``.`` or ``..``, not empty, no leading dot, no control characters (NUL
included) and no Unicode format characters (category Cf: the bidi overrides and isolates such as U+202E, which show
a name reversed, zero-width spaces and joiners), no leading/trailing whitespace, at most 200 characters. Anything else (letters of any script, digits,
``-_.+@=,:`` and spaces inside) is kept as given, so existing results folders keep their names.
"""

from __future__ import annotations

import os
import re
import unicodedata
from pathlib import Path

from medvision_bm.errors import UserError

#: Longest name accepted (ext4 allows 255 bytes; room is left for the suffixes the suite adds).
MAX_COMPONENT_CHARS = 200
ALLOWED = ("a single folder name: no '/' or '\\', not '.' or '..', no leading dot, no control or format characters, "
           f"no leading or trailing spaces, at most {MAX_COMPONENT_CHARS} characters")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _hidden_char(text: str) -> bool:
    """Whether ``text`` holds a control character or a Unicode format character (category Cf: U+202E and the other
    bidi controls, zero-width spaces and joiners, U+FEFF): characters that change or hide how a name reads."""
    if _CONTROL.search(text):
        return True
    return not text.isascii() and any(unicodedata.category(c) == "Cf" for c in text)


def component_problem(name: object) -> str | None:
    """Why ``name`` cannot be one path component, or None when it can."""
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not text"
    if not name:
        return "is empty"
    if name in (".", ".."):
        return f"is {name!r}"
    if "/" in name or "\\" in name:
        return "contains a path separator"
    if _hidden_char(name):
        return "contains a control or format character"
    if name.startswith("."):
        return "starts with a dot"
    if name != name.strip():
        return "starts or ends with whitespace"
    if len(name) > MAX_COMPONENT_CHARS:
        return f"is {len(name)} characters long"
    return None


def has_control_char(text: str) -> bool:
    """Whether ``text`` holds a control character (newline, carriage return, tab, NUL, DEL, C1, line separators) or a
    Unicode format character (bidi overrides such as U+202E, zero-width characters)."""
    return _hidden_char(text)


def safe_component(name: object, what: str) -> str:
    """``name`` unchanged when it is a safe single path component; else a one-line UserError naming ``what``."""
    why = component_problem(name)
    if why or not isinstance(name, str):  # component_problem names every non-text value
        raise UserError(f"{what} {_show(name)} {why}; it names a folder, so it must be {ALLOWED}")
    return name


def show(name: object) -> str:
    """``name`` as it may be quoted in a one-line message: ascii() (control characters escaped), at most 80 chars."""
    return _show(name)


def _show(name: object) -> str:
    text = ascii(name) if isinstance(name, str) else repr(name)
    return text if len(text) <= 80 else text[:77] + "..."


def relative_path_problem(path: object) -> str | None:
    """Why ``path`` cannot name a file inside the folder it is read under (an image below ``Datasets/``): absolute,
    a ``..`` part, a control character, not text; None when it stays inside."""
    if not isinstance(path, str) or not path:
        return "is not a relative path"
    text = path.replace("\\", "/")
    if text.startswith("/") or re.match(r"^[A-Za-z]:", text):
        return "is absolute"
    if ".." in text.split("/"):
        return "has a '..' part"
    if _hidden_char(text):
        return "contains a control or format character"
    return None


def inside(root: os.PathLike[str] | str, path: object, what: str) -> Path:
    """``root / path`` for a ``path`` that stays inside ``root`` (relative_path_problem); else a one-line
    UserError naming ``what``: a path read from a record never reaches a file outside its folder."""
    why = relative_path_problem(path)
    if why:
        raise UserError(f"{what} {_show(path)} {why}; it must be a path inside {root}")
    return Path(root) / str(path)
