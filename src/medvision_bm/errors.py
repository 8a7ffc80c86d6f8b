"""The one exception type for user mistakes: the CLI prints its message on one line and exits non-zero."""


class UserError(Exception):
    """A problem with the user's input (paths, flags, data); the message names the input and the fix."""

    exit_code = 2


class IncompleteRun(Exception):
    """Some selected samples still have no successful answer; rerun to retry them."""

    exit_code = 3
